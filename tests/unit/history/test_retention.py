"""Retention (auditor.history.retention): what a prune deletes, keeps and clears, in one transaction.
On SQLite and on PostgreSQL (the ``history_url`` fixture); expected counts come from hand-written SQL."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta

import pytest
from sqlalchemy import Column, ForeignKey, Integer, Table, insert, select, text, update

from auditor.config.load import parse
from auditor.config.tables import ConfigError
from auditor.db import schema as m
from auditor.history import retention
from auditor.history.retention import apply_retention, prune
from auditor.history.store import Store
from tests.history_fixtures import generate_history

START = datetime(2026, 1, 1)
RUNS = 200  # every 15 minutes: a bit over two days
NOW = START + timedelta(days=3)  # keep_days=2 keeps the runs from Jan 2 00:00 on


@pytest.fixture
def filled(store):
    info = generate_history(store.engine, RUNS, start=START, upgrade_at=0.25)
    return store, info, store


class _Raw:
    """Hand-written SQL with ``?`` parameters on the store's database, whatever its backend."""

    def __init__(self, store: Store):
        self.engine = store.engine

    def __enter__(self) -> _Raw:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None

    def execute(self, query: str, args: tuple = ()) -> _Rows:
        parts = query.split("?")
        sql = "".join(f"{part}:p{i}" if i < len(parts) - 1 else part for i, part in enumerate(parts))
        pg = self.engine.dialect.name == "postgresql"
        params = {
            f"p{i}": (datetime.fromisoformat(a) if pg and _is_time(a) else a) for i, a in enumerate(args)
        }
        with self.engine.connect() as conn:
            return _Rows([tuple(r) for r in conn.execute(text(sql), params)])


def _is_time(value: object) -> bool:
    return isinstance(value, str) and len(value) >= 19 and value[4] == "-" and value[10] == " "


class _Rows(list):
    def fetchone(self) -> tuple | None:
        return self[0] if self else None

    def fetchall(self) -> list:
        return list(self)


def connect(store: Store) -> _Raw:
    return _Raw(store)


def counts(path) -> dict[str, int]:
    with connect(path) as c:
        tables = [
            "runs",
            "probe_results",
            "metric_sets",
            "metrics",
            "latencies",
            "findings",
            "run_stacks",
            "fingerprints",
            "artifacts",
        ]
        return {t: c.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}


def old_counts(path, cutoff: datetime) -> dict[str, int]:
    """What belongs to the runs before the cut-off, counted with hand-written SQL."""
    old = "SELECT id FROM runs WHERE started_at < ? AND status != 'running'"
    res = f"SELECT id FROM probe_results WHERE run_id IN ({old})"
    kept = (
        f"SELECT metric_set_id FROM probe_results WHERE run_id NOT IN ({old}) AND metric_set_id IS NOT NULL"
    )
    only_old = (
        f"SELECT metric_set_id FROM probe_results WHERE run_id IN ({old}) AND metric_set_id NOT IN ({kept})"
    )
    with connect(path) as c:

        def n(q: str) -> int:
            return c.execute(q, (str(cutoff),) * q.count("?")).fetchone()[0]

        return {
            "runs": n(f"SELECT count(*) FROM ({old}) AS old"),
            "probe_results": n(f"SELECT count(*) FROM ({res}) AS res"),
            # the sets only old results refer to, with their rows (the generated sets are older
            # than any cut-off here)
            "metric_sets": n(f"SELECT count(*) FROM metric_sets WHERE id IN ({only_old})"),
            "metrics": n(f"SELECT count(*) FROM metrics WHERE set_id IN ({only_old})"),
            "latencies": n(f"SELECT count(*) FROM latencies WHERE result_id IN ({res})"),
            "findings": n(f"SELECT count(*) FROM findings WHERE run_id IN ({old})"),
            "run_stacks": n(f"SELECT count(*) FROM run_stacks WHERE run_id IN ({old})"),
        }


def test_prune_deletes_old_runs_with_all_their_rows(filled):
    store, info, path = filled
    before = counts(path)
    cutoff = NOW - timedelta(days=2)
    expected = old_counts(path, cutoff)
    assert 0 < expected["runs"] < RUNS

    result = prune(store.engine, 2, now=NOW)

    assert result.cutoff == cutoff and not result.dry_run
    assert result.runs == expected["runs"]
    for table, n in expected.items():
        assert result.deleted[table] == n, table
    after = counts(path)
    for table, n in expected.items():
        assert after[table] == before[table] - n, table
    with connect(path) as c:
        assert str(c.execute("SELECT min(started_at) FROM runs").fetchone()[0]) >= str(cutoff)
        if store.engine.dialect.name == "sqlite":  # PostgreSQL enforces the foreign keys itself
            assert c.execute("PRAGMA foreign_key_check").fetchall() == []
    # The fingerprint lite20 had before its upgrade (a quarter in) belongs only to pruned runs.
    assert result.deleted["fingerprints"] == 1
    assert after["fingerprints"] == before["fingerprints"] - 1
    assert "deleted" in result.summary() and f"{expected['runs']} run(s)" in result.summary()


