"""Tests for auditor.history.store: migration, schema, atomic result writes, orphaned runs."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import socket
import subprocess
import sys
from datetime import datetime

import numpy as np
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import func, inspect, select
from sqlalchemy.orm import Session

from auditor.compare.outputs import METRIC_NAMES, OutputComparison, Tolerance, compare_output
from auditor.db import schema as m
from auditor.history.store import Store, StoreError
from auditor.results import (
    Artifact,
    CycleResult,
    Finding,
    Latency,
    ProbeResult,
    StackReport,
    fingerprint_digest,
)

HEAD = "0018"  # the newest migration in migrations/versions
TABLES = {
    "alembic_version",
    "alert_deliveries",
    "alerts",
    "baselines",
    "mindir_limits",
    "operator_limits",
    "artifacts",
    "fixes",
    "artifact_blobs",
    "publications",
    "publication_items",
    "fingerprints",
    "fingerprint_templates",
    "findings",
    "cycle_hosts",
    "latencies",
    "metric_sets",
    "metrics",
    "probe_results",
    "series",
    "telemetry_points",
    "telemetry_series",
    "latency_series",
    "run_stacks",
    "runs",
    "stacks",
    "threshold_sets",
}


@pytest.fixture
def url(db_url) -> str:
    """A new, unmigrated history database for the tests of opening and migrating: an SQLite
    file, then a PostgreSQL database (conftest.db_url)."""
    return db_url


def count(store: Store, model) -> int:
    with Session(store.engine) as s:
        return s.scalar(select(func.count()).select_from(model))


def rows(store: Store, model, *where, order=None) -> list:
    with Session(store.engine, expire_on_commit=False) as s:
        stmt = select(model).where(*where)
        if order is not None:
            stmt = stmt.order_by(order)
        return list(s.scalars(stmt))


def figures_of(store: Store, result: m.ProbeResultRow) -> list:
    """The metric rows a result refers to (its metric set's), in order."""
    return rows(store, m.MetricRow, m.MetricRow.set_id == result.metric_set_id, order=m.MetricRow.id)


def thresholds_of(store: Store, result: m.ProbeResultRow) -> dict:
    with Session(store.engine) as s:
        return s.get(m.ThresholdSet, result.thresholds_id).document


def get_run(store: Store, run_id: int) -> m.Run:
    with Session(store.engine) as s:
        run = s.get(m.Run, run_id)
        s.expunge(run)
        return run


# -- a hand-built cycle result ------------------------------------------------------------------

MINDIR = b"\x08\x01MINDIR" + bytes(range(256)) * 4
MINDIR_SHA = hashlib.sha256(MINDIR).hexdigest()
FP_TRAIN = {"python": "3.9.18", "mindspore": "2.1.0", "packages": {"numpy": "1.23.5"}}
FP_INFER = {"python": "3.9.18", "mindspore_lite": "2.0.0", "packages": {"numpy": "1.23.5"}}
TRAIN_NS = [1000, 1100, 1200, 1300, 5000]
INFER_NS = [700, 800, 900, 950, 4000]


def stack_reports(infer_fp: dict | None = None, host: str = "hostA") -> dict[str, StackReport]:
    return {
        "tr": StackReport("tr", "train", "mindspore", "/stacks/tr/bin/python", "cpu", host, FP_TRAIN),
        "inf": StackReport(
            "inf", "infer", "mindspore-lite", "/stacks/inf/bin/python", "cpu", host, infer_fp or FP_INFER
        ),
        "broken": StackReport(
            "broken", "infer", "mindspore-graph", "/nope/python", "cpu", host, None, "python not found"
        ),
    }


def comparisons() -> tuple[OutputComparison, ...]:
    a = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    mean = compare_output("mean", a, a + np.float32(1e-3), Tolerance())
    shape = compare_output("log_std", np.zeros(3), np.zeros(4), Tolerance())  # inf metrics
    return (mean, shape)


def cycle_result(infer_fp: dict | None = None, artifact: Artifact | None = None) -> CycleResult:
    artifact = artifact or Artifact(MINDIR_SHA, "mindir", len(MINDIR), {"inputs": [[256, 8]], "ops": 12})
    drift = ProbeResult(
        pair="tr->inf",
        train="tr",
        infer="inf",
        probe="ppo_policy",
        probe_version="3",
        variant="b256",
        status="drift",
        message="2 outputs out of tolerance",
        outputs=comparisons(),
        thresholds={"mean": {"atol": 1e-5, "rtol": 1e-5}, "log_std": {"atol": 1e-5, "rtol": 1e-5}},
        train_latency=Latency.from_ns(TRAIN_NS, 256),
        infer_latency=Latency.from_ns(INFER_NS, 256),
        artifact=artifact,
    )
    same_artifact = dataclasses.replace(
        drift,
        variant="b1",
        status="consistent",
        message="ok",
        outputs=(compare_output("mean", np.ones(2), np.ones(2), Tolerance()),),
        train_latency=None,
        infer_latency=Latency.from_ns([10, 20], 1),
    )
    no_artifact = dataclasses.replace(
        drift, variant="export-failed", status="error", message="export failed", outputs=(), artifact=None
    )
    no_artifact = dataclasses.replace(no_artifact, train_latency=None, infer_latency=None)
    return CycleResult(
        started_at=1.0,
        finished_at=2.0,
        config="auditor.toml",
        stacks=stack_reports(infer_fp),
        results=[drift, same_artifact, no_artifact],
        findings=[
            Finding("version", "warning", "inf", "mindspore_lite", "older than train", {"train": "2.1.0"}),
            Finding("export", "info", "tr->inf", "export:b256", "exported", {}),
        ],
    )


# -- opening and migrating ------------------------------------------------------------------------


def test_open_creates_schema_at_head(url, tmp_path, backend):
    store = Store.open(url)
    try:
        if backend == "sqlite":
            assert (tmp_path / "db" / "history.db").is_file()
        assert store.current_revision() == HEAD
        assert store.head_revision() == HEAD
        assert set(inspect(store.engine).get_table_names()) == TABLES
    finally:
        store.close()


def test_open_twice_keeps_data(url):
    first = Store.open(url)
    run_id = first.begin_run("a.toml")
    first.close()
    second = Store.open(url)
    try:
        assert second.current_revision() == second.head_revision() == HEAD
        assert [r.id for r in second.runs()] == [run_id]
    finally:
        second.close()


def test_store_without_open_has_no_schema(url):
    s = Store(url)
    try:
        assert s.current_revision() is None
        s.upgrade()
        assert s.current_revision() == HEAD
    finally:
        s.close()


def test_migrated_schema_matches_orm_metadata(store):
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), m.Base.metadata)
    assert diff == []


