"""The lists of trend series (metric series: metric, pair, probe, variant, output; latency
series: pair, probe, variant, side) and the walk that reads the newest N points of each
without ranking the whole history.

Why lists: finding which series exist from the values themselves means reading every row
of a metric; with the list at hand, each series is one statement that walks the newest runs
(ix_runs_started_at) and asks of each run, by index look-ups only, whether it holds a value
of the series (probe_results (pair, probe, variant, run_id), then metrics (set_id, name,
output) or latencies (result_id, side)), stopping after N runs. The cost grows with N and the
number of series, not with the length of the history (a series whose values stopped long
ago walks back until it finds them).

The walk's FROM holds runs alone, and the outer query reaches the results of the newest runs
through a LEFT JOIN (whose right side the planner never takes as the outer loop) and reads
every other value through a correlated look-up, so the database has no join order to choose:
the plan is the same with fresh, stale or no planner statistics (with a plain join of runs,
results and metrics, SQLite without statistics started from the metric name and read a
tenth of the metric table per series; tests/unit/history/test_history.py checks the plan both ways).

The store calls ``record_run`` in the transaction that writes a run, so the lists never lag
behind the values.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    Connection,
    Integer,
    Select,
    String,
    and_,
    bindparam,
    exists,
    insert,
    literal,
    or_,
    select,
)
from sqlalchemy.orm import Session

from auditor.db import schema as m
from auditor.db.prepared import prepared
from auditor.history import figures
from auditor.history.filters import Filters, filter_shape, is_latency_metric, latency_metric, where_bound

R, P, M, L, SER, LSER = m.Run, m.ProbeResultRow, m.MetricRow, m.LatencyRow, m.SeriesRow, m.LatencySeriesRow
KEY = ("metric", "pair", "probe", "variant", "output")
LATENCY_KEY = ("pair", "probe", "variant", "side")


def _found(run_id: int | None) -> list[tuple[Any, tuple[str, ...], Select]]:
    """(list table, its key columns, the distinct keys of the stored values) for both lists;
    the values of one run, or of the whole history (``run_id`` None)."""
    metrics = select(M.name, P.pair, P.probe, P.variant, M.output).distinct().select_from(M)
    metrics = metrics.join(P, P.metric_set_id == M.set_id)
    served = select(literal(figures.THROUGHPUT, String()), P.pair, P.probe, P.variant, figures.output_of(L))
    served = served.distinct().select_from(L).join(P, P.id == L.result_id).where(figures.counted(L))
    latencies = select(P.pair, P.probe, P.variant, L.side).distinct().select_from(L)
    latencies = latencies.join(P, P.id == L.result_id)
    if run_id is not None:
        metrics, served, latencies = (q.where(P.run_id == run_id) for q in (metrics, served, latencies))
    return [(SER, KEY, metrics), (SER, KEY, served), (LSER, LATENCY_KEY, latencies)]


def record_run(session: Session | Connection, run_id: int) -> None:
    """Add the series of the metrics and latencies stored for ``run_id`` that are not listed
    yet, one statement per list. Two auditors sharing a PostgreSQL history may add the same
    series at once: there (and on SQLite) a conflicting row is skipped, not an error."""
    bind = session if isinstance(session, Connection) else session.get_bind()
    dialect = bind.dialect.name
    for table, key, found in _found(run_id):
        if dialect in ("sqlite", "postgresql"):
            if dialect == "sqlite":
                from sqlalchemy.dialects.sqlite import insert as dialect_insert
            else:
                from sqlalchemy.dialects.postgresql import insert as dialect_insert
            stmt = dialect_insert(table).from_select(key, found).on_conflict_do_nothing()
        else:
            columns = found.selected_columns
            listed = exists().where(
                and_(*(getattr(table, k) == c for k, c in zip(key, columns, strict=True)))
            )
            stmt = insert(table).from_select(key, found.where(~listed))
        session.execute(stmt)


def prune(conn: Connection) -> int:
    """Forget the series that no stored value has any more (after retention deleted runs),
    so the trend does not walk the whole history looking for them. Returns how many."""
    of_series = (P.pair == SER.pair, P.probe == SER.probe, P.variant == SER.variant)
    stored = exists().where(
        M.name == SER.metric, M.output == SER.output, P.metric_set_id == M.set_id, *of_series
    )
    served = exists().where(
        SER.metric == figures.THROUGHPUT,
        P.id == L.result_id,
        figures.output_of(L) == SER.output,
        figures.counted(L),
        *of_series,
    )
    gone = conn.execute(SER.__table__.delete().where(~or_(stored, served))).rowcount or 0
    of_series = (P.pair == LSER.pair, P.probe == LSER.probe, P.variant == LSER.variant)
    stored = exists().where(L.side == LSER.side, P.id == L.result_id, *of_series)
    return gone + (conn.execute(LSER.__table__.delete().where(~stored)).rowcount or 0)


def rebuild(conn: Connection) -> None:
    """List every series of the stored values again (after bulk inserts that bypass the store)."""
    for table in (SER, LSER):
        conn.execute(table.__table__.delete())
    for table, key, found in _found(None):
        conn.execute(insert(table).from_select(key, found))


def newest_points(conn: Connection, metric: str, f: Filters, limit: int) -> list[tuple]:
    """Rows (pair, probe, variant, output, run_id, started_at, value, status, train, infer) of the
    newest ``limit`` points of every series of ``metric`` that the filters select, oldest first
    within each series. The same rows as ranking every value of the metric per series.
    ``metric`` may be a latency series (``latency.[SIDE.]STAT``): its output is the side, its
    value the latency row of the probe's own batch (the first of its side)."""

    if is_latency_metric(metric):
        side, stat = latency_metric(metric)
        table, output_col, sides = LSER, LSER.side, () if side is None else (side,)
        kind: tuple[str, ...] = ("latency", stat)
        listing = select(LSER.pair, LSER.probe, LSER.variant, LSER.side)
        if sides:
            listing = listing.where(LSER.side == sides[0])
    else:
        table, output_col = SER, SER.output
        kind = (figures.THROUGHPUT,) if metric == figures.THROUGHPUT else ("metric",)
        listing = select(SER.pair, SER.probe, SER.variant, SER.output).where(SER.metric == metric)
    for column, values in (
        (table.pair, f.pairs),
        (table.probe, f.probes),
        (table.variant, f.variants),
        (output_col, f.outputs),
    ):
        if values:
            listing = listing.where(column == values[0] if len(values) == 1 else column.in_(values))
    # The filters on the series key are the listing's; the others apply to each result.
    shape, values = filter_shape(_others(f))
    values.update({"metric": metric, "limit": limit})

    walk = prepared(conn, ("series walk", kind, shape), lambda: _walk_statement(kind, shape))
    rows: list[tuple] = []
    for pair, probe, variant, output in conn.execute(listing.order_by(*listing.selected_columns)).all():
        values.update(pair=pair, probe=probe, variant=variant, output=output)
        if kind[0] == figures.THROUGHPUT:
            values["batch"] = figures.batch_of(output)
            if values["batch"] is None:
                continue
        # (a LEFT JOIN row without a result, see _walk_statement, is left out)
        rows.extend(row for row in walk.rows(conn, values) if row[0] is not None)
    return rows


