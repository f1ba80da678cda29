"""How much does the auditor's latency figure differ from a bare timing loop?

For each stack of the default config, this runs the same runtime call two ways, side by
side, several rounds interleaved:
  - reported: the p50 the auditor stores (worker `time` request: warm-up, then
    perf_counter_ns around the runtime call only);
  - bare: a minimal script in the same stack interpreter that loads/builds the same model
    and times the same call in a plain loop, with nothing of the auditor imported.
and prints reported/bare per stack (goal: within ±10%). A ratio near 1.0 means the figures in
the history are the runtime's, not the auditor's.

The bare call is built from the probe's own input specs (``INPUTS`` and ``make_inputs``): every
input the probe declares is fed, so the bench follows the probe when its inputs change.

Making the comparison honest: the two sides must run under the same conditions, so the bare
script gets the worker's environment (auditor.stacks.launch.local_worker_env: GLOG_v=2 and
GLOG_logtostderr=1, the stack's env, no PYTHONPATH), the same inputs (the exact arrays, fp16 widened to the
model's declared dtype for Lite as the worker does), the same warm-up and iteration counts, the
same device choice (set_device where MindSpore has it, else device_target), the same history
before its timing loop (one run, then the timed calls: the cycle times a model right after its
first run, and exports only afterwards), and its stderr goes to a file as the worker's does
during a request, not to a pipe. The cycle here drives one stack at a time
([worker] parallel = 1): with two stacks at once on a small machine, one worker's timing loop
shares the cores with the other's build or export.

And the bare process is started in its own session, as StackWorker starts a worker
(start_new_session). This matters more than anything above on a shared Linux machine: with
the kernel's autogroup scheduling (/proc/sys/kernel/sched_autogroup_enabled = 1, the default
of desktop and many server kernels) CPU time is shared fairly between sessions first, and only
then between the processes of a session. A bare loop left in the bench's session shares one
session's share with everything else started from the same shell, while the worker has a
session of its own. Measured with one busy loop running in the bench's shell: ms20 PyNative
p50 worker 3.2 ms, bare 15.6 ms (ratio 0.21); with the bare loop in its own session, 3.3 ms
vs 3.9 ms; and the whole bench, bare loops in the bench's session, printed reported/bare
0.46-0.82 for every stack, the pattern of the figures this bench once printed (ms210 0.48,
ms210-graph 0.65/0.80, lite20 0.76): the worker measured the runtime, the bare loop was starved.

Each stack's bare loop runs right before and right after its `time` request, inside the cycle
(PairedCycle), so that the figures are seconds apart rather than a whole cycle: on a shared
machine the load moves within a minute, and a PyNative p50 moves 2x with it. The reported p50
is compared with the geometric mean of the two bare ones (a load that rises or falls during
the request favours neither side), and the two bare p50s with each other: that "bare/bare"
spread is the runtime's own repeatability from one process to the next, the floor under any
reported/bare ratio. Measured on a quiet machine, it is wide for the PyNative stacks: MindSpore
2.10's PyNative p50 for the same cell is about 15 ms in most processes and 8-9 ms in some, in
a bare process as in a worker, and MindSpore 2.0's moves by +-20% between consecutive 200-call
windows of one process.

Why MindSpore 2.10's PyNative p50 moves so much on a 2-core machine: a call goes through
five runtime threads (the Python thread, frontend_queue, backend_queue, ActorThread_0,
KernelThread_0) that wait for each other by spinning and yielding; together they keep both
cores busy (measured: 99% of 2 cores during a timing loop), and a call takes one, two, three or
four 4 ms scheduler ticks (p50 4, 8, 12 or 16 ms at batch 256). Which one changes between
windows of 20-200 calls within a process and differs from process to process: two identical
bare loops in one process, alternated 20 times, gave 0.92 (0.77-1.09); in two processes,
alternated 12 times, 0.73-1.08. Pinned to one core, every call takes 25-35 ms.

Each stack's ratio is the geometric mean of its rounds' reported/bare ratios, with a 95%
interval (bench_stats): the load moves a round's ratio either way by tens of percent, while a
cost of the auditor's would move every round the same way. The interval says whether the
rounds were enough to tell. Ten to twenty rounds pin the graph stacks to about +-10%; the
PyNative stacks and Lite (whose p50 is about 90 µs in some processes and 170 µs in others)
need about forty, which ``--stack NAME`` (repeatable) makes affordable: only
the named stacks are timed, and the cycle runs only the pairs they need (40 rounds of ms210
and ms20: 18 minutes). Bare/bare is summed up the same way, so the floor is on the
same footing as the ratio. The machine's load is printed with the figures.

usage: .venv/bin/python bench/latency_overhead.py [--quick] [--rounds N] [--iterations N]
                                                  [--stack NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_config import reference_config  # noqa: E402
from bench_stats import geomean_interval  # noqa: E402

from auditor.cycle.cycle import Cycle  # noqa: E402
from auditor.stacks.launch import local_worker_env  # noqa: E402

PROBE = "ppo_policy"
VARIANT = "fp32"

BARE = r"""
import importlib.util, json, os, sys, time
import numpy as np
args = json.loads(sys.argv[1])
data = np.load(args["inputs"])
inputs = [np.ascontiguousarray(data["a%d" % i]) for i in range(len(data.files))]
n, warmup = args["iterations"], args["warmup"]
rt = args["runtime"]
if rt == "mindspore-lite":
    import mindspore_lite as mslite
    ctx = mslite.Context(); ctx.target = ["cpu"]
    m = mslite.Model(); m.build_from_file(args["mindir"], mslite.ModelType.MINDIR, ctx)
    ins = m.get_inputs()
    assert len(ins) == len(inputs), "model takes %d inputs, the probe declares %d" % (len(ins), len(inputs))
    for t, x in zip(ins, inputs):
        if str(t.dtype).endswith("FLOAT32") and x.dtype == np.float16:
            x = x.astype(np.float32)
        t.set_data_from_numpy(x)
    call = lambda: m.predict(ins)