def test_sqlite_pragmas(history_db):
    store = Store.open(f"sqlite:///{history_db}")  # SQLite's own settings: no PostgreSQL variant
    try:
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    finally:
        store.close()


# -- writing a cycle ------------------------------------------------------------------------------


def test_finish_run_writes_everything(store):
    result = cycle_result()
    assert result.outcome == "error"  # the "error" probe result wins
    run_id = store.begin_run("auditor.toml")
    run = get_run(store, run_id)
    assert (run.status, run.pid, run.host) == ("running", os.getpid(), socket.gethostname())
    assert run.finished_at is None and run.outcome is None

    store.finish_run(run_id, result, {MINDIR_SHA: MINDIR})

    run = get_run(store, run_id)
    assert run.status == "complete"
    assert run.outcome == "error"
    assert run.finished_at is not None and run.finished_at >= run.started_at
    assert run.config_path == "auditor.toml"

    stacks = {s.name: s for s in rows(store, m.Stack)}
    assert set(stacks) == {"tr", "inf", "broken"}
    assert (stacks["inf"].host, stacks["inf"].role, stacks["inf"].runtime, stacks["inf"].python) == (
        "hostA",
        "infer",
        "mindspore-lite",
        "/stacks/inf/bin/python",
    )

    run_stacks = {rs.stack_id: rs for rs in rows(store, m.RunStack, m.RunStack.run_id == run_id)}
    assert set(run_stacks) == {s.id for s in stacks.values()}
    assert run_stacks[stacks["tr"].id].fingerprint_digest == fingerprint_digest(FP_TRAIN)
    assert run_stacks[stacks["inf"].id].fingerprint_digest == fingerprint_digest(FP_INFER)
    assert run_stacks[stacks["broken"].id].fingerprint_digest is None
    assert run_stacks[stacks["broken"].id].error == "python not found"

    fps = store.fingerprints([f.digest for f in rows(store, m.Fingerprint)])
    assert fps == {fingerprint_digest(FP_TRAIN): FP_TRAIN, fingerprint_digest(FP_INFER): FP_INFER}

    results = rows(store, m.ProbeResultRow, m.ProbeResultRow.run_id == run_id, order=m.ProbeResultRow.id)
    assert [(r.variant, r.status) for r in results] == [
        ("b256", "drift"),
        ("b1", "consistent"),
        ("export-failed", "error"),
    ]
    drift, consistent, error = results
    assert (drift.pair, drift.probe, drift.probe_version, drift.message) == (
        "tr->inf",
        "ppo_policy",
        "3",
        "2 outputs out of tolerance",
    )
    assert (drift.train_stack_id, drift.infer_stack_id) == (stacks["tr"].id, stacks["inf"].id)
    assert thresholds_of(store, drift) == result.results[0].thresholds
    assert drift.artifact_sha256 == consistent.artifact_sha256 == MINDIR_SHA
    assert error.artifact_sha256 is None

    # metrics in long format: one row per output x metric, values as computed
    metrics = figures_of(store, drift)
    expected = {(c.output, k): v for c in result.results[0].outputs for k, v in c.metrics.items()}
    assert len(metrics) == len(expected) == 2 * len(METRIC_NAMES)
    assert [(r.output, r.name) for r in metrics] == list(expected)  # in the order computed
    assert {(r.output, r.name): r.value for r in metrics} == expected
    got = {(r.output, r.name): r.value for r in metrics}
    assert got[("log_std", "max_abs")] == math.inf
    assert got[("log_std", "min_atol")] == math.inf
    assert got[("log_std", "cosine")] == 0.0
    assert 0 < got[("mean", "max_abs")] < 2e-3
    assert count(store, m.MetricRow) == 3 * len(METRIC_NAMES)  # + the consistent result's one output
    assert error.metric_set_id is None and consistent.metric_set_id not in (None, drift.metric_set_id)
    assert count(store, m.MetricSet) == 2

    # latencies: one row per measured side
    lats = {(r.result_id, r.side): r for r in rows(store, m.LatencyRow)}
    assert set(lats) == {(drift.id, "train"), (drift.id, "infer"), (consistent.id, "infer")}
    t = lats[(drift.id, "train")]
    expected_t = Latency.from_ns(TRAIN_NS, 256)
    assert t.stack_id == stacks["tr"].id
    assert (t.batch, t.samples, t.p50_us, t.p90_us, t.p99_us, t.mean_us) == (
        256,
        5,
        expected_t.p50_us,
        expected_t.p90_us,
        expected_t.p99_us,
        expected_t.mean_us,
    )
    assert t.p50_us == 1.2 and t.mean_us == pytest.approx(1.92)
    assert lats[(drift.id, "infer")].stack_id == stacks["inf"].id
    assert lats[(consistent.id, "infer")].batch == 1

    # the artifact, once, with its bytes
    arts = rows(store, m.Artifact)
    assert len(arts) == 1
    assert (arts[0].sha256, arts[0].kind, arts[0].size, arts[0].data) == (
        MINDIR_SHA,
        "mindir",
        len(MINDIR),
        MINDIR,
    )
    assert arts[0].info == {"inputs": [[256, 8]], "ops": 12}

    findings = rows(store, m.FindingRow, m.FindingRow.run_id == run_id, order=m.FindingRow.id)
    assert [(f.kind, f.severity, f.subject, f.key, f.message, f.details) for f in findings] == [
        ("version", "warning", "inf", "mindspore_lite", "older than train", {"train": "2.1.0"}),
        ("export", "info", "tr->inf", "export:b256", "exported", {}),
    ]


