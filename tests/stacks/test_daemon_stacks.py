"""A real `auditor daemon` process on the real stacks, on a 2-second interval: several cycles,
alerts to a JSON-lines sink, sd_notify on a socket the test owns, Prometheus on loopback,
SIGHUP with a bad and a good config, a second daemon refused, and SIGTERM in the middle of a
cycle: clean exit, run aborted, earlier runs intact, no worker left."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from auditor.db import schema as m
from auditor.history.store import Store
from auditor.stacks.warm import WARM_DIR_ENV
from tests.ascend_trees import build_tree
from tests.cli import auditor_argv
from tests.conftest import REPO, stack_python, worker_pids

pytestmark = pytest.mark.stacks

KEY = "ms20->lite20/ppo_policy/drift/mean+std+logp+action"  # the cause: what drifts


def config_text(tmp: Path, tolerance: float, interval: str = "2") -> str:
    return f"""
[stacks.ms20]
role = "train"
runtime = "mindspore"
python = "{stack_python("ms20")}"

[stacks.lite20]
role = "infer"
runtime = "mindspore-lite"
python = "{stack_python("lite20")}"

[[pairs]]
train = "ms20"
infer = "lite20"
probes = ["ppo_policy"]

[latency]
warmup = 1
iterations = 5

[probes.ppo_policy]
variants = ["fp32"]
atol = {tolerance}
rtol = {tolerance}
params = {{ batch = 8, seed = 0 }}

# This test follows one alert (the drift); the per-side NaN hazard each stack really has
# (tests/stacks/test_side_checks_stacks.py) would open two more.
[probes.ppo_policy.comparators.nan_hazard]
enabled = false

[schedule]
interval = {interval}
run_on_start = true

[daemon]
state_dir = "{tmp / "state"}"
stop_timeout = 0

[prometheus]
enabled = true
address = "127.0.0.1"
port = 0

[alerts]
cooldown = "1h"
on = ["probes"]         # the built-in probe's drift is what this test follows
resolve_after = 1       # open_after stays 2: the alert opens in the second run

[alerts.sinks.file]
type = "jsonl"
path = "{tmp / "alerts.jsonl"}"

[alerts.sinks.journal]
type = "log"
"""


class NotifyListener:
    """A datagram socket standing in for systemd's notify socket."""

    def __init__(self, path: Path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.path = path
        self.messages: list[dict[str, str]] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(4096).decode()
            except TimeoutError:
                continue
            except OSError:
                return
            self.messages.append(dict(line.split("=", 1) for line in data.split("\n") if "=" in line))

    def has(self, key: str, value: str | None = None) -> bool:
        return any(key in msg and (value is None or value in msg[key]) for msg in list(self.messages))

    def close(self) -> None:
        self._stop.set()
        self.thread.join(2)
        self.sock.close()


def wait_for(
    what: str, predicate, timeout: float, proc: subprocess.Popen | None = None, log: Path | None = None
):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.1)
    tail = log.read_text()[-3000:] if log is not None and log.exists() else ""
    pytest.fail(f"timed out waiting for {what}\n--- daemon log ---\n{tail}")


def runs(store: Store) -> list[m.Run]:
    return sorted(store.runs(1000), key=lambda r: r.id)


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def alert_events(path: Path, key: str | None = None) -> list[tuple[str, str]]:
    """(event, key) of each line of the jsonl sink; only ``key``'s when given (other findings,
    such as latency regressions against a baseline, may come and go)."""
    if not path.exists():
        return []
    events = [(e["event"], e["alert"]["key"]) for e in map(json.loads, path.read_text().splitlines())]
    return [e for e in events if key is None or e[1] == key]


def start_daemon(cfg: Path, db: Path, log: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        auditor_argv("--config", str(cfg), "--db", str(db), "daemon"),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
        env=env,
    )


