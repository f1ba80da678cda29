"""The list of trend series (metric, pair, probe, variant, output) and the query that reads the
newest N points of each without ranking the whole history.

Why a table: finding which series exist from the metrics themselves means reading every row
of a metric; with the list at hand, each series is one query that walks the newest runs
(ix_runs_started_at) and looks its value up by index (probe_results (pair, run_id), metrics
(result_id, name, output)), stopping after N points. The cost grows with N and the number of
series, not with the length of the history (a series whose values stopped long ago walks back
until it finds them).

The store calls ``record_run`` in the transaction that writes a run, so the list never lags
behind the metrics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import Connection, Select, String, and_, bindparam, exists, insert, select
from sqlalchemy.orm import Session

from auditor import models as m

if TYPE_CHECKING:
    from auditor.history import Filters

R, P, M, SER = m.Run, m.ProbeResultRow, m.MetricRow, m.SeriesRow
KEY = ("metric", "pair", "probe", "variant", "output")


def record_run(session: Session | Connection, run_id: int) -> None:
    """Add the series of the metrics stored for ``run_id`` that are not listed yet, in one
    statement. Two auditors sharing a PostgreSQL history may add the same series at once:
    there (and on SQLite) a conflicting row is skipped, not an error."""
    found = (
        select(M.name, P.pair, P.probe, P.variant, M.output)
        .distinct()
        .select_from(M)
        .join(P, P.id == M.result_id)
        .where(P.run_id == run_id)
    )
    bind = session if isinstance(session, Connection) else session.get_bind()
    dialect = bind.dialect.name
    if dialect in ("sqlite", "postgresql"):
        if dialect == "sqlite":
            from sqlalchemy.dialects.sqlite import insert as dialect_insert
        else:
            from sqlalchemy.dialects.postgresql import insert as dialect_insert
        stmt = dialect_insert(SER).from_select(KEY, found).on_conflict_do_nothing()
    else:
        listed = exists().where(
            and_(
                SER.metric == M.name,
                SER.pair == P.pair,
                SER.probe == P.probe,
                SER.variant == P.variant,
                SER.output == M.output,
            )
        )
        stmt = insert(SER).from_select(KEY, found.where(~listed))
    session.execute(stmt)


def prune(conn: Connection) -> int:
    """Forget the series that no stored metric has any more (after retention deleted runs),
    so the trend does not walk the whole history looking for them. Returns how many."""
    stored = exists().where(
        and_(
            M.name == SER.metric,
            M.output == SER.output,
            P.id == M.result_id,
            P.pair == SER.pair,
            P.probe == SER.probe,
            P.variant == SER.variant,
        )
    )
    return conn.execute(SER.__table__.delete().where(~stored)).rowcount or 0


def rebuild(conn: Connection) -> None:
    """List every series of the stored metrics again (after bulk inserts that bypass the store)."""
    conn.execute(SER.__table__.delete())
    conn.execute(
        insert(SER).from_select(
            KEY,
            select(M.name, P.pair, P.probe, P.variant, M.output).distinct().join(P, P.id == M.result_id),
        )
    )


def newest_points(conn: Connection, metric: str, f: Filters, limit: int) -> list[tuple]:
    """Rows (pair, probe, variant, output, run_id, started_at, value, status, train, infer) of the
    newest ``limit`` points of every series of ``metric`` that the filters select, oldest first
    within each series. The same rows as ranking every value of the metric per series."""
    from auditor.history import S_INFER, S_TRAIN, Filters, _in, _where_results

    listing = select(SER.pair, SER.probe, SER.variant, SER.output).where(SER.metric == metric)
    for column, values in (
        (SER.pair, f.pairs),
        (SER.probe, f.probes),
        (SER.variant, f.variants),
        (SER.output, f.outputs),
    ):
        if values:
            listing = listing.where(_in(column, values))
    # One statement for every series, built once (its values are bound per series): the
    # newest runs that have a value of this series, walked through ix_runs_started_at.
    key = {c: bindparam(c, type_=String()) for c in ("pair", "probe", "variant", "output")}
    unset = {"pairs": (), "probes": (), "variants": (), "since": None, "until": None}
    others = Filters(**{**f.__dict__, **unset})

    def of_series(stmt: Select) -> Select:
        stmt = stmt.where(P.pair == key["pair"], P.probe == key["probe"], P.variant == key["variant"])
        return _where_results(stmt, others)

    value_join = and_(M.result_id == P.id, M.name == metric, M.output == key["output"])
    has_value = of_series(select(P.id).join(M, value_join).where(P.run_id == R.id))
    runs = select(R.id, R.started_at).where(exists(has_value))
    if f.since is not None:
        runs = runs.where(R.started_at >= f.since)
    if f.until is not None:
        runs = runs.where(R.started_at < f.until)
    newest = runs.order_by(R.started_at.desc(), R.id.desc()).limit(limit).subquery("newest")
    stmt = of_series(
        select(
            P.pair,
            P.probe,
            P.variant,
            M.output,
            newest.c.id,
            newest.c.started_at,
            M.value,
            P.status,
            S_TRAIN.name,
            S_INFER.name,
        )
        .select_from(newest)
        .join(P, P.run_id == newest.c.id)
        .join(M, value_join)
        .join(S_TRAIN, S_TRAIN.id == P.train_stack_id)
        .join(S_INFER, S_INFER.id == P.infer_stack_id)
    ).order_by(newest.c.started_at, newest.c.id, P.id)
    rows: list[tuple] = []
    for pair, probe, variant, output in conn.execute(listing.order_by(*KEY[1:])).all():
        values = {"pair": pair, "probe": probe, "variant": variant, "output": output}
        rows.extend(tuple(r) for r in conn.execute(stmt, values))
    return rows
