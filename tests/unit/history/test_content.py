"""Content-addressed metric sets and threshold tables (auditor.db.content): results that compute
the same figures share one stored set, the derived throughput reads as it was stored, and
migration 0013 moves an existing history into sets without changing what any result says."""

from __future__ import annotations

import dataclasses
import json
import threading
from datetime import datetime

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from auditor.db import schema as m
from auditor.db.content import document_digest, metric_set_digest
from auditor.history.filters import Filters
from auditor.history.queries import metric_rows, run_detail, trend
from auditor.history.store import Store
from tests.history_fixtures import generate_history
from tests.unit.history.test_store import count, cycle_result


def result_rows(store: Store, run_id: int) -> list[m.ProbeResultRow]:
    with Session(store.engine, expire_on_commit=False) as s:
        rows = list(
            s.scalars(select(m.ProbeResultRow).where(m.ProbeResultRow.run_id == run_id).order_by("id"))
        )
        s.expunge_all()
        return rows


def metrics_of(store: Store, run_id: int) -> list[dict]:
    with store.engine.connect() as conn:
        return [(r["variant"], r["metrics"], r["thresholds"]) for r in run_detail(conn, run_id).results]


def test_a_cycle_that_computes_the_same_figures_adds_no_metric_rows(store):
    first = store.begin_run("a.toml")
    store.finish_run(first, cycle_result(), {})
    stored = {model: count(store, model) for model in (m.MetricRow, m.MetricSet, m.ThresholdSet)}
    assert stored[m.MetricSet] == 2 and stored[m.ThresholdSet] == 1  # the error result has no figures
    second = store.begin_run("a.toml")
    store.finish_run(second, cycle_result(), {})
    assert {model: count(store, model) for model in stored} == stored
    a, b = result_rows(store, first), result_rows(store, second)
    assert [(r.metric_set_id, r.thresholds_id) for r in a] == [(r.metric_set_id, r.thresholds_id) for r in b]
    # each run still reads as its own, whole: figures, thresholds, and the derived throughput
    assert metrics_of(store, first) == metrics_of(store, second)
    variant, metrics, thresholds = metrics_of(store, second)[0]
    assert variant == "b256" and thresholds == cycle_result().results[0].thresholds
    assert set(metrics) == {"mean", "log_std", "b256"}
    infer = cycle_result().results[0].infer_latency
    assert metrics["b256"] == {"throughput": infer.throughput}


def test_a_changed_figure_is_a_set_of_its_own_and_the_others_stay_shared(store):
    store.finish_run(store.begin_run("a.toml"), cycle_result(), {})
    before = count(store, m.MetricRow)
    changed = cycle_result()
    drift = changed.results[0]
    mean = drift.outputs[0]
    moved = dataclasses.replace(mean, metrics={**mean.metrics, "max_abs": mean.metrics["max_abs"] * 2})
    changed.results[0] = dataclasses.replace(drift, outputs=(moved, *drift.outputs[1:]))
    run = store.begin_run("a.toml")
    store.finish_run(run, changed, {})
    figures = sum(len(c.metrics) for c in drift.outputs)
    assert count(store, m.MetricRow) == before + figures and count(store, m.MetricSet) == 3
    with store.engine.connect() as conn:
        rows = list(metric_rows(conn, Filters(metrics=("max_abs",), outputs=("mean",), variants=("b256",))))
    assert [r[-1] for r in rows] == [mean.metrics["max_abs"] * 2, mean.metrics["max_abs"]]  # newest first


