"""Which operators of an artifact a stack's runtime cannot run, before a load is attempted, and what
is known of the others: the runtime's measured operator table and earlier failed loads.

Only the runtime plugin's hand-kept table (``RuntimeSpec.unsupported_operators``, keyed by the
runtime's version and device kind) blocks a load: operators no graph can get past (a random
operator without a kernel, a hang). An operator a load failed on, or that the operator sweep
saw failing in its minimal graph, is not such a fact: MindSpore Lite 2.0 has no primitive for a
lone SiLU, yet runs a policy whose SiLU follows a Dense layer (its converter fuses the
activation into the layer; measured). Those failures name the operator when a load of another
file fails without saying it, and warn where there is no load to decide (``known_failures``).
The history database keeps what loads taught, like the learned MindIR limits.

``coverage`` is the deployment gate's reading of a measured table for one file: which of its
operators were measured to work, to fail, to compute differently, or are unknown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from auditor.config.tables import StackConfig
from auditor.results import LearnedOperator
from auditor.runtime import RuntimeSpec
from auditor.runtime.failures import other_release
from auditor.runtime.operator_table import (
    FAILS,
    PLUMBING,
    WRONG_OUTPUT,
    OperatorEntry,
    OperatorTable,
    table_for,
)
from auditor.stacks.failures import Diagnosis


def target_of(stack: StackConfig) -> str:
    """The device kind of a stack: 'cpu', 'ascend' or 'gpu'."""
    return stack.device.partition(":")[0]


def learn(stack: StackConfig, hello: Mapping[str, Any], diagnosis: Diagnosis) -> LearnedOperator | None:
    """What a failed load or first call on ``stack`` (whose worker said ``hello``) teaches: an
    operator the runtime named as one it cannot run, in a file of its own release."""
    package, version = hello.get("runtime_package"), hello.get("runtime_version")
    if not diagnosis.learnable or not package or not version or diagnosis.operator is None:
        return None
    return LearnedOperator(
        str(package), str(version), target_of(stack), diagnosis.operator, diagnosis.words or diagnosis.summary
    )


def operator_limits(
    stacks: Mapping[str, StackConfig],
    fingerprints: Mapping[str, dict[str, Any] | None],
    runtimes: Mapping[str, RuntimeSpec],
) -> dict[str, dict[str, str]]:
    """Stack name -> operator its runtime cannot run in any graph -> why (the plugin's table),
    for every stack with a fingerprint."""
    out: dict[str, dict[str, str]] = {}
    for name, stack in stacks.items():
        runtime = (fingerprints.get(name) or {}).get("runtime") or {}
        version = runtime.get("runtime_version")
        spec = runtimes.get(stack.runtime)
        if not version or spec is None:
            continue
        table = dict(spec.unsupported_operators.get(f"{version}:{target_of(stack)}", {}))
        if table:
            out[name] = table
    return out


def learned_failures(
    learned: Iterable[LearnedOperator], package: str | None, version: str | None, target: str
) -> dict[str, str]:
    """Operator -> what an earlier failed load on this runtime (package, version, device kind) said."""
    out: dict[str, str] = {}
    for item in learned:
        if (item.package, item.version, item.target) == (package, version, target):
            when = f" on {item.learned_at:%Y-%m-%d}" if item.learned_at else ""
            out.setdefault(
                item.operator, f"a load on {package} {version} ({target}) failed{when}: {item.message}"
            )
    return out


@dataclass
class Coverage:
    """A measured table read for one file on one runtime."""

    table: OperatorTable | None
    why_no_table: str = ""
    works: list[str] = field(default_factory=list)
    failing: dict[str, OperatorEntry] = field(default_factory=dict)
    """Operators the sweep saw fail (load, first call, hang) in its minimal graph."""
    wrong: dict[str, OperatorEntry] = field(default_factory=dict)
    """Operators the runtime ran with outputs other than the exporter's PyNative beyond 1e-5
    (in their own case or in another case's graph)."""
    uneven: dict[str, OperatorEntry] = field(default_factory=dict)
    """Operators that worked in one case's graph and failed in another's."""
    unknown: list[str] = field(default_factory=list)
    same_release: bool = True
    """The table's files are of the runtime's own release (its failures are the runtime's, not
    a cross-release pair's, which depend on the graph)."""

    @property
    def covers(self) -> bool:
        """Evidence that the runtime loads and runs every operator of the file: a table of the
        runtime's own release measured each of them working in every graph it tried. (Graph
        plumbing alone proves nothing; a cross-release pair fails on graphs whose operators
        all work alone, so its table never covers.)"""
        return (
            self.table is not None
            and self.same_release
            and bool(self.works)
            and not (self.failing or self.wrong or self.uneven or self.unknown)
        )

    def known_failures(self) -> dict[str, str]:
        """Operator -> what was measured, for every operator measured not to work."""
        out = {op: e.describe() for op, e in self.failing.items()}
        out.update({op: e.describe() for op, e in self.uneven.items() if op not in out})
        return out

    def describe(self) -> str:
        """What the table knows and does not know about the file, in words."""
        if self.table is None:
            return self.why_no_table
        parts = []
        if self.works:
            parts.append(f"{len(self.works)} operator(s) measured to work")
        if self.failing:
            parts.append(
                "measured to fail: " + "; ".join(f"{o} ({e.describe()})" for o, e in self.failing.items())
            )
        if self.wrong:
            parts.append(
                "measured to compute differently: "
                + "; ".join(f"{o} ({e.describe()})" for o, e in self.wrong.items())
            )
        if self.uneven:
            parts.append(
                "failed in some graphs: " + "; ".join(f"{o} ({e.describe()})" for o, e in self.uneven.items())
            )
        if self.unknown:
            parts.append(f"not in the table (unknown): {', '.join(self.unknown)}")
        if not self.same_release:
            parts.append("a cross-release pair: operators that work alone can fail in a larger graph")
        return f"operator table {self.table.describe()}: " + "; ".join(parts)


def coverage(
    tables: Sequence[OperatorTable],
    package: str | None,
    runtime_version: str | None,
    target: str,
    info: Mapping[str, Any],
) -> Coverage:
    """What the measured ``tables`` say about the file summarised in ``info`` (a MindIRInfo as
    a dict) on one runtime release and device kind."""
    exported_by = info.get("model_version")
    ops = info.get("op_types")
    table = table_for(tables, runtime_version, target, exported_by)
    if table is None:
        measured = sorted({f"{t.runtime_version}/{t.target} on MindSpore {t.exported_by}" for t in tables})
        return Coverage(
            None,
            f"no measured operator table for {package or 'the runtime'} {runtime_version} ({target}) "
            "on files "
            f"of MindSpore {exported_by}"
            + (f" (measured: {', '.join(measured)})" if measured else " (the runtime ships none)"),
        )
    out = Coverage(table, same_release=not other_release(runtime_version, exported_by))
    if ops is None:
        out.why_no_table = "the file's operators could not be read"
        out.unknown = ["(the file's operators)"]
        return out
    for op in sorted(set(ops) - PLUMBING):
        entry = table.operators.get(op)
        if entry is None:
            out.unknown.append(op)
            continue
        if entry.status == WRONG_OUTPUT or any(f.get("status") == WRONG_OUTPUT for f in entry.fails_in):
            out.wrong[op] = entry
        if entry.status in FAILS:
            out.failing[op] = entry
        elif entry.fails_in and any(f.get("status") != WRONG_OUTPUT for f in entry.fails_in):
            out.uneven[op] = entry
        elif entry.works:
            out.works.append(op)
    return out
