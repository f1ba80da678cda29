"""What does a fleet of inference hosts cost the auditor? (#35 point 7.)

Stands in N inference hosts with the ``command`` transport, as the tests do: one group
``infer`` of N hosts (``infer-01`` ...), each reached through ``env H=<host>`` (any argv prefix
works the same way, ``docker exec -i box`` included), each with its own interpreter path (a
wrapper for lite20) and its own deployed model file; the last host serves another file, so
exactly one host is out of line. One ms20 train stack on this machine, the pair ms20 -> lite20
with ``ppo_policy`` and ``obs_normalizer`` (fp32), ``[worker] max_hosts`` (default 8).

For each N (default 1, 8, 32, 64), two cycles are run through the CLI (``auditor audit``, into
a fresh SQLite history), then ``auditor report`` writes the HTML report, each command in a
process of its own (as the daemon runs each cycle in a child). The figures are the second
cycle's (the first creates and migrates the history). Prints per N:

- the auditor's own CPU seconds (its process alone, not its workers: they are the stacks' cost)
  per host, for the second cycle (goal <= 0.15 s per host at 64 hosts);
- its peak RSS (goal <= 150 MB), and the HTML report's;
- the workers' CPU seconds (the stacks' cost, children of the auditor) per host;
- the wall seconds of the second cycle, beside its CPU floor (the auditor's and its workers'
  CPU over this machine's CPUs: the fake hosts' workers run here, so no auditor could finish
  sooner on this machine) and the load average around it;
- the lines of the text report (goal <= 40 with one host out of line);
- the history's growth in the second cycle per host (goal <= 30 KB);
- the HTML report's seconds and size (goal <= 5 s).

With ``--auditors 1,3``: that many auditors share the hosts through the job queue ([queue]) on
one throw-away PostgreSQL server, each count a fresh database: a first cycle they all join,
then ``--cycles`` measured ones (default 3: a table grows by whole pages, so one cycle's growth
is off by a page or so per table), every auditor started at once. Each auditor runs its cycles
as ``auditor daemon`` does, in a cycle child, once started cold (``[worker] warm = "cycle"``,
the default: every cycle imports the auditor) and once forked from the fork server that
imported it (``warm = "daemon"``), a row each. Prints per row: wall seconds and hosts per
minute, the auditors' own CPU per host (all of them together; goal <= 0.05 s), their workers'
CPU per host, the history's and the queue's growth per host and cycle (PostgreSQL's own sizes;
goal <= 3 KB), the lines of the text report (one more cycle, by ``auditor audit --cycle``).

usage: .venv/bin/python bench/fleet.py [--hosts 1,8,32,64] [--max-hosts 8] [--keep DIR] [--quick]
                                    [--all-variants] [--auditors 1,3 [--cycles 3]]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STACKS = Path(os.environ.get("AUDITOR_STACKS_DIR", Path.home() / ".cache" / "auditor" / "stacks"))
USER_POLICY = REPO / "tests" / "model_fixtures" / "user_policy.py"


def policies(d: Path) -> tuple[bytes, bytes]:
    """Two exports of the user's policy (seeds 0 and 1) by ms20: the one the fleet serves, and
    the other file one host serves."""
    out = []
    for seed in (0, 1):
        path = d / f"policy-{seed}.mindir"
        if not path.exists():
            argv = [str(STACKS / "ms20" / "bin" / "python"), str(USER_POLICY), str(path), "--seed", str(seed)]
            subprocess.run(argv, check=True, capture_output=True, timeout=600)
        out.append(path.read_bytes())
    return out[0], out[1]


def config_text(d: Path, hosts: int, max_hosts: int, served: tuple[bytes, bytes]) -> str:
    """The config of N hosts, with their folders written under ``d``."""
    for i in range(1, hosts + 1):
        host = d / f"infer-{i:02d}"
        host.mkdir(parents=True, exist_ok=True)
        wrapper = host / "python"
        wrapper.write_text(f'#!/bin/sh\nexec {STACKS / "lite20" / "bin" / "python"} "$@"\n')
        wrapper.chmod(0o755)
        other = i == hosts and hosts >= 3
        (host / "policy.mindir").write_bytes(served[1] if other else served[0])
    last = f"infer-{hosts:02d}" if hosts > 1 else "infer-01"
    return f"""
