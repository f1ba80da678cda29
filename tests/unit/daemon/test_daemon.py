"""The daemon's parts that need no stack: the single-instance lock, journald-friendly logs,
schedules (interval, crontab weekdays), the [schedule]/[alerts]/[prometheus]/[daemon] config,
and reload keeping the old config when the new one is bad."""

from __future__ import annotations

import logging
import multiprocessing
import os
import sys
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from auditor.common.logs import JournalFormatter, stderr_is_journal
from auditor.config.load import load, parse
from auditor.config.schedule import cron_trigger, make_trigger
from auditor.config.tables import ConfigError, DaemonConfig, ScheduleConfig
from auditor.daemon.main import Daemon, DaemonError, StateLock
from auditor.daemon.setup import DaemonSetup, RuntimeInfo, SetupError, SetupFailure, load_setup
from auditor.extend.manager import Plugins
from tests.conftest import REPO

UTC = ZoneInfo("UTC")


def minimal(**sections) -> dict:
    doc = {
        "stacks": {
            "tr": {"role": "train", "runtime": "mindspore", "python": "/opt/tr/bin/python"},
            "inf": {"role": "infer", "runtime": "mindspore-lite", "python": "/opt/inf/bin/python"},
        },
        "pairs": [{"train": "tr", "infer": "inf", "probes": ["ppo_policy"]}],
    }
    doc.update(sections)
    return doc


# -- single instance -----------------------------------------------------------------------


def test_second_lock_on_the_same_state_dir_is_refused(tmp_path):
    first = StateLock(tmp_path / "state")
    first.acquire()
    try:
        assert (tmp_path / "state" / "daemon.lock").read_text().strip() == str(os.getpid())
        with pytest.raises(
            DaemonError, match=rf"another auditor daemon \(pid {os.getpid()}\) is already running"
        ):
            StateLock(tmp_path / "state").acquire()
        StateLock(tmp_path / "elsewhere").acquire()  # another state dir is another daemon
    finally:
        first.release()
    again = StateLock(tmp_path / "state")
    again.acquire()
    again.release()


def _hold_lock_and_die(path: str) -> None:
    StateLock(Path(path)).acquire()
    os._exit(0)  # no release: the kernel drops the lock with the process


def test_a_dead_daemon_leaves_no_stale_lock(tmp_path):
    p = multiprocessing.get_context("fork").Process(target=_hold_lock_and_die, args=(str(tmp_path),))
    p.start()
    p.join(60)
    assert p.exitcode == 0  # it did take the lock, and died holding it
    assert (tmp_path / "daemon.lock").read_text().strip() == str(p.pid)  # its pid, never released
    lock = StateLock(tmp_path)
    lock.acquire()
    lock.release()


def test_unusable_state_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(DaemonError, match="cannot create the lock file"):
        StateLock(blocker / "state").acquire()


# -- logging -------------------------------------------------------------------------------


def test_journal_format_has_priority_and_no_timestamp():
    fmt = JournalFormatter("%(name)s: %(message)s")
    rec = logging.LogRecord("auditor.daemon", logging.WARNING, __file__, 1, "cycle %s aborted", (3,), None)
    assert fmt.format(rec) == "<4>auditor.daemon: cycle 3 aborted"
    rec = logging.LogRecord("auditor.daemon", logging.INFO, __file__, 1, "started", (), None)
    assert fmt.format(rec) == "<6>auditor.daemon: started"


def test_journal_is_detected_only_when_stderr_is_the_journal_stream(tmp_path, monkeypatch):
    stream = (tmp_path / "stderr").open("w")
    monkeypatch.setattr(sys, "stderr", stream)
    st = os.fstat(stream.fileno())
    assert stderr_is_journal({"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"})
    assert not stderr_is_journal({"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino + 1}"})  # redirected
    assert not stderr_is_journal({})
    assert not stderr_is_journal({"JOURNAL_STREAM": "garbage"})
    stream.close()


# -- schedules -----------------------------------------------------------------------------


def fires(trigger, start: datetime, n: int) -> list[datetime]:
    out, prev, now = [], None, start
    for _ in range(n):
        nxt = trigger.get_next_fire_time(prev, now)
        out.append(nxt)
        prev, now = nxt, nxt
    return out


