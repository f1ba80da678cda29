"""Operator sweep: which MindIR operators each serving runtime loads and runs, measured on the
runtimes themselves, written as the operator tables the runtime plugins ship.

For every case of ``opsweep.catalog`` (one minimal graph per operator primitive the training
stacks can export):
  1. each training stack (MindSpore PyNative) builds the cell from seeded weights, runs it on
     seeded inputs and exports the MindIR;
  2. each serving stack whose MindIR-version limit admits the file loads it, runs the same
     inputs once and compares with the exporter's PyNative outputs (atol = rtol = 1e-5;
     random operators: shape, dtype and finiteness only);
  3. a failure is read with ``auditor.stacks.failures`` (the same forms as the deployment gate:
     load or first call, the operator the runtime names, its log at GLOG_v=2), and attributed to
     an operator: the one the runtime names, else the only one of the case not proven elsewhere,
     else the case's graph as a whole (a ``combination``; each of its operators keeps the
     failure under ``fails_in``).

Stacks are reached the way every command reaches them (``Reach``, the config's hosts), with one
worker per stack for the whole sweep, restarted after any failure so that no case inherits a
runtime's state after one. A serving stack "X-graph" that the config lacks, for a train stack X,
is MindSpore GraphCell on X's interpreter.

    .venv/bin/python scripts/operator_sweep.py                       # every case, every stack
    .venv/bin/python scripts/operator_sweep.py --ci --out /tmp/sweep  # 9 cases, one per failure form
    .venv/bin/python scripts/operator_sweep.py --cases Dense,SiLU --write plugins/runtimes
    .venv/bin/python scripts/operator_sweep.py --ci --compare plugins/runtimes   # exit 1 on a change

Each runtime package ships its own table as ``<runtime>.json`` (``plugins/runtimes/lite/
mindspore-lite.json``, ``plugins/runtimes/mindspore/mindspore-graph.json``). ``--write DIR``
merges the tables into ``<runtime>.json`` in DIR or the runtime package under DIR that holds
it (a new one in DIR itself; a table of another runtime release, device or exporter is kept);
``--compare DIR`` says where a fresh case differs from those tables and exits 1 if any does.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))  # the opsweep package travels to the workers from here
sys.path.insert(0, str(REPO))

from opsweep import catalog  # noqa: E402

from auditor import __version__  # noqa: E402
from auditor.cli.context import Context  # noqa: E402
from auditor.compare.outputs import Tolerance, compare_output  # noqa: E402
from auditor.config.tables import Config, StackConfig  # noqa: E402
from auditor.runtime import RuntimeSpec  # noqa: E402
from auditor.runtime.operator_table import PLUMBING  # noqa: E402
from auditor.stacks.failures import diagnose  # noqa: E402
from auditor.stacks.session import reach  # noqa: E402
from auditor.stacks.worker import StackWorker, WorkerError  # noqa: E402
from auditor.worker.mindir import read_info  # noqa: E402

CELLS = "opsweep.cells"
TOLERANCE = Tolerance(1e-5, 1e-5)
NOT_EXPRESSIBLE = ("AttributeError", "TypeError", "ImportError", "NameError")
WORST = ("ok", "wrong-output", "run-fails", "load-fails", "hangs", "crashes")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def max_mind_ir_version(package: str, version: str) -> int:
    """The highest mind_ir_version a runtime reads (FACTS.md section 2): Lite 2.0 and MindSpore
    1.7-2.2 read 1, 2.3-2.4 read 2, 2.5 and later 3."""
    parts = [int(p) for p in version.split(".")[:2] if p.isdigit()] + [0, 0]
    release = (parts[0], parts[1])
    return 1 if release < (2, 3) else 2 if release < (2, 5) else 3


# -- stacks ---------------------------------------------------------------------------------------
def sweep_config(config: Config, exporters: Sequence[str], servers: Sequence[str]) -> Config:
    """The config's stacks the sweep drives, GLOG_v=2 on each (the runtimes name operators only
    at that level), with a GraphCell twin "X-graph" of a train stack X where asked for."""
    stacks: dict[str, StackConfig] = {}
    for name in [*exporters, *servers]:
        if name in config.stacks:
            stack = config.stacks[name]
        elif name.endswith("-graph") and name[: -len("-graph")] in config.stacks:
            base = config.stacks[name[: -len("-graph")]]
            stack = dataclasses.replace(base, name=name, role="infer", runtime="mindspore-graph")
        else:
            raise SystemExit(f"no stack {name!r} in {config.source} (and no train stack to make it from)")
        stacks[name] = dataclasses.replace(stack, env={**stack.env, "GLOG_v": "2"})
    return dataclasses.replace(config, stacks=stacks, pairs=(), models={})


def default_servers(config: Config) -> list[str]:
    """Every infer stack, and a GraphCell twin of each train stack whose interpreter serves none."""
    infer = [n for n, s in config.stacks.items() if s.role == "infer" and s.source == "local"]
    served = {config.stacks[n].python for n in infer}
    twins = [
        f"{n}-graph"
        for n, s in config.stacks.items()
        if s.role == "train" and s.runtime == "mindspore" and s.source == "local" and s.python not in served
    ]
    return infer + twins


class Workers:
    """One started worker per stack, replaced after a failure."""

    def __init__(self, config: Config, runtimes: Mapping[str, RuntimeSpec], timeout: float):
        self.config = config
        self.runtimes = dict(runtimes)
        self.reach = reach(config, runtimes, [CELLS])
        self.timeout = timeout
        self.workers: dict[str, StackWorker] = {}
        self.hello: dict[str, dict[str, Any]] = {}

    def get(self, name: str) -> StackWorker:
        if name not in self.workers:
            worker = self.reach.worker(name, request_timeout=self.timeout)
            self.hello[name] = dict(worker.start())
            self.workers[name] = worker
        return self.workers[name]

    def spec(self, name: str) -> RuntimeSpec | None:
        """The runtime spec of stack ``name`` (its failure forms read its failures)."""
        return self.runtimes.get(self.config.stacks[name].runtime)

    def restart(self, name: str) -> None:
        worker = self.workers.pop(name, None)
        if worker is not None:
            worker.close()

    def close(self) -> None:
        for name in list(self.workers):
            self.restart(name)


# -- one case ---------------------------------------------------------------------------------------
@dataclass
class Export:
    status: str
    message: str = ""
    path: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    outputs: list[np.ndarray] = field(default_factory=list)


@dataclass
class Serve:
    server: str
    exporter: str
    status: str
    phase: str = ""
    message: str = ""
    admitted: bool = True
    operator: str | None = None
    kind: str = ""
    form: str = ""
    words: str = ""
    log_lines: list[str] = field(default_factory=list)
    max_abs: float | None = None
    seconds: float = 0.0


def export_case(workers: Workers, exporter: str, case: catalog.Case, seed: int, out: Path) -> Export:
    model = f"{case.name}/{exporter}"
    inputs = catalog.make_inputs(case, seed)
    worker = workers.get(exporter)
    step = "build"
    try:
        worker.request(
            "build",
            model=model,
            probe={"module": CELLS, "params": {"case": case.name, "seed": seed}},
            weights={},
        )
        step = "pynative"
        outputs = worker.request("run", model=model, inputs=inputs).result["outputs"]
        step = "export"
        path = out / "runs" / case.name / f"{exporter}.mindir"
        path.parent.mkdir(parents=True, exist_ok=True)
        data = worker.request(
            "export", model=model, inputs=inputs, path=str(worker.workdir / f"{case.name}.mindir")
        ).result["artifact"]
        path.write_bytes(data)
    except WorkerError as exc:
        if exc.kind != "error":
            workers.restart(exporter)
        if step == "build" and exc.error_type in NOT_EXPRESSIBLE:
            return Export("not-expressible", exc.message.splitlines()[0][:300])
        return Export(f"{step}-fails", exc.message.splitlines()[0][:300] if exc.message else exc.kind)
    info = asdict(read_info(data))
    info.pop("parameters", None)
    return Export("ok", path=str(path), info=info, outputs=[np.asarray(o) for o in outputs])


def serve_case(
    workers: Workers,
    server: str,
    exporter: str,
    case: catalog.Case,
    seed: int,
    export: Export,
    admitted: bool,
) -> Serve:
    model = f"{case.name}/{exporter}"
    inputs = catalog.make_inputs(case, seed)
    worker = workers.get(server)
    hello = workers.hello[server]
    begun = time.time()
    load_log = ""
    try:
        load_log = worker.request("load", model=model, path=export.path).log
        outputs = worker.request("run", model=model, inputs=inputs).result["outputs"]
    except WorkerError as exc:
        workers.restart(server)  # a fresh process for the next case, whatever this one left behind
        d = diagnose(
            exc,
            workers.spec(server),
            hello.get("runtime_version"),
            export.info,
            load_log,
            package=hello.get("runtime_package"),
        )
        status = {"timeout": "hangs", "crash": "crashes"}.get(exc.kind) or (
            "load-fails" if exc.op == "load" else "run-fails"
        )
        first = (exc.message.strip().splitlines() or [exc.kind])[0][:300]
        return Serve(
            server,
            exporter,
            status,
            "load" if exc.op == "load" else "run",
            first,
            admitted,
            d.operator,
            d.kind or "",
            d.form or "",
            d.words,
            list(d.log_lines),
            seconds=time.time() - begun,
        )
    status, message, max_abs = judge(export.outputs, outputs, case.random)
    return Serve(
        server, exporter, status, "", message, admitted, max_abs=max_abs, seconds=time.time() - begun
    )


def judge(
    reference: list[np.ndarray], outputs: list[np.ndarray], random: bool
) -> tuple[str, str, float | None]:
    """(status, message, max abs difference) of a serving runtime's outputs against the exporter's."""
    if len(outputs) != len(reference):
        return "wrong-output", f"{len(outputs)} outputs, the exporter's PyNative gave {len(reference)}", None
    problems, worst = [], 0.0
    for i, (ref, got) in enumerate(zip(reference, outputs, strict=True)):
        ref, got = np.asarray(ref), np.asarray(got)
        if ref.shape != got.shape:
            problems.append(f"output {i}: shape {list(got.shape)}, expected {list(ref.shape)}")
        elif random:
            if got.dtype.kind == "f" and not np.isfinite(got).all():
                problems.append(f"output {i}: non-finite random values")
        elif ref.dtype.kind in "biu" or got.dtype.kind in "biu":
            bad = int(np.count_nonzero(ref.astype(np.float64) != got.astype(np.float64)))
            if bad:
                problems.append(f"output {i}: {bad} of {ref.size} values differ (exact compare)")
        else:
            c = compare_output(f"output{i}", ref, got, TOLERANCE)
            worst = max(worst, float(c.metrics.get("max_abs", 0.0)))
            if not c.passed:
                problems.append(
                    f"output {i}: {c.failing} of {c.total} values beyond atol=rtol=1e-5 "
                    f"(max abs {c.metrics.get('max_abs', float('nan')):.3g})"
                )
    return ("wrong-output" if problems else "ok"), "; ".join(problems), (None if random else worst)


# -- tables -----------------------------------------------------------------------------------------
def case_record(case: catalog.Case, export: Export, serve: Serve) -> dict[str, Any]:
    """What one case showed on one (server, exporter): kept in the table, so that a later sweep
    of a few cases can be merged and the operators attributed again from every case."""
    record: dict[str, Any] = {
        "status": serve.status,
        "ops": [o for o in export.info.get("op_types") or () if o not in PLUMBING],
        "plumbing": [o for o in export.info.get("op_types") or () if o in PLUMBING],
    }
    if case.random:
        record["random"] = True
    if serve.status != "ok":
        record["phase"] = serve.phase
        message = serve.message + (
            f" | {serve.words}" if serve.words and serve.words not in serve.message else ""
        )
        record["message"] = message[:400]
        for k in ("operator", "kind", "form"):
            if getattr(serve, k):
                record[k] = getattr(serve, k)
    if serve.max_abs is not None and serve.status == "wrong-output":
        record["max_abs"] = serve.max_abs
    return record


def attribute(records: Mapping[str, Mapping[str, Any]]) -> tuple[dict, dict]:
    """(operators, combinations) from one table's case records: an operator is ok when some
    case with it ran; a failing case is the operator the runtime named, else the only one of
    the case not proven elsewhere, else the graph as a whole (its operators keep the failure)."""
    proven: set[str] = set()
    for r in records.values():
        if r["status"] == "ok":
            proven.update(r["ops"] + r.get("plumbing", []))
    ops: dict[str, dict[str, Any]] = {}
    for op in sorted(proven):
        names = [
            n for n, r in records.items() if r["status"] == "ok" and op in r["ops"] + r.get("plumbing", [])
        ]
        entry: dict[str, Any] = {"status": "ok", "cases": names}
        if op in PLUMBING:
            entry["note"] = "graph plumbing node"
        elif all(records[n].get("random") for n in names):
            entry["note"] = "random: shape, dtype and finiteness compared, not values"
        ops[op] = entry
    combinations: dict[str, dict[str, Any]] = {}
    for name, r in records.items():
        if r["status"] == "ok":
            continue
        named = r.get("operator") if r.get("operator") in r["ops"] else None
        suspects = [o for o in r["ops"] if o not in proven]
        if named:
            culprits, how = [named], "named by the runtime"
        elif len(suspects) == 1:
            culprits, how = suspects, "the only operator of the case not proven by another case"
        elif suspects:
            culprits, how = suspects, "one of these (none proven by another case)"
        else:
            culprits, how = [], "every operator of the case works elsewhere: the graph as a whole fails"
        message = r.get("message", "")
        failure = {"case": name, "status": r["status"], "phase": r.get("phase", ""), "message": message}
        for op in culprits:
            entry = ops.setdefault(
                op,
                {
                    "status": r["status"],
                    "phase": r.get("phase", ""),
                    "message": message,
                    "cases": [],
                    "attribution": how,
                },
            )
            if entry["status"] != r["status"]:
                entry.setdefault("fails_in", []).append(failure)
                continue
            entry["cases"].append(name)
            if r.get("kind") and named == op and entry.get("kind") != "operator":
                entry["kind"] = r["kind"]  # "operator" (no primitive or kernel) wins over a graph shape
            if "max_abs" in r:
                entry["max_abs"] = max(entry.get("max_abs", 0.0), r["max_abs"])
        if not culprits:
            combinations[name] = {**failure, "cases": [name], "attribution": how, "operators": r["ops"]}
            for op in r["ops"]:
                if op in ops:
                    ops[op].setdefault("fails_in", []).append(failure)
    return dict(sorted(ops.items())), combinations


def derive(table: dict[str, Any]) -> dict[str, Any]:
    """A table's operators, combinations and case statuses from its case records."""
    table["operators"], table["combinations"] = attribute(table["cases"])
    table["case_status"] = {n: r["status"] for n, r in sorted(table["cases"].items())}
    table["cases_run"] = len(table["cases"])
    return table


