"""Rows that several auditors may insert at the same moment into one database: content-addressed
rows (fingerprints, artifacts) and stacks (a train stack's row is written by the auditor that
runs it and by the infer-side auditors that consume its publications).

A plain "look it up, insert it if missing" loses that race on a shared database: the second
insert violates the key and rolls back the whole run. ``INSERT ... ON CONFLICT DO NOTHING``
(PostgreSQL and SQLite both have it) makes the insert a no-op instead.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Insert, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from auditor.db import schema as m


def insert_new(session: Session, model: Any, **values: Any) -> Insert | None:
    """``INSERT ... ON CONFLICT DO NOTHING`` of a row of ``model`` on this session's database
    (None where the database has no such statement)."""
    dialect = session.get_bind().dialect.name
    if dialect not in ("postgresql", "sqlite"):
        return None
    return (
        (postgresql if dialect == "postgresql" else sqlite)
        .insert(model.__table__)
        .values(**values)
        .on_conflict_do_nothing()
    )


def add_once(session: Session, model: Any, **values: Any) -> None:
    """Insert a row of ``model`` unless a row with the same key (primary or unique) exists."""
    stmt = insert_new(session, model, **values)
    if stmt is not None:
        session.execute(stmt)
        return
    key = tuple(values[c.name] for c in model.__table__.primary_key.columns)
    if session.get(model, key if len(key) > 1 else key[0]) is None:
        session.add(model(**values))
        session.flush()


def stack_row(session: Session, host: str, name: str, **attributes: Any) -> m.Stack:
    """The stack (host, name), created if missing, with ``attributes`` (role, runtime, ...) set."""
    stack = session.scalars(select(m.Stack).where(m.Stack.host == host, m.Stack.name == name)).first()
    if stack is None:
        add_once(session, m.Stack, host=host, name=name, **attributes)
        stack = session.scalars(select(m.Stack).where(m.Stack.host == host, m.Stack.name == name)).one()
    for key, value in attributes.items():
        setattr(stack, key, value)
    session.flush()
    return stack


__all__ = ["add_once", "insert_new", "stack_row"]