def test_daemon_lifecycle(stacks, tmp_path):
    cfg, db, log = tmp_path / "auditor.toml", tmp_path / "h.db", tmp_path / "daemon.log"
    jsonl = tmp_path / "alerts.jsonl"
    cfg.write_text(config_text(tmp_path, tolerance=0))  # ms20 and lite20 differ: drift
    listener = NotifyListener(tmp_path / "notify.sock")
    env = {**os.environ, "NOTIFY_SOCKET": str(listener.path), "WATCHDOG_USEC": "2000000"}
    env.pop("WATCHDOG_PID", None)
    proc = start_daemon(cfg, db, log, env)
    store = None
    try:
        wait_for("READY=1", lambda: listener.has("READY", "1"), 60, proc, log)
        store = Store(f"sqlite:///{db}")

        # -- several cycles; one alert, opened once -------------------------------------------
        def complete() -> list[m.Run]:
            return [r for r in runs(store) if r.status == "complete"]

        wait_for("two complete runs", lambda: len(complete()) >= 2, 240, proc, log)
        assert {r.outcome for r in complete()} == {"drift"}
        wait_for("the opened alert in the jsonl sink", lambda: alert_events(jsonl, KEY), 10, proc, log)
        assert alert_events(jsonl, KEY) == [("opened", KEY)]  # not once per cycle
        opened = [k for e, k in alert_events(jsonl) if e == "opened"]
        assert len(opened) == len(set(opened))
        assert listener.has("STATUS", "drift")
        assert listener.has("WATCHDOG", "1")

        # -- a second daemon on the same state directory is refused ----------------------------
        second = subprocess.run(
            [
                sys.executable,
                "-m",
                "auditor",
                "--config",
                str(cfg),
                "--db",
                str(tmp_path / "other.db"),
                "daemon",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            env={k: v for k, v in env.items() if k != "NOTIFY_SOCKET"},
        )
        assert second.returncode == 1
        assert f"already running with the state directory {tmp_path / 'state'}" in second.stderr
        assert f"pid {proc.pid}" in second.stderr

        # -- Prometheus on loopback, parsed back ---------------------------------------------
        url = re.search(r"Prometheus metrics on (http://127\.0\.0\.1:\d+/metrics)", log.read_text()).group(1)
        with urllib.request.urlopen(url, timeout=10) as r:
            fams = {f.name: f for f in text_string_to_metric_families(r.read().decode())}
        div = [s for s in fams["auditor_divergence"].samples if s.labels["metric"] == "max_abs"]
        assert div and all(s.labels["pair"] == "ms20->lite20" and s.labels["variant"] == "fp32" for s in div)
        assert any(s.value > 0 for s in div)
        assert {s.labels["severity"]: s.value for s in fams["auditor_open_alerts"].samples}["warning"] == 1
        info = {s.labels["stack"]: s.labels for s in fams["auditor_stack_info"].samples}
        assert info["ms20"]["mindspore"] == "2.0.0" and info["lite20"]["mindspore_lite"] == "2.0.0"

        # -- SIGHUP with a bad config: logged with key paths, the old one stays ---------------
        good_text = cfg.read_text()
        cfg.write_text(
            good_text.replace("interval = 2", "interval = -1").replace('cooldown = "1h"', 'cooldown = "soon"')
        )
        hup = utcnow()
        proc.send_signal(signal.SIGHUP)
        # the problems are logged a line each after "not reloaded": wait for the last one
        wait_for("the rejected reload", lambda: "alerts.cooldown" in log.read_text(), 30, proc, log)
        text = log.read_text()
        assert "schedule.interval: must be a duration from 1s to 366d" in text and "not -1" in text
        assert "alerts.cooldown: must be a duration" in text
        wait_for(
            "a complete run after the bad reload",
            lambda: [r for r in complete() if r.started_at > hup],
            60,
            proc,
            log,
        )
        assert [r.outcome for r in complete() if r.started_at > hup][0] == "drift"
        assert listener.has("RELOADING", "1")

        # -- SIGHUP with a good config: applies from the next cycle; the alert resolves -------
        cfg.write_text(config_text(tmp_path, tolerance=1.0))
        proc.send_signal(signal.SIGHUP)
        wait_for(
            "the reload", lambda: "reloaded; it applies from the next cycle" in log.read_text(), 30, proc, log
        )
        wait_for(
            "a consistent run", lambda: [r for r in complete() if r.outcome == "consistent"], 60, proc, log
        )
        wait_for("the resolved alert", lambda: ("resolved", KEY) in alert_events(jsonl), 10, proc, log)
        assert alert_events(jsonl, KEY) == [("opened", KEY), ("resolved", KEY)]

        # -- SIGTERM in the middle of a cycle ------------------------------------------------
        with Session(store.engine) as s:
            metrics_before = s.scalar(select(func.count()).select_from(m.MetricRow))
        done_before = [(r.id, r.status) for r in complete()]

        # Its cycle's workers: forked by the session's zygotes (AUDITOR_ZYGOTES: this process's
        # children, and nothing else of this process runs now) or by the cycle's own.
        def cycle_workers() -> list[int]:
            return worker_pids(parent=proc.pid) + worker_pids(parent=os.getpid())

        wait_for("a cycle in progress", cycle_workers, 30, proc, log)
        workers = cycle_workers()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=40) == 0, log.read_text()[-3000:]
        assert _all_end(workers), [p for p in workers if _lives(p)]

        all_runs = runs(store)
        last = all_runs[-1]
        assert last.status == "aborted" and "SIGTERM" in (last.note or ""), (last.status, last.note)
        assert [(r.id, r.status) for r in all_runs if r.status == "complete"][
            : len(done_before)
        ] == done_before
        assert all(r.status in ("complete", "aborted") for r in all_runs)
        with Session(store.engine) as s:
            assert s.scalar(select(func.count()).select_from(m.MetricRow)) >= metrics_before
            assert (
                s.scalar(
                    select(func.count())
                    .select_from(m.ProbeResultRow)
                    .where(m.ProbeResultRow.run_id == last.id)
                )
                == 0
            )
        assert listener.has("STOPPING", "1")
        assert "auditor daemon stopped" in log.read_text()
        assert not (tmp_path / "state" / "daemon.lock").read_text().strip()  # lock released
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        listener.close()
        if store is not None:
            store.close()


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_a_drift_on_the_edge_opens_no_alert_until_it_fails_n_cycles_in_a_row(stacks, tmp_path):
    """The daemon's cycle (cycle, alerts, delivery: auditor.daemon.cycle_child.run_cycle) on a
    result that alternates across its threshold: no alert while it alternates, one when it fails
    ``open_after`` cycles in a row."""
    from auditor.cli.context import Context
    from auditor.daemon.cycle_child import run_cycle
    from auditor.daemon.cycle_process import DONE, CycleRequest

    cfg, db, jsonl = tmp_path / "auditor.toml", tmp_path / "h.db", tmp_path / "alerts.jsonl"

    def cycle(tolerance: float) -> str:
        text = config_text(tmp_path, tolerance).replace('on = ["probes"]', 'on = ["probes"]\nopen_after = 2')
        cfg.write_text(text + "\n[rollout]\nenabled = false\n")
        config = Context(str(cfg), None).load_config()
        reply = run_cycle(CycleRequest(config, [], f"sqlite:///{db}"))
        assert reply.kind == DONE and reply.summary is not None, reply.message
        return reply.summary.outcome

    assert [cycle(t) for t in (0.0, 1.0, 0.0, 1.0, 0.0)] == ["drift", "consistent"] * 2 + ["drift"]
    assert alert_events(jsonl, KEY) == []  # fail, pass, fail, pass, fail: never two in a row
    assert cycle(0.0) == "drift"
    assert alert_events(jsonl, KEY) == [("opened", KEY)]
    assert cycle(1.0) == "consistent"  # resolve_after = 1 in this config
    assert alert_events(jsonl, KEY) == [("opened", KEY), ("resolved", KEY)]


