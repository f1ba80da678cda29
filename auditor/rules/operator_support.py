"""Which MindIR operators a stack's runtime cannot run, before a load is attempted.

Two sources, merged per stack: the runtime plugin's table (``RuntimeSpec.unsupported_operators``,
keyed by the runtime's version and device kind) and what a real load on that runtime said
before (MindSpore Lite names the node it has no kernel for; the node's name carries the
MindIR operator type), which the history database keeps like the learned MindIR limits.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from auditor.config.tables import StackConfig
from auditor.extend.runtime_spec import RuntimeSpec
from auditor.results import LearnedOperator

# MindSpore Lite 2.0: "schedule node return nullptr, name: Default/StandardNormal-op12, type:
# RandomStandardNormal". The type is Lite's own schema name; the node name ends with the
# MindIR primitive ("StandardNormal"), which is what a MindIR's operator list holds.
_NO_KERNEL = re.compile(r"schedule node return nullptr, name: ([^,\n]*), type: (\w+)")


def target_of(stack: StackConfig) -> str:
    """The device kind of a stack: 'cpu', 'ascend' or 'gpu'."""
    return stack.device.partition(":")[0]


def failed_operator(text: str) -> tuple[str, str] | None:
    """(MindIR operator type, the runtime's line) from a load failure's log, if an operator
    without a kernel is what failed."""
    m = _NO_KERNEL.search(text)
    if not m:
        return None
    node = m.group(1).strip().rpartition("/")[2]
    op = re.sub(r"-op\d+$", "", node) or m.group(2)
    return op, m.group(0)


def learn(stack: StackConfig, hello: Mapping[str, Any], text: str) -> LearnedOperator | None:
    """What a failed load on ``stack`` (whose worker said ``hello``) teaches, if anything."""
    found = failed_operator(text)
    package, version = hello.get("runtime_package"), hello.get("runtime_version")
    if found is None or not package or not version:
        return None
    return LearnedOperator(str(package), str(version), target_of(stack), found[0], found[1])


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
