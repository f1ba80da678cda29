"""What does NPU telemetry cost a cycle? Sampling eight NPUs next to a default audit cycle.

Writes a fake npu-smi that prints the published outputs of eight Atlas A2 cards
(tests/npu_fakes.py; one busy, one failing with -8005, as in the tests), points the first
stack of the default config at it, and times what a cycle adds for telemetry: the worker's
collector request on an already started worker (41 npu-smi calls: the list, then five views
per NPU), the median of --rounds samples. Then times the default cycle itself
(`auditor audit --no-store` on auditor.toml, telemetry off, so the cycle is the baseline),
and prints the ratio; the goal is under 1%.

A fake npu-smi is a shell script: a real one takes longer per call (it opens the driver),
so the same calls on a real host cost more; the script's own cost is printed per call, to
scale the figure by a host's own `time npu-smi info -t power -i 0`.

usage: .venv/bin/python bench/telemetry_cost.py [--quick] [--rounds N] [--cycle-seconds S]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_config import reference_config  # noqa: E402

from auditor.cycle.telemetry import sample  # noqa: E402
from tests.npu_fakes import host_910b_8, write_npu_smi  # noqa: E402

AUDITOR = str(Path(sys.executable).with_name("auditor"))


def cycle_seconds(folder: Path, quick: bool) -> float:
    """Wall time of `auditor audit --no-store` on the default config (telemetry off)."""
    text = (REPO / "auditor.toml").read_text()
    text = re.sub(r"(?m)^\[telemetry\]\nenabled = true", "[telemetry]\nenabled = false", text, count=1)
    if "[telemetry]\nenabled = false" not in text:
        text = text.replace("\n[worker]", "\n[telemetry]\nenabled = false\n\n[worker]", 1)
    if quick:
        text = text.replace("[rollout]\nenabled = true", "[rollout]\nenabled = false")
        text = re.sub(r"(?m)^iterations = \d+", "iterations = 5", text, count=1)
        text = re.sub(r"(?m)^batches = \[[^\]]*\]", "batches = []", text, count=1)
    config = folder / "auditor.toml"
    config.write_text(text)
    started = time.perf_counter()
    narrowed = ["--pair", "ms20->lite20"] if quick else []  # --quick checks the bench works
    proc = subprocess.run(
        [AUDITOR, "--config", str(config), "audit", "--no-store", *narrowed],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if proc.returncode not in (0, 1):
        raise SystemExit(f"the cycle failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 samples; a one-pair cycle without rollouts")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument(
        "--cycle-seconds", type=float, help="the default cycle's wall time, if already measured"
    )
    args = parser.parse_args()
    rounds = 5 if args.quick else args.rounds
    with tempfile.TemporaryDirectory(prefix="bench-telemetry-cost-") as tmp:
        folder = Path(tmp)
        fake = write_npu_smi(folder / "npu-smi", host_910b_8())
        config, plugins = reference_config()
        name = sorted(config.stacks)[0]
        stack = dataclasses.replace(config.stacks[name], npu_smi=str(fake))
        config = dataclasses.replace(config, stacks={**config.stacks, name: stack})
        reach = plugins.reach(config)
        per_call = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            subprocess.run([str(fake), "info", "-t", "power", "-i", "0"], capture_output=True, check=True)
            per_call.append(time.perf_counter() - t0)
        times, calls = [], 0
        with reach.worker(name) as worker:
            worker.start()
            for _ in range(rounds):
                t0 = time.perf_counter()
                s = sample(worker, stack, config.telemetry)
                times.append(time.perf_counter() - t0)
                assert s.available and len(s.npus) == 8, s
                calls = s.calls
        sample_s = statistics.median(times)
        print(f"load average {os.getloadavg()[0]:.1f}")
        print(
            f"telemetry sample of 8 NPUs through {name}'s worker: {sample_s * 1000:.0f} ms "
            f"(median of {rounds}; {calls} npu-smi calls, {statistics.median(per_call) * 1000:.1f} ms "
            "per call of the fake npu-smi from here)"
        )
        cycle = args.cycle_seconds if args.cycle_seconds else cycle_seconds(folder, args.quick)
        what = "given" if args.cycle_seconds else ("quick cycle, one pair" if args.quick else "default cycle")
        share = sample_s / cycle * 100
        print(f"{what}: {cycle:.1f} s; telemetry share of the cycle: {share:.2f}% (goal: under 1%)")


if __name__ == "__main__":
    main()
