"""Retention: delete the runs older than ``[storage] keep_days`` with everything they stored.

A pruned run takes its rows with it (probe results, latencies, findings, stacks'
fingerprint links, and whatever later tables hang off runs or results with ON DELETE
CASCADE); references declared ON DELETE SET NULL (an alert that was opened by the run) are
cleared; a row that refers to a run or to one of its results without either (a pinned
baseline, say) keeps that run. Content-addressed rows (fingerprints, exported models and
their bytes, metric sets with their metrics, threshold tables) that no row refers to any more
are deleted too, if they are older than the cut-off.

The rules come from the foreign keys of the ORM metadata, not from a list of tables, so
tables added later are pruned correctly without touching this module. Everything happens
in one transaction that holds the write lock from the start, so the runs chosen are the
runs deleted; a dry run does the same work and rolls it back, which makes its counts exact.
A run that is still ``running`` is never touched, however old.

Several auditors on one database: an auditor prunes only its own runs (``runs.auditor_id``),
by its own ``keep_days``; another auditor's runs stay until that auditor (or
``auditor db prune --all-auditors``) prunes them. Content-addressed rows are shared by every
auditor, so they go only when no run of any auditor refers to them any more.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Column, Connection, Engine, Table, and_, delete, exists, func, select, update

from auditor.db import queue_tables
from auditor.db import schema as m
from auditor.history import series, telemetry
from auditor.history.filters import utcnow
from auditor.history.queries import refresh_statistics

CHUNK = 500
CONTENT_ADDRESSED: tuple[Any, ...] = (
    m.Fingerprint,
    m.FingerprintTemplate,  # after the fingerprints that refer to it
    m.Artifact,
    m.ArtifactBlob,  # after the artifacts that refer to it
    m.MetricSet,
    m.ThresholdSet,
)


@dataclass
class PruneResult:
    """What a prune deleted (or, for a dry run, would delete)."""

    keep_days: int
    cutoff: datetime
    dry_run: bool
    runs: int = 0
    deleted: dict[str, int] = field(default_factory=dict)
    """Rows per table, runs included."""
    cleared: dict[str, int] = field(default_factory=dict)
    """References set to NULL, per ``table.column``."""
    kept_running: int = 0
    """Runs older than the cut-off left alone because they are still running."""
    kept_referenced: int = 0
    """Runs older than the cut-off kept because a row refers to them (or their results)."""
    auditor_id: str | None = None
    """Whose runs were pruned (None: every auditor's)."""

    def summary(self) -> str:
        verb = "would delete" if self.dry_run else "deleted"
        parts = [f"{n} {t}" for t, n in self.deleted.items() if n and t != "runs"]
        whose = f" of auditor {self.auditor_id}" if self.auditor_id is not None else ""
        text = (
            f"{verb} {self.runs} run(s){whose} started before {self.cutoff:%Y-%m-%d %H:%M} UTC "
            f"(keep_days = {self.keep_days})"
        )
        if parts:
            text += ": " + ", ".join(parts)
        if any(self.cleared.values()):
            text += "; cleared " + ", ".join(f"{n} {c}" for c, n in self.cleared.items() if n)
        kept = []
        if self.kept_running:
            kept.append(f"{self.kept_running} still running")
        if self.kept_referenced:
            kept.append(f"{self.kept_referenced} referred to by other rows")
        if kept:
            text += "; kept " + ", ".join(kept)
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "keep_days": self.keep_days,
            "cutoff": self.cutoff.isoformat() + "Z",
            "dry_run": self.dry_run,
            "runs": self.runs,
            "deleted": self.deleted,
            "cleared": self.cleared,
            "kept_running": self.kept_running,
            "kept_referenced": self.kept_referenced,
            "auditor_id": self.auditor_id,
        }


def prune(
    engine: Engine,
    keep_days: int,
    *,
    now: datetime | None = None,
    dry_run: bool = False,
    auditor_id: str | None = None,
) -> PruneResult:
    """Delete the runs that started more than ``keep_days`` days before ``now`` (UTC), with
    their rows and the content-addressed rows nothing refers to any more, in one transaction.
    ``keep_days`` 0 deletes nothing (keep forever). ``auditor_id``: only that auditor's runs
    (None: every auditor's)."""
    if keep_days < 0:
        raise ValueError(f"keep_days must be 0 (keep forever) or more, not {keep_days}")
    cutoff = (now or utcnow()) - timedelta(days=keep_days)
    result = PruneResult(keep_days, cutoff, dry_run, auditor_id=auditor_id)
    if keep_days == 0:
        return result
    with engine.connect() as conn:
        tx = conn.begin()
        try:
            _lock(conn)
            _prune(conn, result)
        except BaseException:
            tx.rollback()
            raise
        if dry_run:
            tx.rollback()
        else:
            tx.commit()
            if result.runs:
                refresh_statistics(conn)
    return result


def apply_retention(store: Any, keep_days: int, now: datetime | None = None) -> PruneResult | None:
    """The daemon's call after each cycle: prune ``store`` (an auditor.history.store.Store) to
    ``keep_days`` (the config's ``keep_days``); None when retention is off (0)."""
    if keep_days == 0:
        return None
    return prune(store.engine, keep_days, now=now, auditor_id=store.auditor_id)


def _lock(conn: Connection) -> None:
    """Take the write lock before choosing the runs, so no writer changes them in between."""
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    elif conn.dialect.name == "postgresql":
        conn.exec_driver_sql("LOCK TABLE runs IN SHARE ROW EXCLUSIVE MODE")


