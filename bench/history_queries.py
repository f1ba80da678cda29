"""How fast are the history queries on a long history, and what does the auditor's query layer
cost over plain SQL?

Generates a history of a million stored metric rows, counted (tests/history_fixtures.py: the
stacks and pairs, two probes x two variants, runs every 15 minutes, one stack upgraded
half-way), then times the typical filtered queries two ways, each the median of several
rounds on the same file (the two in turn in each round, so that the load of a shared machine
weighs on both alike; the load average is printed with the figures):
  - auditor: the functions behind `auditor history` / `auditor trend` (SQLAlchemy select()
    statements built and compiled once per filter shape (auditor.db.prepared), rows streamed
    and converted to Python values by the column types, datetimes included);
  - sqlite3: the same query written by hand and run with the sqlite3 module (rows fetched as
    the module returns them, times as strings).
and prints both with their ratio. Both read the same rows (the script checks the counts).
The two "latest 200" trends (a metric, and the p50 latency of the probe's own batch) walk
each series' newest runs; their goal is 0.3 s whatever the length of the history.
With --url (e.g. postgresql://user@host:5432/db), the same history is generated there too
(same generator, same seed) and two more columns show the auditor's queries on that database
and whether PostgreSQL's plan for the query scans one of the big tables whole ("seq:metrics")
or reaches them through indexes ("index").

Then grows the same file to ten million stored metric rows and measures again, printing how each
query's time grew next to how its row count grew (an indexed query must not grow with the
history; an export of the whole history does).

usage: .venv/bin/python bench/history_queries.py [--quick] [--rows N ...] [--rounds N] [--db PATH]
                                                  [--url URL]
"""

from __future__ import annotations

import argparse
import math
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from auditor.history import queries as h  # noqa: E402
from auditor.history.store import Store  # noqa: E402
from tests.history_fixtures import DRIFTING_PAIR, generate_history, runs_for  # noqa: E402

SHAPE = {"probes": ("ppo_policy", "action_sampler"), "variants": ("fp32", "fp16")}
START = datetime(2026, 1, 1)
INTERVAL = timedelta(minutes=15)

PRIMARY = (
    "{a}.id = (SELECT min(x.id) FROM latencies x WHERE x.result_id = {a}.result_id AND x.side = {a}.side)"
)
# probe results with the p50 of each side at the probe's own batch (the first latency row per side)
RESULTS = (
    "SELECT r.id, r.started_at, p.pair, p.probe, p.variant, p.status, lt.p50_us, li.p50_us, p.message "
    "FROM probe_results p JOIN runs r ON r.id = p.run_id "
    "LEFT JOIN latencies lt ON lt.result_id = p.id AND lt.side = 'train' AND " + PRIMARY.format(a="lt") + " "
    "LEFT JOIN latencies li ON li.result_id = p.id AND li.side = 'infer' AND " + PRIMARY.format(a="li") + " "
)
TREND_COLUMNS = (
    "p.pair, p.probe, p.variant, m.output, r.id, r.started_at, m.value, p.status, st.name, si.name"
)


