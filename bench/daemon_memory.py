"""What does the idle daemon hold, and does it grow from cycle to cycle?

Starts `auditor daemon` on a narrowed copy of the default config (one pair, the PPO policy's
fp32 variant, with its closed-loop rollout; a cycle every --interval seconds, none at start),
once on an existing, up-to-date history database and once on a new one (--database picks),
then reads the daemon's resident memory (VmRSS in /proc/PID/status) right after start and
after each cycle, once the cycle is over, and the CPU time it used while idle between cycles
(utime + stime in /proc/PID/stat). Goals: idle RSS <= 60 MB, no growth across cycles, ~0 CPU
between cycles. The daemon's children (the cycle child, auditor/daemon/cycle_child.py, and its
stack workers and rollout environment process) are not counted: they live only during a
cycle, and the bench reads the daemon once they are gone (it prints how many are left: 0).

Measured: with the cycle in the daemon's own process, 77 MB at start, 87-88 MB after the
first cycle and +0.15 MB a cycle after that (imports, SQLAlchemy's statement cache,
SQLite's page cache, malloc arenas and the library pages a cycle touches); with the cycle
in a child, 77.0 at start and 77.4 after the fourth cycle.

A new database is migrated at start. In the daemon's own process that left Alembic, Mako and
Pygments resident: 89 MB idle against 77 on an up-to-date database. The migration then ran in a
short-lived child, and both started at the same figure (77.5 MB, 80.3 in December 2026).

That figure was mostly what the daemon loaded to read its config and open its database: the
plugins (the probes and comparators bring numpy, 16 MB), SQLAlchemy (33 MB) and every command
of the command line. Since then the daemon reads its config and checks its database in a child
(auditor/daemon/setup.py), each command is imported when it runs, and a cycle child answers
with a summary of plain data (auditor/exposition/families.py) instead of its result: neither numpy
nor SQLAlchemy is ever mapped in the daemon, which idles at 40 MB on either database.

usage: .venv/bin/python bench/daemon_memory.py [--quick] [--cycles N] [--interval S]
                                               [--database existing|fresh|both]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_config import reference_config  # noqa: E402

from auditor.history.store import Store  # noqa: E402

PAIR = ("ms20", "lite20")
TICK = os.sysconf("SC_CLK_TCK")


def config_text(interval: float) -> str:
    config, _ = reference_config()
    train, infer = (config.stacks[n] for n in PAIR)
    stacks = "".join(
        f'[stacks.{s.name}]\nrole = "{s.role}"\nruntime = "{s.runtime}"\npython = "{s.python}"\n'
        f'device = "{s.device}"\n\n'
        for s in (train, infer)
    )
    return (
        '[storage]\nurl = ""\nkeep_days = 90\n\n'
        f"{stacks}"
        f'[[pairs]]\ntrain = "{train.name}"\ninfer = "{infer.name}"\nprobes = ["ppo_policy"]\n\n'
        '[probes.ppo_policy]\nvariants = ["fp32"]\n\n'
        "[latency]\nbatches = []\niterations = 10\n\n"
        f"[schedule]\ninterval = {interval}\nrun_on_start = false\n\n"
        '[alerts.sinks.journal]\ntype = "log"\n'
    )


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def children(pid: int) -> list[int]:
    """The daemon's live child processes (stack workers, environment processes)."""
    pids = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            pids += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return pids


def wait_for(log: Path, text: str, count: int, timeout: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.read_text(errors="replace").count(text) >= count:
            return
        if proc.poll() is not None:
            raise SystemExit(f"the daemon exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        time.sleep(0.5)
    raise SystemExit(
        f"no {count}x {text!r} in the daemon's log within {timeout:g} s:\n{log.read_text()[-3000:]}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--interval", type=float, default=45.0, help="seconds between cycle starts")
    ap.add_argument(
        "--database",
        choices=("existing", "fresh", "both"),
        default=None,
        help="an up-to-date history database, a new one (migrated at start), or one run of each "
        "(default: both; with --quick: fresh)",
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="two cycles 5 s apart on a fresh database: checks that the bench works",
    )
    args = ap.parse_args()
    if args.quick:
        args.cycles, args.interval = 2, min(args.interval, 5.0)
    args.database = args.database or ("fresh" if args.quick else "both")
    kinds = ("existing", "fresh") if args.database == "both" else (args.database,)
    idle = 1.0 if args.quick else 5.0
    results = {kind: measure(kind, args.cycles, args.interval, idle) for kind in kinds}
    print()
    for kind, (start, last) in results.items():
        print(
            f"{kind + ' database:':<19} idle RSS {start:.1f} MB at start, {last:.1f} MB after cycle "
            f"{args.cycles} (goal <= 60: {'ok' if max(start, last) <= 60 else 'MISSED'})"
        )


def measure(kind: str, cycles: int, interval: float, idle_window: float = 5.0) -> tuple[float, float]:
    """One daemon on an ``existing`` or ``fresh`` database: (RSS at start, after the last cycle).
    ``idle_window``: seconds its CPU is read for after each cycle (and half that to settle)."""
    print(f"== {kind} history database")
    with tempfile.TemporaryDirectory(prefix="auditor-bench-") as tmp:
        cfg = Path(tmp) / "auditor.toml"
        cfg.write_text(config_text(interval))
        log = Path(tmp) / "daemon.log"
        env = {**os.environ, "XDG_STATE_HOME": f"{tmp}/state"}
        if kind == "existing":
            # As for a daemon that restarts: the history is there and up to date.
            Store.open(f"sqlite:///{tmp}/h.db").close()
        with open(log, "w") as out:
            proc = subprocess.Popen(
                [
                    str(Path(sys.executable).parent / "auditor"),
                    "--config",
                    str(cfg),
                    "--db",
                    f"sqlite:///{tmp}/h.db",
                    "daemon",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=tmp,
            )
        try:
            wait_for(log, "auditor daemon started", 1, 120, proc)
            time.sleep(idle_window / 2)
            start_rss = rss_mb(proc.pid)
            print(f"daemon pid {proc.pid}, a cycle every {interval:g} s on {'->'.join(PAIR)} ppo_policy/fp32")
            print(
                f"{'after':<16} {'VmRSS MB':>9} {'idle CPU %':>11} {'children':>9}  "
                "goal: <= 60 MB, no growth, ~0 % CPU"
            )
            print(f"{'start':<16} {start_rss:>9.1f}")
            figures = []
            for n in range(1, cycles + 1):
                wait_for(log, "cycle done", n, interval + 300, proc)
                time.sleep(idle_window / 2)  # the alerts and retention that follow a cycle
                c0, t0 = cpu_s(proc.pid), time.monotonic()
                time.sleep(idle_window)
                idle = 100 * (cpu_s(proc.pid) - c0) / (time.monotonic() - t0)
                rss = rss_mb(proc.pid)
                figures.append(rss)
                print(f"{f'cycle {n}':<16} {rss:>9.1f} {idle:>11.1f} {len(children(proc.pid)):>9}")
            growth = figures[-1] - figures[0] if figures else 0.0
            print(
                f"idle RSS after the last cycle {figures[-1] if figures else start_rss:.1f} MB; "
                f"growth from cycle 1 to {cycles}: {growth:+.1f} MB"
            )
            return start_rss, figures[-1] if figures else start_rss
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    main()