def _prune(conn: Connection, result: PruneResult) -> None:
    runs = m.Run.__table__
    old: tuple = (runs.c.started_at < result.cutoff,)
    if result.auditor_id is not None:
        old += (runs.c.auditor_id == result.auditor_id,)
    result.kept_running = conn.scalar(
        select(func.count()).select_from(runs).where(*old, runs.c.status == "running")
    )
    candidates = list(
        conn.scalars(select(runs.c.id).where(*old, runs.c.status != "running").order_by(runs.c.id))
    )
    blocked = _blocked(conn, runs, candidates, set())
    doomed = [i for i in candidates if i not in blocked]
    result.kept_referenced = len(candidates) - len(doomed)
    result.runs = len(doomed)
    for chunk in _chunks(doomed):
        _delete(conn, runs, chunk, result, set())
    for model in CONTENT_ADDRESSED:
        _delete_unreferenced(conn, model.__table__, result)
    if doomed:
        result.deleted["series"] = series.prune(conn)
    # NPU telemetry belongs to no run (the daemon samples between cycles too): pruned by age.
    result.deleted.update(telemetry.prune(conn, result.cutoff, result.auditor_id))
    # the job queue's rows of cycles long over ([queue], PostgreSQL): every auditor's
    result.deleted.update(queue_tables.prune(conn, result.cutoff))


def _dependents(table: Table) -> Iterator[tuple[Table, Column, str]]:
    """(table, column, ondelete) of every foreign key that refers to ``table``."""
    for other in table.metadata.sorted_tables:
        for fk in other.foreign_keys:
            if fk.column.table is table:
                yield other, fk.parent, (fk.ondelete or "NO ACTION").upper()


def _pk(table: Table) -> Column:
    cols = list(table.primary_key.columns)
    if len(cols) != 1:
        raise RuntimeError(
            f"retention: table {table.name} has dependent rows but a composite primary key; "
            "give it a single-column key or make its references ON DELETE SET NULL"
        )
    return cols[0]


def _chunks(ids: Sequence[Any]) -> Iterator[list[Any]]:
    for i in range(0, len(ids), CHUNK):
        yield list(ids[i : i + CHUNK])


def _blocked(conn: Connection, table: Table, ids: Sequence[Any], seen: set[str]) -> set[Any]:
    """The ids of ``table`` that cannot be deleted: some row refers to them (or to a row that
    would be deleted with them) without ON DELETE CASCADE or SET NULL."""
    if not ids or table.name in seen:
        return set()
    seen = seen | {table.name}
    blocked: set[Any] = set()
    for child, col, ondelete in _dependents(table):
        if ondelete == "SET NULL":
            continue
        for chunk in _chunks(ids):
            if ondelete != "CASCADE":
                blocked.update(conn.scalars(select(col).where(col.in_(chunk)).distinct()))
            elif any(True for _ in _dependents(child)):
                pk = _pk(child)
                parent_of = dict(conn.execute(select(pk, col).where(col.in_(chunk))).all())
                for child_id in _blocked(conn, child, list(parent_of), seen):
                    blocked.add(parent_of[child_id])
    return blocked


def _delete(conn: Connection, table: Table, ids: list[Any], result: PruneResult, seen: set[str]) -> None:
    """Delete rows of ``table`` by primary key, their dependents first."""
    if not ids:
        return
    seen = seen | {table.name}
    pk = _pk(table)
    for child, col, ondelete in _dependents(table):
        if ondelete == "SET NULL":
            n = conn.execute(update(child).where(col.in_(ids)).values({col.name: None})).rowcount
            key = f"{child.name}.{col.name}"
            result.cleared[key] = result.cleared.get(key, 0) + n
        elif ondelete == "CASCADE" and child.name not in seen:
            if any(True for _ in _dependents(child)):
                child_ids = list(conn.scalars(select(_pk(child)).where(col.in_(ids))))
                for chunk in _chunks(child_ids):
                    _delete(conn, child, chunk, result, seen)
            else:
                n = conn.execute(delete(child).where(col.in_(ids))).rowcount
                result.deleted[child.name] = result.deleted.get(child.name, 0) + n
    n = conn.execute(delete(table).where(pk.in_(ids))).rowcount
    result.deleted[table.name] = result.deleted.get(table.name, 0) + n


def _delete_unreferenced(conn: Connection, table: Table, result: PruneResult) -> None:
    """Delete content-addressed rows older than the cut-off that no row refers to, with their
    parts (rows that refer to them ON DELETE CASCADE: a metric set's metrics)."""
    pk = _pk(table)
    dependents = list(_dependents(table))
    conditions = [~exists().where(col == pk) for _child, col, ondelete in dependents if ondelete != "CASCADE"]
    if "created_at" in table.c:
        conditions.append(table.c.created_at < result.cutoff)
    parts = [(child, col) for child, col, ondelete in dependents if ondelete == "CASCADE"]
    if not parts:
        n = conn.execute(delete(table).where(and_(*conditions))).rowcount
        result.deleted[table.name] = result.deleted.get(table.name, 0) + n
        return
    doomed = list(conn.scalars(select(pk).where(and_(*conditions))))
    for chunk in _chunks(doomed):
        for child, col in parts:
            n = conn.execute(delete(child).where(col.in_(chunk))).rowcount
            result.deleted[child.name] = result.deleted.get(child.name, 0) + n
        n = conn.execute(delete(table).where(pk.in_(chunk))).rowcount
        result.deleted[table.name] = result.deleted.get(table.name, 0) + n


__all__ = ["CONTENT_ADDRESSED", "PruneResult", "apply_retention", "prune"]