def test_dry_run_counts_exactly_and_changes_nothing(filled):
    store, _, path = filled
    before = counts(path)
    dry = prune(store.engine, 2, now=NOW, dry_run=True)
    assert counts(path) == before
    assert dry.dry_run and "would delete" in dry.summary()
    real = prune(store.engine, 2, now=NOW)
    assert (dry.runs, dry.deleted, dry.cleared) == (real.runs, real.deleted, real.cleared)
    assert real.runs > 0


def test_keep_days_zero_keeps_everything(filled):
    store, _, path = filled
    before = counts(path)
    result = prune(store.engine, 0, now=NOW + timedelta(days=10_000))
    assert result.runs == 0 and counts(path) == before
    assert apply_retention(store, 0) is None
    with pytest.raises(ValueError, match="keep_days must be 0"):
        prune(store.engine, -1)


def test_apply_retention_is_prune_for_the_daemon(filled):
    store, _, path = filled
    expected = old_counts(path, NOW - timedelta(days=2))
    store.auditor_id = "generated"  # the auditor that wrote the generated history
    result = apply_retention(store, 2, now=NOW)
    assert result is not None and result.runs == expected["runs"] > 0
    assert result.deleted["metrics"] == expected["metrics"]
    assert prune(store.engine, 2, now=NOW).runs == 0  # idempotent


def test_running_runs_are_never_touched(filled):
    store, info, path = filled
    old_running = info.run_ids[3]
    with store.engine.begin() as conn:
        conn.execute(update(m.Run).where(m.Run.id == old_running).values(status="running"))
    result = prune(store.engine, 2, now=NOW)
    assert result.kept_running == 1
    assert "1 still running" in result.summary()
    with connect(path) as c:
        assert c.execute("SELECT status FROM runs WHERE id = ?", (old_running,)).fetchone() == ("running",)
        assert (
            c.execute("SELECT count(*) FROM probe_results WHERE run_id = ?", (old_running,)).fetchone()[0] > 0
        )


def test_alert_references_are_cleared_not_deleted(filled):
    store, info, _ = filled
    old, new = info.run_ids[0], info.run_ids[-1]
    with store.engine.begin() as conn:
        alert_id = conn.execute(
            insert(m.Alert).values(
                key="ms20->lite20/ppo_policy/fp32/drift",
                state="open",
                kind="drift",
                severity="warning",
                subject="ms20->lite20",
                message="drift",
                details={},
                opened_at=START,
                opened_run_id=old,
                last_seen_at=info.last,
                last_seen_run_id=new,
                notifications=0,
            )
        ).inserted_primary_key[0]
    result = prune(store.engine, 2, now=NOW)
    assert result.cleared["alerts.opened_run_id"] == 1
    with store.engine.connect() as conn:
        alert = conn.execute(select(m.Alert).where(m.Alert.id == alert_id)).one()
    assert alert.opened_run_id is None and alert.last_seen_run_id == new


def test_content_addressed_rows_go_only_when_unreferenced(store, tmp_path):
    info = generate_history(store.engine, RUNS, start=START, upgrade_at=None)
    old_results = text("SELECT id FROM probe_results WHERE run_id = :r")
    with store.engine.begin() as conn:
        for blob in ("ab", "c", "d"):  # old bytes: a blob goes once no artifact refers to it
            conn.execute(insert(m.ArtifactBlob).values(digest=blob, size=1, created_at=START, data=b"x"))
        for sha, when, run, blob in (
            ("a" * 64, START, info.run_ids[0], "ab"),  # old, only used by a pruned run: goes
            ("b" * 64, START, info.run_ids[-1], "ab"),  # old, used by a kept run: stays, and its bytes
            ("c" * 64, NOW, info.run_ids[0], "c"),  # used by a pruned run but newer than the cut-off: stays
            ("d" * 64, START, None, "d"),  # old and never used: goes, and its bytes with it
        ):
            conn.execute(
                insert(m.Artifact).values(
                    sha256=sha, kind="mindir", size=1, created_at=when, info={}, blob_digest=blob
                )
            )
            if run is not None:
                rid = conn.execute(old_results, {"r": run}).scalars().first()
                conn.execute(
                    update(m.ProbeResultRow).where(m.ProbeResultRow.id == rid).values(artifact_sha256=sha)
                )
    result = prune(store.engine, 2, now=NOW)
    assert result.deleted["artifacts"] == 2 and result.deleted["artifact_blobs"] == 1
    with store.engine.connect() as conn:
        left = set(conn.scalars(select(m.Artifact.sha256)))
        blobs = set(conn.scalars(select(m.ArtifactBlob.digest)))
    assert left == {"b" * 64, "c" * 64}
    assert blobs == {"ab", "c"}


