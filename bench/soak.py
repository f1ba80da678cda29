"""The operator's fault suite at any size, with figures: a kill -9 loop over real audits,
Hypothesis fuzzing of the history-database reader, and a daemon soak (cycles back to back
on the reference stacks, ms20 -> lite20) that prints the daemon's RSS, open fds, threads,
child processes and database size after each cycle, then the slope of each.

    .venv/bin/python bench/soak.py            # CI size: a few trials, cycles and examples
    .venv/bin/python bench/soak.py --soak     # an hour or more: >= 100 kill -9 trials,
                                              # >= 1000 fuzzed inputs per surface, 45 min soak

Exit status 1 when any figure that must be zero is not (tracebacks, lost or corrupt runs,
leftover processes or directories).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.fault_kit import daemon_soak, kill9_trials  # noqa: E402

FUZZ_SURFACES = (
    "test_fuzzed_database_bytes_give_a_clear_error_or_success",
    "test_fuzzed_rows_give_a_clear_error_or_success",
)


def fuzz(examples: int) -> tuple[int, int, str]:
    """Run the database-reader fuzz tests with ``examples`` inputs each: (surfaces, failed, tail)."""
    env = {**os.environ, "AUDITOR_FUZZ_EXAMPLES": str(examples)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/faults/test_db_robustness.py",
            "-k",
            "fuzzed",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    failed = proc.stdout.count("FAILED")
    if proc.returncode != 0 and not failed:
        failed = len(FUZZ_SURFACES)  # pytest itself failed: count every surface as failed
    return len(FUZZ_SURFACES), failed, proc.stdout[-2000:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--soak", action="store_true", help="the long run: 100 trials, 1000 examples, 45 min daemon"
    )
    ap.add_argument("--kill9", type=int, help="kill -9 trials (default 4; --soak 100)")
    ap.add_argument("--fuzz", type=int, help="fuzzed inputs per surface (default 25; --soak 1000)")
    ap.add_argument("--cycles", type=int, help="daemon cycles (default 5; --soak: run for --seconds)")
    ap.add_argument("--seconds", type=float, help="daemon soak duration (--soak default 2700)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip", action="append", default=[], choices=["kill9", "fuzz", "daemon"])
    args = ap.parse_args()
    kill9 = args.kill9 if args.kill9 is not None else (100 if args.soak else 4)
    examples = args.fuzz if args.fuzz is not None else (1000 if args.soak else 25)
    cycles = args.cycles if args.cycles is not None else (0 if args.soak else 5)
    seconds = args.seconds if args.seconds is not None else (2700.0 if args.soak else 0.0)
    started = time.monotonic()
    bad = False
    summary = []
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        if "kill9" not in args.skip and kill9 > 0:
            print(f"== kill -9 loop: {kill9} trials (seed {args.seed})", flush=True)
            t0 = time.monotonic()
            Path(tmp, "kill9").mkdir()
            k = kill9_trials(Path(tmp) / "kill9", kill9, args.seed, echo=lambda s: print(s, flush=True))
            summary.append(f"{k.line()} ({time.monotonic() - t0:.0f} s)")
            for note in k.notes:
                summary.append(f"  note: {note}")
            bad |= not k.clean
        if "fuzz" not in args.skip and examples > 0:
            print(f"== fuzzing the database reader: {examples} inputs per surface", flush=True)
            t0 = time.monotonic()
            surfaces, failed, tail = fuzz(examples)
            summary.append(
                f"fuzz: {surfaces} surfaces x {examples} inputs = {surfaces * examples} inputs, "
                f"{failed} surfaces failed (a traceback or an unclear error) ({time.monotonic() - t0:.0f} s)"
            )
            if failed:
                print(tail)
            bad |= bool(failed)
        if "daemon" not in args.skip and (cycles or seconds):
            what = f"{cycles} cycles" if cycles else f"{seconds:.0f} s"
            print(f"== daemon soak: {what}, cycles back to back (1 s schedule)", flush=True)
            t0 = time.monotonic()
            Path(tmp, "daemon").mkdir()
            d = daemon_soak(Path(tmp) / "daemon", cycles, seconds, echo=lambda s: print(s, flush=True))
            summary.append(f"{d.line()} ({time.monotonic() - t0:.0f} s)")
            bad |= bool(d.tracebacks or d.leftover_dirs or d.leftover_processes or d.exit_status != 0)
    print(f"\n== figures ({time.monotonic() - started:.0f} s in all)")
    for line in summary:
        print(line)
    print("result:", "FAIL" if bad else "ok: 0 tracebacks, 0 lost or corrupt runs, 0 leftovers")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