def queries(last: datetime) -> list[tuple[str, Callable, str, tuple]]:
    """(name, auditor call on a connection, hand-written SQL, its parameters)."""
    week = (last - timedelta(days=7), last + timedelta(seconds=1))
    day = (last - timedelta(days=1), last + timedelta(seconds=1))
    s = lambda d: d.isoformat(" ")  # noqa: E731 - SQLAlchemy stores SQLite datetimes like this
    return [
        (
            "pair + metric, last 7 days",
            lambda c: list(
                h.metric_rows(
                    c,
                    h.Filters(
                        pairs=(DRIFTING_PAIR,), metrics=("max_abs",), since=week[0], until=week[1], limit=None
                    ),
                )
            ),
            "SELECT r.id, r.started_at, p.pair, p.probe, p.variant, p.status, m.output, m.name, m.value "
            "FROM metrics m JOIN probe_results p ON p.metric_set_id = m.set_id "
            "JOIN runs r ON r.id = p.run_id "
            "WHERE p.pair = ? AND m.name = ? AND r.started_at >= ? AND r.started_at < ? "
            "ORDER BY r.started_at DESC, r.id DESC, p.id, m.id",
            (DRIFTING_PAIR, "max_abs", s(week[0]), s(week[1])),
        ),
        (
            "probe + status (drift, error), newest 100",
            lambda c: list(
                h.result_rows(
                    c, h.Filters(probes=("action_sampler",), statuses=("drift", "error"), limit=100)
                )
            ),
            RESULTS + "WHERE p.probe = ? AND p.status IN (?, ?) "
            "ORDER BY r.started_at DESC, r.id DESC, p.id LIMIT 100",
            ("action_sampler", "drift", "error"),
        ),
        (
            "latest 50 results",
            lambda c: list(h.result_rows(c, h.Filters(limit=50))),
            RESULTS + "ORDER BY r.started_at DESC, r.id DESC, p.id LIMIT 50",
            (),
        ),
        (
            "stack, last day",
            lambda c: list(
                h.result_rows(c, h.Filters(stacks=("lite20",), since=day[0], until=day[1], limit=None))
            ),
            RESULTS + "WHERE (p.train_stack_id IN (SELECT id FROM stacks WHERE name = ?) "
            "OR p.infer_stack_id IN (SELECT id FROM stacks WHERE name = ?)) "
            "AND r.started_at >= ? AND r.started_at < ? ORDER BY r.started_at DESC, r.id DESC, p.id",
            ("lite20", "lite20", s(day[0]), s(day[1])),
        ),
        (
            "trend: one metric, one series, all time",
            lambda c: [
                p
                for series in h.trend(
                    c,
                    "max_abs",
                    h.Filters(
                        pairs=(DRIFTING_PAIR,),
                        probes=("ppo_policy",),
                        variants=("fp32",),
                        outputs=("mean",),
                        limit=None,
                    ),
                )
                for p in series.points
            ],
            f"SELECT {TREND_COLUMNS} "
            "FROM metrics m JOIN probe_results p ON p.metric_set_id = m.set_id "
            "JOIN runs r ON r.id = p.run_id "
            "JOIN stacks st ON st.id = p.train_stack_id JOIN stacks si ON si.id = p.infer_stack_id "
            "WHERE m.name = ? AND m.output = ? AND p.pair = ? AND p.probe = ? AND p.variant = ? "
            "ORDER BY r.started_at, r.id",
            ("max_abs", "mean", DRIFTING_PAIR, "ppo_policy", "fp32"),
        ),
        (
            "trend: latest 200 points of every series",
            lambda c: [p for series in h.trend(c, "cosine", h.Filters(limit=200)) for p in series.points],
            latest_per_series,
            ("cosine", 200),
        ),
        (
            "trend: latency p50, latest 200 per series",
            lambda c: [
                p for series in h.trend(c, "latency.p50_us", h.Filters(limit=200)) for p in series.points
            ],
            latest_latency_per_series,
            ("p50_us", 200),
        ),
        (
            "one metric, whole history (export)",
            lambda c: list(h.metric_rows(c, h.Filters(metrics=("min_atol",), limit=None))),
            "SELECT r.id, r.started_at, p.pair, p.probe, p.variant, p.status, m.output, m.name, m.value "
            "FROM metrics m JOIN probe_results p ON p.metric_set_id = m.set_id "
            "JOIN runs r ON r.id = p.run_id "
            "WHERE m.name = ? ORDER BY r.started_at DESC, r.id DESC, p.id, m.id",
            ("min_atol",),
        ),
    ]