def test_crontab_weekdays_mean_what_they_mean_in_crontab():
    start = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)  # a Saturday
    sunday = fires(cron_trigger("0 3 * * 0", UTC), start, 2)
    assert [d.strftime("%a %H:%M") for d in sunday] == ["Sun 03:00", "Sun 03:00"]
    assert cron_trigger("0 3 * * 7", UTC).get_next_fire_time(None, start).strftime("%a") == "Sun"
    weekdays = fires(cron_trigger("30 6 * * 1-5", UTC), start, 5)
    assert [d.strftime("%a") for d in weekdays] == ["Mon", "Tue", "Wed", "Thu", "Fri"]
    listed = fires(cron_trigger("0 0 * * 2,4", UTC), start, 2)
    assert [d.strftime("%a") for d in listed] == ["Tue", "Thu"]
    every = fires(cron_trigger("*/20 * * * *", UTC), start, 3)
    assert [d.strftime("%H:%M") for d in every] == ["12:00", "12:20", "12:40"]


def test_interval_trigger_and_jitter():
    t = make_trigger(ScheduleConfig(interval=90, timezone="UTC"))
    start = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
    first = t.get_next_fire_time(None, start)
    assert (t.get_next_fire_time(first, first) - first).total_seconds() == 90
    jittered = make_trigger(ScheduleConfig(interval=60, jitter=30, timezone="UTC"))
    assert jittered.jitter == 30


# -- config --------------------------------------------------------------------------------


def test_defaults_when_the_sections_are_absent():
    cfg = parse(minimal())
    assert cfg.schedule == ScheduleConfig()
    assert cfg.schedule.interval == 3600 and cfg.schedule.cron is None and cfg.schedule.run_on_start
    assert not cfg.prometheus.enabled and cfg.prometheus.address == "127.0.0.1"
    assert cfg.daemon == DaemonConfig() and cfg.daemon.stop_timeout == 30
    assert cfg.alerts.sinks == {}


def test_durations_and_cron(tmp_path):
    cfg = parse(
        minimal(
            schedule={
                "cron": "*/30 * * * 1-5",
                "timezone": "Europe/Berlin",
                "jitter": "90s",
                "misfire_grace": "1h30m",
            },
            alerts={"cooldown": "2d", "max_attempts": 3},
            daemon={"state_dir": "state", "stop_timeout": 0},
            prometheus={"enabled": True, "address": "::1", "port": 0},
        ),
        source=str(tmp_path / "auditor.toml"),
    )
    s = cfg.schedule
    assert (s.cron, s.interval, s.timezone, s.jitter, s.misfire_grace) == (
        "*/30 * * * 1-5",
        None,
        "Europe/Berlin",
        90,
        5400,
    )
    assert cfg.alerts.cooldown == 172800 and cfg.alerts.max_attempts == 3
    assert cfg.daemon.state_dir == str(tmp_path / "state")  # relative to the config file
    assert cfg.daemon.stop_timeout == 0
    assert (cfg.prometheus.enabled, cfg.prometheus.address, cfg.prometheus.port) == (True, "::1", 0)


def test_every_problem_in_the_daemon_sections_with_its_key_path():
    with pytest.raises(ConfigError) as err:
        parse(
            minimal(
                schedule={
                    "interval": 0.5,
                    "cron": "61 * * * *",
                    "timezone": "Mars/Olympus",
                    "jitter": "soon",
                    "run_on_start": "yes",
                    "every": 3,
                },
                alerts={"cooldown": -1, "max_attempts": 0, "sinks": {"x y": {"type": "log"}}},
                prometheus={"enabled": 1, "port": 70000, "address": " "},
                daemon={"stop_timeout": "forever", "pidfile": "/run/a.pid"},
            )
        )
    paths = sorted(e.partition(": ")[0] for e in err.value.errors)
    assert paths == sorted(
        [
            "schedule",  # interval and cron both set
            "schedule.interval",  # below 1 s
            "schedule.every",
            "schedule.cron",
            "schedule.timezone",
            "schedule.jitter",
            "schedule.run_on_start",
            "alerts.cooldown",
            "alerts.max_attempts",
            "alerts.sinks.x y",
            "prometheus.enabled",
            "prometheus.port",
            "prometheus.address",
            "daemon.pidfile",
            "daemon.stop_timeout",
        ]
    ), err.value.errors
    text = "\n".join(err.value.errors)
    assert "schedule: set either interval or cron, not both" in text
    assert "schedule.cron: not a cron expression" in text
    assert "schedule.timezone: unknown time zone 'Mars/Olympus'" in text


def test_interval_below_one_second_is_refused():
    with pytest.raises(ConfigError) as err:
        parse(minimal(schedule={"interval": -1}))
    assert err.value.errors == [
        'schedule.interval: must be a duration from 1s to 366d (seconds, or a string like "90s", "15m", '
        '"1h30m"), not -1'
    ]


