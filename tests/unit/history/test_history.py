"""History queries (auditor.history.queries) and the history/show/trend commands, on a generated history.

Expected rows come from hand-written SQL run with the sqlite3 module on the same file, so the
query builder is checked against an independent statement, not against itself. The suite runs
a second time with the history in PostgreSQL: the same generated history (same seed, same
ids) is written to both, the auditor queries PostgreSQL, and the SQLite copy answers the
hand-written SQL.
"""

from __future__ import annotations

import csv
import io
import json
import math
import shutil
import sqlite3
from datetime import datetime, timedelta

import pytest
from click.testing import CliRunner
from sqlalchemy import func, insert, select, text

from auditor.cli.main import cli
from auditor.db import schema as m
from auditor.history import queries as h
from auditor.history import series
from auditor.history.filters import parse_when
from auditor.history.store import Store
from tests.history_fixtures import (
    DRIFTING_PAIR,
    UPGRADED_STACK,
    UPGRADED_VERSION,
    generate_history,
)

START = datetime(2026, 3, 1)
RUNS = 240  # 15 minutes apart: 2.5 days; lite20 is upgraded at run 120
SHAPE = {"probes": ("ppo_policy", "sampler"), "variants": ("fp32", "fp16")}
# What changed, in the words of the version-drift rule (auditor.fingerprint.drift), which the history uses.
CHANGE = f"mindspore-lite 2.0.0 -> {UPGRADED_VERSION}"


DB_OF: dict[object, str] = {}
"""The database the CLI is pointed at for a generated SQLite file (its PostgreSQL twin)."""


def _generate(store: Store):
    info = generate_history(
        store.engine, RUNS, start=START, seed=7, abort_rate=0.02, error_rate=0.02, **SHAPE
    )
    # Metrics that are not finite, as a shape mismatch stores them (SQLite cannot hold NaN,
    # which the comparison never stores).
    with store.engine.begin() as conn:
        rid = conn.scalar(
            select(m.ProbeResultRow.id)
            .where(m.ProbeResultRow.run_id == info.run_ids[-1], m.ProbeResultRow.pair == DRIFTING_PAIR)
            .limit(1)
        )
        sid = conn.scalar(select(m.ProbeResultRow.metric_set_id).where(m.ProbeResultRow.id == rid))
        assert conn.scalar(select(func.count()).where(m.ProbeResultRow.metric_set_id == sid)) == 1  # its own
        conn.execute(insert(m.MetricRow).values(set_id=sid, output="log_std", name="max_abs", value=math.inf))
        conn.execute(
            insert(m.MetricRow).values(set_id=sid, output="log_std", name="min_atol", value=math.inf)
        )
        series.record_run(conn, info.run_ids[-1])  # as the store does in a run's transaction
    return info


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def gen(request, tmp_path_factory, history_template):
    path = tmp_path_factory.mktemp("hist") / "history.db"
    shutil.copyfile(history_template, path)
    store = Store.open(f"sqlite:///{path}")
    info = _generate(store)
    if request.param == "postgresql":
        server = request.getfixturevalue("postgres")
        store.close()
        store = Store.open(server.create_database(f"hist{id(path)}"))
        pg_info = _generate(store)
        assert pg_info.run_ids == info.run_ids  # the same ids, so the SQLite copy answers for it
        DB_OF[path] = store.url
    yield path, store, info
    DB_OF.pop(path, None)
    store.close()


def sql(path, query: str, *args) -> list[tuple]:
    with sqlite3.connect(path) as c:
        return c.execute(query, args).fetchall()