def test_outcome_is_stored(store):
    result = cycle_result()
    # An unavailable stack makes the whole cycle an error, whatever its results say.
    assert result.outcome == "error"
    result.results = result.results[:2]
    result.stacks = {n: s for n, s in result.stacks.items() if n != "broken"}
    assert result.outcome == "drift"
    run_id = store.begin_run("a.toml")
    store.finish_run(run_id, result, {})
    assert get_run(store, run_id).outcome == "drift"
    assert rows(store, m.Artifact)[0].data is None  # bytes not provided: metadata only


def test_fingerprints_and_artifacts_are_content_addressed(store):
    first = store.begin_run("a.toml")
    store.finish_run(first, cycle_result(), {MINDIR_SHA: MINDIR})
    assert count(store, m.Fingerprint) == 2
    assert count(store, m.Artifact) == 1
    assert count(store, m.Stack) == 3

    # same fingerprints, same artifact: no new rows, but the run links them
    second = store.begin_run("a.toml")
    store.finish_run(second, cycle_result(), {MINDIR_SHA: MINDIR})
    assert count(store, m.Fingerprint) == 2
    assert count(store, m.Artifact) == 1
    assert count(store, m.Stack) == 3
    linked = {rs.fingerprint_digest for rs in rows(store, m.RunStack, m.RunStack.run_id == second)}
    assert linked == {fingerprint_digest(FP_TRAIN), fingerprint_digest(FP_INFER), None}

    # key order does not matter for the digest
    reordered = dict(reversed(list(FP_INFER.items())))
    third = store.begin_run("a.toml")
    store.finish_run(third, cycle_result(infer_fp=reordered), {})
    assert count(store, m.Fingerprint) == 2

    # a changed fingerprint adds exactly one row; the old one stays for history
    changed = {**FP_INFER, "mindspore_lite": "2.0.1"}
    fourth = store.begin_run("a.toml")
    store.finish_run(fourth, cycle_result(infer_fp=changed), {MINDIR_SHA: MINDIR})
    digests = {f.digest for f in rows(store, m.Fingerprint)}
    assert digests == {fingerprint_digest(d) for d in (FP_TRAIN, FP_INFER, changed)}
    inf_id = rows(store, m.Stack, m.Stack.name == "inf")[0].id
    by_run = {
        rs.run_id: rs.fingerprint_digest for rs in rows(store, m.RunStack, m.RunStack.stack_id == inf_id)
    }
    assert by_run == {
        first: fingerprint_digest(FP_INFER),
        second: fingerprint_digest(FP_INFER),
        third: fingerprint_digest(FP_INFER),
        fourth: fingerprint_digest(changed),
    }

    # a different artifact is a new row
    other = Artifact("ab" * 32, "mindir", 3, {})
    fifth = store.begin_run("a.toml")
    store.finish_run(fifth, cycle_result(artifact=other), {other.sha256: b"abc"})
    assert {a.sha256: a.data for a in rows(store, m.Artifact)} == {MINDIR_SHA: MINDIR, other.sha256: b"abc"}
    assert [r.status for r in store.runs()] == ["complete"] * 5