def _scrape(log: Path) -> dict[tuple[str, str], float]:
    """The daemon's warm-worker gauges: (metric, stacks) -> value."""
    url = re.search(r"Prometheus metrics on (http://127\.0\.0\.1:\d+/metrics)", log.read_text()).group(1)
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    return {
        (s.name, s.labels["stacks"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("auditor_warm_worker_")
    }


def test_the_daemon_keeps_its_warm_workers_between_cycles_and_renews_them_on_reload(stacks, tmp_path):
    """[worker] warm = "daemon": one zygote per stack, children of the daemon, kept from cycle to
    cycle (each cycle's workers are forked from them), stated in the log and in Prometheus;
    the zygote of a stack whose fingerprint changed (its driver upgraded) and, after a SIGHUP,
    every zygote start afresh; SIGTERM ends them with the daemon."""
    cfg, db, log = tmp_path / "auditor.toml", tmp_path / "h.db", tmp_path / "daemon.log"
    tree = build_tree(tmp_path / "trees", "consistent-8.2")
    options = "".join(f"{k} = {json.dumps(v)}\n" for k, v in tree.stack_options().items())
    text = config_text(tmp_path, tolerance=1.0, interval="3")
    text = text.replace('runtime = "mindspore"\n', 'runtime = "mindspore"\n' + options, 1)
    cfg.write_text(text + '\n[worker]\nwarm = "daemon"\n')
    env = {k: v for k, v in os.environ.items() if k not in (WARM_DIR_ENV, "NOTIFY_SOCKET", "WATCHDOG_USEC")}
    proc = start_daemon(cfg, db, log, env)
    store = None

    def zygotes() -> dict[str, int]:
        """The daemon's zygotes by the stack each serves (its log names them)."""
        found = {}
        for pid in worker_pids(proc.pid, zygotes=True):
            for stack in ("ms20", "lite20"):
                if re.search(rf"warm worker of {stack}: pid {pid},", log.read_text()):
                    found[stack] = pid
        return found

    def complete() -> list[m.Run]:
        return [r for r in runs(store) if r.status == "complete"]

    try:
        wait_for("the warm workers", lambda: len(zygotes()) == 2, 90, proc, log)
        store = Store(f"sqlite:///{db}")
        first = zygotes()
        assert {_parent(p) for p in first.values()} == {proc.pid}  # the daemon's own
        wait_for("two complete runs", lambda: len(complete()) >= 2, 120, proc, log)
        assert zygotes() == first  # kept between the cycles
        # the cycle processes are forked from one server that imported the cycle once
        # (auditor.daemon.forks), a child of the daemon; none starts cold
        [server] = [
            p for p in _children(proc.pid) if b"cycle_preload" in Path(f"/proc/{p}/cmdline").read_bytes()
        ]
        wait_for("a cycle forked from the server", lambda: bool(_children(server)), 60, proc, log)
        assert "cycle children start cold" not in log.read_text()
        text = log.read_text()
        for stack, module in (("ms20", "mindspore"), ("lite20", "mindspore_lite")):
            assert re.search(
                rf"warm worker of {stack}: pid \d+, imported {module} in [\d.]+ CPU-s, \d+ MB resident", text
            )
        gauges = _scrape(log)
        assert gauges[("auditor_warm_worker_resident_bytes", "ms20")] > 100 * 2**20
        # PSS: the runtime's pages shared with every other process that maps them (a test run's
        # other zygotes of lite20 halve it); a bare interpreter's is under 10 MB
        assert gauges[("auditor_warm_worker_proportional_bytes", "lite20")] > 20 * 2**20
        assert gauges[("auditor_warm_worker_forks", "ms20")] >= 2  # a worker per cycle at least

        # ms20's driver is upgraded: its next fingerprint differs, so its zygote is renewed.
        driver = tree.ascend_root / "driver" / "version.info"
        driver.write_text(driver.read_text().replace("25.0.rc1.1", "25.0.rc2"))
        wait_for(
            "ms20's renewed warm worker",
            lambda: (
                "ms20 changed: its warm worker starts afresh" in log.read_text()
                and set(zygotes()) == {"ms20", "lite20"}
                and zygotes()["ms20"] != first["ms20"]
            ),
            120,
            proc,
            log,
        )
        assert zygotes()["lite20"] == first["lite20"]  # the other stack's is kept

        kept = zygotes()
        proc.send_signal(signal.SIGHUP)
        wait_for(
            "the reload", lambda: "reloaded; it applies from the next cycle" in log.read_text(), 30, proc, log
        )
        wait_for(
            "fresh warm workers",
            lambda: len(zygotes()) == 2 and not set(zygotes().values()) & set(kept.values()),
            90,
            proc,
            log,
        )
        assert "the configuration was reloaded: the warm workers start afresh" in log.read_text()
        assert _all_end(kept.values()), [p for p in kept.values() if _lives(p)]
        renewed = set(zygotes().values())

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
        assert _all_end(renewed), [p for p in renewed if _lives(p)]
        assert _all_end([server])  # the fork server ends with the daemon
        assert not list((tmp_path / "state" / "zygotes").glob("*.sock"))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if store is not None:
            store.close()


def _lives(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists() and _state(pid) != "Z"


def _all_end(pids, polls: int = 200) -> bool:
    """Whether every pid ends while watched (every 50 ms, 200 times): what is killed as a
    process ends is reaped a moment later, and reading at once would race it."""
    for _ in range(polls):
        if not any(_lives(p) for p in pids):
            return True
        time.sleep(0.05)
    return not any(_lives(p) for p in pids)


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def test_the_idle_daemon_holds_no_plugin_numpy_or_sqlalchemy_on_a_fresh_database(stacks, tmp_path):
    """#36: the daemon idles under 60 MB on a new history database, before and after cycles: its
    config and database are read by a child, each cycle's result comes back as plain data, so
    neither numpy nor SQLAlchemy is ever mapped in it (bench/daemon_memory.py prints figures)."""
    cfg, db, log = tmp_path / "auditor.toml", tmp_path / "h.db", tmp_path / "daemon.log"
    text = config_text(tmp_path, tolerance=1.0, interval="5").replace("enabled = true", "enabled = false")
    cfg.write_text(text)
    env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}
    proc = start_daemon(cfg, db, log, env)
    store = None
    try:
        wait_for("the start", lambda: "auditor daemon started" in log.read_text(), 60, proc, log)
        assert db.is_file()  # created and migrated at start (by the setup child)
        store = Store(f"sqlite:///{db}")
        wait_for(
            "two complete runs",
            lambda: len([r for r in runs(store) if r.status == "complete"]) >= 2,
            120,
            proc,
            log,
        )
        wait_for("the idle daemon", lambda: not _children(proc.pid), 30, proc, log)
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
        assert "numpy" not in maps and "sqlalchemy" not in maps
        assert _rss_mib(proc.pid) <= 60, _rss_mib(proc.pid)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        if store is not None:
            store.close()


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return out