def _others(f: Filters) -> Filters:

    # since/until stay: they bound the walk over runs
    return Filters(**{**f.__dict__, "pairs": (), "probes": (), "variants": ()})


def _walk_statement(kind: tuple[str, ...], shape: tuple[int, ...]) -> Select:
    """The newest ``:limit`` runs that hold a value of the series (:pair, :probe, :variant,
    :output; :metric for a metric series), and their points, oldest first."""

    key = {c: bindparam(c, type_=String()) for c in ("pair", "probe", "variant", "output", "metric")}
    since, until = shape[-2:]

    def of_series(stmt: Select) -> Select:
        stmt = stmt.where(P.pair == key["pair"], P.probe == key["probe"], P.variant == key["variant"])
        return where_bound(stmt, (*shape[:-2], False, False))

    if kind[0] == "latency":
        where_value = and_(L.result_id == P.id, L.side == key["output"])
        # the probe's own batch: the first latency row of the side (history.primary_latency)
        value = select(getattr(L, kind[1])).where(where_value).order_by(L.id).limit(1)
    elif kind[0] == figures.THROUGHPUT:  # derived from the first serving-side latency at the batch
        batch = bindparam("batch", type_=Integer())
        where_value = and_(L.result_id == P.id, L.side == figures.SIDE, L.batch == batch, L.p50_us > 0)
        value = select(figures.value_of(L)).where(where_value).order_by(L.id).limit(1)
    else:
        where_value = and_(M.set_id == P.metric_set_id, M.name == key["metric"], M.output == key["output"])
        value = select(M.value).where(where_value).order_by(M.id).limit(1)
    has_value = exists().where(where_value)
    walk = select(R.id, R.started_at).where(
        exists(of_series(select(P.id).where(P.run_id == R.id, has_value)))
    )
    if since:
        walk = walk.where(R.started_at >= bindparam("since", type_=R.started_at.type))
    if until:
        walk = walk.where(R.started_at < bindparam("until", type_=R.started_at.type))
    newest = (
        walk.order_by(R.started_at.desc(), R.id.desc())
        .limit(bindparam("limit", type_=Integer()))
        .subquery("newest")
    )
    S = m.Stack
    stack = lambda column: select(S.name).where(S.id == column).scalar_subquery()  # noqa: E731
    # A LEFT JOIN: its right side is never the outer loop, so the database cannot start from
    # the series' results (all of them) instead of the newest runs. Every newest run has a
    # result of the series (the walk found one), so no row is padded with NULLs; the
    # conditions stay in ON (in WHERE they would let SQLite make it an inner join again).
    in_newest = of_series(select(P.id).where(P.run_id == newest.c.id, has_value)).whereclause
    return (
        select(
            P.pair,
            P.probe,
            P.variant,
            key["output"],
            newest.c.id,
            newest.c.started_at,
            value.scalar_subquery(),
            P.status,
            stack(P.train_stack_id),
            stack(P.infer_stack_id),
        )
        .select_from(newest)
        .outerjoin(P, in_newest)
        .order_by(newest.c.started_at, newest.c.id, P.id)
    )
