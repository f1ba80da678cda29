"""What does one full audit cycle cost, next to the framework work it cannot avoid?

Runs one audit cycle on the default config (what `auditor audit --no-store` does: load the
plugins and config, run the cycle, render the report) and records every request each stack
worker received. Then replays, for each worker process the cycle started, the same framework
work in a bare script in that stack's interpreter, with nothing of the auditor imported:
import the framework, build the same probe cells from the same weights, run them on the
same inputs, time them with the same warm-up and iterations, export them, load the same
MindIR files. Requests that timed out or crashed in the cycle are not replayed (their cost
is the deadline, reported separately); fingerprint collection is auditor work, not replayed.

Prints the cycle's wall time, the bare time per worker process and in total (serial), and
their ratio. The cycle drives up to [worker] parallel stacks at once, so a ratio below 1 is
possible; the serial sum is the honest floor for one machine running everything in turn.

usage: .venv/bin/python bench/full_cycle.py [--quick] [--config auditor.toml] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

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


def audit_once(config_path: str, quick: bool) -> tuple[float, str]:
    """`auditor audit --no-store`, in process: plugins, config, cycle, report. ``quick``: one
    pair, one probe variant, no rollout, no extra batch sizes (checks that the bench works)."""
    started = time.perf_counter()
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
    result = Cycle(config, plugins.probes(), plugins.runtimes()).run()
    render_text(result)
    return time.perf_counter() - started, result.outcome


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(REPO / "auditor.toml"))
    ap.add_argument("--keep", metavar="DIR", help="keep the recorded requests in DIR")
    ap.add_argument(
        "--quick", action="store_true", help="one pair, one probe variant: checks that the bench works"
    )
    args = ap.parse_args()

    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="auditor-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    recorder = Recorder(folder)
    recorder.install()
    try:
        cycle_s, outcome = audit_once(args.config, args.quick)
    finally:
        recorder.uninstall()

    rows = []
    for i, entry in enumerate(recorder.workers.values()):
        plan_path = folder / f"plan{i}.json"
        plan_path.write_text(json.dumps({**entry, "probes_dir": str(REPO / "probes")}))
        started = time.perf_counter()
        proc = subprocess.run(
            [entry["python"], "-c", BARE, str(plan_path)], capture_output=True, text=True, cwd=folder
        )
        wall = time.perf_counter() - started
        if proc.returncode != 0:
            raise SystemExit(f"bare replay for {entry['stack']} failed:\n{proc.stderr[-3000:]}")
        figures = json.loads(proc.stdout.strip().splitlines()[-1])
        rows.append((entry["stack"], len(entry["ops"]), figures, wall))

    bare_total = sum(wall for *_, wall in rows)
    print(f"one audit cycle on {args.config} (outcome {outcome}): {cycle_s:.1f} s wall")
    if recorder.skipped:
        print(f"  of which {recorder.skipped_s:.1f} s in requests that timed out or crashed (not replayed):")
        for s in recorder.skipped:
            print(f"    {s}")
    print("bare replay, one process per worker the cycle started, run one after another:")
    print(f"  {'stack':<14} {'requests':>8} {'import s':>9} {'calls s':>8} {'process s':>10} {'failed':>7}")
    for stack, n, f, wall in rows:
        print(f"  {stack:<14} {n:>8} {f['import_s']:>9.2f} {f['ops_s']:>8.2f} {wall:>10.2f} {f['failed']:>7}")
        if f["failed"] != f["expected"]:  # a call that worked in the cycle must work bare too
            print(f"    {f['failed'] - f['expected']} failed bare only: " + "; ".join(f["errors"][:3]))
    print(f"  {'total':<14} {'':>8} {'':>9} {'':>8} {bare_total:>10.2f}")
    print(f"ratio cycle / bare: {cycle_s / bare_total:.2f}  (goal <= 1.3)")
    if recorder.skipped:
        print(f"ratio without the timed-out requests: {(cycle_s - recorder.skipped_s) / bare_total:.2f}")
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
