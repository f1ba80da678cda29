"""How big the history is and will be (``auditor db size``): the database's bytes now, the
complete runs it holds, their average size, and what ``keep_days`` of runs at the schedule's
rate come to. A fleet's history grows with its hosts; this says whether the disk (or the
PostgreSQL instance) will hold it before it fills.

What a run adds is not the average run: fingerprints, exported models, metric sets and
threshold tables are kept once by content, so a first run stores most of them and a later one
little (a fleet's consistent hosts repeat their peers' figures). The projection therefore
measures the newest complete run: its own rows (its results, their latencies, its findings,
...) and the shared rows it was the first to store, each at its table's average bytes per row
(indexes included); the rest of the database (what runs share, the schema) is counted once.
Where the table sizes cannot be read, the average run stands in, which errs on the side of a
larger database.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, Table, func, select, text
from sqlalchemy.exc import OperationalError

from auditor.db import schema as m
from auditor.history.retention import CONTENT_ADDRESSED


@dataclass(frozen=True)
class HistorySize:
    bytes: int
    """The database's size: SQLite's used pages, or PostgreSQL's pg_database_size."""
    runs: int
    """Complete runs, of every auditor."""
    first: datetime | None
    last: datetime | None
    keep_days: int
    runs_per_day: float
    """At the schedule's interval (or as observed, with cron or no schedule)."""
    newest_run: float | None = None
    """Bytes the newest complete run added (its rows, and the shared rows it stored first);
    None where the tables' sizes cannot be read."""

    @property
    def per_run(self) -> float | None:
        return self.bytes / self.runs if self.runs else None

    @property
    def projected(self) -> float | None:
        """Bytes at ``keep_days`` of runs (None: nothing to average yet, or keep_days 0: the
        history is never pruned and grows without bound): what runs share, once, and the
        newest run's growth per run kept."""
        if self.per_run is None or self.keep_days <= 0:
            return None
        kept = self.runs_per_day * self.keep_days
        if self.newest_run is None:
            return self.per_run * kept
        shared = max(self.bytes - self.runs * self.newest_run, 0.0)
        return shared + self.newest_run * kept

    def to_json(self) -> dict[str, Any]:
        return dict(asdict(self), per_run=self.per_run, projected=self.projected)

    def summary(self) -> str:
        if not self.runs:
            return f"{_size(self.bytes)} and no complete run yet: nothing to project"
        span = f"from {self.first:%Y-%m-%d %H:%M} to {self.last:%Y-%m-%d %H:%M} UTC" if self.first else ""
        per_run = self.per_run or 0.0
        head = (
            f"{_size(self.bytes)} for {self.runs} complete run(s) {span}: {_size(per_run)} per run on average"
        )
        if self.newest_run is not None:
            head += f", {_size(self.newest_run)} added by the newest"
        if self.projected is None:
            return head + "; keep_days is 0: runs are never pruned, the history grows without bound"
        return (
            f"{head}; at {self.runs_per_day:g} run(s) a day kept {self.keep_days} days: "
            f"about {_size(self.projected)}"
        )


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def database_bytes(engine: Engine) -> int:
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            pages = conn.execute(text("PRAGMA page_count")).scalar() or 0
            free = conn.execute(text("PRAGMA freelist_count")).scalar() or 0
            size = conn.execute(text("PRAGMA page_size")).scalar() or 0
            return int((pages - free) * size)
        return int(conn.execute(text("SELECT pg_database_size(current_database())")).scalar() or 0)


def measure(engine: Engine, keep_days: int, interval: float | None) -> HistorySize:
    """The history's size now and its runs; ``interval``: the schedule's seconds between
    cycles (None: the rate the runs were made at)."""
    with engine.connect() as conn:
        runs, first, last = conn.execute(
            select(func.count(), func.min(m.Run.finished_at), func.max(m.Run.finished_at)).where(
                m.Run.status == "complete"
            )
        ).one()
    if interval:
        rate = 86400.0 / interval
    elif runs and first is not None and last is not None and last > first:
        rate = (runs - 1) * 86400.0 / (last - first).total_seconds()
    else:
        rate = 1.0
    newest = newest_run_bytes(engine)
    return HistorySize(database_bytes(engine), int(runs), first, last, keep_days, round(rate, 3), newest)


def table_bytes(conn: Connection) -> dict[str, int] | None:
    """Bytes per table, its indexes included (None: not readable here, e.g. SQLite without
    the dbstat table)."""
    if conn.dialect.name == "sqlite":
        try:
            pages = conn.execute(
                text(
                    "SELECT coalesce(s.tbl_name, d.name), sum(d.pgsize) FROM dbstat d "
                    "LEFT JOIN sqlite_master s ON s.name = d.name GROUP BY 1"
                )
            ).all()
        except OperationalError:
            return None
        return {name: int(n) for name, n in pages}
    if conn.dialect.name == "postgresql":
        rows = conn.execute(
            text(
                "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE c.relkind = 'r' AND n.nspname = current_schema()"
            )
        ).all()
        return {name: int(n) for name, n in rows}
    return None


def newest_run_bytes(engine: Engine) -> float | None:
    """What the newest complete run added: the rows that belong to it (by their foreign keys
    to the run or to its results) and the content-addressed rows stored since it began, each
    at its table's bytes per row."""
    with engine.connect() as conn:
        sizes = table_bytes(conn)
        newest = conn.execute(
            select(m.Run.id, m.Run.started_at)
            .where(m.Run.status == "complete")
            .order_by(m.Run.finished_at.desc(), m.Run.id.desc())
            .limit(1)
        ).first()
        if sizes is None or newest is None:
            return None
        run_id, started = newest
        # The run's row and the shared rows stored since it began; then, parents first, every
        # row that belongs to one of those (ON DELETE CASCADE): its results, their latencies,
        # its findings, a new metric set's metrics.
        runs = m.Run.__table__
        owned: dict[Table, Any] = {runs: runs.c.id == run_id}
        owned.update({c.__table__: c.__table__.c.created_at >= started for c in CONTENT_ADDRESSED})
        for table in m.Base.metadata.sorted_tables:
            for fk in table.foreign_keys:
                parent = fk.column.table
                if fk.ondelete == "CASCADE" and parent in owned:
                    owned.setdefault(table, fk.parent.in_(select(fk.column).where(owned[parent])))
        total = 0.0
        for table, condition in owned.items():
            rows = conn.scalar(select(func.count()).select_from(table))
            if not rows or not sizes.get(table.name):
                continue
            mine = conn.scalar(select(func.count()).select_from(table).where(condition)) or 0
            total += sizes[table.name] * mine / rows
        return total