[storage]
keep_days = 0
[worker]
parallel = 2
max_hosts = {max_hosts}
[latency]
warmup = 1
iterations = 5
batches = []
[rollout]
enabled = false
[groups.infer]
hosts = ["infer-[01:{last[-2:]}]"]
command = ["env", "H={{host}}"]
[stacks.ms20]
role = "train"
runtime = "mindspore"
python = "{STACKS / "ms20" / "bin" / "python"}"
npu_smi_timeout = 1
[stacks.lite20]
group = "infer"
role = "infer"
runtime = "mindspore-lite"
python = "{d}/{{host}}/python"
models = ["{d}/{{host}}/policy.mindir"]
npu_smi_timeout = 1
[[pairs]]
train = "ms20"
infer = "lite20"
probes = ["ppo_policy", "obs_normalizer"]
[probes.ppo_policy]
variants = ["fp32"]
[probes.obs_normalizer]
variants = ["fp32"]
"""


def cpu() -> tuple[float, float]:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def invoke(args: list[str]) -> tuple[int, str]:
    """The CLI in this process (its CPU and memory are the auditor's own)."""
    from auditor.cli.main import cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            cli.main(args, prog_name="auditor", standalone_mode=False)
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue()


def stored_bytes(db: Path) -> int:
    """The bytes the history's pages hold (its write-ahead log checkpointed first)."""
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages, free, size = (
            conn.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_count", "freelist_count", "page_size")
        )
    return (pages - free) * size


def step(args: list[str]) -> dict[str, float | str]:
    """One command in this process, as the daemon runs a cycle in a child of its own: its own
    CPU, its workers' CPU, its peak RSS, its wall time and what it printed."""
    own, kids = cpu()
    start = time.perf_counter()
    code, text = invoke(args)
    wall = time.perf_counter() - start
    own2, kids2 = cpu()
    return {
        "code": code,
        "text": text,
        "wall": wall,
        "own": own2 - own,
        "kids": kids2 - kids,
        "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def in_child(args: list[str]) -> dict[str, float | str]:
    argv = [sys.executable, __file__, "--step", json.dumps(args)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def one(
    hosts: int, max_hosts: int, d: Path, served: tuple[bytes, bytes], all_variants: bool = False
) -> dict[str, float]:
    """Each command in a fresh process: a first cycle (it creates the history and migrates it),
    then the measured cycle, then the HTML report."""
    config = d / "auditor.toml"
    text = config_text(d, hosts, max_hosts, served)
    if all_variants:  # every variant of both probes, as the issue measured
        text = text.replace('variants = ["fp32"]\n', "")
    config.write_text(text)
    db = d / "history.db"
    base = ["--config", str(config), "--db", str(db)]
    in_child([*base, "audit"])
    size = stored_bytes(db)
    load = os.getloadavg()[0]
    audit = in_child([*base, "audit"])
    (d / "report.txt").write_text(str(audit["text"]))
    html = in_child([*base, "report", "--out", str(d / "report.html")])
    cpus = os.cpu_count() or 1
    return {
        "wall": float(audit["wall"]),
        # the fake hosts' workers run on this machine: their CPU over its CPUs is a wall time
        # no auditor could beat here, and the load says what else ran
        "wall_floor": (float(audit["own"]) + float(audit["kids"])) / cpus,
        "load": max(load, os.getloadavg()[0]),
        "own_cpu_per_host": float(audit["own"]) / hosts,
        "worker_cpu_per_host": float(audit["kids"]) / hosts,
        "report_lines": len(str(audit["text"]).splitlines()),
        "db_kb_per_host": (stored_bytes(db) - size) / 1024 / hosts,
        "rss_mb": float(audit["rss"]),
        "html_s": float(html["wall"]),
        "html_kb": (d / "report.html").stat().st_size / 1024,
        "html_rss_mb": float(html["rss"]),
    }


QUEUE = """
[queue]
enabled = true
claim = 4
heartbeat = 5
timeout = 30
"""


def pg_bytes(url: str) -> dict[str, int]:
    """The bytes of the history's tables and of the job queue's (procrastinate_*), indexes and
    TOAST included, from PostgreSQL's own accounting."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE c.relkind = 'r' AND n.nspname = 'public'"
                )
            ).all()
    finally:
        engine.dispose()
    queue = sum(size for name, size in rows if name.startswith("procrastinate_"))
    return {"history": sum(size for _, size in rows) - queue, "queue": queue}


def shared(
    hosts: int,
    auditors: int,
    max_hosts: int,
    d: Path,
    served: tuple[bytes, bytes],
    url: str,
    cycles: int,
    forked: bool,
) -> dict:
    """``auditors`` auditors on one PostgreSQL history sharing the hosts through the job queue
    ([queue]): a first cycle they all join (it creates the history and the queue), then
    ``cycles`` measured ones. Each auditor is a process of its own that runs its cycles as
    ``auditor daemon`` does, each in a cycle child (auditor.daemon.cycle_process.ChildCycle):
    started cold (``[worker] warm = "cycle"``, the default) or, ``forked``, from the fork
    server that imported the cycle once (``warm = "daemon"``). All auditors start each cycle at
    once. The auditor's CPU is the cycle child's own (its reply says it) and what its daemon
    spent on it; figures per cycle: the mean over the measured cycles."""
    base_text = config_text(d, hosts, max_hosts, served) + QUEUE
    procs = []
    for i in range(auditors):
        config = d / f"auditor-{i}.toml"
        config.write_text(base_text.replace("[storage]\n", f'[storage]\nauditor_id = "auditor-{i}"\n'))
        argv = [sys.executable, __file__, "--auditor", json.dumps([str(config), url, forked])]
        procs.append(subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))

    def cycle(label: str) -> list[dict]:
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(label + "\n")
            p.stdin.flush()
        out = []
        for p in procs:
            assert p.stdout is not None
            line = p.stdout.readline()
            if not line:
                sys.exit(f"auditor process {p.pid} ended ({p.wait()})")
            found = json.loads(line)
            if found["kind"] != "done":
                sys.exit(f"an auditor's cycle {label} did not complete: {found['message']}")
            out.append(found)
        return out

    try:
        cycle("warm-up")
        size = pg_bytes(url)
        walls, steps = [], []
        for i in range(cycles):
            start = time.perf_counter()
            steps += cycle(f"measured-{i + 1}")
            walls.append(time.perf_counter() - start)
        after = pg_bytes(url)
    finally:
        for p in procs:
            assert p.stdin is not None
            p.stdin.close()
            p.wait(60)
    # What a person reads: one more cycle, by `auditor audit --cycle` in every auditor at once,
    # the first one's text (its run and the follow-ups it did for the others)
    texts = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--step",
                json.dumps(["--config", str(c), "--db", url, "audit", "--cycle", "shown"]),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for c in sorted(d.glob("auditor-*.toml"))
    ]
    shown = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in texts][0]
    (d / "report.txt").write_text(str(shown["text"]))
    per = hosts * cycles  # per host and cycle: a table grows by whole pages, so one cycle's
    # growth is a page more or less per table; several cycles give the steady rate
    return {
        "wall": sum(walls) / cycles,
        "hosts_per_min": hosts / (sum(walls) / cycles) * 60,
        "own_cpu_per_host": sum(float(s["own"]) for s in steps) / per,
        "worker_cpu_per_host": sum(float(s["workers"]) for s in steps) / per,
        "history_kb_per_host": (after["history"] - size["history"]) / 1024 / per,
        "queue_kb_per_host": (after["queue"] - size["queue"]) / 1024 / per,
        "report_lines": len(str(shown["text"]).splitlines()),
    }


def auditor_process(config: str, url: str, forked: bool) -> None:
    """One auditor as its daemon runs: a cycle child per label read on stdin (the shared
    cycle of that name), one line of figures per cycle on stdout."""
    from auditor.common.logs import setup_logging
    from auditor.config.load import load
    from auditor.daemon.cycle_process import ChildCycle, CycleRequest
    from auditor.queue import cycles

    setup_logging(logging.WARNING)
    loaded = load(config)
    for line in sys.stdin:
        label = line.strip()
        request = CycleRequest(
            loaded, [], url, logging.WARNING, shared=cycles.named(loaded.queue.pool, label)
        )
        own = cpu()[0]
        reply = ChildCycle(request, python=None if forked else sys.executable).run()
        daemon = cpu()[0] - own  # the daemon's side: the request, the reply (a cold child's
        # CPU is not counted here: it is in RUSAGE_CHILDREN, the reply says it)
        print(
            json.dumps(
                {
                    "kind": reply.kind,
                    "message": reply.message,
                    "run_id": reply.run_id,
                    "own": reply.cpu_seconds + daemon,
                    "workers": reply.workers_cpu_seconds,
                }
            ),
            flush=True,
        )


def auditors_table(hosts: int, counts: list[int], max_hosts: int, keep: Path | None, cycles: int) -> None:
    """The shared fleet: one row per number of auditors and way of starting cycle children, on
    one PostgreSQL (the test server)."""
    sys.path.insert(0, str(REPO))
    from tests import postgres_server  # noqa: PLC0415 - the checkout's own throw-away server

    server = postgres_server.start()
    rows = []
    try:
        for n in counts:
            for forked in (False, True):
                mode = "forked" if forked else "cold"
                with tempfile.TemporaryDirectory(prefix="auditor-bench-fleet-") as tmp:
                    d = (keep / f"auditors-{n}-{mode}") if keep else Path(tmp) / f"auditors-{n}-{mode}"
                    d.mkdir(parents=True, exist_ok=True)
                    url = server.create_database(f"bench_fleet_{n}_{mode}_{os.getpid()}")
                    rows.append(
                        (n, mode, shared(hosts, n, max_hosts, d, policies(d.parent), url, cycles, forked))
                    )
                    print(f"{n} auditor(s), {mode} cycle children: done", file=sys.stderr)
    finally:
        server.stop()
    print(
        f"{hosts} hosts shared through the job queue ([queue] claim 4) on one PostgreSQL; load average "
        f"{os.getloadavg()[0]:.2f}; [worker] max_hosts = {max_hosts}; per cycle: the mean of {cycles} "
        "measured cycles after a first. Cycle children as the daemon starts them: cold (warm = "
        '"cycle", the default: each imports the cycle) or forked (warm = "daemon": from a fork server '
        "that imported it once)"
    )
    print(
        "| auditors | cycle child | wall s | hosts/min | auditor CPU s/host (all) | workers CPU s/host "
        "| history KB/host | queue KB/host | report lines |"
    )
    print("|---" * 9 + "|")
    for n, mode, f in rows:
        print(
            f"| {n} | {mode} | {f['wall']:.1f} | {f['hosts_per_min']:.0f} | {f['own_cpu_per_host']:.3f} "
            f"| {f['worker_cpu_per_host']:.2f} | {f['history_kb_per_host']:.2f} "
            f"| {f['queue_kb_per_host']:.2f} | {f['report_lines']} |"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="1,8,32,64")
    ap.add_argument("--max-hosts", type=int, default=8)
    ap.add_argument("--keep", type=Path, help="keep each N's folder (config, reports) under DIR")
    ap.add_argument("--quick", action="store_true", help="1 and 4 hosts, max_hosts 3 (a smoke test)")
    ap.add_argument(
        "--all-variants", action="store_true", help="every variant of both probes (default: fp32)"
    )
    ap.add_argument(
        "--auditors",
        metavar="1,3",
        help="auditors sharing the hosts through the job queue on one PostgreSQL (the test server), "
        "one row per count, at the last --hosts (default 64)",
    )
    ap.add_argument(
        "--cycles", type=int, default=3, help="with --auditors: measured cycles after the first (default 3)"
    )
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--step", help=argparse.SUPPRESS)
    ap.add_argument("--auditor", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.auditor:
        sys.path.insert(0, str(REPO))
        auditor_process(*json.loads(args.auditor))
        return
    if args.step:
        sys.path.insert(0, str(REPO))
        from auditor.common.memory import tune_malloc  # noqa: PLC0415 - the checkout just put on the path

        tune_malloc()  # as the command's entry point does first (auditor.entry)
        print(json.dumps(step(json.loads(args.step))))
        return
    if args.one:
        sys.path.insert(0, str(REPO))
        found = one(args.one, args.max_hosts, args.dir, policies(args.dir.parent), args.all_variants)
        print(json.dumps(found))
        return
    if args.quick:
        args.hosts, args.max_hosts = "1,4", 3
    if args.auditors:
        hosts = int(args.hosts.split(",")[-1])
        auditors = [int(x) for x in args.auditors.split(",")]
        auditors_table(hosts, auditors, args.max_hosts, args.keep, args.cycles)
        return
    rows = []
    for n in [int(x) for x in args.hosts.split(",")]:
        with tempfile.TemporaryDirectory(prefix="auditor-bench-fleet-") as tmp:
            d = (args.keep / f"hosts-{n}") if args.keep else Path(tmp) / f"hosts-{n}"
            d.mkdir(parents=True, exist_ok=True)
            argv = [sys.executable, __file__, "--one", str(n), "--max-hosts", str(args.max_hosts)]
            argv += ["--all-variants"] if args.all_variants else []
            done = subprocess.run([*argv, "--dir", str(d)], capture_output=True, text=True, check=False)
            if done.returncode != 0:
                sys.exit(f"{n} hosts failed:\n{done.stderr[-3000:]}")
            rows.append((n, json.loads(done.stdout.strip().splitlines()[-1])))
            print(f"{n} hosts done", file=sys.stderr)
    print(
        f"load average {os.getloadavg()[0]:.2f} at the end, on {os.cpu_count()} CPUs; [worker] max_hosts = "
        f"{args.max_hosts}, parallel = 2. The fake hosts' workers run on this machine: 'CPU floor s' is "
        "the measured cycle's CPU (auditor and workers) over the CPUs, a wall time no auditor beats here; "
        "'load' is the 1-minute load average around that cycle"
    )
    head = (
        "| hosts | wall s | CPU floor s | load | auditor CPU s/host | auditor RSS MB | workers CPU s/host "
        "| report lines | history KB/host | HTML s | HTML KB | HTML RSS MB |"
    )
    print(head)
    print("|---" * 12 + "|")
    for n, f in rows:
        print(
            f"| {n} | {f['wall']:.1f} | {f['wall_floor']:.1f} | {f['load']:.2f} "
            f"| {f['own_cpu_per_host']:.3f} | {f['rss_mb']:.0f} "
            f"| {f['worker_cpu_per_host']:.2f} | {f['report_lines']:.0f} | {f['db_kb_per_host']:.1f} "
            f"| {f['html_s']:.2f} | {f['html_kb']:.0f} | {f['html_rss_mb']:.0f} |"
        )


if __name__ == "__main__":
    main()