else:
    import mindspore as ms
    ms.set_context(mode=ms.GRAPH_MODE if rt == "mindspore-graph" else ms.PYNATIVE_MODE)
    # The device, chosen as the worker (and any program that picks its device) chooses it.
    kind, _, index = args["device"].partition(":")
    target = {"cpu": "CPU", "ascend": "Ascend", "gpu": "GPU"}[kind.lower()]
    if hasattr(ms, "set_device"):
        ms.set_device(target, int(index or 0))
    else:
        ms.set_context(device_target=target, device_id=int(index or 0))
    try:
        (ms.Tensor(np.ones(1, np.float32)) + 1).asnumpy()
    except SystemError:
        pass
    if rt == "mindspore-graph":
        cell = ms.nn.GraphCell(ms.load(args["mindir"]))
    else:
        spec = importlib.util.spec_from_file_location("bare_probe", args["probe_file"])
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        cell = mod.build_cell(args["params"], dict(np.load(args["weights"])))
    tensors = [ms.Tensor(x) for x in inputs]
    def call():
        for o in cell(*tensors):
            o.asnumpy()
# What the worker's process did before its `time` request: one `run` (the cycle exports after timing).
call()
for _ in range(warmup):
    call()
ns = []
for _ in range(n):
    t0 = time.perf_counter_ns(); call(); ns.append(time.perf_counter_ns() - t0)
