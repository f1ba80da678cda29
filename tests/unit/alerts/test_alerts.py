"""The alert engine over several stored runs: open, suppressed repeats, reminder after the
cooldown, resolve; what aborted and errored runs may not do; delivery state of sinks."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from datetime import datetime, timedelta

import pytest
from click.testing import CliRunner
from sqlalchemy import select
from sqlalchemy.orm import Session

from auditor.alerts.engine import AlertEngine, ConfiguredSink, build_sinks, list_alerts, sink_status
from auditor.cli.main import cli
from auditor.config.tables import AlertsConfig, SinkConfig
from auditor.db import schema as m
from auditor.history.store import Store
from auditor.results import CycleResult, Finding, StackReport

T0 = datetime(2026, 12, 2, 10, 0, 0)
AT_ONCE = {"open_after": 1, "resolve_after": 1}
"""No hysteresis: the lifecycle tests below see every change in the run it happens."""
DRIFT = Finding("drift", "warning", "ms20->lite20", "ms20->lite20/ppo_policy/fp32/drift", "mean drifted")
INCOMPATIBLE = Finding(
    "incompatible", "critical", "ms210->lite20", "ms210->lite20/ppo_policy/fp32/incompatible", "cannot load"
)


class Recorder:
    def __init__(self, fail_times: int = 0):
        self.events: list[dict] = []
        self.fail_times = fail_times
        self.calls = 0

    def send(self, event: dict) -> None:
        self.calls += 1
        if self.calls <= self.fail_times:
            raise ConnectionError(f"down (call {self.calls})")
        self.events.append(event)

    def seen(self) -> list[tuple[str, str]]:
        return [(e["event"], e["alert"]["key"]) for e in self.events]


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def at(self, seconds: float) -> None:
        self.now = T0 + timedelta(seconds=seconds)


@pytest.fixture
def store(history_url):
    """An empty history: an SQLite file, then a PostgreSQL database (conftest.history_url)."""
    s = Store.open(history_url)
    yield s
    s.close()


def stored_run(store: Store, findings: list[Finding], error: bool = False) -> int:
    run_id = store.begin_run("test.toml")
    stacks = {}
    if error:
        stacks["ms20"] = StackReport(
            "ms20", "train", "mindspore", "/x/python", "cpu", "local", None, "crashed"
        )
    result = CycleResult(0.0, 1.0, "test.toml", stacks, [], list(findings))
    store.finish_run(run_id, result, {})
    return run_id


def engine_with(store: Store, clock: Clock, cooldown: float = 3600, max_attempts: int = 5, **sinks):
    configured = {
        name: ConfiguredSink(SinkConfig(name, "test", severity), sink)
        for name, (sink, severity) in sinks.items()
    }
    return AlertEngine(
        store.engine,
        AlertsConfig(cooldown=cooldown, max_attempts=max_attempts, **AT_ONCE),
        configured,
        clock=clock,
        host="test-host",
    )


def cycle(engine: AlertEngine, run_id: int) -> list[tuple[str, str]]:
    events = engine.evaluate(run_id)
    engine.deliver()
    return [(e.event, e.key) for e in events]


def test_lifecycle_open_suppress_remind_resolve(store):
    clock = Clock()
    rec = Recorder()
    engine = engine_with(store, clock, rec=(rec, "info"))

    clock.at(0)
    assert cycle(engine, stored_run(store, [DRIFT, INCOMPATIBLE])) == [
        ("opened", DRIFT.key),
        ("opened", INCOMPATIBLE.key),
    ]
    for t in (600, 1200, 3000):  # still there, within the cooldown: nothing sent
        clock.at(t)
        assert cycle(engine, stored_run(store, [DRIFT, INCOMPATIBLE])) == []
    clock.at(3300)  # the incompatibility is fixed
    assert cycle(engine, stored_run(store, [DRIFT])) == [("resolved", INCOMPATIBLE.key)]
    clock.at(3600)  # an hour after the drift alert was sent: reminder
    assert cycle(engine, stored_run(store, [DRIFT])) == [("reminder", DRIFT.key)]
    clock.at(4000)
    assert cycle(engine, stored_run(store, [DRIFT])) == []
    clock.at(7200)  # the cooldown counts from the reminder
    assert cycle(engine, stored_run(store, [DRIFT])) == [("reminder", DRIFT.key)]
    clock.at(7300)
    assert cycle(engine, stored_run(store, [])) == [("resolved", DRIFT.key)]
    clock.at(7400)  # it comes back: a new alert
    assert cycle(engine, stored_run(store, [DRIFT])) == [("opened", DRIFT.key)]

    assert rec.seen() == [
        ("opened", DRIFT.key),
        ("opened", INCOMPATIBLE.key),
        ("resolved", INCOMPATIBLE.key),
        ("reminder", DRIFT.key),
        ("reminder", DRIFT.key),
        ("resolved", DRIFT.key),
        ("opened", DRIFT.key),
    ]
    alerts = list_alerts(store.engine)
    assert [(a["key"], a["state"], a["notifications"]) for a in alerts] == [
        (DRIFT.key, "open", 1),
        (DRIFT.key, "resolved", 4),
        (INCOMPATIBLE.key, "resolved", 2),
    ]
    assert [a["key"] for a in list_alerts(store.engine, open_only=True)] == [DRIFT.key]
    assert engine.open_counts() == {"info": 0, "warning": 1, "error": 0, "critical": 0}


def test_event_payload(store):
    clock = Clock()
    rec = Recorder()
    engine = engine_with(store, clock, rec=(rec, "info"))
    run_id = stored_run(store, [INCOMPATIBLE])
    cycle(engine, run_id)
    (event,) = rec.events
    json.dumps(event)  # plain JSON
    assert event["schema"] == "auditor.alert/1"
    assert event["event"] == "opened"
    assert event["host"] == "test-host"
    assert event["created_at"] == "2026-12-02T10:00:00Z"
    # the run's only part is an incompatibility finding: its outcome says so (never "consistent")
    assert event["run"]["id"] == run_id and event["run"]["outcome"] == "incompatible"
    alert = event["alert"]
    assert {
        k: alert[k] for k in ("key", "state", "kind", "severity", "subject", "message", "notifications")
    } == {
        "key": INCOMPATIBLE.key,
        "state": "open",
        "kind": "incompatible",
        "severity": "critical",
        "subject": "ms210->lite20",
        "message": "cannot load",
        "notifications": 1,
    }
    assert alert["opened_run_id"] == alert["last_seen_run_id"] == run_id and alert["resolved_at"] is None


def test_aborted_and_errored_runs_resolve_nothing(store):
    clock = Clock()
    rec = Recorder()
    engine = engine_with(store, clock, rec=(rec, "info"))
    cycle(engine, stored_run(store, [DRIFT]))
    aborted = store.begin_run("test.toml")
    store.abort_run(aborted, "interrupted by SIGTERM")
    assert cycle(engine, aborted) == []
    clock.at(60)
    # a stack crashed: the drift finding is absent because the pair was not checked
    assert cycle(engine, stored_run(store, [], error=True)) == []
    assert [a["state"] for a in list_alerts(store.engine)] == ["open"]
    clock.at(120)
    assert cycle(engine, stored_run(store, [])) == [("resolved", DRIFT.key)]


def test_a_run_that_could_not_check_everything_resolves_nothing(store):
    """A collector failed: the version drift it found last time is absent because it was not
    looked at, not because it was fixed (no silent all-clear through the alerts)."""
    engine = engine_with(store, Clock(), rec=(Recorder(), "info"))
    assert cycle(engine, stored_run(store, [DRIFT])) == [("opened", DRIFT.key)]
    lost = Finding("unchecked", "warning", "ms20", "ms20/unchecked/collector/cann", "cann collector failed")
    for _ in range(3):
        assert ("resolved", DRIFT.key) not in cycle(engine, stored_run(store, [lost]))
    assert {a["key"]: a["state"] for a in list_alerts(store.engine)}[DRIFT.key] == "open"
    # a run that looked at everything resolves both: the drift, and the collector's failure
    assert sorted(cycle(engine, stored_run(store, []))) == [("resolved", DRIFT.key), ("resolved", lost.key)]


def test_an_errored_run_still_opens_alerts(store):
    engine = engine_with(store, Clock())
    unavailable = Finding("stack-unavailable", "error", "ms20", "ms20/stack-unavailable", "crashed")
    assert cycle(engine, stored_run(store, [unavailable], error=True)) == [("opened", unavailable.key)]


def test_failing_sink_is_recorded_and_retried_in_order_at_the_next_notification(store):
    clock = Clock()
    flaky = Recorder(fail_times=2)
    good = Recorder()
    engine = engine_with(store, clock, flaky=(flaky, "info"), good=(good, "info"))
    cycle(engine, stored_run(store, [DRIFT, INCOMPATIBLE]))
    assert good.seen() == [("opened", DRIFT.key), ("opened", INCOMPATIBLE.key)]  # unaffected
    assert flaky.calls == 1 and flaky.events == []  # failed once; the rest waits its turn
    status = sink_status(store.engine)["flaky"]
    assert status["pending"] == 2 and status["last_error"] == "ConnectionError: down (call 1)"

    clock.at(60)
    cycle(engine, stored_run(store, [DRIFT, INCOMPATIBLE]))  # nothing new; retried, fails again
    assert flaky.calls == 2 and flaky.events == []
    clock.at(120)
    cycle(engine, stored_run(store, [DRIFT]))  # new event; the old ones go first
    assert flaky.seen() == [
        ("opened", DRIFT.key),
        ("opened", INCOMPATIBLE.key),
        ("resolved", INCOMPATIBLE.key),
    ]
    status = sink_status(store.engine)["flaky"]
    assert (status["pending"], status["delivered"], status["failed"]) == (0, 3, 0)
    with Session(store.engine) as s:
        first = s.scalars(
            select(m.AlertDelivery).where(m.AlertDelivery.sink == "flaky").order_by(m.AlertDelivery.id)
        ).first()
        assert first.attempts == 3 and first.state == "delivered"


def test_a_sink_that_always_fails_gives_up_after_max_attempts(store):
    clock = Clock()
    dead = Recorder(fail_times=10**6)
    engine = engine_with(store, clock, max_attempts=2, dead=(dead, "info"))
    cycle(engine, stored_run(store, [DRIFT]))
    clock.at(60)
    round_ = engine.deliver()
    assert (round_.delivered, round_.failed, round_.pending) == (0, 1, 0)
    assert sink_status(store.engine)["dead"]["failed"] == 1
    clock.at(120)
    engine.deliver()
    assert dead.calls == 2


def test_min_severity_filters_per_sink(store):
    pager, everything = Recorder(), Recorder()
    engine = engine_with(store, Clock(), pager=(pager, "critical"), all=(everything, "info"))
    cycle(engine, stored_run(store, [DRIFT, INCOMPATIBLE]))
    assert pager.seen() == [("opened", INCOMPATIBLE.key)]
    assert len(everything.events) == 2


def test_cooldown_zero_never_reminds(store):
    clock = Clock()
    rec = Recorder()
    engine = engine_with(store, clock, cooldown=0, rec=(rec, "info"))
    cycle(engine, stored_run(store, [DRIFT]))
    for t in (3600, 86400 * 7):
        clock.at(t)
        assert cycle(engine, stored_run(store, [DRIFT])) == []


def test_deliveries_to_a_removed_sink_are_dropped(store):
    gone = Recorder(fail_times=1)
    engine = engine_with(store, Clock(), gone=(gone, "info"))
    cycle(engine, stored_run(store, [DRIFT]))
    engine.sinks = {}
    engine.deliver()
    assert sink_status(store.engine)["gone"]["dropped"] == 1


def test_a_sink_that_cannot_be_created_fails_its_deliveries(store):
    from auditor.alerts.sinks import SinkType

    def create(name, options):
        raise ValueError("no such queue")

    types = {"broken": SinkType("broken", "", lambda o: [], create)}
    sinks = build_sinks(AlertsConfig(sinks={"q": SinkConfig("q", "broken")}), types)
    engine = AlertEngine(store.engine, AlertsConfig(**AT_ONCE), sinks, clock=Clock())
    cycle(engine, stored_run(store, [DRIFT]))
    assert "no such queue" in sink_status(store.engine)["q"]["last_error"]


def test_alerts_command(store, tmp_path):
    engine = engine_with(store, Clock(), rec=(Recorder(fail_times=1), "info"))
    cycle(engine, stored_run(store, [DRIFT, INCOMPATIBLE]))
    cycle(engine, stored_run(store, [DRIFT]))
    runner = CliRunner()
    db = store.url
    result = runner.invoke(cli, ["--db", db, "alerts", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert [(a["key"], a["state"]) for a in doc["alerts"]] == [
        (DRIFT.key, "open"),
        (INCOMPATIBLE.key, "resolved"),
    ]
    assert doc["sinks"]["rec"]["delivered"] == 3
    result = runner.invoke(cli, ["--db", db, "alerts", "--open"])
    assert result.exit_code == 0
    assert DRIFT.key in result.output and INCOMPATIBLE.key not in result.output
    assert "sink rec: 3 delivered, 0 pending, 0 failed; last error" in result.output


def test_two_auditors_never_resolve_each_others_alerts(store):
    """Auditors A and B share the database and see the same finding key: each has its own
    alert; A's clean run resolves A's alert only, and each delivers only its own events."""
    a = Store(store.url, auditor_id="auditor-a")
    b = Store(store.url, auditor_id="auditor-b")
    clock = Clock()
    rec_a, rec_b = Recorder(), Recorder()
    engine_a = AlertEngine(
        store.engine,
        AlertsConfig(**AT_ONCE),
        {"r": ConfiguredSink(SinkConfig("r", "test", "info"), rec_a)},
        clock=clock,
        auditor_id="auditor-a",
    )
    engine_b = AlertEngine(
        store.engine,
        AlertsConfig(**AT_ONCE),
        {"r": ConfiguredSink(SinkConfig("r", "test", "info"), rec_b)},
        clock=clock,
        auditor_id="auditor-b",
    )
    try:
        assert cycle(engine_a, stored_run(a, [DRIFT])) == [("opened", DRIFT.key)]
        assert cycle(engine_b, stored_run(b, [DRIFT])) == [("opened", DRIFT.key)]  # B's own alert
        clock.at(60)
        assert cycle(engine_a, stored_run(a, [])) == [("resolved", DRIFT.key)]  # A's only
        states = {(x["auditor_id"], x["key"]): x["state"] for x in list_alerts(store.engine)}
        assert states == {("auditor-a", DRIFT.key): "resolved", ("auditor-b", DRIFT.key): "open"}
        assert [e["event"] for e in rec_a.events] == ["opened", "resolved"]
        assert [e["event"] for e in rec_b.events] == ["opened"]
        assert engine_b.open_counts()["warning"] == 1 and engine_a.open_counts()["warning"] == 0
        shown = CliRunner().invoke(cli, ["--db", store.url, "alerts"])
        assert shown.exit_code == 0 and "auditor " in shown.output.splitlines()[1]  # the column
        rows = [line.split() for line in shown.output.splitlines()[2:] if DRIFT.key in line]
        assert sorted((r[1], r[3]) for r in rows) == [("open", "auditor-b"), ("resolved", "auditor-a")]
        only_b = CliRunner().invoke(
            cli, ["--db", store.url, "alerts", "--auditor", "auditor-b", "--format", "csv"]
        )
        lines = only_b.output.splitlines()
        assert lines[0].startswith("id,state,severity,auditor_id,key") and len(lines) == 2
        assert ",auditor-b," in lines[1] and lines[1].split(",")[1] == "open"
    finally:
        a.close()
        b.close()


@pytest.mark.faults
def test_a_slow_sink_spends_its_budget_and_the_others_are_not_held_up(store, caplog):
    """[alerts] sink_budget: a sink that answers, but slowly, sends what it can within its
    seconds this round; the rest waits, pending, for the next round; the other sinks deliver
    everything (a fake timer: each of the slow sink's sends takes 50 s of it)."""
    elapsed = [0.0]

    class Slow(Recorder):
        def send(self, event):
            elapsed[0] += 50.0
            super().send(event)

    slow, fast = Slow(), Recorder()
    configured = {
        name: ConfiguredSink(SinkConfig(name, "test", "info"), sink)
        for name, sink in (("slow", slow), ("fast", fast))
    }
    engine = AlertEngine(
        store.engine,
        AlertsConfig(sink_budget=120.0, **AT_ONCE),
        configured,
        clock=Clock(),
        timer=lambda: elapsed[0],
    )
    findings = [DRIFT, INCOMPATIBLE, *(replace(DRIFT, key=f"{DRIFT.key}/{i}") for i in range(3))]
    engine.evaluate(stored_run(store, findings))
    with caplog.at_level(logging.WARNING, "auditor.alerts.engine"):
        first = engine.deliver()
    assert len(fast.seen()) == 5 and len(slow.seen()) == 3  # 3 x 50 s crossed the 120 s budget
    assert first.failed == 0 and first.pending == 2
    assert "alert sink slow used its 120 s of this round (sink_budget): 2 delivery(ies) wait" in caplog.text
    second = engine.deliver()
    assert len(slow.seen()) == 5 and second.pending == 0  # the next round sends the rest, in order
    assert [e for e, _ in slow.seen()] == ["opened"] * 5