def latest_per_series(raw: sqlite3.Connection, metric: str, n: int) -> list[tuple]:
    """The best plain SQL found for "the newest n points of every series": the list of series
    from the `series` table, then per series a walk of the newest runs (CROSS JOIN makes SQLite
    keep runs as the outer loop, in ix_runs_started_at order, whatever its statistics say)
    that looks each run's result up in ix_probe_results_pair_probe_variant_run_id and its
    value in ix_metrics_set_id_name_output, and stops after n points. Ranking every value
    of the metric with row_number() reads them all (measured: about 1.5 s on a million
    metric rows)."""
    rows: list[tuple] = []
    for pair, probe, variant, output in raw.execute(
        "SELECT pair, probe, variant, output FROM series WHERE metric = ? "
        "ORDER BY pair, probe, variant, output",
        (metric,),
    ).fetchall():
        newest = raw.execute(
            "SELECT p.pair, p.probe, p.variant, m.output, r.id, r.started_at, m.value, p.status, "
            "st.name, si.name FROM runs r CROSS JOIN probe_results p CROSS JOIN metrics m "
            "JOIN stacks st ON st.id = p.train_stack_id JOIN stacks si ON si.id = p.infer_stack_id "
            "WHERE p.run_id = r.id AND m.set_id = p.metric_set_id "
            "AND p.pair = ? AND p.probe = ? AND p.variant = ? "
            "AND m.name = ? AND m.output = ? ORDER BY r.started_at DESC, r.id DESC LIMIT ?",
            (pair, probe, variant, metric, output, n),
        ).fetchall()
        rows.extend(reversed(newest))
    return rows


def latest_latency_per_series(raw: sqlite3.Connection, stat: str, n: int) -> list[tuple]:
    """The same walk for latencies: the series from `latency_series` (pair, probe, variant,
    side), per series the newest runs' result and its latency row of the probe's own batch
    (the first of its side: ix_latencies_result_id_side)."""
    assert stat in ("p50_us", "p90_us", "p99_us", "mean_us")
    rows: list[tuple] = []
    for pair, probe, variant, side in raw.execute(
        "SELECT pair, probe, variant, side FROM latency_series ORDER BY pair, probe, variant, side"
    ).fetchall():
        newest = raw.execute(
            f"SELECT p.pair, p.probe, p.variant, l.side, r.id, r.started_at, l.{stat}, p.status, "
            "st.name, si.name FROM runs r CROSS JOIN probe_results p CROSS JOIN latencies l "
            "JOIN stacks st ON st.id = p.train_stack_id JOIN stacks si ON si.id = p.infer_stack_id "
            "WHERE p.run_id = r.id AND l.result_id = p.id AND p.pair = ? AND p.probe = ? AND p.variant = ? "
            "AND l.side = ? AND l.id = (SELECT min(x.id) FROM latencies x WHERE x.result_id = p.id "
            "AND x.side = ?) ORDER BY r.started_at DESC, r.id DESC LIMIT ?",
            (pair, probe, variant, side, side, n),
        ).fetchall()
        rows.extend(reversed(newest))
    return rows


def timed(fn: Callable[[], list], rounds: int) -> tuple[float, int]:
    times, n = [], 0
    for _ in range(rounds):
        t0 = time.perf_counter()
        n = len(fn())
        times.append(time.perf_counter() - t0)
    return statistics.median(times), n


def timed_side_by_side(
    first: Callable[[], list], second: Callable[[], list], rounds: int
) -> tuple[tuple[float, int], tuple[float, int]]:
    """Both timed in turn in each round (a shared machine's load hits both alike)."""
    a: list[float] = []
    b: list[float] = []
    n = m = 0
    for _ in range(rounds):
        t0 = time.perf_counter()
        n = len(first())
        a.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        m = len(second())
        b.append(time.perf_counter() - t0)
    return (statistics.median(a), n), (statistics.median(b), m)


def fmt_ms(seconds: float) -> str:
    ms = seconds * 1000
    return f"{ms:.2f}" if ms < 10 else f"{ms:.1f}" if ms < 100 else f"{ms:.0f}"


