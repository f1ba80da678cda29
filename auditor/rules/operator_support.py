"""Which operators of an artifact a stack's runtime cannot run, before a load is attempted.

Two sources, merged per stack: the runtime plugin's table (``RuntimeSpec.unsupported_operators``,
keyed by the runtime's version and device kind) and what a real load on that runtime said
before (its failure patterns name the operator as the artifact's operator list does, e.g.
MindSpore Lite's node without a kernel), which the history database keeps like the learned
MindIR limits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from auditor.config.tables import StackConfig
from auditor.results import UNSUPPORTED, LearnedOperator
from auditor.runtime import Failure, RuntimeSpec


def target_of(stack: StackConfig) -> str:
    """The device kind of a stack: 'cpu', 'ascend' or 'gpu'."""
    return stack.device.partition(":")[0]


def learn(stack: StackConfig, hello: Mapping[str, Any], failure: Failure | None) -> LearnedOperator | None:
    """What a failed load on ``stack`` (whose worker said ``hello``) teaches, if anything: the
    operator it could not run, as the artifact names it."""
    package, version = hello.get("runtime_package"), hello.get("runtime_version")
    if failure is None or failure.status != UNSUPPORTED or not failure.artifact_operator:
        return None
    if not package or not version:
        return None
    return LearnedOperator(
        str(package), str(version), target_of(stack), failure.artifact_operator, failure.words
    )


def operator_limits(
    stacks: Mapping[str, StackConfig],
    fingerprints: Mapping[str, dict[str, Any] | None],
    runtimes: Mapping[str, RuntimeSpec],
    learned: Iterable[LearnedOperator] = (),
) -> dict[str, dict[str, str]]:
    """Stack name -> operator -> where it is known from, for every stack with a fingerprint."""
    learned = list(learned)
    out: dict[str, dict[str, str]] = {}
    for name, stack in stacks.items():
        runtime = (fingerprints.get(name) or {}).get("runtime") or {}
        package, version = runtime.get("runtime_package"), runtime.get("runtime_version")
        if not version:
            continue
        target = target_of(stack)
        table: dict[str, str] = {}
        spec = runtimes.get(stack.runtime)
        if spec is not None:
            table.update(spec.unsupported_operators.get(f"{version}:{target}", {}))
        for item in learned:
            if (item.package, item.version, item.target) == (package, version, target):
                when = f" on {item.learned_at:%Y-%m-%d}" if item.learned_at else ""
                table.setdefault(
                    item.operator, f"a load on {package} {version} ({target}) failed{when}: {item.message}"
                )
        if table:
            out[name] = table
    return out
