"""Which cycle a run belongs to when auditors share a fleet (``[queue]``).

A cycle is one round of the fleet's serving hosts, each audited once: the schedule's cycle
due at a time (every auditor's daemon on the same schedule finds the same one, however late
it fires: auditor.config.schedule.cycle_tick), a manual ``auditor audit`` (a cycle of its
own), or a cycle named by ``auditor audit --cycle LABEL`` (a deployment pipeline's run, which
several auditors can join). Its hosts are jobs in one queue of its own, so an auditor takes
only the hosts of the cycle it runs.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from auditor.db.queue_names import QUEUE_PREFIX

QUEUE_DIGEST = 30
"""Hex digits of a queue's name: procrastinate notifies ``procrastinate_queue_v1#<queue>``, and
PostgreSQL's channel names end at 63 bytes."""

MANUAL_WAIT = timedelta(hours=1)
"""How long a manual or named cycle waits for the hosts other auditors work on, at most
(``[queue] wait`` unset): a scheduled one waits until the next is due."""


@dataclass(frozen=True)
class CycleId:
    pool: str
    label: str
    """``2026-12-07T06:30:00Z`` (scheduled), ``manual/...`` or the name given."""
    ends: datetime | None = None
    """When the next cycle of the schedule is due (aware), or None."""

    @property
    def queue(self) -> str:
        """The job queue of this cycle's hosts: a digest of pool and label, as PostgreSQL's
        notification channel of a queue (procrastinate's prefix and the name) has 63 bytes."""
        return f"{QUEUE_PREFIX}{digest(self.pool, self.label)[:QUEUE_DIGEST]}"

    def host_key(self, host: str) -> str:
        """The key that makes a host's job of this cycle deferred once, whoever defers it."""
        return f"{QUEUE_PREFIX}{digest(self.pool, self.label, host)}"

    def to_json(self) -> dict[str, str]:
        return {"pool": self.pool, "cycle": self.label}


def digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:48]


def scheduled(pool: str, tick: datetime, following: datetime | None) -> CycleId:
    """The schedule's cycle due at ``tick`` (aware, no jitter)."""
    return CycleId(pool, f"{tick.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}", following)


def manual(pool: str, auditor_id: str, now: datetime) -> CycleId:
    """A cycle of its own (``auditor audit`` without ``--cycle``)."""
    label = f"manual/{now.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}/{auditor_id}/{secrets.token_hex(3)}"
    return CycleId(pool, label)


def named(pool: str, label: str) -> CycleId:
    """The cycle ``auditor audit --cycle LABEL`` names: every auditor given it joins it."""
    return CycleId(pool, label)