def ensure_rows(db: Path, rows: int) -> None:
    """Grow the history in ``db`` to at least ``rows`` stored metric rows (runs appended after
    the last). Metric sets are content-addressed, so a run stores fewer rows than it has
    values: the rows are counted after each batch of runs and the next batch sized by what a
    run really stored."""
    store = Store.open(f"sqlite:///{db}")
    made = stored_total = batch = 0
    while True:
        with store.engine.connect() as conn:
            have = conn.exec_driver_sql("SELECT count(*) FROM metrics").scalar()
            last = conn.exec_driver_sql("SELECT max(started_at) FROM runs").scalar()
            seed = conn.exec_driver_sql("SELECT count(*) FROM runs").scalar()  # new values, not a replay
        if have >= rows:
            break
        if made == 0:
            batch = runs_for(rows - have, **SHAPE)
        else:  # by what the runs so far stored, growing a batch at most twofold
            batch = min(math.ceil((rows - have) * made / max(stored_total, 1)), 2 * batch)
        t0 = time.perf_counter()
        start = START if last is None else datetime.fromisoformat(last) + INTERVAL
        gen = generate_history(
            store.engine, max(batch, 1), start=start, interval=INTERVAL, seed=seed, **SHAPE
        )
        with store.engine.connect() as conn:
            stored = conn.exec_driver_sql("SELECT count(*) FROM metrics").scalar() - have
        made, stored_total = made + gen.counts["runs"], stored_total + stored
        print(
            f"generated {gen.counts['runs']} runs, {gen.counts['probe_results']} probe results, "
            f"{stored} metric rows, {gen.counts['latencies']} latency rows "
            f"in {time.perf_counter() - t0:.1f} s"
        )
    store.close()


def measure(db: Path, rounds: int, url: str | None = None) -> tuple[int, dict[str, tuple[int, float, float]]]:
    """(metric rows stored, name -> (rows, auditor seconds, sqlite3 seconds)), medians of
    ``rounds``, warm cache; with ``url``, the same queries on that database too (printed side
    by side)."""
    store = Store.open(f"sqlite:///{db}")
    with store.engine.connect() as conn:
        t0 = time.perf_counter()
        if h.refresh_statistics(conn):
            print(f"planner statistics collected in {time.perf_counter() - t0:.2f} s")
        counts = {
            t: conn.exec_driver_sql(f"SELECT count(*) FROM {t}").scalar()
            for t in ("runs", "probe_results", "metrics", "latencies")
        }
        last = datetime.fromisoformat(conn.exec_driver_sql("SELECT max(started_at) FROM runs").scalar())
    size = db.stat().st_size / 2**20
    print(
        f"\nhistory: {counts['runs']} runs, {counts['probe_results']} probe results, "
        f"{counts['metrics']} metric rows, {counts['latencies']} latency rows; {size:.0f} MiB ({db})"
    )
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"median of {rounds} rounds, auditor and sqlite3 in turn in each round, warm cache; "
        f"load average {load}"
    )
    other = _second_database(url, counts) if url else None
    raw = sqlite3.connect(db)
    header = f"{'query':<42} {'rows':>8} {'auditor ms':>11} {'sqlite3 ms':>11} {'ratio':>6}"
    if other is not None:
        header += f" {'postgres ms':>12} {'plan':<7}"
    header += "  goal"
    print(header)
    print("-" * len(header))
    out: dict[str, tuple[int, float, float]] = {}
    with store.engine.connect() as conn:
        for name, call, sql, params in queries(last):
            if callable(sql):
                run_raw = lambda sql=sql, params=params: sql(raw, *params)  # noqa: E731
            else:
                run_raw = lambda sql=sql, params=params: raw.execute(sql, params).fetchall()  # noqa: E731
            call(conn)  # warm the page cache and SQLAlchemy's statement cache
            run_raw()
            (t_aud, n_aud), (t_raw, n_raw) = timed_side_by_side(lambda call=call: call(conn), run_raw, rounds)
            if n_aud != n_raw:
                raise SystemExit(f"{name}: the auditor read {n_aud} rows, the hand-written SQL {n_raw}")
            goal = "ratio <= 2"
            if name.startswith("trend: latest 200") or name.startswith("trend: latency"):
                goal += f", auditor <= 300 ms: {'ok' if t_aud <= 0.3 else 'MISSED'}"
            line = f"{name:<42} {n_aud:>8} {fmt_ms(t_aud):>11} {fmt_ms(t_raw):>11} {t_aud / t_raw:>6.2f}"
            if other is not None:
                line += " " + _on_second(other, name, call, sql, params, n_aud, rounds)
            print(f"{line}  {goal}")
            out[name] = (n_aud, t_aud, t_raw)
    raw.close()
    store.close()
    if other is not None:
        other.close()
    return counts["metrics"], out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--rows",
        type=int,
        nargs="+",
        default=[1_000_000, 10_000_000],
        help="history sizes in stored metric rows (counted, not estimated), measured in turn on one "
        "growing file",
    )
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds per query (median)")
    ap.add_argument("--db", type=Path, help="SQLite file to use (and grow); default: a temporary one")
    ap.add_argument(
        "--quick", action="store_true", help="20,000 metric rows, one round: checks the bench works"
    )
    ap.add_argument(
        "--url",
        help="a second database (PostgreSQL) to run the same queries on, side by side "
        "(at the first history size)",
    )
    args = ap.parse_args()
    if args.quick:
        args.rows, args.rounds = [20_000], 1

    tmp = None
    if args.db is None:
        tmp = tempfile.TemporaryDirectory(prefix="auditor-bench-")
        args.db = Path(tmp.name) / "history.db"
    figures: list[tuple[int, dict[str, tuple[int, float, float]]]] = []
    for i, rows in enumerate(sorted(args.rows)):
        ensure_rows(args.db, rows)
        figures.append(measure(args.db, args.rounds, args.url if i == 0 else None))
    if len(figures) > 1:
        (small, first), (big, last) = figures[0], figures[-1]
        print(f"\ngrowth from {small:,} to {big:,} stored metric rows ({big / small:.1f}x the history):")
        print(f"{'query':<42} {'rows x':>7} {'auditor x':>10} {'sqlite3 x':>10}")
        for name, (n0, a0, r0) in first.items():
            n1, a1, r1 = last[name]
            print(f"{name:<42} {n1 / max(n0, 1):>7.1f} {a1 / a0:>10.1f} {r1 / r0:>10.1f}")
    if tmp is not None:
        tmp.cleanup()


