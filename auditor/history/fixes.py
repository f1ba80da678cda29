"""What `auditor fix` found, kept in the history: one row per run of the command, read by the
gate (by the fixed file's digest: an audit of this very file), by a cycle (by policy, variant
and stacks: a fixed export exists) and listed by ``auditor history --fixes``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, select
from sqlalchemy.orm import Session

from auditor.db import schema as m
from auditor.history.queries import ServedResult

Key = tuple[str, str, str, str]
"""(name, variant, train stack, serving stack): a policy on one pair ("" variant for a model)."""


@dataclass(frozen=True)
class StoredFix:
    id: int
    created_at: datetime | None
    kind: str
    name: str
    variant: str
    train: str
    stack: str
    runtime: str
    runtime_version: str
    found: bool
    sha256: str | None
    status: str | None
    exports: int
    summary: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> Key:
        return (self.name, self.variant, self.train, self.stack)

    @property
    def cells(self) -> list[str] | None:
        cells = self.summary.get("cells")
        return list(cells) if isinstance(cells, list) else None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "kind": self.kind,
            "name": self.name,
            "variant": self.variant,
            "train": self.train,
            "stack": self.stack,
            "runtime": self.runtime,
            "runtime_version": self.runtime_version,
            "found": self.found,
            "sha256": self.sha256,
            "status": self.status,
            "exports": self.exports,
            "cells": self.cells,
            "change": list(self.summary.get("change") or []),
        }


T = m.FixRow.__table__


def _row(r: Any) -> StoredFix:
    return StoredFix(
        r.id,
        r.created_at,
        r.kind or "",
        r.name or "",
        r.variant or "",
        r.train or "",
        r.stack or "",
        r.runtime or "",
        r.runtime_version or "",
        bool(r.found),
        r.sha256,
        r.status,
        int(r.exports or 0),
        r.summary if isinstance(r.summary, dict) else {},
    )


def record(engine: Any, fix: StoredFix) -> int:
    """Store ``fix`` (its id and created_at are given here); returns its id."""
    with Session(engine) as s, s.begin():
        row = m.FixRow(
            created_at=datetime.now(UTC).replace(tzinfo=None),
            kind=fix.kind,
            name=fix.name,
            variant=fix.variant,
            train=fix.train,
            stack=fix.stack,
            runtime=fix.runtime,
            runtime_version=fix.runtime_version,
            found=int(fix.found),
            sha256=fix.sha256,
            status=fix.status,
            exports=fix.exports,
            summary=dict(fix.summary),
        )
        s.add(row)
        s.flush()
        return int(row.id)


def for_file(conn: Connection, sha256: str, limit: int = 20) -> list[StoredFix]:
    """The fixes whose fixed file is ``sha256``, newest first. One statement."""
    rows = conn.execute(select(T).where(T.c.sha256 == sha256).order_by(T.c.id.desc()).limit(limit)).all()
    return [_row(r) for r in rows]


def latest_found(conn: Connection, keys: Iterable[Key]) -> dict[Key, StoredFix]:
    """The newest fix found for each of ``keys``. One statement."""
    wanted = set(keys)
    if not wanted:
        return {}
    names = sorted({k[0] for k in wanted})
    rows = conn.execute(select(T).where(T.c.name.in_(names), T.c.found == 1).order_by(T.c.id.desc())).all()
    out: dict[Key, StoredFix] = {}
    for row in rows:
        fix = _row(row)
        if fix.key in wanted and fix.key not in out:
            out[fix.key] = fix
    return out


def listing(conn: Connection, limit: int = 20, name: str | None = None) -> list[StoredFix]:
    """The newest fixes (of ``name`` only, when given). One statement."""
    stmt = select(T).order_by(T.c.id.desc()).limit(limit)
    if name:
        stmt = stmt.where(T.c.name == name)
    return [_row(r) for r in conn.execute(stmt).all()]


def as_served(fix: StoredFix) -> ServedResult | None:
    """A fix's audit of its fixed file, as an earlier result of that file on its serving stack
    (what the gate weighs): None for a fix that found nothing or kept no serving identity."""
    served = fix.summary.get("served")
    if not fix.found or fix.sha256 is None or not isinstance(served, dict) or fix.created_at is None:
        return None
    return ServedResult(
        0,
        fix.created_at,
        fix.stack,
        str(served.get("host") or ""),
        str(served.get("device") or ""),
        str(served.get("runtime") or ""),
        fix.runtime or None,
        fix.runtime_version or None,
        f"{fix.train}->{fix.stack}",
        fix.status or "",
        f"auditor fix {fix.id}",
        bool(served.get("converted")),
        fix.id,
    )
