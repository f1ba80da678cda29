"""Prepared statements (auditor.db.prepared) read the same rows as SQLAlchemy's usual path,
damaged values included, and bind their values as the column types bind them."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from sqlalchemy import Integer, String, bindparam, select, text

from auditor.db import columns as tolerant_types
from auditor.db import schema as m
from auditor.db.prepared import Prepared, prepared
from auditor.history.store import Store
from tests.history_fixtures import generate_history

START = datetime(2026, 3, 1)
R, P, M, L = m.Run, m.ProbeResultRow, m.MetricRow, m.LatencyRow


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request):
    if request.param == "sqlite":
        url = f"sqlite:///{request.getfixturevalue('history_db')}"
    else:
        url = request.getfixturevalue("postgres_url")
    s = Store.open(url)
    generate_history(s.engine, 6, start=START, error_rate=0.3, seed=3)
    yield s
    s.close()


def statement():
    return (
        select(R.id, R.started_at, P.pair, P.status, P.message, M.output, M.value, L.p50_us, L.batch)
        .select_from(P)
        .join(R, R.id == P.run_id)
        .outerjoin(M, M.set_id == P.metric_set_id)
        .outerjoin(L, (L.result_id == P.id) & (L.side == "infer"))
        .where(R.started_at >= bindparam("since", type_=R.started_at.type))
        .where(P.pair.in_([bindparam("pair0", type_=String()), bindparam("pair1", type_=String())]))
        .order_by(R.started_at.desc(), R.id.desc(), P.id, M.id, L.id)
        .limit(bindparam("limit", type_=Integer()))
    )


def both(store, values):
    stmt = statement()
    with store.engine.connect() as conn:
        usual = [tuple(r) for r in conn.execute(stmt, values)]
        fast = Prepared(stmt, conn.dialect)
        assert fast.direct
        got = list(fast.rows(conn, values)), list(fast.rows(conn, values, stream=True))
        conn.execution_options(yield_per=7)  # a caller's buffered connection: read through it
        assert list(fast.rows(conn, values)) == got[0]
        return usual, *got


VALUES = {
    "since": START + timedelta(minutes=30),
    "pair0": "ms20->lite20",
    "pair1": "ms210->lite20",
    "limit": 500,
}


def test_same_rows_as_sqlalchemy(store):
    usual, fast, streamed = both(store, VALUES)
    assert fast == usual == streamed
    assert len(usual) > 50
    assert {type(r[1]) for r in usual} == {datetime}
    assert min(r[1] for r in usual) == VALUES["since"]  # the time bound as the column binds it
    assert {type(r[6]) for r in usual} == {float, type(None)}  # (results without metrics)


def test_damaged_values_read_as_the_column_types_read_them(history_db):
    """SQLite stores anything anywhere: a text time, a number as text, a blob message, an
    integer pair. Both paths read them alike (None and a note, or converted text)."""
    s = Store.open(f"sqlite:///{history_db}")
    generate_history(s.engine, 6, start=START, seed=3)
    with s.engine.begin() as conn:
        newest = conn.scalar(text("SELECT max(id) FROM runs"))
        conn.execute(text("UPDATE runs SET started_at = 'not a time' WHERE id = :r"), {"r": newest - 1})
        result = conn.scalar(text("SELECT min(id) FROM probe_results WHERE pair = 'ms20->lite20'"))
        conn.execute(
            text(
                "UPDATE metrics SET value = 'abc' WHERE name = 'cosine' "
                "AND set_id = (SELECT metric_set_id FROM probe_results WHERE id = :r)"
            ),
            {"r": result},
        )
        conn.execute(text("UPDATE probe_results SET message = x'c3a9ff' WHERE id = :r"), {"r": result})
        conn.execute(text("UPDATE latencies SET batch = 2.5 WHERE result_id = :r"), {"r": result})
    values = {**VALUES, "since": START - timedelta(days=1)}
    stmt = statement()
    with s.engine.connect() as conn:
        tolerant_types.unreadable(reset=True)
        usual = [tuple(r) for r in conn.execute(stmt, values)]
        noted_usual = tolerant_types.unreadable(reset=True)
        fast = list(Prepared(stmt, conn.dialect).rows(conn, values))
        noted_fast = tolerant_types.unreadable(reset=True)
    assert fast == usual
    # the same notes (in another order: the prepared path reads column by column)
    assert sorted(noted_fast[0]) == sorted(noted_usual[0]) and len(noted_usual[0]) == 3
    assert noted_fast[1] == noted_usual[1]
    messages = {r[4] for r in usual}
    assert "\N{LATIN SMALL LETTER E WITH ACUTE}\N{REPLACEMENT CHARACTER}" in messages
    assert None in {r[6] for r in usual if r[5] is not None}  # 'abc' as a number
    s.close()


def test_a_shape_is_built_once_per_dialect(store):
    built = []

    def build():
        built.append(1)
        return statement()

    with store.engine.connect() as conn:
        first = prepared(conn, ("test shape", id(store)), build)
        assert prepared(conn, ("test shape", id(store)), build) is first
        assert len(built) == 1
        with pytest.raises(KeyError, match="limit"):
            list(first.rows(conn, {k: v for k, v in VALUES.items() if k != "limit"}))