def test_shipped_config_documents_the_daemon_sections(monkeypatch, tmp_path):
    monkeypatch.setenv("AUDITOR_STACKS_DIR", str(tmp_path))
    cfg = load(REPO / "auditor.toml")
    assert cfg.schedule.interval == 3600 and cfg.schedule.run_on_start
    assert not cfg.prometheus.enabled and cfg.prometheus.address == "127.0.0.1"
    assert cfg.alerts.sinks["journal"].type == "log"


# -- reload --------------------------------------------------------------------------------


def setup_of(config, tmp_path) -> DaemonSetup:
    """What the setup child would answer for ``config`` (auditor.daemon.setup), without one."""
    runtimes = {
        n: RuntimeInfo(r.worker_class, r.cold) for n, r in Plugins(entry_points=False).runtimes().items()
    }
    url = f"sqlite:///{tmp_path / 'h.db'}"
    return DaemonSetup(config, url, url, "test-auditor", [], runtimes, {"warning": 0})


def test_reload_keeps_the_old_config_when_the_new_one_is_bad(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    config = parse(minimal(daemon={"state_dir": str(tmp_path / "state")}))
    answers: list[object] = []

    def load() -> DaemonSetup:
        answer = answers.pop(0)
        if isinstance(answer, SetupFailure):
            raise SetupError(answer)
        return answer

    d = Daemon(setup_of(config, tmp_path), load)
    bad = ("schedule.interval: must be at least 1 s, not -1",)
    answers.append(SetupFailure(("auditor: config auditor.toml is not usable:",), 2, (), "auditor.toml", bad))
    assert not d.reload()
    assert d._setup.config is config
    assert (
        "config auditor.toml not reloaded (1 problem(s)); still running with the previous one:" in caplog.text
    )
    assert "schedule.interval: must be at least 1 s, not -1" in caplog.text

    answers.append(SetupFailure(("auditor: cannot start: the history database is gone",), 1))
    assert not d.reload()
    assert "config not reloaded: cannot start: the history database is gone; still running" in caplog.text
    assert d._setup.config is config

    newer = parse(minimal(alerts={"cooldown": "5m"}, prometheus={"enabled": True}))
    answers.append(setup_of(newer, tmp_path))
    assert d.reload()
    assert d._setup.config is newer and d._setup.config.alerts.cooldown == 300
    assert "[prometheus] changed: restart the daemon to apply it" in caplog.text


def test_the_setup_child_reads_the_config_and_the_database(tmp_path):
    """auditor.daemon.setup: the config read and the database opened (migrated: it is new) in
    a child; the daemon gets plain data, a bad config its problems, no config the command's words."""
    config = tmp_path / "auditor.toml"
    config.write_text(
        '[stacks.tr]\nrole = "train"\nruntime = "mindspore"\npython = "/opt/tr/bin/python"\n'
        '[stacks.inf]\nrole = "infer"\nruntime = "mindspore-lite"\npython = "/opt/inf/bin/python"\n'
        '[[pairs]]\ntrain = "tr"\ninfer = "inf"\nprobes = ["ppo_policy"]\n'
    )
    db = tmp_path / "h.db"
    setup = load_setup(str(config), str(db))
    assert setup.config.source == str(config) and set(setup.config.stacks) == {"tr", "inf"}
    assert setup.db_url == f"sqlite:///{db}" and db.is_file()  # created and migrated
    assert setup.open_alerts == {s: 0 for s in ("info", "warning", "error", "critical")}
    assert setup.runtimes["mindspore"].worker_class.endswith(":MindSporeRuntime")
    assert setup.runtimes["ort"].cold and not setup.runtimes["mindspore-lite"].cold
    config.write_text(config.read_text().replace('probes = ["ppo_policy"]', 'probes = ["nope"]'))
    with pytest.raises(SetupError) as bad:
        load_setup(str(config), str(db))
    assert bad.value.failure.code == 2 and bad.value.failure.source == str(config)
    assert any("nope" in e for e in bad.value.failure.errors)
    with pytest.raises(SetupError) as missing:
        load_setup(str(tmp_path / "none.toml"), str(db))
    assert missing.value.failure.code == 2 and "none.toml" in missing.value.failure.lines[0]
    config.write_text(config.read_text().replace('probes = ["nope"]', 'probes = ["ppo_policy"]'))
    (tmp_path / "a-file").write_text("")
    with pytest.raises(SetupError) as unusable:
        load_setup(str(config), str(tmp_path / "a-file" / "h.db"))  # its directory is a file
    failure = unusable.value.failure
    assert failure.code == 1 and failure.lines[0].startswith("auditor: cannot start")
