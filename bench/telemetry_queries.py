"""How fast are the NPU telemetry history queries on a million points, next to plain SQL?

Generates NPU telemetry the way the daemon samples it (every minute; two hosts of eight NPUs,
sixteen metrics each: 256 series; a million points is about 2.7 days), then times the reads
two ways, each the median of several rounds on the same file (both in turn in each round, so
a shared machine's load weighs on both alike):
  - auditor: the functions behind `auditor telemetry show`, the report and the cycle's
    threshold check (auditor.history.telemetry);
  - sqlite3: the same query written by hand and run with the sqlite3 module;
and prints both with their ratio and the goals of bench/history_queries.py: the auditor at
most twice the hand-written SQL, and the "newest 200 points of every series" walk within
300 ms whatever the length of the history (it is printed again after growing the file to
--grow points: its time must not grow with the history).

usage: .venv/bin/python bench/telemetry_queries.py [--quick] [--points N] [--grow N] [--rounds N] [--db PATH]
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from history_queries import timed_side_by_side  # noqa: E402

from auditor.history import telemetry as th  # noqa: E402
from auditor.history.queries import refresh_statistics  # noqa: E402
from auditor.history.store import Store  # noqa: E402
from auditor.worker.npu_metrics import METRICS  # noqa: E402

START = datetime(2026, 1, 1)
STEP = timedelta(minutes=1)
HOSTS = ("infer-01", "infer-02")
NPUS = 8
SERIES_METRICS = (
    "power_w",
    "temperature_c",
    "hbm_temperature_c",
    "aicore_pct",
    "aicpu_pct",
    "aivector_pct",
    "ctrlcpu_pct",
    "npu_util_pct",
    "hbm_usage_pct",
    "hbm_capacity_mb",
    "hbm_bandwidth_pct",
    "ecc_hbm_single_bit",
    "ecc_hbm_double_bit",
    "ecc_isolated_pages",
    "health",
    "memory_usage_pct",
)  # what an Atlas A2 card reports (auditor.worker.npu_metrics)
assert set(SERIES_METRICS) <= set(METRICS)


def stored(when: datetime) -> str:
    """A time as SQLAlchemy stores it in SQLite (microseconds always written)."""
    return when.strftime("%Y-%m-%d %H:%M:%S.%f")


AUDITOR = "bench"


def generate(db: Path, points: int) -> datetime:
    """Grow ``db`` to at least ``points`` telemetry points; returns the newest sample's time."""
    store = Store.open(f"sqlite:///{db}", auditor_id=AUDITOR)
    store.close()
    raw = sqlite3.connect(db)
    try:
        keys = [(h, n, "0", k) for h in HOSTS for n in range(NPUS) for k in SERIES_METRICS]
        raw.executemany(
            "INSERT OR IGNORE INTO telemetry_series (auditor_id, host, npu, chip, metric) "
            "VALUES (?, ?, ?, ?, ?)",
            [(AUDITOR, *k) for k in keys],
        )
        ids = [r[0] for r in raw.execute("SELECT id FROM telemetry_series ORDER BY id")]
        have, last = raw.execute("SELECT count(*), max(at) FROM telemetry_points").fetchone()
        at = START if last is None else datetime.fromisoformat(last) + STEP
        rng = random.Random(0)
        t0 = time.perf_counter()
        while have < points:
            stamp = stored(at)
            raw.executemany(
                "INSERT INTO telemetry_points (series_id, at, value) VALUES (?, ?, ?)",
                [(i, stamp, round(rng.uniform(0, 100), 1)) for i in ids],
            )
            have += len(ids)
            at += STEP
        raw.commit()
        if time.perf_counter() - t0 > 1:
            print(f"generated telemetry up to {have} points in {time.perf_counter() - t0:.1f} s")
        return at - STEP
    finally:
        raw.close()


def hand_newest(raw: sqlite3.Connection, n: int) -> list[tuple]:
    rows: list[tuple] = []
    for (series_id,) in raw.execute(
        "SELECT id FROM telemetry_series ORDER BY host, npu, chip, metric, auditor_id"
    ).fetchall():
        newest = raw.execute(
            "SELECT at, value FROM telemetry_points WHERE series_id = ? ORDER BY at DESC, id DESC LIMIT ?",
            (series_id, n),
        ).fetchall()
        rows.extend(reversed(newest))
    return rows