print(json.dumps(float(np.percentile(np.array(ns) / 1000.0, 50))))
"""


class PairedCycle(Cycle):
    """The audit cycle, with a bare loop of the stack run right before and right after its
    ``time`` request, so that the figures are seconds apart, not a whole cycle (the load of a
    shared machine moves within a minute). The reported figure is the one the cycle stores
    (the Latency its ``time`` request returned); the two bare figures give the runtime's own
    repeatability from one process to the next, the floor any reported/bare ratio sits on."""

    def __init__(self, config, probes, runtimes, *, bare, tmp: str, stacks: frozenset[str] = frozenset()):
        super().__init__(config, probes, runtimes)
        self.bare, self.tmp, self.named = bare, tmp, stacks
        self.pairs: dict[str, tuple[float, float, float]] = {}
        """By stack (and, infer side, the export it ran): (reported p50, bare p50 just before
        it, bare p50 just after it) in µs."""
        self._mindirs: dict[str, str] = {}
        self._timing_train = ""
        # The cycle's parts share one CycleState: its `time` and `stage` are where a request
        # is timed and an export is written, so the bench wraps those two on this cycle's state.
        self._state_time, self._state_stage = self.state.time, self.state.stage
        self.state.time, self.state.stage = self._time, self._stage

    def _stage(self, data, tmp, suffix=".mindir"):
        # With [worker] parallel = 1 a train stack exports right after its own `time` request.
        path = self._state_stage(data, tmp, suffix)
        if self._timing_train and self._timing_train not in self._mindirs:
            copy = Path(self.tmp) / f"{self._timing_train}.mindir"
            copy.write_bytes(data)
            self._mindirs[self._timing_train] = str(copy)
        return path

    def _time(self, worker, model, inputs, batch):
        stack = worker.stack
        if not model.startswith(f"{PROBE}-{VARIANT}-") and f"/{PROBE}-{VARIANT}-" not in model:
            return self._state_time(worker, model, inputs, batch)
        if stack.role == "train":
            self._timing_train = stack.name  # its export follows: _stage keeps a copy
        if self.named and stack.name not in self.named:
            return self._state_time(worker, model, inputs, batch)
        if stack.role == "train":
            key, mindir = stack.name, ""
        else:
            train = model.partition("/")[0]
            key, mindir = f"{stack.name} ({train} export)", self._mindirs.get(train, "")
        before = self.bare(key, stack, mindir)
        lat = self._state_time(worker, model, inputs, batch)
        after = self.bare(key, stack, mindir)
        self.pairs.setdefault(key, (lat.p50_us, before, after))
        return lat


def bare_p50(key: str, stack, mindir: str, common: dict, tmp: str) -> float:
    """The bare loop's p50 (µs), in a process started the way StackWorker starts a worker:
    same environment, stderr to a file, and a session of its own (see the module docstring)."""
    payload = {**common, "runtime": stack.runtime, "device": stack.device, "mindir": mindir}
    with open(f"{tmp}/stderr.log", "w") as err:
        out = subprocess.run(
            [stack.python, "-c", BARE, json.dumps(payload)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            cwd=tmp,
            env=local_worker_env(stack.env),
            start_new_session=True,
        )
    if out.returncode != 0:
        tail = Path(f"{tmp}/stderr.log").read_text(errors="replace")[-3000:]
        raise SystemExit(f"bare loop for {key} failed:\n{tail}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def focus_pairs(config, stacks: list[str]) -> tuple[str, ...]:
    """For ``--stack``: the pairs a round runs (all of them when no stack is named). A train
    stack needs one of its pairs; an infer stack needs all of its own, since which train
    stack's export it can load is the version rules' answer (lite20 refuses ms210's)."""
    chosen: list[str] = []
    for name in stacks:
        if name not in config.stacks:
            known = ", ".join(config.stacks)
            raise SystemExit(f"--stack {name}: no such stack in auditor.toml (known: {known})")
        uses = [p.name for p in config.pairs if name in (p.train, p.infer)]
        if not uses:
            raise SystemExit(f"--stack {name}: no pair of auditor.toml uses this stack")
        for pair in uses[:1] if config.stacks[name].role == "train" else uses:
            if pair not in chosen:
                chosen.append(pair)
    return tuple(chosen)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--quick", action="store_true", help="one round of 20 calls: checks the bench works")
    ap.add_argument(
        "--stack",
        action="append",
        default=[],
        metavar="NAME",
        help="time only this stack (repeatable); the cycle runs only the pairs the named stacks "
        "need, so a round costs a fraction of the full one and a noisy stack can be given many rounds",
    )
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.iterations = 1, 20
    # Only --stack needs the whole config first (to pick pairs); without it, it is read once.
    pairs = focus_pairs(reference_config()[0], args.stack) if args.stack else ()

    config, plugins = reference_config(
        probes=(PROBE,),
        variants={PROBE: (VARIANT,)},
        rollout=False,
        batches=(),
        iterations=args.iterations,
        parallel=1,
        pairs=pairs,
    )
    probes = plugins.probes()
    spec = probes[PROBE]
    params = spec.variant_params(VARIANT, config.probe(PROBE).params)
    inputs = spec.make_inputs(params)
    if len(inputs) != len(spec.inputs):
        raise SystemExit(f"{PROBE}: make_inputs gave {len(inputs)} arrays for INPUTS {spec.inputs}")
    probe_file = sys.modules[spec.module].__file__
    load_before, started = os.getloadavg()[0], time.monotonic()
    reported: dict[str, list[float]] = {}
    bare: dict[str, list[float]] = {}
    repeat: dict[str, list[float]] = {}
    """bare after / bare before, each round: the runtime's own process-to-process spread."""
    with tempfile.TemporaryDirectory() as tmp:
        np.savez(f"{tmp}/inputs.npz", **{f"a{i}": x for i, x in enumerate(inputs)})
        np.savez(f"{tmp}/weights.npz", **spec.make_weights(params))
        common = {
            "inputs": f"{tmp}/inputs.npz",
            "weights": f"{tmp}/weights.npz",
            "params": params,
            "iterations": args.iterations,
            "warmup": config.latency.warmup,
            "probe_file": probe_file,
        }
        for _ in range(args.rounds):
            cycle = PairedCycle(
                config,
                probes,
                plugins.runtimes(),
                bare=lambda key, stack, mindir: bare_p50(key, stack, mindir, common, tmp),
                tmp=tmp,
                stacks=frozenset(args.stack),
            )
            cycle.run()
            for key, (rep, b0, b1) in cycle.pairs.items():
                reported.setdefault(key, []).append(rep)
                bare.setdefault(key, []).append((b0 * b1) ** 0.5)  # between the two, in ratio terms
                repeat.setdefault(key, []).append(b1 / b0)
    if not reported:
        raise SystemExit(f"the cycle reported no latency for {PROBE}/{VARIANT}: are the stacks installed?")
    print(
        f"p50 latency, {PROBE}/{VARIANT} batch {params['batch']}, inputs {', '.join(spec.inputs)}, "
        f"{args.iterations} timed calls, {args.rounds} round(s): medians of the p50s; ratio = "
        "geometric mean of the rounds' ratios, with its 95% interval"
    )
    print(
        f"load average (1 min) before {load_before:.1f}, after {os.getloadavg()[0]:.1f}; "
        f"{(time.monotonic() - started) / 60:.1f} min"
    )
    print(
        f"{'stack':<34} {'reported µs':>12} {'bare µs':>10} {'ratio':>7} {'95% interval':>13} "
        f"{'rounds min-max':>15} {'bare/bare 95%':>18}  goal"
    )
    every: list[float] = []
    for key in reported:
        rep, b = statistics.median(reported[key]), statistics.median(bare[key])
        ratios = [r / x for r, x in zip(reported[key], bare[key], strict=True)]
        every += ratios
        # The geometric mean of the rounds' ratios: the load moves each round's ratio either
        # way by tens of percent, a cost of the auditor's would move every round the same way.
        mean, lo, hi = geomean_interval(ratios)
        verdict = "ok" if 0.9 <= mean <= 1.1 else "outside"
        _, flo, fhi = geomean_interval(repeat[key])
        floor = f"{flo:.2f}-{fhi:.2f}"
        print(
            f"{key:<34} {rep:>12.1f} {b:>10.1f} {mean:>7.2f} {f'{lo:.2f}-{hi:.2f}':>13} "
            f"{f'{min(ratios):.2f}-{max(ratios):.2f}':>15} {floor:>18}  0.90-1.10 {verdict}"
        )
    mean, lo, hi = geomean_interval(every)
    print(f"{'all stacks pooled':<34} {'':>12} {'':>10} {mean:>7.2f} {f'{lo:.2f}-{hi:.2f}':>13}")
    for key in reported:
        print(
            f"  {key}: reported "
            + " ".join(f"{x:.0f}" for x in reported[key])
            + " | bare "
            + " ".join(f"{x:.0f}" for x in bare[key])
            + " | bare after/before "
            + " ".join(f"{x:.2f}" for x in repeat[key])
        )
    print(
        "bare/bare: the same bare loop in two processes, just before and just after the request, summed\n"
        "up like the ratio; its interval is the runtime's own repeatability from one process to the next\n"
        "over as many rounds: reported/bare cannot be pinned down more tightly than that."
    )


if __name__ == "__main__":
    main()
