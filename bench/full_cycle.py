"""What does one full audit cycle cost, warm and cold, next to the framework work it cannot avoid?

Runs audit cycles on the default config in this process (what `auditor audit --no-store`
does: load the plugins and config, run the cycle, render the report), in pairs (--rounds, 3 by
default): each pair one cycle with warm workers (``[worker] warm = "cycle"``, the default:
each stack's interpreter imports its framework once, in a zygote, and every worker is forked
from it) and one cold (``"off"``: every worker a fresh interpreter that imports its
framework), the order alternating from one pair to the next. For each it prints the medians
of the wall
time, the CPU seconds of this process and of everything it started (workers, zygotes, the
rollout's environment process) and how many times each stack's interpreter started, counted
by wrappers that stand in for the stacks' interpreters (``AUDITOR_STACKS_DIR``).

Then it replays the warm cycle's framework work in a bare script per stack, one cold process
each, with nothing of the auditor imported: import the framework, build the same probe cells
from the same weights, run them on the same inputs, time them with the same warm-up and
iterations, export them, load the same MindIR files. Requests that timed out or crashed in the
cycle are not replayed (their cost is the deadline, reported separately); fingerprint
collection is auditor work, not replayed. Ratios: warm / cold CPU, the geometric mean of the
pairs' ratios with its interval (goal: at most 0.75, a cycle 25% cheaper warm), each / bare;
the load average before and after is printed with them.

Last, `auditor check` on two MindIR files (one exported by MindSpore 2.0, one by 2.10, which
Lite 2.0 refuses: its worker is replaced) and `auditor golden record` run as commands, warm and
cold, with the interpreter starts of each stack: warm, each framework is imported once.

Measured side by side in one run; the machine is shared, so CPU seconds are the steadier figure.

With ``--against REV`` it measures a change instead: the same cycle run by this checkout and by
REV in turn (bench/revision.py), the medians of each side's CPU and wall seconds, their paired
ratio, and every side's saved outputs that repeated on REV compared bitwise.

usage: .venv/bin/python bench/full_cycle.py [--quick] [--rounds N] [--config auditor.toml] [--keep DIR]
       .venv/bin/python bench/full_cycle.py --against REV [--pairs N] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
AUDITOR = str(Path(sys.executable).with_name("auditor"))
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import revision  # noqa: E402
from bench_stats import geomean_interval  # noqa: E402

from auditor.stacks.worker import StackWorker, WorkerError  # noqa: E402

BARE = r"""
import importlib.util, json, os, sys, time
t_start = time.perf_counter()
import numpy as np
plan = json.load(open(sys.argv[1]))
folder = os.path.dirname(sys.argv[1])
runtime = plan["runtime"]
if runtime == "mindspore-lite":
    import mindspore_lite as mslite
else:
    import mindspore as ms
    ms.set_context(mode=ms.GRAPH_MODE if runtime == "mindspore-graph" else ms.PYNATIVE_MODE)
    try:
        (ms.Tensor(np.ones(1, np.float32)) + ms.Tensor(np.ones(1, np.float32))).asnumpy()
    except SystemError:  # MindSpore 2.10 with numpy 2: the first call may fail, later ones work
        pass
t_import = time.perf_counter()
models, modules, failed, expected, errors = {}, {}, 0, 0, []

