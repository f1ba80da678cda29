"""NPU telemetry in the history database (auditor.history.telemetry): written with a run or on
its own, read back newest-N and by time range, the worst value since a time, and pruned by
age per auditor. On SQLite and PostgreSQL (the ``history_url`` fixture)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from sqlalchemy import func, select

from auditor.db import schema as m
from auditor.history import telemetry as th
from auditor.history.retention import prune
from auditor.history.store import Store
from auditor.results import ChipTelemetry, CycleResult, HostTelemetry, NpuTelemetry

T0 = datetime(2026, 3, 1, 12, 0, 0)


def at(minutes: float) -> float:
    return (T0 + timedelta(minutes=minutes) - datetime(1970, 1, 1)).total_seconds()


def host_sample(host: str, minutes: float, temp: float, busy: float = 0.0) -> HostTelemetry:
    return HostTelemetry(
        host,
        "lite20",
        at(minutes),
        True,
        npus=(
            NpuTelemetry(0, (ChipTelemetry("0", {"temperature_c": temp, "aicore_pct": busy}),)),
            NpuTelemetry(
                1,
                (ChipTelemetry("0", {"temperature_c": temp + 1}), ChipTelemetry("mcu", {"power_w": 20.0})),
            ),
            NpuTelemetry(7, errors=("`npu-smi info -t temp -i 7`: exit status 187: ...",)),
        ),
    )


@pytest.fixture
def store(history_url):
    s = Store.open(history_url, auditor_id="a1")
    yield s
    s.close()


def count(store: Store, model) -> int:
    with store.engine.connect() as conn:
        return conn.scalar(select(func.count()).select_from(model))


def test_samples_written_on_their_own_and_read_back(store: Store) -> None:
    for minute in range(10):
        th.store_samples(store.engine, "a1", [host_sample("npu-box", minute, 40 + minute, busy=minute * 10)])
    th.store_samples(store.engine, "a1", [HostTelemetry("empty", "ms20", at(3), False, "npu-smi: not found")])
    assert count(store, m.TelemetrySeriesRow) == 4  # npu0: 2 metrics, npu1: chip 0 and mcu; NPU 7 none
    assert count(store, m.TelemetryPoint) == 40
    with store.engine.connect() as conn:
        newest = th.newest(conn, th.TelemetryFilters(hosts=("npu-box",)), 3)
        assert [(s.label, s.metric) for s in newest] == [
            ("npu0", "aicore_pct"),
            ("npu0", "temperature_c"),
            ("npu1", "temperature_c"),
            ("npu1.mcu", "power_w"),
        ]
        temp = newest[1]
        assert [v for _, v in temp.points] == [47.0, 48.0, 49.0]  # the newest three, oldest first
        assert temp.points[-1][0] == T0 + timedelta(minutes=9)
        ranged = th.between(
            conn,
            th.TelemetryFilters(
                metrics=("temperature_c",),
                npus=(0,),
                since=T0 + timedelta(minutes=2),
                until=T0 + timedelta(minutes=5),
            ),
        )
        assert [[v for _, v in s.points] for s in ranged] == [[42.0, 43.0, 44.0]]
        worst = th.worst_since(conn, "a1", T0 + timedelta(minutes=5))
        assert worst[("npu-box", 0, "0", "temperature_c")] == (49.0, T0 + timedelta(minutes=9))
        assert th.worst_since(conn, "someone else", T0) == {}


def test_a_cycle_stores_its_samples_in_its_run(store: Store) -> None:
    run_id = store.begin_run("auditor.toml")
    result = CycleResult(1.0, 2.0, "auditor.toml", {}, [], [], telemetry=[host_sample("local", 0, 55.0)])
    store.finish_run(run_id, result, {})
    with store.engine.connect() as conn:
        (temp,) = th.newest(conn, th.TelemetryFilters(metrics=("temperature_c",), npus=(0,)), 10)
    assert temp.points == [(T0, 55.0)] and temp.auditor_id == "a1"


def test_retention_prunes_by_age_and_only_its_own_auditors_points(store: Store, history_url: str) -> None:
    other = Store.open(history_url, auditor_id="a2")
    try:
        for day in range(5):
            minutes = day * 24 * 60
            th.store_samples(store.engine, "a1", [host_sample("box", minutes, 40.0)])
            th.store_samples(store.engine, "a2", [host_sample("box", minutes, 40.0)])
        assert count(store, m.TelemetryPoint) == 2 * 5 * 4
        done = prune(store.engine, 2, now=T0 + timedelta(days=4, hours=1), auditor_id="a1")
        # a1 keeps the points of the last two days (days 3 and 4 after T0... and day 2 at +1 h: older)
        assert done.deleted["telemetry_points"] == 3 * 4
        with store.engine.connect() as conn:
            mine = th.newest(conn, th.TelemetryFilters(auditors=("a1",)), 100)
            theirs = th.newest(conn, th.TelemetryFilters(auditors=("a2",)), 100)
        assert {len(s.points) for s in mine} == {2} and {len(s.points) for s in theirs} == {5}
        done = prune(store.engine, 1, now=T0 + timedelta(days=30), auditor_id="a1")
        assert done.deleted["telemetry_series"] == 4  # none of a1's series has points left
        assert count(store, m.TelemetrySeriesRow) == 4
    finally:
        other.close()


def test_show_narrows_to_auditors_and_writes_csv(store: Store, history_url: str) -> None:
    """`auditor telemetry show --auditor ID --format csv`: a row per point of that auditor's
    series only, under a header; JSON the same series with their points."""
    import csv
    import io
    import json

    from click.testing import CliRunner

    from auditor.cli.main import cli

    for minute in range(3):
        th.store_samples(store.engine, "a1", [host_sample("box", minute, 40.0 + minute)])
        th.store_samples(store.engine, "a2", [host_sample("box", minute, 70.0)])
    runner = CliRunner()
    args = ["--db", history_url, "telemetry", "show", "--metric", "temperature_c", "--auditor", "a1"]
    done = runner.invoke(cli, [*args, "--format", "csv"])
    assert done.exit_code == 0, done.output
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert {r["auditor_id"] for r in rows} == {"a1"} and len(rows) == 2 * 3  # NPU 0 and 1, three points
    assert [float(r["value"]) for r in rows if r["npu"] == "0"] == [40.0, 41.0, 42.0]
    series = json.loads(runner.invoke(cli, [*args, "--format", "json"]).stdout)
    assert {s["auditor_id"] for s in series} == {"a1"} and len(series) == 2
    both = json.loads(runner.invoke(cli, [*args[:-2], "--auditor", "a1", "--auditor", "a2", "--json"]).stdout)
    assert {s["auditor_id"] for s in both} == {"a1", "a2"}