def queries(last: datetime) -> list[tuple[str, Callable, Callable, str]]:
    """(name, auditor call on a connection, hand-written SQL on a sqlite3 connection, goal)."""
    week = last - timedelta(days=7)
    hour = last - timedelta(hours=1)
    s = stored
    one = th.TelemetryFilters(hosts=("infer-01",), npus=(3,), metrics=("temperature_c",), since=week)
    return [
        (
            "newest 200 points of every series",
            lambda c: [p for x in th.newest(c, th.TelemetryFilters(), 200) for p in x.points],
            lambda r: hand_newest(r, 200),
            "ratio <= 2, auditor <= 300 ms",
        ),
        (
            "one NPU's temperature, last 7 days",
            lambda c: [p for x in th.between(c, one) for p in x.points],
            lambda r: r.execute(
                "SELECT p.series_id, p.at, p.value FROM telemetry_points p WHERE p.series_id IN "
                "(SELECT id FROM telemetry_series WHERE host = ? AND npu = ? AND metric = ?) "
                "AND p.at >= ? ORDER BY p.series_id, p.at, p.id",
                ("infer-01", 3, "temperature_c", s(week)),
            ).fetchall(),
            "ratio <= 2",
        ),
        (
            "one host, every series, last hour (a report window)",
            lambda c: [
                p
                for x in th.between(c, th.TelemetryFilters(hosts=("infer-02",), since=hour))
                for p in x.points
            ],
            lambda r: r.execute(
                "SELECT p.series_id, p.at, p.value FROM telemetry_points p WHERE p.series_id IN "
                "(SELECT id FROM telemetry_series WHERE host = ?) AND p.at >= ? "
                "ORDER BY p.series_id, p.at, p.id",
                ("infer-02", s(hour)),
            ).fetchall(),
            "ratio <= 2",
        ),
        (
            "worst value of every series in the last hour (a cycle's check)",
            lambda c: list(th.worst_since(c, AUDITOR, hour).items()),
            lambda r: r.execute(
                "SELECT s.host, s.npu, s.chip, s.metric, w.peak, min(p.at) FROM "
                "(SELECT series_id, max(value) AS peak FROM telemetry_points WHERE at >= ? AND series_id IN "
                "(SELECT id FROM telemetry_series WHERE auditor_id = ?) GROUP BY series_id) w "
                "JOIN telemetry_points p ON p.series_id = w.series_id AND p.value = w.peak AND p.at >= ? "
                "JOIN telemetry_series s ON s.id = w.series_id GROUP BY s.id",
                (s(hour), AUDITOR, s(hour)),
            ).fetchall(),
            "ratio <= 2",
        ),
    ]


def measure(db: Path, rounds: int, label: str) -> dict[str, float]:
    store = Store.open(f"sqlite:///{db}", auditor_id=AUDITOR)
    raw = sqlite3.connect(db)
    out: dict[str, float] = {}
    try:
        with store.engine.connect() as conn:
            refresh_statistics(conn)
            points = conn.exec_driver_sql("SELECT count(*) FROM telemetry_points").scalar()
            last = datetime.fromisoformat(
                conn.exec_driver_sql("SELECT max(at) FROM telemetry_points").scalar()
            )
            print(f"\n{label}: {points} telemetry points, load average {os.getloadavg()[0]:.1f}")
            print(f"  {'query':<62} {'rows':>7} {'auditor ms':>10} {'sqlite3 ms':>10} {'ratio':>6}  goal")
            for name, ours, theirs, goal in queries(last):
                (t_aud, n), (t_raw, m) = timed_side_by_side(
                    lambda ours=ours: ours(conn), lambda theirs=theirs: theirs(raw), rounds
                )
                assert n == m, f"{name}: the auditor read {n} rows, the hand-written SQL {m}"
                ratio = t_aud / t_raw if t_raw else float("inf")
                verdict = "ratio ok" if ratio <= 2 else "ratio MISSED"
                if "300 ms" in goal:
                    verdict += f", 300 ms {'ok' if t_aud <= 0.3 else 'MISSED'}"
                print(
                    f"  {name:<62} {n:>7} {t_aud * 1000:>10.1f} {t_raw * 1000:>10.1f} {ratio:>6.2f}  "
                    f"{goal}: {verdict}"
                )
                out[name] = t_aud
    finally:
        raw.close()
        store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100k points, then 200k; 3 rounds")
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument(
        "--grow", type=int, default=3_000_000, help="then grow to this many and measure again"
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--db", help="keep the generated history in this file (reused when it exists)")
    args = parser.parse_args()
    if args.quick:
        args.points, args.grow, args.rounds = 100_000, 200_000, 3
    with tempfile.TemporaryDirectory(prefix="bench-telemetry-") as tmp:
        db = Path(args.db) if args.db else Path(tmp) / "history.db"
        generate(db, args.points)
        first = measure(db, args.rounds, "history")
        if args.grow > args.points:
            generate(db, args.grow)
            grown = measure(db, args.rounds, "grown history")
            name = "newest 200 points of every series"
            print(
                f"\n{name}: {first[name] * 1000:.1f} ms at {args.points} points, "
                f"{grown[name] * 1000:.1f} ms at {args.grow} (goal: no growth with the history)"
            )


if __name__ == "__main__":
    main()