def build_tables(
    cases: dict[str, dict[str, Any]],
    stacks: Mapping[str, Mapping[str, Any]],
    exporters: Sequence[str],
    servers: Sequence[str],
    produced: str,
) -> dict[str, list[dict[str, Any]]]:
    """runtime name -> its tables (one per server release, target, exporter release).
    ``stacks``: each stack that answered, with its ``runtime``, ``runtime_version`` and ``target``."""
    out: dict[str, list[dict[str, Any]]] = {}
    for server in servers:
        for exporter in exporters:
            if server not in stacks or exporter not in stacks:
                continue
            records = {
                name: case_record(c["case"], c["exports"][exporter], s)
                for name, c in cases.items()
                for s in c["serves"]
                if s.server == server and s.exporter == exporter and s.admitted
            }
            if not records:
                continue
            table = {
                "runtime_version": stacks[server]["runtime_version"],
                "target": stacks[server]["target"],
                "exported_by": stacks[exporter]["runtime_version"],
                "produced": produced,
                "cases": records,
            }
            out.setdefault(stacks[server]["runtime"], []).append(derive(table))
    return out


def key(table: Mapping[str, Any]) -> tuple[str, str, str]:
    return (table["runtime_version"], table["target"], table["exported_by"])


def merge(old: dict[str, Any] | None, fresh: dict[str, Any]) -> dict[str, Any]:
    """A fresh table over the shipped one of the same key: its cases replace theirs, the others stay."""
    if old is None or set(fresh["cases"]) >= set(old.get("cases", {})):
        return fresh
    merged = dict(old)
    merged["cases"] = {**old["cases"], **fresh["cases"]}
    merged["produced"] = (
        f"{old['produced']}; cases {', '.join(sorted(fresh['cases']))} again by {fresh['produced']}"
    )
    return derive(merged)