def run_cli(path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["--db", DB_OF.get(path, str(path)), *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def ts(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "")) if "T" in value else datetime.fromisoformat(value)


# -- the generator wrote what it says ---------------------------------------------------------------


def test_generated_history_shape(gen):
    path, _, info = gen
    assert sql(path, "SELECT count(*) FROM runs")[0][0] == RUNS == len(info.run_ids)
    assert info.counts["metrics"] == sql(path, "SELECT count(*) FROM metrics")[0][0] - 2
    assert info.upgrade_at == START + timedelta(minutes=15) * (RUNS // 2)
    # After the upgrade the drifting pair drifts, and only then.
    drift_before = sql(
        path,
        "SELECT count(*) FROM probe_results p JOIN runs r ON r.id = p.run_id "
        "WHERE p.status = 'drift' AND r.started_at < ?",
        info.upgrade_at.isoformat(" "),
    )[0][0]
    drift_after = sql(
        path,
        "SELECT count(DISTINCT p.pair) FROM probe_results p JOIN runs r ON r.id = p.run_id "
        "WHERE p.status = 'drift' AND r.started_at >= ?",
        info.upgrade_at.isoformat(" "),
    )
    assert drift_before == 0
    assert drift_after == [(1,)]


# -- filters ----------------------------------------------------------------------------------------


def _without_auditor(query):  # noqa: ANN001, ANN202
    """The listing's rows without their auditor column (these tests predate it; the auditor
    column and filter are tested in tests/unit/history/test_browse.py)."""

    def rows(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        return ((*r[:2], *r[3:]) for r in query(*args, **kwargs))

    return rows


result_rows, metric_rows = _without_auditor(h.result_rows), _without_auditor(h.metric_rows)


def result_ids(rows) -> list[tuple]:
    return [(r[0], r[2], r[3], r[4]) for r in rows]


def test_latest_results_newest_first_with_latencies(gen):
    path, store, _ = gen
    with store.engine.connect() as conn:
        rows = list(result_rows(conn, h.Filters(limit=20)))
    expected = sql(
        path,
        "SELECT r.id, p.pair, p.probe, p.variant, p.status, lt.p50_us, li.p50_us FROM probe_results p "
        "JOIN runs r ON r.id = p.run_id "
        # each side is stored at the probe's batch (256) and at batch 1; history shows the former
        "LEFT JOIN latencies lt ON lt.result_id = p.id AND lt.side = 'train' AND lt.batch = 256 "
        "LEFT JOIN latencies li ON li.result_id = p.id AND li.side = 'infer' AND li.batch = 256 "
        "ORDER BY r.started_at DESC, r.id DESC, p.id LIMIT 20",
    )
    assert [(r[0], r[2], r[3], r[4], r[5], r[6], r[7]) for r in rows] == expected
    assert len(rows) == 20
    assert all(isinstance(r[1], datetime) for r in rows)
    incompatible = [r for r in rows if r[5] == "incompatible"]
    assert incompatible and all(r[7] is None and r[6] > 0 for r in incompatible)


@pytest.mark.parametrize(
    ("filters", "where", "args"),
    [
        (h.Filters(pairs=("ms20->lite20",), limit=None), "p.pair = ?", ("ms20->lite20",)),
        (h.Filters(probes=("sampler",), limit=None), "p.probe = ?", ("sampler",)),
        (h.Filters(variants=("fp16",), limit=None), "p.variant = ?", ("fp16",)),
        (h.Filters(statuses=("error",), limit=None), "p.status = ?", ("error",)),
        (
            h.Filters(statuses=("error", "incompatible"), probes=("ppo_policy",), limit=None),
            "p.status IN (?, ?) AND p.probe = ?",
            ("error", "incompatible", "ppo_policy"),
        ),
        (
            h.Filters(stacks=("lite20",), limit=None),
            "(p.train_stack_id IN (SELECT id FROM stacks WHERE name = ?) "
            "OR p.infer_stack_id IN (SELECT id FROM stacks WHERE name = ?))",
            ("lite20", "lite20"),
        ),
        (
            h.Filters(stacks=("ms210",), limit=None),
            "(p.train_stack_id IN (SELECT id FROM stacks WHERE name = ?) "
            "OR p.infer_stack_id IN (SELECT id FROM stacks WHERE name = ?))",
            ("ms210", "ms210"),
        ),
        (
            h.Filters(since=START + timedelta(hours=10), until=START + timedelta(hours=12), limit=None),
            "r.started_at >= ? AND r.started_at < ?",
            (str(START + timedelta(hours=10)), str(START + timedelta(hours=12))),
        ),
        (
            h.Filters(pairs=("ms20->lite20", "ms210->lite20"), variants=("fp32",), limit=7),
            "p.pair IN (?, ?) AND p.variant = ?",
            ("ms20->lite20", "ms210->lite20", "fp32"),
        ),
    ],
    ids=[
        "pair",
        "probe",
        "variant",
        "status",
        "statuses+probe",
        "stack-infer",
        "stack-train",
        "window",
        "limit",
    ],
)
def test_result_filters_match_hand_written_sql(gen, filters, where, args):
    path, store, _ = gen
    with store.engine.connect() as conn:
        got = list(result_rows(conn, filters))
    limit = f" LIMIT {filters.limit}" if filters.limit else ""
    expected = sql(
        path,
        "SELECT r.id, p.pair, p.probe, p.variant FROM probe_results p JOIN runs r ON r.id = p.run_id "
        f"WHERE {where} ORDER BY r.started_at DESC, r.id DESC, p.id{limit}",
        *args,
    )
    assert expected, "the filter should match something in the generated history"
    assert result_ids(got) == expected
    if filters.limit:
        assert len(got) == filters.limit


def test_stack_filter_means_either_side(gen):
    _, store, _ = gen
    with store.engine.connect() as conn:
        pairs = {r[2] for r in result_rows(conn, h.Filters(stacks=("lite20",), limit=None))}
        train_pairs = {r[2] for r in result_rows(conn, h.Filters(stacks=("ms20",), limit=None))}
    assert pairs == {"ms20->lite20", "ms210->lite20"}
    assert train_pairs == {"ms20->lite20", "ms20->ms210-graph"}


def test_metric_rows_by_pair_metric_and_window(gen):
    path, store, info = gen
    since, until = info.upgrade_at - timedelta(hours=1), info.upgrade_at + timedelta(hours=1)
    f = h.Filters(pairs=(DRIFTING_PAIR,), metrics=("max_abs",), since=since, until=until, limit=None)
    with store.engine.connect() as conn:
        got = list(metric_rows(conn, f))
    expected = sql(
        path,
        "SELECT r.id, r.started_at, p.pair, p.probe, p.variant, p.status, mt.output, mt.name, mt.value "
        "FROM metrics mt JOIN probe_results p ON p.metric_set_id = mt.set_id JOIN runs r ON r.id = p.run_id "
        "WHERE p.pair = ? AND mt.name = ? AND r.started_at >= ? AND r.started_at < ? "
        "ORDER BY r.started_at DESC, r.id DESC, p.id, mt.id",
        DRIFTING_PAIR,
        "max_abs",
        str(since),
        str(until),
    )
    assert [(r[0], *r[2:]) for r in got] == [(e[0], *e[2:]) for e in expected]
    assert len(got) > 16
    # The upgrade shows in the numbers: before it every max_abs is within atol, after it none is.
    before = [r[8] for r in got if r[1] < info.upgrade_at]
    after = [r[8] for r in got if r[1] >= info.upgrade_at]
    assert before and after and max(before) < 1e-5 < min(after)


def test_metric_rows_by_output_and_several_metrics(gen):
    path, store, _ = gen
    f = h.Filters(metrics=("cosine", "min_atol"), outputs=("std",), probes=("sampler",), limit=30)
    with store.engine.connect() as conn:
        got = list(metric_rows(conn, f))
    expected = sql(
        path,
        "SELECT r.id, p.pair, mt.output, mt.name, mt.value FROM metrics mt "
        "JOIN probe_results p ON p.metric_set_id = mt.set_id JOIN runs r ON r.id = p.run_id "
        "WHERE mt.name IN ('cosine', 'min_atol') AND mt.output = 'std' AND p.probe = 'sampler' "
        "ORDER BY r.started_at DESC, r.id DESC, p.id, mt.id LIMIT 30",
    )
    assert [(r[0], r[2], r[6], r[7], r[8]) for r in got] == expected
    assert {r[7] for r in got} == {"cosine", "min_atol"}


def test_known_values(gen):
    _, store, _ = gen
    with store.engine.connect() as conn:
        assert h.known_values(conn, "probe") == ["ppo_policy", "sampler"]
        assert "max_abs" in h.known_values(conn, "metric")
        assert h.known_values(conn, "stack") == ["lite20", "ms20", "ms210", "ms210-graph"]


@pytest.mark.parametrize(
    ("text_", "expected"),
    [
        ("2026-03-01", datetime(2026, 3, 1)),
        ("2026-03-01T12:30", datetime(2026, 3, 1, 12, 30)),
        ("2026-03-01T12:30:00Z", datetime(2026, 3, 1, 12, 30)),
        ("2026-03-01T14:30:00+02:00", datetime(2026, 3, 1, 12, 30)),
        ("7d", datetime(2026, 3, 3)),
        ("12h", datetime(2026, 3, 9, 12)),
        ("90m", datetime(2026, 3, 9, 22, 30)),
        ("2w", datetime(2026, 2, 24)),
        ("now", datetime(2026, 3, 10)),
    ],
)
def test_parse_when(text_, expected):
    assert parse_when(text_, now=datetime(2026, 3, 10)) == expected


def test_parse_when_rejects_nonsense():
    with pytest.raises(h.HistoryError, match="cannot read 'yesterday-ish'.*7d"):
        parse_when("yesterday-ish")


# -- the history command: formats ------------------------------------------------------------------


def test_history_json_parses_back_to_the_query_rows(gen):
    path, store, _ = gen
    code, out, err = run_cli(path, "history", "--probe", "ppo_policy", "--limit", "40", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    with store.engine.connect() as conn:
        rows = list(result_rows(conn, h.Filters(probes=("ppo_policy",), limit=40)))
    assert len(doc) == 40
    assert [list(d) for d in doc] == [list(h.RESULT_COLUMNS)] * 40
    for d, r in zip(doc, rows, strict=True):
        assert (d["run"], d["pair"], d["probe"], d["variant"], d["status"], d["message"]) == (
            r[0],
            r[2],
            r[3],
            r[4],
            r[5],
            r[8],
        )
        assert ts(d["started_at"]) == r[1] and d["started_at"].endswith("Z")
        assert d["train_p50_us"] == r[6] and d["infer_p50_us"] == r[7]


def test_history_csv_parses_back_exactly(gen):
    path, store, info = gen
    code, out, err = run_cli(
        path, "history", "--pair", DRIFTING_PAIR, "--metric", "max_abs", "--limit", "0", "--format", "csv"
    )
    assert code == 0, err
    table = list(csv.DictReader(io.StringIO(out)))
    assert list(table[0]) == list(h.METRIC_COLUMNS)
    count = sql(
        path,
        "SELECT count(*) FROM metrics mt JOIN probe_results p ON p.metric_set_id = mt.set_id "
        "WHERE p.pair = ? AND mt.name = 'max_abs'",
        DRIFTING_PAIR,
    )[0][0]
    assert len(table) == count
    with store.engine.connect() as conn:
        rows = list(metric_rows(conn, h.Filters(pairs=(DRIFTING_PAIR,), metrics=("max_abs",), limit=None)))
    for t, r in zip(table, rows, strict=True):
        assert int(t["run"]) == r[0] and ts(t["started_at"]) == r[1]
        assert (t["pair"], t["probe"], t["variant"], t["status"], t["output"], t["metric"]) == r[2:8]
        assert float(t["value"]) == r[8]  # repr round-trips floats exactly
    infinite = [t for t in table if t["output"] == "log_std"]
    assert [float(t["value"]) for t in infinite] == [math.inf]


def test_history_json_non_finite_values_are_strings(gen):
    path, _, info = gen
    code, out, _ = run_cli(
        path, "history", "--output", "log_std", "--format", "json", "--since", str(info.last.date())
    )
    assert code == 0
    doc = json.loads(out)
    assert {(d["metric"], d["value"]) for d in doc} == {("max_abs", "inf"), ("min_atol", "inf")}


def test_history_table_format(gen):
    path, _, info = gen
    code, out, err = run_cli(path, "history", "--status", "incompatible", "--limit", "3")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:7] == ["run", "started", "(UTC)", "auditor", "pair", "probe", "variant"]
    assert len(lines) == 4
    last = info.run_ids[-1]
    for line in lines[1:]:
        assert line.split()[0] == str(last) or int(line.split()[0]) <= last
        assert "incompatible" in line and "ms210->lite20" in line and "cannot load the MindIR" in line
        assert " ms " in line  # the train side's p50 is shown in a readable unit


def test_history_metric_table_format(gen):
    path, _, _ = gen
    code, out, _ = run_cli(
        path, "history", "--metric", "max_abs", "--pair", "ms210->ms210-graph", "--limit", "4"
    )
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[-3:] == ["output", "metric", "value"]
    assert [line.split()[-3:] for line in lines[1:]][:2] == [
        ["mean", "max_abs", "0"],
        ["std", "max_abs", "0"],
    ]


def test_history_unknown_names_are_usage_errors_naming_the_known_ones(gen):
    path, _, _ = gen
    code, out, err = run_cli(path, "history", "--pair", "ms20->lite2O", "--format", "csv")
    assert code == 2 and out == ""
    assert "no pair 'ms20->lite2O' in the history" in err and "ms20->lite20" in err
    for option, value, known in (
        ("--stack", "lite2O", "lite20"),
        ("--metric", "max_abz", "max_abs"),
        ("--probe", "ppo", "ppo_policy"),
    ):
        code, out, err = run_cli(path, "history", option, value)
        assert code == 2 and f"no {option[2:]} {value!r} in the history" in err and known in err, err
    code, _, err = run_cli(path, "history", "--status", "fine")
    assert code == 2 and "unsupported" in err  # the choices name every stored status


def test_history_status_accepts_every_stored_status(gen):
    path, _, _ = gen
    for status in ("consistent", "drift", "unsupported", "incompatible", "error"):
        code, _, err = run_cli(path, "history", "--status", status, "--format", "json")
        assert code == 0, (status, err)


@pytest.mark.parametrize(
    "args",
    [
        ("history", "--limit", "-1"),
        ("history", "--limit", str(10**30)),
        ("trend", "--metric", "max_abs", "--limit", str(10**30)),
        ("trend", "--metric", "max_abs", "--width", "-5"),
        ("runs", "--limit", "-1"),
        ("runs", "--limit", str(10**30)),
        ("alerts", "--limit", str(10**30)),
        ("drift", "ms20", "--limit", str(10**30)),
        ("history", "--since", "99999999999999999999d"),
        ("history", "--since", "0001-01-01T00:00+14:00"),
        ("history", "--until", "1900-01-01"),
        ("history", "--until", "9999-12-31T23:59:59-05:00"),
        ("show", "١٢"),
        ("show", "²"),
        ("show", str(10**30)),
        ("show", "latest~" + "9" * 30),
    ],
)
def test_absurd_cli_input_is_a_usage_error(gen, args):
    path, _, _ = gen
    result = CliRunner().invoke(cli, ["--db", str(path), *args])
    assert result.exit_code == 2, (result.output, result.exception)
    assert "Traceback" not in result.output


def test_history_bad_time_is_a_usage_error(gen):
    path, _, _ = gen
    code, _, err = run_cli(path, "history", "--since", "last tuesday")
    assert code == 2
    assert "--since" in err and "cannot read 'last tuesday'" in err


# -- show ----------------------------------------------------------------------------------------------


def test_show_run_with_fingerprint_change(gen):
    path, store, info = gen
    with store.engine.connect() as conn:
        detail = h.run_detail(conn, info.upgrade_run_id)
    stacks = {s["name"]: s for s in detail.stacks}
    assert set(stacks) == {"ms210", "ms210-graph", "ms20", "lite20"}
    lite = stacks[UPGRADED_STACK]
    assert lite["fingerprint_changed"] and lite["previous_run"] == info.upgrade_run_id - 1
    assert lite["changes"] == [CHANGE]
    assert not stacks["ms20"]["fingerprint_changed"]
    assert lite["fingerprint"]["runtime"]["runtime_version"] == UPGRADED_VERSION
    # 4 pairs x 2 probes x 2 variants; metrics for the measured ones, latencies per side
    assert len(detail.results) == 16
    expected_metrics = sql(  # each result's set, and the throughput derived from its latencies
        path,
        "SELECT (SELECT count(*) FROM metrics mt JOIN probe_results p ON p.metric_set_id = mt.set_id "
        "WHERE p.run_id = ?) + (SELECT count(DISTINCT l.result_id || '/' || l.batch) FROM latencies l "
        "JOIN probe_results p ON p.id = l.result_id WHERE p.run_id = ? "
        "AND l.side = 'infer' AND l.p50_us > 0)",
        info.upgrade_run_id,
        info.upgrade_run_id,
    )[0][0]
    assert sum(len(v) for r in detail.results for v in r["metrics"].values()) == expected_metrics
    drift = [r for r in detail.results if r["pair"] == DRIFTING_PAIR]
    assert {r["status"] for r in drift} <= {"drift", "error"}
    assert all(r["train"] == "ms20" and r["infer"] == "lite20" for r in drift)

    code, out, err = run_cli(path, "show", str(info.upgrade_run_id))
    assert code == 0, err
    assert out.startswith(f"run {info.upgrade_run_id}  complete")
    assert f"changed since run {info.upgrade_run_id - 1}" in out
    assert f"      {CHANGE}\n" in out
    assert "ms210->lite20  ppo_policy [fp32]  INCOMPATIBLE" in out
    assert "max_abs" in out and "latency train: batch 256" in out
    assert "Findings" in out and "[critical] incompatible ms210->lite20" in out


def test_show_json_and_latest(gen):
    path, _, info = gen
    code, out, _ = run_cli(path, "show", "latest", "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["run"]["id"] == info.run_ids[-1]
    assert doc["run"]["started_at"] == info.last.isoformat() + "Z"
    assert {"run", "stacks", "results", "findings", "artifacts"} == set(doc)
    values = [v for r in doc["results"] for o in r["metrics"].values() for v in o.values()]
    assert values.count("inf") == 2  # non-finite values as strings
    measured = next(r for r in doc["results"] if r["status"] == "consistent")
    # each side at the probe's batch and at batch 1; "latency" is the probe's own batch
    assert [(x["side"], x["batch"]) for x in measured["latencies"]] == [
        ("train", 256),
        ("infer", 256),
        ("train", 1),
        ("infer", 1),
    ]
    assert measured["latency"]["train"] == measured["latencies"][0]
    assert measured["latency"]["infer"] == measured["latencies"][1]
    code, out, _ = run_cli(path, "show", "latest~1", "--format", "json")
    assert json.loads(out)["run"]["id"] == info.run_ids[-2]


def test_show_unknown_run(gen):
    path, _, info = gen
    code, _, err = run_cli(path, "show", "999999")
    assert code == 1
    assert f"no run 999999 in the history database (runs go up to {info.run_ids[-1]})" in err
    code, _, err = run_cli(path, "show", "first")
    assert code == 2 and "not a run: 'first'" in err


def test_show_aborted_run(gen):
    path, _, _ = gen
    aborted = sql(path, "SELECT id FROM runs WHERE status = 'aborted' LIMIT 1")
    assert aborted, "the generator aborts about 0.5% of the runs"
    code, out, _ = run_cli(path, "show", str(aborted[0][0]))
    assert code == 0
    assert "aborted" in out.splitlines()[0] and "note: interrupted by SIGTERM" in out
    assert "(none: the run stored no probe results)" in out


# -- trend and fingerprint changes ----------------------------------------------------------------------


def test_fingerprint_changes(gen):
    _, store, info = gen
    with store.engine.connect() as conn:
        changes = h.fingerprint_changes(conn)
        assert h.fingerprint_changes(conn, ["ms20", "ms210"]) == []
        assert h.fingerprint_changes(conn, since=info.upgrade_at + timedelta(seconds=1)) == []
    assert len(changes) == 1
    c = changes[0]
    assert (c.run_id, c.at, c.stack) == (info.upgrade_run_id, info.upgrade_at, UPGRADED_STACK)
    assert c.changes == (CHANGE,)
    assert c.old_digest != c.new_digest


def test_fingerprint_outage_is_not_a_change(history_db):
    store = Store.open(f"sqlite:///{history_db}")
    generate_history(store.engine, 20, start=START, upgrade_at=None)
    with store.engine.begin() as conn:  # lite20 could not be fingerprinted in run 10
        conn.execute(
            text(
                "UPDATE run_stacks SET fingerprint_digest = NULL, error = 'python not found' "
                "WHERE run_id = 10 AND stack_id = (SELECT id FROM stacks WHERE name = 'lite20')"
            )
        )
    with store.engine.connect() as conn:
        assert h.fingerprint_changes(conn) == []
        detail = h.run_detail(conn, 11)
    assert not any(s["fingerprint_changed"] for s in detail.stacks)
    store.close()


def test_trend_series_and_limit(gen):
    path, store, info = gen
    f = h.Filters(
        pairs=(DRIFTING_PAIR,), probes=("ppo_policy",), variants=("fp32",), outputs=("mean",), limit=None
    )
    with store.engine.connect() as conn:
        (series,) = h.trend(conn, "max_abs", f)
        limited = h.trend(conn, "max_abs", h.Filters(pairs=(DRIFTING_PAIR,), limit=5))
    expected = sql(
        path,
        "SELECT r.id, mt.value FROM metrics mt JOIN probe_results p ON p.metric_set_id = mt.set_id "
        "JOIN runs r ON r.id = p.run_id WHERE p.pair = ? AND p.probe = 'ppo_policy' AND p.variant = 'fp32' "
        "AND mt.output = 'mean' AND mt.name = 'max_abs' ORDER BY r.started_at, r.id",
        DRIFTING_PAIR,
    )
    assert [(p[0], p[2]) for p in series.points] == expected
    assert (series.train, series.infer) == ("ms20", "lite20")
    # one series per probe x variant x output, each its newest 5 points, oldest first
    assert len(limited) == 2 * 2 * 3 - 3  # log_std only on the one result of the last run
    for s in limited:
        times = [p[1] for p in s.points]
        assert times == sorted(times)
        if s.output != "log_std":
            assert len(s.points) == 5 and times[-1] == info.last


def test_latency_trend(gen):
    path, store, _ = gen
    with store.engine.connect() as conn:
        both = h.trend(conn, "latency.p50_us", h.Filters(pairs=("ms210->lite20",), limit=None))
        infer = h.trend(conn, "latency.infer.p90_us", h.Filters(pairs=(DRIFTING_PAIR,), limit=3))
        with pytest.raises(h.HistoryError, match="unknown latency series"):
            h.trend(conn, "latency.infer.p42", h.Filters())
    # the incompatible pair has only a train side
    assert {s.output for s in both} == {"train"}
    assert {s.output for s in infer} == {"infer"}
    expected = sql(
        path,
        "SELECT l.p90_us FROM latencies l JOIN probe_results p ON p.id = l.result_id "
        "JOIN runs r ON r.id = p.run_id WHERE p.pair = ? AND p.probe = 'ppo_policy' AND p.variant = 'fp16' "
        "AND l.side = 'infer' AND l.batch = 256 ORDER BY r.started_at DESC, r.id DESC LIMIT 3",
        DRIFTING_PAIR,
    )
    s = next(s for s in infer if (s.probe, s.variant) == ("ppo_policy", "fp16"))
    assert [p[2] for p in s.points] == [e[0] for e in reversed(expected)]


def test_trend_command_marks_the_fingerprint_change(gen):
    path, _, info = gen
    code, out, err = run_cli(
        path,
        "trend",
        "--metric",
        "max_abs",
        "--pair",
        DRIFTING_PAIR,
        "--probe",
        "ppo_policy",
        "--variant",
        "fp32",
        "--output",
        "mean",
        "--since",
        (info.upgrade_at - timedelta(hours=2)).isoformat(),
        "--until",
        (info.upgrade_at + timedelta(hours=2)).isoformat(),
    )
    assert code == 0, err
    points = sql(
        path,
        "SELECT r.id FROM metrics mt JOIN probe_results p ON p.metric_set_id = mt.set_id "
        "JOIN runs r ON r.id = p.run_id "
        "WHERE p.pair = ? AND p.probe = 'ppo_policy' AND p.variant = 'fp32' AND mt.output = 'mean' "
        "AND mt.name = 'max_abs' AND r.started_at >= ? AND r.started_at < ? ORDER BY r.started_at",
        DRIFTING_PAIR,
        str(info.upgrade_at - timedelta(hours=2)),
        str(info.upgrade_at + timedelta(hours=2)),
    )
    first_after = next(i for i, (run,) in enumerate(points) if run >= info.upgrade_run_id)
    lines = out.splitlines()
    assert lines[0] == f"max_abs · {DRIFTING_PAIR} · ppo_policy [fp32] · output mean"
    assert f"{len(points)} points" in lines[1] and len(points) > 10
    assert len(lines[2].strip()) == len(points)  # sparkline, one character per point
    assert lines[3].strip() == "◆" and lines[3].index("◆") == 2 + first_after
    mark = next(i for i, line in enumerate(lines) if line.strip().startswith("◆ run"))
    assert lines[mark].strip() == (f"◆ run {info.upgrade_run_id}: lite20: {CHANGE}")
    assert f" {points[first_after][0]} " in lines[mark + 1] and lines[mark + 1].rstrip().endswith("drift")
    assert f" {points[first_after - 1][0]} " in lines[mark - 1] and "drift" not in lines[mark - 1]


def test_trend_json(gen):
    path, _, info = gen
    code, out, _ = run_cli(
        path, "trend", "--metric", "max_abs", "--pair", DRIFTING_PAIR, "--limit", "0", "--format", "json"
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["metric"] == "max_abs"
    assert len(doc["series"]) == 2 * 2 * 2 + 1
    assert [c["run"] for c in doc["fingerprint_changes"]] == [info.upgrade_run_id]
    s = doc["series"][0]
    assert [p["run"] for p in s["points"]] == sorted(p["run"] for p in s["points"])


def test_trend_unknown_metric(gen):
    path, _, _ = gen
    code, _, err = run_cli(path, "trend", "--metric", "max_abz")
    assert code == 2
    assert "no metric 'max_abz' in the history" in err and "max_abs" in err


# -- statistics and plans ---------------------------------------------------------------------------------


def test_refresh_statistics_and_indexed_plans(history_db):
    store = Store.open(f"sqlite:///{history_db}")
    generate_history(store.engine, 400, start=START, **SHAPE)
    with store.engine.connect() as conn:
        assert h.refresh_statistics(conn)  # grew from empty: stale
        assert not h.refresh_statistics(conn)  # nothing changed since
        plan = "\n".join(
            r[3]
            for r in conn.exec_driver_sql(
                "EXPLAIN QUERY PLAN SELECT mt.value FROM metrics mt "
                "JOIN probe_results p ON p.metric_set_id = mt.set_id "
                "JOIN runs r ON r.id = p.run_id WHERE p.pair = 'ms20->lite20' AND mt.name = 'max_abs' "
                "AND r.started_at >= '2026-03-03' AND r.started_at < '2026-03-04'"
            )
        )
    # the window drives the query: runs by time, results by run, metrics by result
    assert "ix_runs_started_at" in plan
    assert "SCAN mt" not in plan and "ix_metrics_name_result (name=?)\n" not in plan + "\n"
    store.close()


def test_describe_change_without_the_drift_module(monkeypatch):
    """Where no drift module is installed, the history names the changed fields itself."""
    from tests.history_fixtures import fingerprint_document

    monkeypatch.setattr(h, "_drift_module_diff", lambda old, new: None)
    old, new = fingerprint_document("lite20"), fingerprint_document("lite20", "2.0.1")
    new["environment"]["MS_DEV_X"] = "1"
    assert h.describe_change(old, new) == [
        "environment.MS_DEV_X: (absent) → 1",
        "runtime.runtime_version: 2.0.0 → 2.0.1",
        "packages.all.mindspore-lite: 2.0.0 → 2.0.1",
        "packages.framework.mindspore-lite: 2.0.0 → 2.0.1",
    ]
    assert h.describe_change(old, new, limit=1) == ["environment.MS_DEV_X: (absent) → 1", "… and 3 more"]
    assert h.describe_change(None, new) == []


def test_trend_limit_matches_ranking_every_row(gen):
    """The series walk (auditor.history.series) returns exactly the rows that ranking every value of
    the metric per series returns, for every series, with and without a time window."""
    path, store, info = gen
    since = info.last - timedelta(days=1)
    for f, where, args in (
        (h.Filters(limit=7), "", ()),
        (h.Filters(limit=3, since=since), "AND r.started_at >= ?", (since.isoformat(" "),)),
    ):
        with store.engine.connect() as conn:
            got = [(s.key, [(p[0], p[2]) for p in s.points]) for s in h.trend(conn, "min_atol", f)]
        ranked = sql(
            path,
            "SELECT pair, probe, variant, output, id, value FROM (SELECT p.pair, p.probe, p.variant, "
            "mt.output, r.id, r.started_at, mt.value, row_number() OVER (PARTITION BY p.pair, p.probe, "
            "p.variant, mt.output ORDER BY r.started_at DESC, r.id DESC) AS n FROM metrics mt "
            "JOIN probe_results p ON p.metric_set_id = mt.set_id JOIN runs r ON r.id = p.run_id "
            f"WHERE mt.name = 'min_atol' {where}) WHERE n <= ? ORDER BY pair, probe, variant, output, "
            "started_at, id",
            *args,
            f.limit,
        )
        want: dict[tuple, list] = {}
        for pair, probe, variant, output, run, value in ranked:
            want.setdefault((pair, probe, variant, output), []).append((run, value))
        assert got == sorted(want.items())
        assert any(key[3] == "log_std" for key, _ in got) == (f.since is None or info.last >= since)


@pytest.mark.parametrize("metric", ["latency.p50_us", "latency.infer.p90_us"])
def test_latency_trend_limit_matches_ranking_every_row(gen, metric):
    """The latency walk returns exactly the rows that ranking every latency row of the probe's
    own batch (the first of its side) per series returns, with and without a time window."""
    path, store, info = gen
    side, stat = h.latency_metric(metric)
    since = info.last - timedelta(days=1)
    for f, where, args in (
        (h.Filters(limit=6), "", ()),
        (
            h.Filters(limit=4, since=since, probes=("sampler",)),
            "AND r.started_at >= ? AND p.probe = ?",
            (since.isoformat(" "), "sampler"),
        ),
    ):
        with store.engine.connect() as conn:
            got = [(s.key, [(p[0], p[2]) for p in s.points]) for s in h.trend(conn, metric, f)]
        if side is not None:
            where += " AND l.side = ?"
            args = (*args, side)
        ranked = sql(
            path,
            f"SELECT pair, probe, variant, side, id, value FROM (SELECT p.pair, p.probe, p.variant, "
            f"l.side, r.id, r.started_at, l.{stat} AS value, row_number() OVER (PARTITION BY p.pair, "
            "p.probe, p.variant, l.side ORDER BY r.started_at DESC, r.id DESC) AS n FROM latencies l "
            "JOIN probe_results p ON p.id = l.result_id JOIN runs r ON r.id = p.run_id "
            "WHERE l.id = (SELECT min(x.id) FROM latencies x WHERE x.result_id = l.result_id "
            f"AND x.side = l.side) {where}) WHERE n <= ? ORDER BY pair, probe, variant, side, started_at, id",
            *args,
            f.limit,
        )
        want: dict[tuple, list] = {}
        for pair, probe, variant, output, run, value in ranked:
            want.setdefault((pair, probe, variant, output), []).append((run, value))
        assert got == sorted(want.items())
        assert len(got) >= 2


def test_series_walk_plan_does_not_depend_on_planner_statistics(history_db):
    """Every table of the walk is reached through an index, runs first, with the planner's
    statistics and without them (SQLite without statistics once started a join from the
    metric name and read a tenth of the metric table per series)."""
    store = Store.open(f"sqlite:///{history_db}")
    generate_history(store.engine, 40, start=START, **SHAPE)
    statements: list[tuple[str, tuple]] = []

    def grab(conn, cursor, statement, parameters, context, executemany):  # noqa: ARG001
        statements.append((statement, parameters))

    from sqlalchemy import event

    event.listen(store.engine, "before_cursor_execute", grab)
    with store.engine.connect() as conn:
        h.refresh_statistics(conn, force=True)
        for metric in ("cosine", "latency.p50_us"):
            statements.clear()
            assert h.trend(conn, metric, h.Filters(limit=5, statuses=("consistent", "drift")))
            walk, params = statements[-1]
            plans = []
            for statistics in (True, False):
                conn.exec_driver_sql("SAVEPOINT plan")
                if not statistics:
                    conn.exec_driver_sql("DELETE FROM sqlite_stat1")
                conn.exec_driver_sql("ANALYZE sqlite_schema")  # (re)load what sqlite_stat1 says
                plan = [r[3] for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + walk, params)]
                conn.exec_driver_sql("ROLLBACK TO plan")
                conn.exec_driver_sql("RELEASE plan")
                conn.exec_driver_sql("ANALYZE sqlite_schema")
                plans.append(plan)
                assert not [
                    step
                    for step in plan
                    if step.startswith("SCAN") and "newest" not in step and "ix_runs_started_at" not in step
                ], plan
                assert plan[1].startswith("SCAN runs USING COVERING INDEX ix_runs_started_at"), plan
                # no index made up for the query, no metric found by its name alone
                assert not [s for s in plan if "AUTOMATIC" in s or "ix_metrics_name_result" in s], plan
            assert plans[0] == plans[1]
    event.remove(store.engine, "before_cursor_execute", grab)
    store.close()


def test_store_lists_the_series_of_a_run(history_db):
    store = Store.open(f"sqlite:///{history_db}")
    generate_history(store.engine, 3, start=START)
    with store.engine.connect() as conn:
        listed = conn.execute(text("SELECT count(*) FROM series")).scalar()
        distinct = conn.execute(
            text(
                "SELECT count(*) FROM (SELECT DISTINCT m.name, p.pair, p.probe, p.variant, m.output "
                "FROM metrics m JOIN probe_results p ON p.metric_set_id = m.set_id "
                # and the throughput derived from each serving-side latency's batch
                "UNION SELECT DISTINCT 'throughput', p.pair, p.probe, p.variant, 'b' || l.batch "
                "FROM latencies l JOIN probe_results p ON p.id = l.result_id "
                "WHERE l.side = 'infer' AND l.p50_us > 0)"
            )
        ).scalar()
        served = conn.execute(text("SELECT count(*) FROM series WHERE metric = 'throughput'")).scalar()
    assert listed == distinct > served > 0
    with store.engine.connect() as conn:
        listed = conn.execute(text("SELECT pair, probe, variant, side FROM latency_series")).all()
        distinct = conn.execute(
            text(
                "SELECT DISTINCT p.pair, p.probe, p.variant, l.side "
                "FROM latencies l JOIN probe_results p ON p.id = l.result_id"
            )
        ).all()
    assert sorted(listed) == sorted(distinct) and len(listed) == 7  # the incompatible pair: train only
    store.close()


def test_series_no_metric_has_any_more_are_forgotten(history_db):
    store = Store.open(f"sqlite:///{history_db}")
    generate_history(store.engine, 5, start=START)
    with store.engine.begin() as conn:
        before = conn.execute(text("SELECT count(*) FROM series WHERE metric != 'throughput'")).scalar()
        served = conn.execute(text("SELECT count(*) FROM series WHERE metric = 'throughput'")).scalar()
        conn.execute(text("DELETE FROM metrics WHERE output = 'std'"))
        assert series.prune(conn) == before // 2
        outputs = "SELECT count(DISTINCT output) FROM series WHERE metric != 'throughput'"
        assert conn.execute(text(outputs)).scalar() == 1
        assert series.prune(conn) == 0
        conn.execute(text("DELETE FROM latencies WHERE side = 'infer'"))
        # the three pairs that have an infer side, and their throughput at each batch
        assert series.prune(conn) == 3 + served
        assert served == 3 * 2
        assert conn.execute(text("SELECT count(*) FROM series WHERE metric = 'throughput'")).scalar() == 0
        assert conn.execute(text("SELECT DISTINCT side FROM latency_series")).scalars().all() == ["train"]
    store.close()
