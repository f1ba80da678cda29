"""Rows that several auditors may insert at the same moment into one database: content-addressed
rows (fingerprints, artifacts) and stacks (a train stack's row is written by the auditor that
runs it and by the infer-side auditors that consume its publications).

A plain "look it up, insert it if missing" loses that race on a shared database: the second
insert violates the key and rolls back the whole run. ``INSERT ... ON CONFLICT DO NOTHING``
(PostgreSQL and SQLite both have it) makes the insert a no-op instead.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from auditor.db import schema as m


def add_once(session: Session, model: Any, **values: Any) -> None:
    """Insert a row of ``model`` unless a row with the same key (primary or unique) exists."""
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    elif dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    else:
        key = tuple(values[c.name] for c in model.__table__.primary_key.columns)
        if session.get(model, key if len(key) > 1 else key[0]) is None:
            session.add(model(**values))
            session.flush()
        return
    session.execute(insert(model.__table__).values(**values).on_conflict_do_nothing())


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


__all__ = ["add_once", "stack_row"]