def table_path(directory: Path, runtime: str) -> Path:
    """``<runtime>.json`` in ``directory`` or in the one runtime package under it that holds it
    (``plugins/runtimes/lite/mindspore-lite.json``); ``directory/<runtime>.json`` when neither does."""
    name = f"{runtime}.json"
    found = sorted(directory.glob(f"*/{name}"))
    if (directory / name).is_file() or len(found) != 1:
        return directory / name
    return found[0]


def write_tables(directory: Path, tables: dict[str, list[dict[str, Any]]]) -> list[Path]:
    """Merge into each runtime's table under DIR (``table_path``; case by case: a table of
    another key is kept)."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for runtime, fresh in tables.items():
        path = table_path(directory, runtime)
        old = json.loads(path.read_text()) if path.is_file() else {"runtime": runtime, "tables": []}
        shipped = {key(t): t for t in old["tables"]}
        for t in fresh:
            shipped[key(t)] = merge(shipped.get(key(t)), t)
        document = {
            "runtime": runtime,
            "about": "Measured by scripts/operator_sweep.py; read by auditor.runtime.operator_table. "
            "Regenerate rather than edit.",
            "tables": [shipped[k] for k in sorted(shipped)],
        }
        path.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
        written.append(path)
    return written


def compare_tables(directory: Path, tables: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Where a fresh case's status differs from the shipped table's (and shipped tables missing)."""
    problems = []
    for runtime, fresh in tables.items():
        path = table_path(directory, runtime)
        shipped = {key(t): t for t in json.loads(path.read_text())["tables"]} if path.is_file() else {}
        for table in fresh:
            old = shipped.get(key(table))
            if old is None:
                problems.append(f"{runtime} {'/'.join(key(table))}: no shipped table in {path}")
                continue
            for case, status in table["case_status"].items():
                was = old["case_status"].get(case)
                if was != status:
                    problems.append(
                        f"{runtime} {'/'.join(key(table))}: case {case}: shipped {was}, fresh {status}"
                    )
    return problems


