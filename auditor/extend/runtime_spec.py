"""What the auditor knows about a runtime without loading it: its name, which side of a
pair it can serve, and the class a stack worker instantiates for it."""

from __future__ import annotations

from dataclasses import dataclass, field

from auditor.extend.operator_table import OperatorTable

CAPABILITIES = ("export", "load")


@dataclass(frozen=True)
class RuntimeSpec:
    """``can``: "export" (builds and exports probes: a train stack) or "load" (loads an
    exported MindIR: an infer stack). ``worker_class``: "package.module:Class", imported
    inside the stack's worker; it must be Python 3.7 compatible."""

    name: str
    can: str
    worker_class: str
    description: str = ""
    unsupported_operators: dict[str, dict[str, str]] = field(default_factory=dict)
    """Operators this runtime is known not to run: ``"VERSION:TARGET"`` (``"2.0.0:cpu"``, the
    runtime's own version and the device kind) -> MindIR operator type -> why. Checked by the
    operator-support rule against every MindIR before it is loaded."""
    operator_tables: tuple[OperatorTable, ...] = ()
    """What the operator sweep measured (``scripts/operator_sweep.py``, shipped as one JSON file
    per runtime and read with ``auditor.extend.operator_table.read_tables``): per runtime release,
    device kind and exporting MindSpore release, each operator's status in a minimal graph. Read
    by the deployment gate (``auditor check``) and to name the operator of a failed load; it
    blocks no load (an operator that fails alone may run inside a larger graph)."""

    def __post_init__(self) -> None:
        if self.can not in CAPABILITIES:
            raise ValueError(f"runtime {self.name}: can must be 'export' or 'load', not {self.can!r}")
        if ":" not in self.worker_class:
            raise ValueError(f"runtime {self.name}: worker_class must be 'module:Class'")