def probe_module(name):
    if name not in modules:
        path = os.path.join(plan["probes_dir"], name.rpartition(".")[2] + ".py")
        spec = importlib.util.spec_from_file_location("bare_" + name.rpartition(".")[2], path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod  # export reads the cell's source through its module
        spec.loader.exec_module(mod)
        modules[name] = mod
    return modules[name]

def arrays(ref):
    data = np.load(os.path.join(folder, ref))
    return [data["a%d" % i] for i in range(len(data.files))]

def call(model, inputs):
    if runtime == "mindspore-lite":
        ins = model.get_inputs()
        shapes = [list(x.shape) for x in inputs]
        if [list(t.shape) for t in ins] != shapes:
            model.resize(ins, shapes); ins = model.get_inputs()
        for t, x in zip(ins, inputs):
            if str(t.dtype).endswith("FLOAT32") and x.dtype == np.float16:
                x = x.astype(np.float32)  # Lite 2.0 on CPU takes fp16 models' inputs as fp32
            t.set_data_from_numpy(np.ascontiguousarray(x))
        return [np.array(o.get_data_to_numpy(), copy=True) for o in model.predict(ins)]
    outs = model(*[ms.Tensor(np.ascontiguousarray(x)) for x in inputs])
    return [o.asnumpy() for o in (outs if isinstance(outs, (tuple, list)) else [outs])]

for op in plan["ops"]:
    try:
        if op["op"] == "build":
            w = np.load(os.path.join(folder, op["weights"]))
            extra = {"expose_layers": True} if op.get("expose_layers") else {}
            models[op["model"]] = probe_module(op["module"]).build_cell(op["params"], dict(w), **extra)
        elif op["op"] == "load":
            if runtime == "mindspore-lite":
                ctx = mslite.Context(); ctx.target = ["cpu"]
                m = mslite.Model()
                m.build_from_file(os.path.join(folder, op["mindir"]), mslite.ModelType.MINDIR, ctx)
                models[op["model"]] = m
            else:
                models[op["model"]] = ms.nn.GraphCell(ms.load(os.path.join(folder, op["mindir"])))
        elif op["op"] == "run":
            call(models[op["model"]], arrays(op["inputs"]))
        elif op["op"] == "time":
            x = arrays(op["inputs"])
            for _ in range(op["warmup"]):
                call(models[op["model"]], x)
            for _ in range(op["iterations"]):
                t0 = time.perf_counter_ns(); call(models[op["model"]], x); time.perf_counter_ns() - t0
        elif op["op"] == "export":
            x = [ms.Tensor(a) for a in arrays(op["inputs"])]
            out = os.path.join(folder, "bare_export")
            ms.export(models[op["model"]], *x, file_name=out, file_format="MINDIR")
            os.chmod(out + ".mindir", 0o600)
            os.remove(out + ".mindir")
    except Exception as exc:
        failed += 1
        expected += bool(op.get("cycle_failed"))
        errors.append("%s %s: %s" % (op["op"], op.get("model"), str(exc).strip().splitlines()[-1:]))
t_end = time.perf_counter()
print(json.dumps({"import_s": t_import - t_start, "ops_s": t_end - t_import,
                  "failed": failed, "expected": expected, "errors": errors}))
"""


class Recorder:
    """Wraps StackWorker.request: every request of every worker process, with its payload
    saved (arrays as .npz, MindIR files copied) so the bare script can do the same work."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.workers: dict[int, dict] = {}
        self.skipped_s = 0.0
        self.skipped: list[str] = []
        self._n = 0
        self._original = StackWorker.request

    def _save(self, values: list[np.ndarray] | dict[str, np.ndarray]) -> str:
        self._n += 1
        name = f"arrays{self._n}.npz"
        if isinstance(values, dict):
            np.savez(self.folder / name, **values)
        else:
            np.savez(self.folder / name, **{f"a{i}": a for i, a in enumerate(values)})
        return name

    def install(self) -> None:
        recorder = self

        def request(worker: StackWorker, op: str, timeout: float | None = None, **payload):
            started = time.perf_counter()
            if not hasattr(worker, "_bench_key"):  # one entry per worker process (id() may be reused)
                worker._bench_key = len(recorder.workers)  # type: ignore[attr-defined]
            entry = recorder.workers.setdefault(
                worker._bench_key,  # type: ignore[attr-defined]
                {"stack": worker.stack.name, "runtime": worker.stack.runtime, "ops": []},
            )
            entry["python"] = worker.stack.python
            record = recorder._record(op, payload)
            try:
                reply = recorder._original(worker, op, timeout=timeout, **payload)
            except WorkerError as exc:
                if record is not None:
                    record["cycle_failed"] = True
                if exc.kind in ("timeout", "crash"):
                    recorder.skipped_s += time.perf_counter() - started
                    recorder.skipped.append(f"{worker.stack.name} {op}: {exc.kind}")
                    record = None
                raise
            finally:
                if record is not None:
                    entry["ops"].append(record)
            return reply

        StackWorker.request = request  # type: ignore[method-assign]

    def uninstall(self) -> None:
        StackWorker.request = self._original  # type: ignore[method-assign]

    def _record(self, op: str, p: dict) -> dict | None:
        if op == "build":
            return {
                "op": op,
                "model": p["model"],
                "module": p["probe"]["module"],
                "params": p["probe"]["params"],
                "expose_layers": bool(p["probe"].get("expose_layers")),
                "weights": self._save(p["weights"]),
            }
        if op == "load":
            self._n += 1
            name = f"model{self._n}.mindir"
            shutil.copyfile(p["path"], self.folder / name)
            return {"op": op, "model": p["model"], "mindir": name}
        if op in ("run", "export"):
            return {"op": op, "model": p["model"], "inputs": self._save(p["inputs"])}
        if op == "time":
            return {
                "op": op,
                "model": p["model"],
                "inputs": self._save(p["inputs"]),
                "warmup": int(p.get("warmup", 5)),
                "iterations": int(p.get("iterations", 50)),
            }
        return None  # hello (the import, done by the bare script too), fingerprint, echo


def audit_once(config_path: str, quick: bool, warm: str) -> tuple[float, str]:
    """`auditor audit --no-store`, in process: plugins, config, cycle, report. ``quick``: one
    pair, one probe variant, no rollout, no extra batch sizes (checks that the bench works)."""
    started = time.perf_counter()
    import dataclasses

    from bench_config import reference_config

    from auditor.cycle.cycle import Cycle
    from auditor.report.text import render_text

    if quick:
        config, plugins = reference_config(
            config_path,
            pairs=("ms20->lite20",),
            probes=("ppo_policy",),
            variants={"ppo_policy": ("fp32",)},
            rollout=False,
            batches=(),
            iterations=10,
        )
    else:
        config, plugins = reference_config(config_path)
    config = dataclasses.replace(config, worker=dataclasses.replace(config.worker, warm=warm))
    result = Cycle(config, plugins.probes(), plugins.runtimes()).run()
    render_text(result)
    return time.perf_counter() - started, result.outcome


def _cpu() -> float:
    """CPU seconds of this process and of every child it has waited for (their children too)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def counting_stacks(folder: Path) -> Path:
    """A stacks directory whose interpreters are wrappers of the real ones that note each start
    (each start of a stack interpreter, a zygote or a cold worker, imports its framework once)."""
    from auditor.common.paths import stacks_dir

    real = stacks_dir()
    root = folder / "stacks"
    for name in ("ms210", "ms20", "lite20", "ort"):
        wrapper = root / name / "bin" / "python"
        wrapper.parent.mkdir(parents=True, exist_ok=True)
        log, python = root / f"{name}.starts", real / name / "bin" / "python"
        wrapper.write_text(f'#!/bin/sh\necho start >> "{log}"\nexec "{python}" "$@"\n')
        wrapper.chmod(0o755)
    return root


def starts(root: Path) -> dict[str, int]:
    """Interpreter starts per stack since the last call (and forget them)."""
    out = {}
    for path in sorted(root.glob("*.starts")):
        out[path.stem] = len(path.read_text().splitlines())
        path.unlink()
    return out


def _starts_text(found: dict[str, int]) -> str:
    return ", ".join(f"{n} {k}" for n, k in sorted(found.items())) or "none"


def bare_replay(folder: Path, recorder: Recorder) -> list[tuple[str, int, dict, float, float]]:
    """The recorded framework work, one cold bare process per stack: (stack, requests, figures,
    wall, CPU seconds)."""
    by_stack: dict[str, dict] = {}
    for i, entry in enumerate(recorder.workers.values()):
        merged = by_stack.setdefault(entry["stack"], {**entry, "ops": []})
        for op in entry["ops"]:  # model ids are per worker process: kept apart here
            merged["ops"].append({**op, "model": f"w{i}:{op['model']}"} if "model" in op else op)
    rows = []
    for stack, entry in by_stack.items():
        plan_path = folder / f"plan-{stack}.json"
        plan_path.write_text(json.dumps({**entry, "probes_dir": str(REPO / "probes")}))
        started, cpu = time.perf_counter(), _cpu()
        proc = subprocess.run(
            [entry["python"], "-c", BARE, str(plan_path)], capture_output=True, text=True, cwd=folder
        )
        wall, cpu = time.perf_counter() - started, _cpu() - cpu
        if proc.returncode != 0:
            raise SystemExit(f"bare replay for {stack} failed:\n{proc.stderr[-3000:]}")
        figures = json.loads(proc.stdout.strip().splitlines()[-1])
        rows.append((stack, len(entry["ops"]), figures, wall, cpu))
    return rows


def commands(folder: Path, root: Path, quick: bool) -> list[tuple[str, str, float, float, dict[str, int]]]:
    """`auditor check` on two exported files and `auditor golden record`, as commands, warm and
    cold: (command, warm, wall, CPU seconds, interpreter starts per stack)."""
    models = []
    for stack in ("ms20",) if quick else ("ms20", "ms210"):
        out = folder / f"policy-{stack}.mindir"
        proc = subprocess.run(
            [
                str(root / stack / "bin" / "python"),
                str(REPO / "tests/model_fixtures/user_policy.py"),
                str(out),
            ],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise SystemExit(f"export by {stack} failed:\n{proc.stderr[-2000:]}")
        models.append(out)
    starts(root)
    text = (REPO / "auditor.toml").read_text()
    model = (
        f'\n[models.policy]\npath = "{models[0]}"\nstacks = ["lite20"]\nreference = "ms210-graph"\n'
        'inputs = [{ name = "obs", shape = [8, 11], low = -1.0, high = 1.0 }]\n'
    )
    rows = []
    env = {k: v for k, v in os.environ.items() if k != "AUDITOR_ZYGOTES"}
    env["AUDITOR_STACKS_DIR"] = str(root)
    for warm in ("cycle", "off"):
        config = folder / f"auditor-{warm}.toml"
        config.write_text(text.replace('\nwarm = "cycle"', f'\nwarm = "{warm}"') + model)
        base = [AUDITOR, "--config", str(config), "--db", str(folder / f"h-{warm}.db")]
        check = ["check", *[a for m in models for a in ("--model", str(m))]]
        golden = [
            "golden",
            "record",
            "policy",
            "--stack",
            "ms210-graph",
            "--out",
            str(folder / f"g-{warm}.npz"),
        ]
        for label, args in (
            ("check " + " ".join(m.name for m in models), check),
            ("golden record policy", golden),
        ):
            started, cpu = time.perf_counter(), _cpu()
            proc = subprocess.run([*base, *args], capture_output=True, text=True, env=env, timeout=1800)
            wall, cpu = time.perf_counter() - started, _cpu() - cpu
            if proc.returncode not in (0, 1):
                raise SystemExit(
                    f"{label} failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
                )
            rows.append((label, warm, wall, cpu, starts(root)))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(REPO / "auditor.toml"))
    ap.add_argument("--keep", metavar="DIR", help="keep the recorded requests in DIR")
    ap.add_argument(
        "--quick", action="store_true", help="one pair, one probe variant: checks that the bench works"
    )
    ap.add_argument(
        "--against",
        metavar="REV",
        help="instead: the cycle by this checkout and by REV (a git revision) side by side, in turn: "
        "CPU and wall medians, their paired ratio, and the outputs bitwise",
    )
    ap.add_argument("--pairs", type=int, default=3, help="with --against: runs of each, in turn")
    ap.add_argument(
        "--rounds", type=int, help="pairs of warm and cold cycles, in turn (default 3; --quick: 1)"
    )
    args = ap.parse_args()
    args.rounds = args.rounds or (1 if args.quick else 3)
    os.environ.pop("AUDITOR_ZYGOTES", None)  # this process's own zygotes: their CPU is counted here
    if args.against:
        narrow = ["--pair", "ms20->lite20", "--probe", "ppo_policy"] if args.quick else []
        print("\n".join(revision.audits_side_by_side(args.against, args.config, args.pairs, narrow)))
        return

    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="auditor-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    root = counting_stacks(folder)
    os.environ["AUDITOR_STACKS_DIR"] = str(root)
    load_before = os.getloadavg()
    recorder = Recorder(folder)
    recorder.install()  # a warm cycle recorded for the bare replay (not one of the pairs)
    try:
        recorded_wall, _ = audit_once(args.config, args.quick, "cycle")
    finally:
        recorder.uninstall()
    starts(root)
    # warm and cold in turn, the order alternating (A B, B A, ...): a load that comes and goes
    # weighs on both alike; each figure is the median of its runs, the ratio the paired one's
    runs: dict[str, list[tuple[float, float, str, dict[str, int]]]] = {"cycle": [], "off": []}
    for i in range(args.rounds):
        for warm in ("cycle", "off") if i % 2 == 0 else ("off", "cycle"):
            started_cpu = _cpu()
            wall, outcome = audit_once(args.config, args.quick, warm)
            runs[warm].append((wall, _cpu() - started_cpu, outcome, starts(root)))
    load_after = os.getloadavg()
    cycles = {
        warm: (
            statistics.median(r[0] for r in done),
            statistics.median(r[1] for r in done),
            "/".join(sorted({r[2] for r in done})),
            done[-1][3],
        )
        for warm, done in runs.items()
    }
    rows = bare_replay(folder, recorder)
    command_rows = commands(folder, root, args.quick)

    bare_wall = sum(r[3] for r in rows)
    bare_cpu = sum(r[4] for r in rows)
    print(
        f"one audit cycle on {args.config}{' (--quick: ms20->lite20, ppo_policy fp32)' if args.quick else ''}"
    )
    print(
        f"  {args.rounds} pair(s) of runs, warm and cold in turn (order alternating), medians; a recorded "
        f"warm cycle before them ({recorded_wall:.1f} s) for the bare replay; load average "
        f"{load_before[0]:.2f} before, {load_after[0]:.2f} after, on {os.cpu_count()} CPUs"
    )
    print(
        f"  {'workers':<8} {'outcome':<9} {'wall s':>7} {'CPU s':>7}  interpreter starts (framework imports)"
    )
    for warm, label in (("cycle", "warm"), ("off", "cold")):
        wall, cpu, outcome, found = cycles[warm]
        print(f"  {label:<8} {outcome:<9} {wall:>7.1f} {cpu:>7.1f}  {_starts_text(found)}")
    if recorder.skipped:
        print(f"  warm: {recorder.skipped_s:.1f} s in requests that timed out or crashed (not replayed):")
        for s in recorder.skipped:
            print(f"    {s}")
    print("bare replay of the warm cycle's framework work, one cold process per stack, one after another:")
    head = ("stack", "requests", "import s", "calls s", "process s", "CPU s", "failed")
    print("  {:<14} {:>8} {:>9} {:>8} {:>10} {:>7} {:>7}".format(*head))
    for stack, n, f, wall, cpu in rows:
        figures = (stack, n, f["import_s"], f["ops_s"], wall, cpu, f["failed"])
        print("  {:<14} {:>8} {:>9.2f} {:>8.2f} {:>10.2f} {:>7.2f} {:>7}".format(*figures))
        if f["failed"] != f["expected"]:  # a call that worked in the cycle must work bare too
            print(f"    {f['failed'] - f['expected']} failed bare only: " + "; ".join(f["errors"][:3]))
    print(f"  {'total':<14} {'':>8} {'':>9} {'':>8} {bare_wall:>10.2f} {bare_cpu:>7.2f}")
    (warm_wall, warm_cpu, *_), (_, cold_cpu, *_) = cycles["cycle"], cycles["off"]
    paired = list(zip(runs["cycle"], runs["off"], strict=True))
    cpu_ratio = geomean_interval([w[1] / c[1] for w, c in paired])
    wall_ratio = geomean_interval([w[0] / c[0] for w, c in paired])
    print(
        f"ratio warm / cold CPU: {cpu_ratio[0]:.2f} [{cpu_ratio[1]:.2f}, {cpu_ratio[2]:.2f}] over "
        f"{len(paired)} pair(s)  (goal <= 0.75); wall: {wall_ratio[0]:.2f} [{wall_ratio[1]:.2f}, "
        f"{wall_ratio[2]:.2f}]"
    )
    print(f"ratio cycle / bare CPU: warm {warm_cpu / bare_cpu:.2f}, cold {cold_cpu / bare_cpu:.2f}")
    print(f"ratio cycle / bare: {warm_wall / bare_wall:.2f}  (wall, warm; goal <= 1.3)")
    print("commands, each a fresh process (its stack interpreters counted: goal, warm: one each):")
    print(f"  {'command':<44} {'workers':<7} {'wall s':>7} {'CPU s':>7}  interpreter starts")
    for label, warm, wall, cpu, found in command_rows:
        how = "warm" if warm == "cycle" else "cold"
        print(f"  {label:<44} {how:<7} {wall:>7.1f} {cpu:>7.1f}  {_starts_text(found)}")
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
