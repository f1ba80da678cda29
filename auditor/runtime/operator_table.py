"""A runtime's measured operator table: which MindIR operators one release of a serving runtime
loads and runs, on one device kind, for the files of one exporting MindSpore release.

Written by ``scripts/operator_sweep.py`` (each operator primitive the training stacks can export,
in a minimal graph, loaded and run on each serving runtime, compared with the exporter's
PyNative outputs) as one JSON file per runtime, which the runtime plugin ships
(``RuntimeSpec.operator_tables``). An operator the table does not list is unknown, never
"ok". An "ok" operator that failed in another case's graph keeps that failure (``fails_in``):
a table of load successes cannot vouch for every graph shape.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OK, WRONG_OUTPUT = "ok", "wrong-output"
LOAD_FAILS, RUN_FAILS, HANGS, CRASHES = "load-fails", "run-fails", "hangs", "crashes"
STATUSES = (OK, WRONG_OUTPUT, LOAD_FAILS, RUN_FAILS, HANGS, CRASHES)
FAILS = (LOAD_FAILS, RUN_FAILS, HANGS, CRASHES)

PLUMBING = frozenset({"Constant", "Depend", "Load", "MakeTuple", "TupleGetItem", "UpdateState", "Return"})
"""Graph plumbing nodes every exported graph holds: they say nothing about what a graph computes."""


class TableError(ValueError):
    """An operator table file that cannot be read (named with its path)."""


@dataclass(frozen=True)
class OperatorEntry:
    """What the sweep saw of one operator: ``status`` (one of STATUSES), where it failed
    (``phase``: "load" or "run"), the runtime's words, the failure's ``kind``
    (auditor.runtime.failures: "operator" when the runtime named this operator as one it has no
    primitive or kernel for, "graph", "first-call", ...), the cases that showed it, and the
    failures of an otherwise working operator in other cases' graphs."""

    status: str
    message: str = ""
    phase: str = ""
    kind: str = ""
    cases: tuple[str, ...] = ()
    fails_in: tuple[dict[str, str], ...] = ()
    max_abs: float | None = None
    note: str = ""

    def wrong_output(self) -> str:
        """Where the runtime's outputs differed from the exporter's, in words ("" if nowhere)."""
        if self.status == WRONG_OUTPUT:
            return self.describe()
        wrong = [f for f in self.fails_in if f.get("status") == WRONG_OUTPUT]
        return "; ".join(f"in case {f.get('case')}: {f.get('message', '')[:200]}" for f in wrong)

    @property
    def works(self) -> bool:
        """Loaded, ran and matched the exporter in every case's graph the sweep tried."""
        return self.status == OK and not self.fails_in

    def describe(self) -> str:
        if self.status == OK and self.fails_in:
            first = self.fails_in[0]
            return (
                f"ran in {', '.join(self.cases)}, but {first.get('status')} in case {first.get('case')} "
                f"({first.get('message', '')[:200]})"
            )
        text = self.status + (f" at {self.phase}" if self.phase and self.status in FAILS else "")
        if self.max_abs is not None and self.status == WRONG_OUTPUT:
            text += f" (max abs difference {self.max_abs:.2g} from the exporter's PyNative)"
        if self.message:
            text += f": {self.message[:300]}"
        if self.note:
            text += f" [{self.note}]"
        return text


@dataclass(frozen=True)
class OperatorTable:
    """One (runtime release, device kind, exporting MindSpore release) of a runtime's table."""

    runtime: str
    runtime_version: str
    target: str
    exported_by: str
    produced: str
    """How and when: the script, the date, the host, the cases, the seed, the timeout."""
    operators: Mapping[str, OperatorEntry] = field(default_factory=dict)
    combinations: Mapping[str, OperatorEntry] = field(default_factory=dict)
    """Cases that failed although each of their operators works elsewhere (the graph as a whole)."""

    def describe(self) -> str:
        """Which table, and when it was measured (the whole story is ``produced``)."""
        when = re.search(r"\d{4}-\d{2}-\d{2}", self.produced)
        return (
            f"{self.runtime} {self.runtime_version} ({self.target}) on files of MindSpore "
            f"{self.exported_by}, swept {when.group(0) if when else 'at an unknown date'}"
        )


def _entry(raw: Mapping[str, Any], where: str) -> OperatorEntry:
    status = raw.get("status")
    if status not in STATUSES:
        raise TableError(f"{where}: status is one of {', '.join(STATUSES)}, not {status!r}")
    max_abs = raw.get("max_abs")
    return OperatorEntry(
        str(status),
        str(raw.get("message") or ""),
        str(raw.get("phase") or ""),
        str(raw.get("kind") or ""),
        tuple(str(c) for c in raw.get("cases") or ()),
        tuple({str(k): str(v) for k, v in f.items()} for f in raw.get("fails_in") or ()),
        float(max_abs) if isinstance(max_abs, int | float) else None,
        str(raw.get("note") or ""),
    )


def tables_from(document: Mapping[str, Any], where: str = "operator table") -> tuple[OperatorTable, ...]:
    """The tables of one runtime's document (what ``scripts/operator_sweep.py`` writes)."""
    runtime = document.get("runtime")
    if not isinstance(runtime, str) or not isinstance(document.get("tables"), list):
        raise TableError(f"{where}: not an operator table (needs 'runtime' and a list of 'tables')")
    out = []
    for i, t in enumerate(document["tables"]):
        here = f"{where}: tables[{i}]"
        try:
            out.append(
                OperatorTable(
                    runtime,
                    str(t["runtime_version"]),
                    str(t["target"]),
                    str(t["exported_by"]),
                    str(t["produced"]),
                    {str(op): _entry(e, f"{here}.operators.{op}") for op, e in t["operators"].items()},
                    {
                        str(c): _entry(e, f"{here}.combinations.{c}")
                        for c, e in (t.get("combinations") or {}).items()
                    },
                )
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise TableError(f"{here}: missing or malformed field ({type(exc).__name__}: {exc})") from None
    return tuple(out)


def read_tables(path: str | Path) -> tuple[OperatorTable, ...]:
    """The tables in one runtime's JSON file; TableError names the file and the problem."""
    p = Path(path)
    try:
        document = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TableError(f"{p}: cannot be read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise TableError(f"{p}: not JSON ({exc})") from None
    if not isinstance(document, dict):
        raise TableError(f"{p}: not an operator table")
    return tables_from(document, str(p))


def shipped_tables(path: str | Path) -> tuple[OperatorTable, ...]:
    """The tables a runtime plugin ships in ``path``; none when the file is missing or damaged
    (said in the log: the runtime itself stays usable)."""
    if not Path(path).is_file():
        return ()
    try:
        return read_tables(path)
    except TableError as exc:
        logging.getLogger(__name__).warning("operator table not used: %s", exc)
        return ()


def _release(version: str) -> tuple[str, ...]:
    return tuple(version.split(".")[:2])


def table_for(
    tables: Iterable[OperatorTable], runtime_version: str | None, target: str, exported_by: str | None
) -> OperatorTable | None:
    """The table measured on this runtime release and device kind for files of this exporting
    release: the exact exporter version, else one of its release (2.0.0 for a 2.0.1 file)."""
    if not runtime_version or not exported_by:
        return None
    mine = [t for t in tables if t.runtime_version == runtime_version and t.target == target]
    exact = [t for t in mine if t.exported_by == exported_by]
    if exact:
        return exact[0]
    same = [t for t in mine if _release(t.exported_by) == _release(exported_by)]
    return same[0] if same else None