def test_throughput_reads_as_a_metric_in_listings_and_trends(store):
    for _ in range(2):
        store.finish_run(store.begin_run("a.toml"), cycle_result(), {})
    expected = {
        f"b{r.infer_latency.batch}": r.infer_latency.throughput
        for r in cycle_result().results
        if r.infer_latency
    }
    with store.engine.connect() as conn:
        listed = list(metric_rows(conn, Filters(metrics=("throughput",))))
        both = list(metric_rows(conn, Filters(variants=("b1",))))
        series = {s.output: [p[2] for p in s.points] for s in trend(conn, "throughput", Filters())}
        newest = {s.output: [p[2] for p in s.points] for s in trend(conn, "throughput", Filters(limit=1))}
    assert sorted((r[-3], r[-1]) for r in listed) == sorted(list(expected.items()) * 2)
    # a result's own figures first, then its throughput; newest run first
    names = [r[-2] for r in both]
    assert names.count("throughput") == 2 and names[-1] == names[len(names) // 2 - 1] == "throughput"
    assert [r[0] for r in both] == sorted((r[0] for r in both), reverse=True)
    assert series == {o: [v, v] for o, v in expected.items()}
    assert newest == {o: [v] for o, v in expected.items()}


def test_two_auditors_storing_the_same_new_figures_at_once_share_one_set(store):
    """On a shared database the second insert of a new set waits for the first and takes its id
    (ON CONFLICT DO NOTHING RETURNING): both runs are stored, the set once."""
    other = Store.open(store.url, "other")
    runs = [store.begin_run("a.toml"), other.begin_run("b.toml")]
    barrier, errors = threading.Barrier(2), []

    def finish(s: Store, run_id: int) -> None:
        try:
            barrier.wait(timeout=30)
            s.finish_run(run_id, cycle_result(), {})
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=finish, args=pair) for pair in zip((store, other), runs, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    other.close()
    assert errors == [] and not any(t.is_alive() for t in threads)
    assert count(store, m.MetricSet) == 2 and count(store, m.ThresholdSet) == 1
    assert metrics_of(store, runs[0]) == metrics_of(store, runs[1])
    assert {r.status for r in store.runs()} == {"complete"}


def test_migration_0013_moves_each_result_into_sets_and_back(db_url):
    """A history at 0012 (each result its own metric rows, throughput stored, thresholds per row)
    migrates to sets: every result reads the same figures and thresholds, identical figures are
    stored once, throughput comes from the latencies; and the migration goes back."""
    store = Store(db_url)
    try:
        store.upgrade("0012")
        generate_history(store.engine, 12, start=datetime(2026, 1, 1), host="h")
        with store.engine.begin() as conn:
            # throughput as 0012 stored it: batch / p50 of the first serving-side latency per batch
            conn.execute(
                text(
                    "INSERT INTO metrics (result_id, output, name, value) "
                    "SELECT l.result_id, 'b' || l.batch, 'throughput', l.batch / (l.p50_us / 1000000.0) "
                    "FROM latencies l WHERE l.side = 'infer' ORDER BY l.id"
                )
            )
            old = _old_figures(conn)
            thresholds = dict(conn.execute(text("SELECT id, thresholds FROM probe_results")).all())
            results = len(thresholds)
        store.upgrade()
        with store.engine.connect() as conn:
            new = {}
            for run_id in conn.execute(text("SELECT id FROM runs")).scalars():
                for r in run_detail(conn, run_id).results:
                    new[r["id"]] = {
                        (o, n): v for o, figures in r["metrics"].items() for n, v in figures.items()
                    }
                    stored = thresholds[r["id"]]
                    assert r["thresholds"] == (stored if isinstance(stored, dict) else json.loads(stored))
            sets = conn.scalar(text("SELECT count(*) FROM metric_sets"))
            with_figures = conn.scalar(
                text("SELECT count(*) FROM probe_results WHERE metric_set_id IS NOT NULL")
            )
            throughput_rows = conn.scalar(text("SELECT count(*) FROM metrics WHERE name = 'throughput'"))
            threshold_sets = conn.scalar(text("SELECT count(*) FROM threshold_sets"))
        assert {rid: figures for rid, figures in new.items() if figures} == {
            rid: figures for rid, figures in old.items() if figures
        }
        # the bitwise pair computes all zeros every run: one set for all its results
        assert 0 < sets < with_figures and throughput_rows == 0 and threshold_sets == 1 and results > 0
        store.downgrade("0012")
        with store.engine.connect() as conn:
            back = _old_figures(conn)
        assert back == {rid: {k: v for k, v in f.items() if k[1] != "throughput"} for rid, f in old.items()}
    finally:
        store.close()


def _old_figures(conn) -> dict[int, dict]:
    figures: dict[int, dict] = {}
    for rid in conn.execute(text("SELECT id FROM probe_results")).scalars():
        figures[rid] = {}
    for rid, output, name, value in conn.execute(
        text("SELECT result_id, output, name, value FROM metrics ORDER BY id")
    ).all():
        figures[rid][(output, name)] = value
    return figures


def test_digests_cover_order_and_exact_values():
    a = [("mean", "max_abs", 0.1), ("mean", "cosine", 1.0)]
    assert metric_set_digest(a) == metric_set_digest(list(a))
    assert metric_set_digest(a) != metric_set_digest(a[::-1])
    assert metric_set_digest(a) != metric_set_digest([("mean", "max_abs", 0.1 + 2**-56), a[1]])
    assert metric_set_digest([("o", "m", float("inf"))]) != metric_set_digest([("o", "m", float("-inf"))])
    assert document_digest({"a": 1, "b": 2}) == document_digest({"b": 2, "a": 1})


def test_a_prune_waits_for_a_store_that_may_refer_to_old_sets(store):
    """A run refers to sets it found stored; a prune between finding one and referring to it
    would delete it as unreferenced. The store takes the prune's write lock first: the prune
    ends only after the store commits."""
    from auditor.history.retention import prune
    from auditor.history.store import _write_lock

    order: list[str] = []
    with Session(store.engine) as s, s.begin():
        _write_lock(s)
        pruning = threading.Thread(target=lambda: (prune(store.engine, 1), order.append("pruned")))
        pruning.start()
        pruning.join(timeout=1.0)  # long enough for an unblocked prune of an empty history
        order.append("stored")
    pruning.join(timeout=60)
    assert order == ["stored", "pruned"]