def test_exports_that_differ_only_in_primitive_order_share_their_bytes(store):
    """MindSpore writes a MindIR's primitive definitions (top-level field 12) in another order
    at each export: two such files are two artifacts (each file's own sha256, what results
    name) with one stored copy of the bytes; a file with other content gets its own."""

    def mindir(*primitives: bytes) -> bytes:  # field 7 (graph), then field 12 entries
        return b"\x3a\x02ab" + b"".join(b"\x62" + bytes([len(p)]) + p for p in primitives)

    first, again, other = mindir(b"xx", b"yy"), mindir(b"yy", b"xx"), mindir(b"xx", b"zz")
    shas = [hashlib.sha256(d).hexdigest() for d in (first, again, other)]
    assert len(set(shas)) == 3  # three files by their bytes
    for sha, data in zip(shas, (first, again, other), strict=True):
        run = store.begin_run("a.toml")
        artifact = Artifact(sha, "mindir", len(data), {})
        store.finish_run(run, cycle_result(artifact=artifact), {sha: data})
    assert {a.sha256 for a in rows(store, m.Artifact)} == set(shas)
    blobs = rows(store, m.ArtifactBlob)
    assert sorted(b.data for b in blobs) == sorted([first, other])  # the first export's bytes, once
    stored = {a.sha256: a.data for a in rows(store, m.Artifact)}
    assert stored == {shas[0]: first, shas[1]: first, shas[2]: other}


