"""What a runtime's failure means, read from its message and log: a MindIR version above the
runtime's maximum, or an operator it has no kernel for. One place for the patterns, so the
cycle, model probes and the deployment gate classify a failure the same way."""

from __future__ import annotations

import re

from auditor.stacks.worker import WorkerError

MINDIR_REJECTION = re.compile(
    r"maximum mind ?ir version:\s*(\d+).*?support the mind ?ir version:\s*(\d+)", re.IGNORECASE | re.DOTALL
)


UNSUPPORTED_OPERATOR = (
    # MindSpore Lite 2.0, no CPU kernel for a node (its Python error says only "Common error code"):
    # "schedule node return nullptr, name: Default/StandardNormal-op12, type: RandomStandardNormal"
    re.compile(r"schedule node return nullptr, name: [^,\n]*, type: (\w+)"),
    re.compile(r"unsupported op(?:erator)?(?: type)?:?\s*['\"]?([A-Za-z_][\w.]*)", re.IGNORECASE),
)


def unsupported_operator(error: WorkerError) -> str | None:
    """The operator an inference runtime said it cannot load or run, if that is the failure."""
    if error.kind != "error":
        return None
    text = f"{error.message}\n{error.log}"
    for pattern in UNSUPPORTED_OPERATOR:
        m = pattern.search(text)
        if m:
            return m.group(1)
    return None