# -- main -------------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(REPO / "auditor.toml"), help="the stacks (default: auditor.toml)")
    ap.add_argument(
        "--exporters", default="", help="train stacks that export (default: every local train stack)"
    )
    ap.add_argument(
        "--servers", default="", help="serving stacks (default: every infer stack and X-graph twins)"
    )
    ap.add_argument("--cases", default="", help="only these cases (comma list)")
    ap.add_argument("--ci", action="store_true", help=f"the CI subset: {', '.join(catalog.CI_CASES)}")
    ap.add_argument("--version-probe", default="Dense", help="cases loaded where the MindIR version says no")
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per request (a hang is killed)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="/tmp/operator-sweep", help="the exported files and results.json")
    ap.add_argument(
        "--write",
        metavar="DIR",
        help="merge the tables into <runtime>.json in DIR or its runtime packages (plugins/runtimes)",
    )
    ap.add_argument("--compare", metavar="DIR", help="exit 1 where a case differs from DIR's tables")
    ap.add_argument(
        "--from",
        dest="results",
        metavar="RESULTS",
        action="append",
        default=[],
        help="no sweep: the tables of earlier runs' results.json (repeatable, later ones win per case)",
    )
    args = ap.parse_args(argv)
    if args.results:
        tables: dict[str, list[dict[str, Any]]] = {}
        for path in args.results:
            for runtime, fresh in tables_of(Path(path)).items():
                for t in fresh:
                    mine = tables.setdefault(runtime, [])
                    same = [i for i, o in enumerate(mine) if key(o) == key(t)]
                    if same:
                        mine[same[0]] = merge(mine[same[0]], t)
                    else:
                        mine.append(t)
        return finish(args, tables)

    context = Context(args.config, None)
    config = context.config()
    plugins = context.plugins()
    exporters = [s for s in args.exporters.split(",") if s] or [
        n
        for n, s in config.stacks.items()
        if s.role == "train" and s.runtime == "mindspore" and s.source == "local"
    ]
    servers = [s for s in args.servers.split(",") if s] or default_servers(config)
    wanted = [c for c in args.cases.split(",") if c] or (
        list(catalog.CI_CASES) if args.ci else list(catalog.CASES)
    )
    unknown = sorted(set(wanted) - set(catalog.CASES))
    if unknown:
        raise SystemExit(f"unknown cases: {', '.join(unknown)} (known: {', '.join(catalog.CASES)})")
    probes = {c for c in args.version_probe.split(",") if c}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    swept = sweep_config(config, exporters, servers)
    workers = Workers(swept, plugins.runtimes(), args.timeout)
    started = time.time()
    cases: dict[str, dict[str, Any]] = {}
    try:
        for name in [*exporters, *servers]:
            try:
                workers.get(name)
                h = workers.hello[name]
                log(f"stack {name}: {h['runtime_package']} {h['runtime_version']} (Python {h['python']})")
            except WorkerError as exc:
                log(f"stack {name} left out: {exc.describe()}")
        for name in wanted:
            case = catalog.CASES[name]
            t0 = time.time()
            c: dict[str, Any] = {"case": case, "exports": {}, "serves": []}
            for exporter in exporters:
                if exporter in workers.hello:
                    c["exports"][exporter] = export_case(workers, exporter, case, args.seed, out)
            for server in servers:
                if server not in workers.hello:
                    continue
                h = workers.hello[server]
                limit = max_mind_ir_version(h["runtime_package"], h["runtime_version"])
                for exporter, exp in c["exports"].items():
                    if exp.status != "ok":
                        continue
                    admitted = (exp.info.get("mind_ir_version") or 0) <= limit
                    if admitted or name in probes:
                        c["serves"].append(
                            serve_case(workers, server, exporter, case, args.seed, exp, admitted)
                        )
            cases[name] = c
            parts = [f"{e}:{x.status}" for e, x in c["exports"].items()]
            parts += [f"{s.server}<-{s.exporter}:{s.status}" for s in c["serves"]]
            log(f"{name:<26} {time.time() - t0:5.1f}s  {'  '.join(parts)}")
        wall = time.time() - started
        produced = (
            f"scripts/operator_sweep.py (auditor {__version__}) on {platform.node()}, "
            f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {len(wanted)} cases, seed {args.seed}, GLOG_v=2, "
            f"timeout {args.timeout:g} s, one worker per stack restarted after each failure"
        )
        stacks = {
            n: {**h, "target": swept.stacks[n].device.partition(":")[0]} for n, h in workers.hello.items()
        }
        tables = build_tables(cases, stacks, exporters, servers, produced)
    finally:
        workers.close()
    raw = {
        "produced": produced,
        "wall_s": round(wall, 1),
        "stacks": stacks,
        "exporters": exporters,
        "servers": servers,
        "cases": {
            n: {
                "exports": {
                    e: {k: v for k, v in asdict(x).items() if k != "outputs"} for e, x in c["exports"].items()
                },
                "serves": [asdict(s) for s in c["serves"]],
            }
            for n, c in cases.items()
        },
    }
    (out / "results.json").write_text(json.dumps(raw, indent=1, default=str) + "\n")
    log(f"{len(wanted)} cases in {wall:.1f} s; results in {out / 'results.json'}")
    return finish(args, tables)


