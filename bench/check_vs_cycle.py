"""How long does `auditor check` take, next to a full audit cycle?

Exports a typical user policy (tests/model_fixtures/user_policy.py: Dense + LayerNorm trunk,
a discrete and a continuous head) with the ms20 stack, then times, as a user would run them:

- `auditor check --model policy.mindir --no-load` against the default config's infer stacks
  (rules, stored results and measured tables only);
- `auditor check --model policy.mindir` (the default: one seeded batch loaded and run on each stack);
- `auditor audit --no-store` on the same config (the full cycle).

Each command is a fresh process (interpreter start-up included). Prints the wall and CPU
times (of the command and its stack workers) and the ratios check/cycle (the goal: under 10%);
on a shared, loaded machine the CPU ratio is the steadier figure. `--quick` checks that the
bench works: each check once, and the cycle on one pair (ms20->lite20) with the rollouts off
and the latency sweeps short (warmup 1, 5 iterations, no extra batches), so its ratios are not
the goal's; `--repeat N` takes the best of N for the checks.

usage: .venv/bin/python bench/check_vs_cycle.py [--config auditor.toml] [--quick] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
AUDITOR = str(Path(sys.executable).with_name("auditor"))


def stack_python(name: str) -> str:
    sys.path.insert(0, str(REPO))
    from auditor.common.paths import stacks_dir

    return str(stacks_dir() / name / "bin" / "python")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str]) -> tuple[float, float, int, str]:
    """Wall seconds, CPU seconds of the process and its workers, exit status, output."""
    started, cpu = time.perf_counter(), _children_cpu()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - started
    return wall, _children_cpu() - cpu, proc.returncode, proc.stdout + proc.stderr


def quick_config(source: Path, folder: Path) -> Path:
    text = source.read_text()
    text = text.replace("[rollout]\nenabled = true", "[rollout]\nenabled = false")
    text = re.sub(r"(?m)^warmup = \d+", "warmup = 1", text, count=1)
    text = re.sub(r"(?m)^iterations = \d+", "iterations = 5", text, count=1)
    text = re.sub(r"(?m)^batches = \[[^\]]*\]", "batches = []", text, count=1)
    out = folder / "auditor.toml"
    out.write_text(text)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "auditor.toml"))
    parser.add_argument(
        "--quick",
        action="store_true",
        help="checks that the bench works: each check once, the cycle on one pair without rollouts, "
        "short latency sweeps",
    )
    parser.add_argument("--repeat", type=int, default=3, help="best of N for the check commands")
    args = parser.parse_args()
    if args.quick:
        args.repeat = 1
    with tempfile.TemporaryDirectory(prefix="bench-check-") as tmp:
        folder = Path(tmp)
        config = quick_config(Path(args.config), folder) if args.quick else Path(args.config)
        model = folder / "policy.mindir"
        proc = subprocess.run(
            [stack_python("ms20"), str(REPO / "tests" / "model_fixtures" / "user_policy.py"), str(model)]
            + ["--batch", "64"],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            sys.exit(f"export failed:\n{proc.stderr[-2000:]}")
        env_db = ["--db", str(folder / "h.db")]
        base = [AUDITOR, "--config", str(config), *env_db]
        rows = []
        for label, extra in (("auditor check --no-load", ["--no-load"]), ("auditor check", [])):
            best, best_cpu, code = float("inf"), float("inf"), None
            for _ in range(max(1, args.repeat)):
                seconds, cpu, code, output = timed([*base, "check", "--model", str(model), *extra])
                if code not in (0, 1):
                    sys.exit(f"{label} failed ({code}):\n{output[-2000:]}")
                best, best_cpu = min(best, seconds), min(best_cpu, cpu)
            rows.append((label, best, best_cpu, code))
        narrowed = ["--pair", "ms20->lite20"] if args.quick else []
        cycle, cycle_cpu, code, output = timed([*base, "audit", "--no-store", *narrowed])
        if code not in (0, 1):
            sys.exit(f"audit failed ({code}):\n{output[-2000:]}")
    quick = " (--quick: the cycle on ms20->lite20 only, no rollouts, short latency sweeps)"
    print(f"config: {args.config}{quick if args.quick else ''}")
    print(f"model: user policy exported by ms20 ({model.name}), {os.cpu_count()} CPUs")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} (wall times grow with it; CPU times less)")
    print(f"{'command':<28} {'wall s':>8} {'of cycle':>9} {'CPU s':>8} {'of cycle':>9}  exit")
    for label, best, cpu, code in rows:
        print(f"{label:<28} {best:>8.2f} {best / cycle:>8.1%} {cpu:>8.2f} {cpu / cycle_cpu:>8.1%}  {code}")
    print(f"{'auditor audit (full cycle)':<28} {cycle:>8.2f} {1:>8.0%} {cycle_cpu:>8.2f} {1:>8.0%}  {code}")


if __name__ == "__main__":
    main()
