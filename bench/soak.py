"""The operator's fault suite at any size, with figures: a kill -9 loop over real audits,
Hypothesis fuzzing of the history-database reader and of golden files, hostile model, golden
and input files, planted secrets, daemon cycles with a stack on an ssh host whose cycle
processes are SIGKILLed (nothing may be left behind), PostgreSQL stopped and started under
the daemon, and a daemon soak (cycles back to back on the reference stacks, ms20 -> lite20)
that prints the daemon's RSS, open fds, threads, child processes and database size after
each cycle, then the slope of each.

    .venv/bin/python bench/soak.py            # CI size: a few trials, cycles and examples
    .venv/bin/python bench/soak.py --soak     # an hour or more: >= 100 kill -9 trials,
                                              # >= 1000 fuzzed inputs per surface, 100 ssh
                                              # cycles with 20 SIGKILLs, 45 min soak

Exit status 1 when any figure that must be zero is not (tracebacks, lost or corrupt runs,
leftover processes or directories).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.fault_kit import daemon_soak, kill9_trials, postgres_outage, ssh_daemon_soak  # noqa: E402

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


def pytest_surface(path: str, examples: int, *select: str) -> tuple[int, int, str]:
    """Run one fault-suite file (``examples`` fuzzed inputs where it fuzzes): (tests, failed, tail)."""
    env = {**os.environ, "AUDITOR_FUZZ_EXAMPLES": str(examples), "AUDITOR_REQUIRE_STACKS": "1"}
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", path, *select]
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    passed = int(m.group(1)) if (m := re.search(r"(\d+) passed", proc.stdout)) else 0
    failed = int(m.group(1)) if (m := re.search(r"(\d+) (?:failed|error)", proc.stdout)) else 0
    if proc.returncode != 0 and not failed:
        failed = 1
    return passed + failed, failed, proc.stdout[-2000:]


def ssh_leftovers(tmp: Path, cycles: int, kills: int, seed: int) -> tuple[str, bool]:
    from tests.sshd import make_sshd, unavailable

    reason = unavailable()
    if reason:
        return f"ssh leftovers: not run ({reason})", False
    remote_tmp = tmp / "remote-tmp"
    remote_tmp.mkdir(parents=True)
    (tmp / "run").mkdir()
    server = make_sshd(tmp / "sshd", "h", session_env={"TMPDIR": str(remote_tmp)})
    try:
        figures = ssh_daemon_soak(
            tmp / "run", server, remote_tmp, cycles, kills, seed, echo=lambda s: print(s, flush=True)
        )
    finally:
        server.stop()
    if not figures.clean:
        print(f"  left: {figures.leftover_dirs} pids {figures.leftover_processes} host {figures.remote_dirs}")
    return figures.line(), figures.clean and figures.kills == kills and figures.cycles >= cycles


def outage(tmp: Path) -> tuple[str, bool]:
    from tests import postgres_server

    try:
        server = postgres_server.start()
    except postgres_server.Unavailable as exc:
        return f"postgres outage: not run ({exc})", False
    try:
        server.create_database("outage")
        url = f"postgresql://{server.user}@127.0.0.1:{server.port}/outage"
        (tmp / "run").mkdir(parents=True)
        f = postgres_outage(tmp / "run", server, url)
    finally:
        server.stop()
    ok = (
        f.after >= f.before + 2
        and f.interrupted_status == "aborted"
        and f.skipped >= 1
        and f.tracebacks == 0
        and f.continued_lines == 0
        and f.exit_status == 0
    )
    return f.line(), ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--soak", action="store_true", help="the long run: 100 trials, 1000 examples, 45 min daemon"
    )
    ap.add_argument("--kill9", type=int, help="kill -9 trials (default 4; --soak 100)")
    ap.add_argument("--fuzz", type=int, help="fuzzed inputs per surface (default 25; --soak 1000)")
    ap.add_argument("--cycles", type=int, help="daemon cycles (default 5; --soak: run for --seconds)")
    ap.add_argument("--seconds", type=float, help="daemon soak duration (--soak default 2700)")
    ap.add_argument("--ssh-cycles", type=int, help="daemon cycles with an ssh host (default 6; --soak 100)")
    ap.add_argument(
        "--ssh-kills", type=int, help="cycle processes SIGKILLed meanwhile (default 2; --soak 20)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=["kill9", "fuzz", "hostile", "secrets", "journeys", "ssh", "postgres", "daemon"],
    )
    args = ap.parse_args()
    ssh_cycles = args.ssh_cycles if args.ssh_cycles is not None else (100 if args.soak else 6)
    ssh_kills = args.ssh_kills if args.ssh_kills is not None else (20 if args.soak else 2)
    kill9 = args.kill9 if args.kill9 is not None else (100 if args.soak else 4)
    examples = args.fuzz if args.fuzz is not None else (1000 if args.soak else 25)
    cycles = args.cycles if args.cycles is not None else (0 if args.soak else 5)
    seconds = args.seconds if args.seconds is not None else (2700.0 if args.soak else 0.0)
    started = time.monotonic()
    bad = False
    summary = []
    # In /tmp, short: the ssh control sockets must fit under its tmp/ to be counted there.
    with tempfile.TemporaryDirectory(prefix="soak-", dir="/tmp") as tmp:
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
        surfaces = {
            "hostile": (
                "tests/faults/test_hostile_files.py",
                f"hostile files (FIFO, device, directory, symlink loop, huge, text/complex/pickled arrays, "
                f"wrong meta; {examples} damaged goldens)",
            ),
            "secrets": (
                "tests/faults/test_secrets_stacks.py",
                "planted secrets (ps, logs, database, report, Prometheus; ssh and local stacks)",
            ),
            "journeys": (
                "tests",
                "defects found on new users' journeys and by fault injection, kept reproduced "
                "(pytest -m faults: a trickling webhook, bad worker frames, stale gate verdicts, ...)",
            ),
        }
        for name, (path, what) in surfaces.items():
            if name in args.skip:
                continue
            print(f"== {what}", flush=True)
            t0 = time.monotonic()
            select = ("-m", "faults", "--ignore=tests/faults") if name == "journeys" else ()
            tests, failed, tail = pytest_surface(path, examples, *select)
            summary.append(f"{what}: {tests} tests, {failed} failed ({time.monotonic() - t0:.0f} s)")
            if failed:
                print(tail)
            bad |= bool(failed)
        if "ssh" not in args.skip and ssh_cycles:
            print(f"== ssh leftovers: {ssh_cycles} daemon cycles, {ssh_kills} SIGKILLs", flush=True)
            t0 = time.monotonic()
            line, ok = ssh_leftovers(Path(tmp) / "ssh", ssh_cycles, ssh_kills, args.seed)
            summary.append(f"{line} ({time.monotonic() - t0:.0f} s)")
            bad |= not ok
        if "postgres" not in args.skip:
            print("== PostgreSQL stopped and started under the daemon", flush=True)
            t0 = time.monotonic()
            line, ok = outage(Path(tmp) / "pg")
            summary.append(f"{line} ({time.monotonic() - t0:.0f} s)")
            bad |= not ok
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
