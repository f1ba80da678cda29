"""What the auditor knows about a runtime without loading it: its name, which side of a pair it
serves, the class a stack worker instantiates for it, the artifact formats it writes or reads,
the forms of its failures, the format of its log, what its versions mean for the files it reads
and its measured operator tables."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from auditor.runtime.failures import Form, Found, find
from auditor.runtime.formats import MINDIR, ArtifactFormat
from auditor.runtime.logs import LogFormat
from auditor.runtime.operator_table import OperatorTable

CAPABILITIES = ("export", "load")

Reads = Callable[[str, Mapping[str, Any]], tuple[int, str] | None]
"""A load runtime's version facts: (release, a file's summary) -> (the highest format version
that release reads, how that is known), or None when unknown."""


@dataclass(frozen=True)
class RuntimeSpec:
    """``can``: "export" (builds and exports probes: a train stack) or "load" (loads an
    exported model: an infer stack). ``worker_class``: "package.module:Class", imported
    inside the stack's worker; it must be Python 3.7 compatible."""

    name: str
    can: str
    worker_class: str
    description: str = ""
    unsupported_operators: dict[str, dict[str, str]] = field(default_factory=dict)
    """Operators this runtime is known not to run: ``"VERSION:TARGET"`` (``"2.0.0:cpu"``, the
    runtime's own version and the device kind) -> operator type (as the artifact names it)
    -> why. Checked by the operator-support rule against every artifact before it is loaded."""
    loads: ArtifactFormat = MINDIR
    """A load runtime: the format it reads, which a train stack exports for it."""
    exports: tuple[str, ...] = ("mindir",)
    """An export runtime: the names of the formats its exporter writes (a pair needs the one
    its infer runtime loads)."""
    package: str = ""
    """The distribution its worker reports as ``runtime_package`` ("mindspore-lite"): the
    version facts below hold for every runtime that reports this package."""
    failures: tuple[Form, ...] = ()
    """The forms of its own messages and log lines (``auditor.runtime.failures``): a file too
    new for it, an operator it cannot load, run or export, a graph it cannot take, a file it
    cannot parse, and its words that name no cause. Read before the generic forms."""
    log: LogFormat | None = None
    """The format of its native log (``auditor.runtime.logs``: the line, the lines that are no
    failure, the lines ranked right after a cause's): a failure keeps the runtime's lines, a load
    that worked its warnings, read with it. None: no log lines are kept (its exception's message
    is read all the same)."""
    paired_release: bool = False
    """The runtime is meant to serve files exported by the MindSpore release of its own version
    (MindSpore, MindSpore Lite): a file of another release that fails is incompatible, whatever
    the runtime's words."""
    operator_tables: tuple[OperatorTable, ...] = ()
    """What the operator sweep measured (``scripts/operator_sweep.py``, shipped as one JSON file
    per runtime and read with ``auditor.runtime.operator_table.read_tables``): per runtime release,
    device kind and exporting MindSpore release, each operator's status in a minimal graph. Read
    by the deployment gate (``auditor check``) and to name the operator of a failed load; it
    blocks no load (an operator that fails alone may run inside a larger graph)."""
    reads: Reads | None = None
    """Version facts of a load runtime: (the highest version of its format that this release
    of it reads, how that is known) for a file's summary, or None when unknown."""
    writers: Mapping[str, Mapping[int, str]] = field(default_factory=dict)
    """Version facts of an export runtime: format name -> format version -> which of its
    releases write it ("MindSpore 1.7 to 2.2.x")."""
    cold: str = ""
    """Why this runtime's workers must start cold, or "" (the default): its worker class's
    module and ``preload`` are imported once per stack in a zygote and each worker is forked
    from it (``[worker] warm``). Opt out where a fork after the import is not safe: a
    framework that starts threads, or opens devices, when it is imported."""

    def __post_init__(self) -> None:
        if self.can not in CAPABILITIES:
            raise ValueError(f"runtime {self.name}: can must be 'export' or 'load', not {self.can!r}")
        if ":" not in self.worker_class:
            raise ValueError(f"runtime {self.name}: worker_class must be 'module:Class'")
        if not isinstance(self.loads, ArtifactFormat):
            raise ValueError(f"runtime {self.name}: loads must be an ArtifactFormat")
        if isinstance(self.exports, str) or not all(isinstance(f, str) for f in self.exports):
            raise ValueError(f"runtime {self.name}: exports must be a tuple of format names")
        if self.log is not None and not isinstance(self.log, LogFormat):
            raise ValueError(f"runtime {self.name}: log must be a LogFormat or None")

    def explain(self, text: str, phase: str | None = None) -> Found | None:
        """The first of this runtime's forms (then the generic ones) written at ``phase`` (a
        request: "load", "run", "export"; None for any) that names a cause in ``text``."""
        return find(self.failures, text, phase)


def known_maxima(table: Mapping[str, int], how: str) -> Reads:
    """``reads`` of a runtime whose releases each read up to a known format version, whatever
    the file: ``table`` maps a release to it, ``how`` says how that is known ("{version}" is the
    release). A release not in the table: unknown (None)."""

    def reads(version: str, summary: Mapping[str, Any]) -> tuple[int, str] | None:
        if version in table:
            return table[version], how.format(version=version)
        return None

    return reads


def formats_of(runtimes: Mapping[str, RuntimeSpec]) -> dict[str, ArtifactFormat]:
    """Every format the load runtimes read, by name (MindIR always; the first definition of a
    name wins)."""
    out: dict[str, ArtifactFormat] = {MINDIR.name: MINDIR}
    for spec in runtimes.values():
        if spec.can == "load":
            out.setdefault(spec.loads.name, spec.loads)
    return out


def readers_facts(
    runtimes: Mapping[str, RuntimeSpec], name: str | None, package: str | None
) -> RuntimeSpec | None:
    """The spec holding a stack's read limits: its own runtime's, else one reporting the same
    package (a plugin runtime wrapping a built-in's package shares its facts)."""
    spec = runtimes.get(name or "")
    if spec is not None and spec.reads is not None:
        return spec
    return next((o for o in runtimes.values() if package and o.package == package and o.reads), None)


def writers_of(runtimes: Mapping[str, RuntimeSpec], name: str | None, fmt: str) -> Mapping[int, str]:
    """Which releases write each version of format ``fmt``: the exporting stack's runtime's
    facts, else any runtime's (a file checked on its own has no exporting stack)."""
    spec = runtimes.get(name or "")
    if spec is not None and fmt in spec.writers:
        return spec.writers[fmt]
    return next((o.writers[fmt] for o in runtimes.values() if fmt in o.writers), {})
