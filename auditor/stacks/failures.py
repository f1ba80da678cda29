"""What a stack's failed request means: its runtime's failure patterns (``RuntimeSpec.failures``,
then the generic ones) read on the worker's error message and log. One place, so the cycle,
model probes and the deployment gate classify a failure the same way."""

from __future__ import annotations

from auditor.runtime import Failure, RuntimeSpec, explain
from auditor.stacks.worker import WorkerError


def meaning(spec: RuntimeSpec | None, error: WorkerError) -> Failure | None:
    """The failure's meaning, if the runtime raised (not a crash, hang or start failure) and
    said why in words its patterns know."""
    if error.kind != "error":
        return None
    text = f"{error.message}\n{error.log}"
    return spec.explain(text) if spec is not None else explain((), text)