def test_a_reference_without_cascade_keeps_the_run(filled):
    """A table added later that pins a result (no ON DELETE rule) keeps that result's run."""
    store, info, path = filled
    pins = Table(
        "test_pins",
        m.Base.metadata,
        Column("id", Integer, primary_key=True),
        Column("result_id", ForeignKey("probe_results.id")),
    )
    try:
        pins.create(store.engine)
        pinned_run = info.run_ids[5]
        with store.engine.begin() as conn:
            rid = conn.scalar(
                select(m.ProbeResultRow.id).where(m.ProbeResultRow.run_id == pinned_run).limit(1)
            )
            conn.execute(insert(pins).values(result_id=rid))
        expected = old_counts(path, NOW - timedelta(days=2))["runs"] - 1
        result = prune(store.engine, 2, now=NOW)
        assert result.runs == expected and result.kept_referenced == 1
        assert "1 referred to by other rows" in result.summary()
        with connect(path) as c:
            assert (
                c.execute(
                    "SELECT count(*) FROM runs WHERE started_at < ?", (str(NOW - timedelta(days=2)),)
                ).fetchone()[0]
                == 1
            )
            assert (
                c.execute(
                    "SELECT count(*) FROM metrics mt JOIN probe_results p ON p.metric_set_id = mt.set_id "
                    "WHERE p.id = ?",
                    (rid,),
                ).fetchone()[0]
                > 0
            )
    finally:
        m.Base.metadata.remove(pins)


def test_a_failed_prune_deletes_nothing(filled, monkeypatch):
    store, _, path = filled
    before = counts(path)

    def boom(*_args, **_kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(retention, "_delete_unreferenced", boom)
    with pytest.raises(RuntimeError, match="disk on fire"):
        prune(store.engine, 2, now=NOW)
    assert counts(path) == before


def test_prune_holds_the_write_lock(filled, monkeypatch, backend):
    """Another writer cannot commit between choosing the runs and deleting them."""
    store, _, _ = filled
    seen = {}
    original = retention._prune
    if backend == "postgresql":
        import psycopg

        def during_pg(conn, result):
            u = store.engine.url
            with psycopg.connect(
                host=u.host, port=u.port, user=u.username, dbname=u.database, autocommit=True
            ) as other:
                other.execute("SET lock_timeout = '100ms'")
                try:
                    other.execute("UPDATE runs SET note = 'x' WHERE id = 1")
                    seen["other"] = "wrote"
                except psycopg.errors.LockNotAvailable:
                    seen["other"] = "locked"
            original(conn, result)

        monkeypatch.setattr(retention, "_prune", during_pg)
        prune(store.engine, 2, now=NOW)
        assert seen["other"] == "locked"
        return
    path = store.engine.url.database

    def during(conn, result):
        other = sqlite3.connect(path, timeout=0.1)
        try:
            other.execute("UPDATE runs SET note = 'x' WHERE id = 1")
            other.commit()
            seen["other"] = "wrote"
        except sqlite3.OperationalError as exc:
            seen["other"] = str(exc)
        finally:
            other.close()
        original(conn, result)

    monkeypatch.setattr(retention, "_prune", during)
    prune(store.engine, 2, now=NOW)
    assert seen["other"] == "database is locked"


def test_an_auditor_prunes_only_its_own_runs(store):
    """Two auditors share the database: each one's retention leaves the other's runs alone,
    and content shared by both stays while either still refers to it."""
    a = generate_history(store.engine, RUNS, start=START, upgrade_at=None, host="auditor-a")
    b = generate_history(store.engine, RUNS, start=START, upgrade_at=None, host="auditor-b", seed=1)
    store.auditor_id = "auditor-a"
    result = apply_retention(store, 2, now=NOW)
    assert result is not None and result.auditor_id == "auditor-a" and result.runs > 0
    assert "of auditor auditor-a" in result.summary()
    with store.engine.connect() as conn:
        left = dict(conn.execute(text("SELECT auditor_id, count(*) FROM runs GROUP BY auditor_id")).all())
    assert left["auditor-b"] == len(b.run_ids)
    assert left["auditor-a"] == len(a.run_ids) - result.runs
    everyone = prune(store.engine, 2, now=NOW)  # auditor db prune --all-auditors
    assert everyone.auditor_id is None and everyone.runs == result.runs  # b's old runs, as many


# -- config ---------------------------------------------------------------------------------------------


def test_keep_days_config(doc):
    assert parse(doc).keep_days == 90
    doc["storage"]["keep_days"] = 0
    assert parse(doc).keep_days == 0
    doc["storage"]["keep_days"] = 14
    assert parse(doc).keep_days == 14


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, "storage.keep_days: must be a whole number from 0 to 36500, not -1"),
        ("30d", "storage.keep_days: must be a whole number from 0 to 36500, not string '30d'"),
        (1.5, "storage.keep_days: must be a whole number from 0 to 36500, not float 1.5"),
        (True, "storage.keep_days: must be a whole number from 0 to 36500, not boolean True"),
        (10**9, "storage.keep_days: must be a whole number from 0 to 36500, not 1000000000"),
    ],
)
def test_keep_days_config_errors(doc, value, message):
    doc["storage"]["keep_days"] = value
    doc["storage"]["bogus"] = 1
    with pytest.raises(ConfigError) as info:
        parse(doc)
    assert message in info.value.errors
    assert any(e.startswith("storage.bogus: unknown key") for e in info.value.errors)