def test_same_stack_name_on_another_host_is_another_stack(store):
    run_id = store.begin_run("a.toml")
    result = cycle_result()
    store.finish_run(run_id, result, {})
    result.stacks = stack_reports(host="hostB")
    run2 = store.begin_run("a.toml")
    store.finish_run(run2, result, {})
    assert count(store, m.Stack) == 6
    results = rows(store, m.ProbeResultRow, m.ProbeResultRow.run_id == run2)
    hosts = {s.id: s.host for s in rows(store, m.Stack)}
    assert {hosts[r.train_stack_id] for r in results} == {"hostB"}


def test_finish_run_unknown_run(store):
    with pytest.raises(StoreError, match="run 999"):
        store.finish_run(999, cycle_result(), {})


# -- atomicity -------------------------------------------------------------------------------------


def test_failed_finish_run_writes_nothing(store):
    good = store.begin_run("a.toml")
    store.finish_run(good, cycle_result(), {MINDIR_SHA: MINDIR})
    content = (m.Stack, m.Fingerprint, m.FingerprintTemplate, m.Artifact, m.MetricSet, m.ThresholdSet)
    before = {model: count(store, model) for model in content}

    run_id = store.begin_run("b.toml")
    new_fp = {**FP_INFER, "mindspore_lite": "9.9"}
    other = Artifact("cd" * 32, "mindir", 1, {})
    result = cycle_result(infer_fp=new_fp, artifact=other)
    # The last result names a stack that is not in result.stacks: KeyError mid-transaction,
    # after stacks, a fingerprint, an artifact and earlier results were added and flushed.
    result.results[-1] = dataclasses.replace(result.results[-1], train="ghost")
    with pytest.raises(KeyError, match="ghost"):
        store.finish_run(run_id, result, {other.sha256: b"x"})

    run = get_run(store, run_id)
    assert run.status == "running"
    assert run.outcome is None and run.finished_at is None
    assert rows(store, m.ProbeResultRow, m.ProbeResultRow.run_id == run_id) == []
    assert rows(store, m.FindingRow, m.FindingRow.run_id == run_id) == []
    assert rows(store, m.RunStack, m.RunStack.run_id == run_id) == []
    result_ids = select(m.ProbeResultRow.id).where(m.ProbeResultRow.run_id == run_id)
    assert rows(store, m.LatencyRow, m.LatencyRow.result_id.in_(result_ids)) == []
    assert count(store, m.MetricRow) == 3 * len(METRIC_NAMES)  # only the good run's
    assert {model: count(store, model) for model in before} == before
    assert get_run(store, good).status == "complete"

    store.abort_run(run_id, "cycle failed: KeyError 'ghost'")
    run = get_run(store, run_id)
    assert run.status == "aborted"
    assert run.note == "cycle failed: KeyError 'ghost'"
    assert run.finished_at is not None
    assert run.outcome is None


def test_abort_run_only_touches_running_runs(store):
    done = store.begin_run("a.toml")
    store.finish_run(done, cycle_result(), {})
    store.abort_run(done, "late interrupt")
    run = get_run(store, done)
    assert (run.status, run.note) == ("complete", None)

    aborted = store.begin_run("a.toml")
    store.abort_run(aborted, "first")
    store.abort_run(aborted, "second")
    assert get_run(store, aborted).note == "first"
    store.abort_run(12345, "no such run")  # no error