BIG_TABLES = ("metrics", "probe_results", "latencies")


def _second_database(url: str, counts: dict[str, int]) -> Store:
    """The --url database holding the same history as the SQLite file (generated when empty)."""
    other = Store.open(url)
    with other.engine.connect() as conn:
        have = conn.exec_driver_sql("SELECT count(*) FROM metrics").scalar()
    if have == 0:
        t0 = time.perf_counter()
        generate_history(other.engine, counts["runs"], start=START, interval=INTERVAL, **SHAPE)
        print(f"generated the same history in {other.display_url} in {time.perf_counter() - t0:.1f} s")
    with other.engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql("ANALYZE")  # fresh rows: do not wait for autovacuum's statistics
        theirs = {t: conn.exec_driver_sql(f"SELECT count(*) FROM {t}").scalar() for t in counts}
    if theirs != counts:
        raise SystemExit(
            f"{other.display_url} holds another history ({theirs}), not {counts}: use an empty one"
        )
    print(f"second database: {other.display_url}, the same history")
    return other


def _on_second(
    other: Store, name: str, call: Callable, sql: str, params: tuple, rows: int, rounds: int
) -> str:
    """The auditor's query timed on the second database, and whether its plan scans a table."""
    with other.engine.connect() as conn:
        call(conn)
        t, n = timed(lambda: call(conn), rounds)
        if n != rows:
            raise SystemExit(f"{name}: {n} rows on {other.display_url}, {rows} on SQLite")
    plan = ""
    if other.engine.dialect.name == "postgresql" and isinstance(sql, str):
        with other.engine.connect() as conn:  # not the streaming one the history queries used
            lines = conn.exec_driver_sql("EXPLAIN " + sql.replace("?", "%s"), params).scalars().all()
        # a whole-table scan of one of the big tables; the small ones (stacks, runs) may be scanned
        big = {t for line in lines for t in BIG_TABLES if f"Seq Scan on {t} " in line}
        plan = "seq:" + ",".join(sorted(big)) if big else "index"
    return f"{fmt_ms(t):>12} {plan:<7}"


if __name__ == "__main__":
    main()
