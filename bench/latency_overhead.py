"""How much does the auditor's latency figure differ from a bare timing loop?

For each stack of the default config, this runs the same runtime call two ways, side by
side, several rounds interleaved:
  - reported: the p50 the auditor stores (worker `time` request: warm-up, then
    perf_counter_ns around the runtime call only);
  - bare: a minimal script in the same stack interpreter that loads/builds the same model
    and times the same call in a plain loop, with nothing of the auditor imported.
and prints reported/bare per stack. A ratio near 1.0 means the figures in the history are
the runtime's, not the auditor's.

usage: .venv/bin/python bench/latency_overhead.py [--rounds N] [--iterations N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from auditor.config import load  # noqa: E402
from auditor.cycle import Cycle  # noqa: E402
from auditor.probe import builtin_probes  # noqa: E402

BARE = r"""
import json, sys, time
import numpy as np
args = json.loads(sys.argv[1])
x = np.load(args["inputs"])
n, warmup = args["iterations"], args["warmup"]
rt = args["runtime"]
if rt == "mindspore-lite":
    import mindspore_lite as mslite
    ctx = mslite.Context(); ctx.target = ["cpu"]
    m = mslite.Model(); m.build_from_file(args["mindir"], mslite.ModelType.MINDIR, ctx)
    ins = m.get_inputs(); ins[0].set_data_from_numpy(x)
    call = lambda: m.predict(ins)
else:
    import mindspore as ms
    ms.set_context(mode=ms.GRAPH_MODE if rt == "mindspore-graph" else ms.PYNATIVE_MODE)
    try:
        (ms.Tensor(np.ones(1, np.float32)) + 1).asnumpy()
    except SystemError:
        pass
    if rt == "mindspore-graph":
        cell = ms.nn.GraphCell(ms.load(args["mindir"]))
    else:
        sys.path.insert(0, args["probes_dir"])
        import ppo_policy
        weights = dict(np.load(args["weights"]))
        cell = ppo_policy.build_cell(args["params"], weights)
    t = ms.Tensor(x)
    def call():
        for o in cell(t):
            o.asnumpy()
for _ in range(warmup):
    call()
ns = []
for _ in range(n):
    t0 = time.perf_counter_ns(); call(); ns.append(time.perf_counter_ns() - t0)
print(json.dumps(float(np.percentile(np.array(ns) / 1000.0, 50))))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=200)
    args = ap.parse_args()

    import dataclasses

    config = load(REPO / "auditor.toml", set(builtin_probes()))
    config = dataclasses.replace(
        config, latency=dataclasses.replace(config.latency, iterations=args.iterations)
    )
    probes = builtin_probes()
    spec = probes["ppo_policy"]
    params = spec.params(config.probe("ppo_policy").params)
    reported: dict[str, list[float]] = {}
    bare: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        import numpy as np

        np.save(f"{tmp}/inputs.npy", spec.make_inputs(params)[0])
        np.savez(f"{tmp}/weights.npz", **spec.make_weights(params))
        for _ in range(args.rounds):
            cycle = Cycle(config, probes)
            result = cycle.run()
            mindirs = {}
            for r in result.results:
                if r.artifact is not None:
                    path = Path(tmp) / f"{r.artifact.sha256}.mindir"
                    path.write_bytes(cycle.artifacts[r.artifact.sha256])
                    mindirs[r.train] = str(path)
                for side, stack, lat in (
                    ("train", r.train, r.train_latency),
                    ("infer", r.infer, r.infer_latency),
                ):
                    if lat is None:
                        continue
                    key = stack if side == "train" else f"{stack} ({r.train} export)"
                    reported.setdefault(key, []).append(lat.p50_us)
                    st = config.stacks[stack]
                    payload = {
                        "runtime": st.runtime,
                        "inputs": f"{tmp}/inputs.npy",
                        "weights": f"{tmp}/weights.npz",
                        "mindir": mindirs.get(r.train, ""),
                        "params": params,
                        "iterations": args.iterations,
                        "warmup": config.latency.warmup,
                        "probes_dir": str(REPO / "probes"),
                    }
                    if len(bare.get(key, [])) >= len(reported[key]):
                        continue
                    out = subprocess.run(
                        [st.python, "-c", BARE, json.dumps(payload)],
                        capture_output=True,
                        text=True,
                        check=True,
                        cwd=tmp,
                    )
                    bare.setdefault(key, []).append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(
        f"p50 latency, batch {params['batch']}, {args.iterations} timed calls, median of {args.rounds} rounds"
    )
    print(f"{'stack':<34} {'reported µs':>12} {'bare µs':>10} {'ratio':>7}")
    for key in reported:
        rep, b = statistics.median(reported[key]), statistics.median(bare[key])
        print(f"{key:<34} {rep:>12.1f} {b:>10.1f} {rep / b:>7.2f}")


if __name__ == "__main__":
    main()