# -- orphaned runs ----------------------------------------------------------------------------------


def insert_running(store: Store, pid: int, host: str | None = None) -> int:
    with Session(store.engine) as s, s.begin():
        run = m.Run(
            started_at=datetime(2026, 1, 1),
            status="running",
            host=host or socket.gethostname(),
            pid=pid,
            config_path="old.toml",
        )
        s.add(run)
        s.flush()
        return run.id


@pytest.fixture
def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.fixture
def live_pid():
    proc = subprocess.Popen(["sleep", "30"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_begin_run_reaps_runs_of_dead_processes(store, dead_pid, live_pid):
    dead = insert_running(store, dead_pid)
    alive = insert_running(store, live_pid)
    elsewhere = insert_running(store, dead_pid, host="some-other-host")
    mine = insert_running(store, os.getpid())
    other_store = Store(store.url)
    mine_elsewhere = other_store.begin_run("b.toml")  # another Store of this process: still running

    new = store.begin_run("a.toml")

    run = get_run(store, dead)
    assert run.status == "aborted"
    assert run.note == f"interrupted: process {dead_pid} ended before the run finished"
    assert run.finished_at is not None
    assert get_run(store, alive).status == "running"
    assert get_run(store, elsewhere).status == "running"  # cannot check another host's pids
    # this process's run that no Store of it is writing: its end could not be written
    assert get_run(store, mine).status == "aborted"
    assert get_run(store, mine).note == "the history database was unreachable when the run ended"
    assert get_run(store, mine_elsewhere).status == "running"
    assert get_run(store, new).status == "running"
    other_store.close()


def test_reap_orphans_counts_and_is_idempotent(store, dead_pid, live_pid):
    insert_running(store, dead_pid)
    insert_running(store, dead_pid)
    insert_running(store, live_pid)
    assert store.reap_orphans() == 2
    assert store.reap_orphans() == 0
    statuses = sorted(r.status for r in store.runs())
    assert statuses == ["aborted", "aborted", "running"]


def test_runs_lists_newest_first(store):
    ids = [store.begin_run(f"{i}.toml") for i in range(5)]
    assert [r.id for r in store.runs()] == ids[::-1]
    assert [r.config_path for r in store.runs(limit=2)] == ["4.toml", "3.toml"]


# -- errors -------------------------------------------------------------------------------------------


def test_not_a_url():
    with pytest.raises(StoreError, match="not a database URL"):
        Store("this is not a url")


def test_unknown_backend_is_a_store_error():
    with pytest.raises(StoreError):
        Store.open("notadb://x")


@pytest.mark.faults
def test_sqlite_directory_must_exist_unless_it_is_the_default(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    for path, what in (
        (blocker / "history.db", "is not a directory"),
        (tmp_path / "typo" / "h.db", "does not exist"),
    ):
        with pytest.raises(StoreError) as info:
            Store.open(f"sqlite:///{path}")
        assert f"cannot create the history database {path}: its directory {path.parent} {what}" in str(
            info.value
        )
        assert not info.value.reached and not (tmp_path / "typo").exists()
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    default = tmp_path / "state" / "auditor" / "history.db"
    Store.open(f"sqlite:///{default}").close()
    assert default.is_file()
    # The default directory under a file: the OS's words, with the path.
    monkeypatch.setenv("XDG_STATE_HOME", str(blocker))
    with pytest.raises(StoreError, match="cannot create the directory for"):
        Store.open(f"sqlite:///{blocker / 'auditor' / 'history.db'}")


def test_unopenable_sqlite_file_is_a_store_error(tmp_path):
    (tmp_path / "dir.db").mkdir()
    with pytest.raises(StoreError, match="dir.db"):
        Store.open(f"sqlite:///{tmp_path / 'dir.db'}")


def test_sqlite_path_with_tilde(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home" / "state").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    s = Store.open("sqlite:///~/state/history.db")
    try:
        assert (tmp_path / "home" / "state" / "history.db").is_file()
    finally:
        s.close()


def test_a_nan_metric_is_left_out_and_the_run_is_stored(store):
    """A figure that could not be computed (NaN) must not cost the whole run: SQL has no NaN."""
    result = cycle_result()
    out = result.results[0].outputs[0]
    nan_out = dataclasses.replace(out, metrics={**out.metrics, "cosine": math.nan, "max_abs": math.inf})
    first = result.results[0]
    result.results[0] = dataclasses.replace(first, outputs=(nan_out, *first.outputs[1:]))
    run_id = store.begin_run("a.toml")
    store.finish_run(run_id, result, {})
    with Session(store.engine) as s:
        stored = s.scalars(
            select(m.ProbeResultRow).where(
                m.ProbeResultRow.pair == first.pair,
                m.ProbeResultRow.probe == first.probe,
                m.ProbeResultRow.variant == first.variant,
            )
        ).one()
        s.expunge(stored)
    found = {(r.output, r.name): r.value for r in figures_of(store, stored)}
    assert (out.output, "cosine") not in found
    assert found[(out.output, "max_abs")] == math.inf
    assert store.runs()[0].status == "complete"


def test_a_database_from_a_newer_auditor_is_a_clear_store_error(url):
    store = Store.open(url)
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '0999'")
    store.close()
    with pytest.raises(StoreError, match="newer auditor"):
        Store.open(url)


def test_finish_run_lists_new_series_once(store):
    """Each (metric, pair, probe, variant, output) stored is listed in `series`, once, however
    many runs store it (auditor.history.series: the trend's index of series)."""
    for _ in range(2):
        store.finish_run(store.begin_run("a.toml"), cycle_result(), {MINDIR_SHA: MINDIR})
    listed = {(s.metric, s.pair, s.probe, s.variant, s.output) for s in rows(store, m.SeriesRow)}
    stored = {
        (mt.name, p.pair, p.probe, p.variant, mt.output)
        for mt in rows(store, m.MetricRow)
        for p in rows(store, m.ProbeResultRow, m.ProbeResultRow.metric_set_id == mt.set_id)
    } | {  # and the throughput derived from each serving-side latency (auditor.history.figures)
        ("throughput", p.pair, p.probe, p.variant, f"b{lat.batch}")
        for lat in rows(store, m.LatencyRow, m.LatencyRow.side == "infer")
        for p in rows(store, m.ProbeResultRow, m.ProbeResultRow.id == lat.result_id)
    }
    assert any(key[0] == "throughput" for key in stored)
    assert listed == stored and len(listed) == count(store, m.SeriesRow) > 0


def test_shipped_head_read_without_alembic_matches_alembic(store):
    """Store.open skips Alembic when the database is at the head read from the version files;
    that reading must agree with Alembic's own, or a database could be left unmigrated."""
    from auditor.history.store import shipped_head

    assert (shipped_head(),) == store.head_revisions() == (HEAD,)


def test_open_of_an_up_to_date_database_does_not_import_alembic(url, tmp_path):
    Store.open(url).close()
    probe = (
        "import sys; from auditor.history.store import Store; Store.open(sys.argv[1]).close(); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('alembic', 'mako')))"
    )
    out = subprocess.run([sys.executable, "-c", probe, url], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_an_sqlite_older_than_3_35_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    from auditor.history import store as store_module

    monkeypatch.setattr(store_module.sqlite3, "sqlite_version_info", (3, 31, 1))
    path = tmp_path / "sub" / "history.db"
    with pytest.raises(StoreError) as info:
        Store.open(f"sqlite:///{path}")
    said = str(info.value)
    assert "SQLite library is 3.31.1" in said and "3.35.0 or newer" in said and "PostgreSQL" in said
    assert not path.parent.exists()  # nothing made
    store_module.sqlite_usable((3, 35, 0))  # the oldest that works: no error
