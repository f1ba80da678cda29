"""Three auditors, 24 serving hosts and 10 cycles on the real stacks and the test PostgreSQL
server ([queue]): three daemons on one cron schedule, manual audits of cycles of their own
and named cycles several auditors join, one auditor killed (SIGKILL) while it holds hosts.
Every (cycle, host) is stored exactly once, the killed auditor's hosts are taken by the
others within the heartbeat timeout plus a host's time, and no cycle audits no host.

The hosts are the ``command`` transport behind a wrapper that stalls the worker start of the
auditor whose environment says ``STALL=1``, so the kill lands while it holds hosts. The
oracle reads the stored results (each run's probe results on ``lite20@infer-NN`` and the
cycle its selection names), not the queue's own bookkeeping."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.fault_kit import auditor, private_tmp, small_config

pytestmark = pytest.mark.stacks

HOSTS = [f"infer-{i:02d}" for i in range(1, 25)]
WRAPPER = 'if [ -n "$STALL" ]; then sleep 120; fi; exec "$@"'
TIMEOUT = 4.0
"""[queue] timeout: an auditor whose heartbeat is older is stalled."""


def configs(tmp: Path) -> dict[str, Path]:
    """One config per auditor: the same fleet, schedule and queue; its own name and state."""
    base = small_config(tmp, request_timeout=60, start_timeout=150, probes=("obs_normalizer",)).read_text()
    group = (
        '[groups.infer]\nhosts = ["infer-[01:24]"]\n'
        f"command = {json.dumps(['env', 'INFER_HOST={host}', 'sh', '-c', WRAPPER, 'sh'])}\n"
    )
    base = base.replace("[stacks.lite20]\n", '[stacks.lite20]\ngroup = "infer"\n')
    base += (
        "[telemetry]\nenabled = false\n"
        '[schedule]\ncron = "* * * * *"\ntimezone = "UTC"\nrun_on_start = false\n'
        f"[queue]\nenabled = true\nclaim = 2\nheartbeat = 1\ntimeout = {TIMEOUT:g}\n"
    )
    out = {}
    for who in ("a", "b", "c"):
        text_ = base.replace("[storage]\n", f'[storage]\nauditor_id = "{who}"\n')
        text_ = text_.replace(f'state_dir = "{tmp / "state"}"', f'state_dir = "{tmp / ("state-" + who)}"')
        path = tmp / f"{who}.toml"
        path.write_text(group + text_)
        out[who] = path
    return out


def engine(url: str):  # noqa: ANN201
    return create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))


def stored_hosts(url: str) -> Counter[tuple[str, str]]:
    """(cycle, host) -> how many complete runs hold a result served by that host in that cycle."""
    e = engine(url)
    try:
        with e.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT r.id, r.selection, s.name FROM runs r JOIN probe_results p ON p.run_id = r.id "
                    "JOIN stacks s ON s.id = p.infer_stack_id WHERE r.status = 'complete'"
                )
            ).all()
    finally:
        e.dispose()
    seen: set[tuple[int, str]] = set()
    out: Counter[tuple[str, str]] = Counter()
    for run_id, selection, stack in rows:
        doc = selection if isinstance(selection, dict) else json.loads(selection or "{}")
        label = (doc.get("selectors") or {}).get("cycle", [None])[0]
        if "@" in stack and (run_id, stack) not in seen:
            seen.add((run_id, stack))
            out[(label, stack.split("@")[1])] += 1
    return out


def jobs(url: str, queue_like: str = "auditor/%") -> list[tuple]:
    e = engine(url)
    try:
        with e.connect() as conn:
            return conn.execute(
                text(
                    "SELECT id, args->>'cycle', args->>'host', status, worker_id FROM procrastinate_jobs "
                    "WHERE queue_name LIKE :q"
                ),
                {"q": queue_like},
            ).all()
    finally:
        e.dispose()


def start(cfg: Path, url: str, tmp: Path, *args: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        auditor(cfg, url, *args),  # type: ignore[arg-type]
        env={**private_tmp(tmp), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its workers in its group: killed with it, as a dead machine's
    )


def audit(cfgs: dict[str, Path], url: str, tmp: Path, who: str, label: str | None) -> None:
    """Manual audits by ``who`` (a string of auditor names), of the cycle ``label`` or, with
    None, each of a cycle of its own; all at once, each must succeed."""
    extra = ("--cycle", label) if label else ()
    procs = {w: start(cfgs[w], url, tmp, "audit", *extra) for w in who}
    for w, p in procs.items():
        out, err = p.communicate(timeout=600)
        assert p.returncode in (0, 1), f"{w} {label}: {err[-3000:]}"
        assert "Traceback" not in err, err


def test_three_auditors_ten_cycles_each_host_stored_once(
    stacks: Path, tmp_path_factory: pytest.TempPathFactory, postgres
) -> None:
    tmp = tmp_path_factory.mktemp("queue")
    url = postgres.create_database(f"queue_{os.getpid()}")
    cfgs = configs(tmp)
    migrated = subprocess.run(auditor(cfgs["a"], url, "db", "upgrade"), capture_output=True, text=True)
    assert migrated.returncode == 0, migrated.stderr
    daemons = {w: start(cfgs[w], url, tmp, "daemon") for w in "abc"}
    first_tick = datetime.now(UTC).replace(second=0, microsecond=0)
    try:
        # -- a named cycle three auditors join; c holds hosts and is killed ------------------
        doomed = start(cfgs["c"], url, tmp, "audit", "--cycle", "kill", STALL="1")
        for _ in range(600):  # c takes its hosts (its workers never start)
            held = [j for j in jobs(url) if j[1] == "kill" and j[3] == "doing"]
            if held or doomed.poll() is not None:
                break
            time.sleep(0.2)
        assert held, doomed.communicate()
        c_worker = held[0][4]
        survivors = {w: start(cfgs[w], url, tmp, "audit", "--cycle", "kill") for w in "ab"}
        time.sleep(2)
        c_jobs = {j[0]: j[2] for j in jobs(url) if j[1] == "kill" and j[4] == c_worker}
        os.killpg(doomed.pid, signal.SIGKILL)  # c dies holding its hosts; nothing given back
        killed = time.monotonic()
        doomed.communicate()
        # taken by the others within the heartbeat timeout and their poll once they are done
        # with the other hosts (an auditor looks for stalled hosts when the queue has none left
        # for it): a deadline, not a duration (a job still c's when it passes fails the test)
        deadline = killed + TIMEOUT + 8.0
        retaken: set[int] = set()
        while len(retaken) < len(c_jobs) and time.monotonic() < deadline:
            now = jobs(url)
            retaken |= {j[0] for j in now if j[0] in c_jobs and j[4] not in (c_worker, None)}
            if any(j[1] == "kill" and j[3] in ("todo", "doing") and j[0] not in c_jobs for j in now):
                deadline = max(deadline, time.monotonic() + TIMEOUT + 8.0)  # the others still busy
            time.sleep(0.2)
        for w, p in survivors.items():
            out, err = p.communicate(timeout=600)
            assert p.returncode in (0, 1), f"{w}: {err[-3000:]}"
        assert retaken == set(c_jobs), (c_jobs, retaken)
        # -- manual cycles: of their own, and named ones several auditors join ----------------
        audit(cfgs, url, tmp, "a", None)
        audit(cfgs, url, tmp, "abc", "m1")
        audit(cfgs, url, tmp, "b", None)
        audit(cfgs, url, tmp, "ab", "m2")
        audit(cfgs, url, tmp, "c", None)
        audit(cfgs, url, tmp, "bc", "m3")
        # -- two cycles of the daemons' cron schedule ----------------------------------------
        deadline = time.monotonic() + 240
        ticks: list[str] = []
        while time.monotonic() < deadline:
            counts = stored_hosts(url)
            ticks = sorted(
                {c for c, _ in counts if c and c[:4].isdigit() and c >= f"{first_tick:%Y-%m-%dT%H:%M}"}
            )
            complete = [t for t in ticks if sum(n for (c, _), n in counts.items() if c == t) >= len(HOSTS)]
            if len(complete) >= 2 and not [j for j in jobs(url) if j[1] in complete[:2] and j[3] == "doing"]:
                break
            time.sleep(2)
    finally:
        for p in daemons.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        said = {w: p.communicate(timeout=120) for w, p in daemons.items()}
    for w, (_, err) in said.items():
        assert "Traceback" not in err, f"daemon {w}: {err[-4000:]}"
    counts = stored_hosts(url)
    cycles = sorted({c for c, _ in counts})
    scheduled = [c for c in cycles if c and c[:4].isdigit()][:2]
    manual = [c for c in cycles if c and c.startswith("manual/")]
    named = [c for c in cycles if c in ("kill", "m1", "m2", "m3")]
    assert len(scheduled) == 2 and len(manual) == 3 and len(named) == 4, cycles
    for label in scheduled + manual + named:  # ten cycles, every host stored exactly once in each
        per_host = {h: counts.get((label, h), 0) for h in HOSTS}
        assert set(per_host.values()) == {1}, (label, {h: n for h, n in per_host.items() if n != 1})
    # the killed auditor's hosts were stored by the others, and the queue's record agrees
    e = engine(url)
    try:
        with e.connect() as conn:
            record = conn.execute(
                text("SELECT cycle, host, auditor_id FROM cycle_hosts WHERE cycle = 'kill'")
            ).all()
    finally:
        e.dispose()
    assert sorted(h for _, h, _ in record) == HOSTS and {w for _, _, w in record} <= {"a", "b"}
    # the two scheduled cycles were shared by the daemons, not audited three times over
    e = engine(url)
    try:
        with e.connect() as conn:
            who = conn.execute(
                text("SELECT DISTINCT auditor_id FROM cycle_hosts WHERE cycle = :c"), {"c": scheduled[0]}
            ).all()
    finally:
        e.dispose()
    assert len(who) >= 2, who
