"""What `auditor fix` costs on the demo's own drift (ppo_policy [fp16], ms20 -> lite20, the
shipped auditor.toml): wall time, CPU seconds of the command and everything it started, and the
exports it audited, per run and as the median of the runs. Goal: under two minutes here.

    .venv/bin/python bench/fix.py            # 3 runs
    .venv/bin/python bench/fix.py --quick    # 1 run
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ARGS = ("fix", "ppo_policy", "--stack", "lite20", "--train", "ms20", "--variant", "fp16", "--json")
GOAL_S = 120.0


def one(tmp: Path) -> tuple[float, float, dict]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "auditor",
            "--config",
            str(REPO / "auditor.toml"),
            *ARGS,
            "--out",
            str(tmp / "f.mindir"),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=1800,
    )
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"auditor fix failed ({proc.returncode}): {proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, json.loads(proc.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one run (the CI smoke test)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs = 1 if args.quick else args.runs
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(runs):
            wall, cpu, doc = one(Path(tmp))
            rows.append((wall, cpu, doc))
            print(
                f"run {i + 1}: {wall:6.1f} s wall  {cpu:6.1f} CPU-s  exports {doc['exports']}  "
                f"candidates {len(doc['candidates'])} of at most {doc['max_candidates']}  "
                f"kept in float32: {', '.join(c or '(own ops)' for c in doc['cells']) or 'none'}"
            )
    wall = statistics.median(r[0] for r in rows)
    cpu = statistics.median(r[1] for r in rows)
    doc = rows[-1][2]
    load = os.getloadavg()[0]
    print()
    print(f"auditor fix ppo_policy [fp16] ms20 -> lite20, median of {runs} run(s) (load average {load:.1f})")
    print(f"  wall time          {wall:.1f} s")
    print(f"  CPU (with workers) {cpu:.1f} s")
    print(
        f"  exports audited    {doc['exports']} (as configured, {len(doc['candidates'])} candidates, float32)"
    )
    per = wall / max(doc["exports"], 1)
    print(f"  per export         {per:.1f} s wall")
    cost = doc["cost"]
    print(
        f"  the fix costs      {cost['fix']['size'] / 1024:.1f} KB, p50 {cost['fix']['p50_us']:.0f} µs "
        f"(all float16 {cost['all_float16']['size'] / 1024:.1f} KB, {cost['all_float16']['p50_us']:.0f} µs; "
        f"all float32 {cost['all_float32']['size'] / 1024:.1f} KB, {cost['all_float32']['p50_us']:.0f} µs)"
    )
    verdict = "met" if wall < GOAL_S else "NOT met"
    print(f"goal (under {GOAL_S:.0f} s wall): {verdict}")


if __name__ == "__main__":
    main()