def tables_of(path: Path) -> dict[str, list[dict[str, Any]]]:
    """The tables of an earlier sweep, from its results.json."""
    raw = json.loads(path.read_text())
    cases = {
        name: {
            "case": catalog.CASES[name],
            "exports": {e: Export(**x) for e, x in c["exports"].items()},
            "serves": [Serve(**x) for x in c["serves"]],
        }
        for name, c in raw["cases"].items()
    }
    return build_tables(cases, raw["stacks"], raw["exporters"], raw["servers"], raw["produced"])


def finish(args: argparse.Namespace, tables: dict[str, list[dict[str, Any]]]) -> int:
    """Say what the tables hold, write them, compare them."""
    for runtime, ts in tables.items():
        for t in ts:
            counts: dict[str, int] = {}
            for s in t["case_status"].values():
                counts[s] = counts.get(s, 0) + 1
            which = f"{runtime} {t['runtime_version']} ({t['target']}) <- MindSpore {t['exported_by']}"
            log(f"table {which}: {counts}")
    if args.write:
        for path in write_tables(Path(args.write), tables):
            log(f"wrote {path}")
    if args.compare:
        problems = compare_tables(Path(args.compare), tables)
        for p in problems:
            log(f"DIFFERS: {p}")
        if problems:
            return 1
        log(f"every fresh case agrees with the tables in {args.compare}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
