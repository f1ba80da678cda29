"""How big the history is and will be (``auditor db size``): the database's bytes now, the
complete runs it holds, their average size, and what ``keep_days`` of runs at the schedule's
rate come to. A fleet's history grows with its hosts; this says whether the disk (or the
PostgreSQL instance) will hold it before it fills.

The average includes what only a first run stores (fingerprints and exported models are kept
once by content), so on a young history it overstates what each later run adds: the
projection errs on the side of a larger database.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, func, select, text

from auditor.db import schema as m


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

    @property
    def per_run(self) -> float | None:
        return self.bytes / self.runs if self.runs else None

    @property
    def projected(self) -> float | None:
        """Bytes at ``keep_days`` of runs (None: nothing to average yet, or keep_days 0: the
        history is never pruned and grows without bound)."""
        if self.per_run is None or self.keep_days <= 0:
            return None
        return self.per_run * self.runs_per_day * self.keep_days

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
    return HistorySize(database_bytes(engine), int(runs), first, last, keep_days, round(rate, 3))
