"""Does a policy's cost grow with its batch, and no faster? (#48: users of vectorized environments
feed batches of tens of thousands of states.)

One audit cycle of ppo_policy [fp32] on ms20 -> lite20 (no rollout, no other batch sizes) at
batches 256, 4,096 and 32,768, each in a fresh auditor process, the batches taken in turn for
``--rounds``; for each batch the medians of the auditor process's own peak RSS and own CPU
seconds (its threads included, its workers not: they are the stacks' cost) and the cycle's
wall time. Goal at 32,768: peak RSS <= 300 MB and CPU <= 3 s, growing at most linearly.

usage: .venv/bin/python bench/policy_batch.py [--rounds N] [--quick]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

BATCHES = (256, 4096, 32768)
GOAL_RSS_MB, GOAL_CPU_S = 300.0, 3.0


def one(batch: int) -> None:
    """In a fresh process: one cycle at ``batch``, its own figures as one JSON line."""
    from bench_config import reference_config

    from auditor.common.memory import tune_malloc
    from auditor.cycle.cycle import Cycle

    tune_malloc()  # as the command's entry point does
    config, plugins = reference_config(
        probes=("ppo_policy",),
        variants={"ppo_policy": ("fp32",)},
        pairs=("ms20->lite20",),
        rollout=False,
        batches=(),
    )
    probe = config.probes["ppo_policy"]
    config = dataclasses.replace(
        config,
        probes={
            **config.probes,
            "ppo_policy": dataclasses.replace(probe, params={**probe.params, "batch": batch}),
        },
        latency=dataclasses.replace(config.latency, sweep=()),
    )
    t0 = time.perf_counter()
    result = Cycle(config, plugins.probes(), plugins=plugins).run()
    me = resource.getrusage(resource.RUSAGE_SELF)
    print(
        json.dumps(
            {
                "wall": time.perf_counter() - t0,
                "cpu": me.ru_utime + me.ru_stime,
                "rss_mb": me.ru_maxrss / 1024,
                "statuses": [r.status for r in result.results],
            }
        )
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds, each batch once per round, in turn")
    ap.add_argument("--quick", action="store_true", help="one round of batches 256 and 4,096: that it runs")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one is not None:
        one(args.one)
        return 0
    batches = BATCHES[:2] if args.quick else BATCHES
    rounds = 1 if args.quick else args.rounds
    figures: dict[int, list[dict]] = {b: [] for b in batches}
    load0 = os.getloadavg()[0]
    for i in range(rounds):
        for b in batches if i % 2 == 0 else batches[::-1]:
            proc = subprocess.run(
                [sys.executable, __file__, "--one", str(b)], capture_output=True, text=True, timeout=1800
            )
            if proc.returncode != 0:
                sys.stderr.write(proc.stderr[-3000:])
                return 1
            figures[b].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    load = (load0 + os.getloadavg()[0]) / 2
    print(
        f"ppo_policy [fp32], ms20 -> lite20, one cycle per batch in a fresh auditor process; medians of "
        f"{rounds} round(s), batches in turn; load average {load:.2f} on {os.cpu_count()} cores"
    )
    print(f"  {'batch':>7}{'auditor RSS MB':>16}{'auditor CPU s':>15}{'cycle wall s':>14}  statuses")
    med = {}
    for b in batches:
        rows = figures[b]
        med[b] = {k: statistics.median(r[k] for r in rows) for k in ("rss_mb", "cpu", "wall")}
        said = ", ".join(sorted({s for r in rows for s in r["statuses"]}))
        print(f"  {b:>7}{med[b]['rss_mb']:>16.1f}{med[b]['cpu']:>15.2f}{med[b]['wall']:>14.2f}  {said}")
    first, last = batches[0], batches[-1]
    growth = last / first
    for what, unit in (("cpu", "CPU"), ("rss_mb", "RSS")):
        ratio = med[last][what] / med[first][what]
        said = f"the batch grows {growth:.0f}x; linear at most"
        print(f"  {unit} at {last:,} / at {first:,}: {ratio:.2f} ({said})")
    if last == BATCHES[-1]:
        rss, cpu = med[last]["rss_mb"], med[last]["cpu"]
        rss_said = "met" if rss <= GOAL_RSS_MB else "NOT met"
        cpu_said = "met" if cpu <= GOAL_CPU_S else "NOT met"
        print(
            f"  goal at {last:,}: RSS <= {GOAL_RSS_MB:.0f} MB ({rss:.0f}: {rss_said}), "
            f"CPU <= {GOAL_CPU_S:.0f} s ({cpu:.2f}: {cpu_said})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
