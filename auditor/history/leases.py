"""Host leases in the history database: several auditors on one database split a fleet's
serving hosts, one lease per host per cycle *slot* (auditor.fleet.leases drives them).

Why a lease row claimed by an upsert, not ``SELECT ... FOR UPDATE SKIP LOCKED`` or a job queue
(procrastinate): a row lock lives as long as its transaction, and a host's part of a cycle
takes minutes (loads, runs, localization): a transaction held that long pins PostgreSQL's
vacuum horizon and does not survive a connection pooler; SQLite has no such lock at all. A
queue library adds its own schema, its worker model and PostgreSQL alone. A row with an expiry
needs neither: one statement claims a host that nobody holds or whose lease expired (``INSERT
... ON CONFLICT (slot, host) DO UPDATE ... WHERE expires_at < now AND done_at IS NULL
RETURNING host``), the same text on SQLite (3.35 and later) and PostgreSQL, atomic on both;
the holder renews its leases while it works, and an auditor that dies stops renewing, so its
hosts go to whoever asks after they expire. Times are the auditors' clocks (naive UTC): keep
them in sync (NTP); a lease lasts far longer than their skew.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, Connection, Engine, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite

from auditor.db import schema as m

L = m.HostLease.__table__


@dataclass(frozen=True)
class Lease:
    """A host's lease in one slot, as the database holds it."""

    host: str
    holder: str
    auditor_id: str
    claimed_at: datetime
    expires_at: datetime
    served_at: datetime | None
    done_at: datetime | None
    run_id: int | None

    def claimable(self, now: datetime) -> bool:
        """Nobody's any more: expired before its holder stored the host's results."""
        return self.done_at is None and self.expires_at < now

    def pending(self, now: datetime) -> bool:
        """A live holder is still on the host (not expired, its part not done)."""
        return self.done_at is None and self.served_at is None and self.expires_at >= now


class LeaseBook:
    """The ``host_leases`` table of one database; ``holder`` names this auditor's cycle."""

    def __init__(self, engine: Engine, holder: str, auditor_id: str):
        self.engine = engine
        self.holder = holder
        self.auditor_id = auditor_id

    def _insert(self):  # noqa: ANN202 - the dialect's insert, for its ON CONFLICT
        return (postgresql if self.engine.dialect.name == "postgresql" else sqlite).insert(L)

    def leases(self, slot: str, hosts: Iterable[str] | None = None) -> dict[str, Lease]:
        """The slot's leases (of ``hosts``; None: all), by host."""
        query = select(L).where(L.c.slot == slot)
        if hosts is not None:
            query = query.where(L.c.host.in_(list(hosts)))
        with self.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        return {r["host"]: Lease(**{k: r[k] for k in Lease.__dataclass_fields__}) for r in rows}

    def claim(self, slot: str, host: str, now: datetime, until: datetime) -> bool:
        """Take ``host`` for this slot if nobody holds it, or its lease expired unfinished."""
        insert = self._insert()
        values = {
            "slot": slot,
            "host": host,
            "holder": self.holder,
            "auditor_id": self.auditor_id,
            "claimed_at": now,
            "expires_at": until,
            "served_at": None,
            "done_at": None,
            "run_id": None,
        }
        statement = (
            insert.values(**values)
            .on_conflict_do_update(
                index_elements=[L.c.slot, L.c.host],
                set_={k: insert.excluded[k] for k in values if k not in ("slot", "host")},
                where=(L.c.expires_at < now) & L.c.done_at.is_(None),
            )
            .returning(L.c.host)
        )
        with self.engine.begin() as conn:
            return conn.execute(statement).first() is not None

    def _mine(self, slot: str, hosts: Sequence[str] | None = None) -> ColumnElement[bool]:
        clause = (L.c.slot == slot) & (L.c.holder == self.holder) & L.c.done_at.is_(None)
        return clause & L.c.host.in_(list(hosts)) if hosts is not None else clause

    def renew(self, slot: str, until: datetime) -> int:
        """Extend this holder's unfinished leases; how many it still holds."""
        with self.engine.begin() as conn:
            return conn.execute(update(L).where(self._mine(slot)).values(expires_at=until)).rowcount or 0

    def served(self, slot: str, hosts: Sequence[str], now: datetime) -> None:
        """This holder's part on ``hosts`` is done (its results wait for the run's storage)."""
        if hosts:
            with self.engine.begin() as conn:
                conn.execute(update(L).where(self._mine(slot, hosts)).values(served_at=now))

    def done(self, slot: str, run_id: int | None, now: datetime) -> int:
        """This holder's run is stored: its served hosts are audited for the slot."""
        with self.engine.begin() as conn:
            clause = self._mine(slot) & L.c.served_at.is_not(None)
            return conn.execute(update(L).where(clause).values(done_at=now, run_id=run_id)).rowcount or 0

    def give_up(self, slot: str) -> int:
        """Hand this holder's unfinished hosts back at once (an aborted cycle), rather than
        make the others wait for them to expire."""
        with self.engine.begin() as conn:
            return conn.execute(delete(L).where(self._mine(slot))).rowcount or 0


def prune(conn: Connection, cutoff: datetime) -> dict[str, int]:
    """Leases claimed before ``cutoff`` (retention; every auditor's: a slot long past is over)."""
    return {"host_leases": conn.execute(delete(L).where(L.c.claimed_at < cutoff)).rowcount or 0}
