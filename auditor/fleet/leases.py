"""Auditors that share the work: ``[leases]`` splits a fleet's serving hosts between the auditors
of one pool on one history database, each host audited once per cycle *slot*.

Every auditor runs its own held stacks (train stacks, publishers, models' references:
auditor.fleet.window), then takes serving hosts as it has places for them: it claims the next
hosts that nobody holds (or whose lease expired unfinished), at most ``[leases] claim`` in
flight, audits each, marks it served the moment its part is done, and claims again. When no host
is left to claim it waits for the hosts other auditors still work on, polling, so that a host
whose holder died (its lease not renewed, so expired) is taken over within the cycle; hosts
served by others are theirs to store. Its own hosts are done when its run is stored; a cycle
that fails hands them back at once. The database side, and why a lease row rather than a row
lock or a job queue: auditor.history.leases.

A slot is a period of wall-clock time (UTC): ``[leases] slot``, by default the schedule's
interval, so daemons on one schedule share each period's hosts; ``auditor audit --slot LABEL``
names one (a deployment pipeline's run, say). A run under leases covers its held stacks and the
hosts it claimed (stored as a narrowed run: it resolves no alert about a host another auditor
audited).
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from auditor.config.tables import LeasesConfig, ScheduleConfig
from auditor.fleet.window import HostPlan
from auditor.results import UNCHECKED, Finding

log = logging.getLogger(__name__)


class LeaseRow(Protocol):
    holder: str
    auditor_id: str
    served_at: datetime | None
    done_at: datetime | None
    run_id: int | None

    def claimable(self, now: datetime) -> bool: ...
    def pending(self, now: datetime) -> bool: ...


class Book(Protocol):
    """The lease table (auditor.history.leases.LeaseBook)."""

    holder: str

    def leases(self, slot: str, hosts: Sequence[str] | None = None) -> Mapping[str, LeaseRow]: ...
    def claim(self, slot: str, host: str, now: datetime, until: datetime) -> bool: ...
    def renew(self, slot: str, until: datetime) -> int: ...
    def served(self, slot: str, hosts: Sequence[str], now: datetime) -> None: ...
    def done(self, slot: str, run_id: int | None, now: datetime) -> int: ...
    def give_up(self, slot: str) -> int: ...


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def holder_name(auditor_id: str) -> str:
    """This cycle of this auditor, unique even for two auditors of one auditor_id."""
    return f"{auditor_id}/{socket.gethostname()}/{os.getpid()}/{secrets.token_hex(4)}"


@dataclass(frozen=True)
class Slot:
    label: str
    """``POOL:START/LENGTH`` (or ``POOL:LABEL`` as named)."""
    ends: datetime | None
    """When the period ends (None: a named slot)."""


def slot_length(config: LeasesConfig, schedule: ScheduleConfig) -> float:
    """Seconds per slot: ``[leases] slot``, else the schedule's interval (an hour with cron)."""
    return config.slot or (schedule.interval if not schedule.cron and schedule.interval else 3600.0)


def slot(config: LeasesConfig, schedule: ScheduleConfig, now: datetime, named: str | None = None) -> Slot:
    """The slot ``now`` falls in (naive UTC), or the one named."""
    if named:
        return Slot(f"{config.pool}:{named}", None)
    length = slot_length(config, schedule)
    epoch = datetime(1970, 1, 1)
    start = math.floor((now - epoch).total_seconds() / length) * length
    begins = epoch + timedelta(seconds=start)
    return Slot(f"{config.pool}:{begins.isoformat()}Z/{length:g}s", begins + timedelta(seconds=length))


@dataclass
class Shares:
    """Who audited which serving host of the slot, as this auditor saw it at the end."""

    slot: str
    mine: list[str] = field(default_factory=list)
    others: dict[str, list[str]] = field(default_factory=dict)
    """Another auditor (its auditor_id) -> the hosts it served or still works on."""
    unaudited: dict[str, str] = field(default_factory=dict)
    """Host -> why nobody audited it in this slot (as far as this auditor waited)."""

    def to_json(self) -> dict[str, Any]:
        return {"slot": self.slot, "mine": self.mine, "others": self.others, "unaudited": self.unaudited}

    def findings(self) -> list[Finding]:
        """A host nobody audited is unchecked; the hosts others took are said once (info)."""
        out = [
            Finding(
                UNCHECKED,
                "warning",
                host,
                f"{host}/{UNCHECKED}/lease",
                f"{host}: not audited in slot {self.slot}: {why}",
                {"slot": self.slot, "reason": why},
            )
            for host, why in self.unaudited.items()
        ]
        if self.others:
            said = "; ".join(f"{_some(hosts)} by {who}" for who, hosts in sorted(self.others.items()))
            total = sum(len(h) for h in self.others.values())
            out.append(
                Finding(
                    "leases",
                    "info",
                    "leases",
                    f"leases/{self.slot}",
                    f"{total} serving host{'s' if total != 1 else ''} of slot {self.slot} went to "
                    f"other auditors ([leases]): {said}; this auditor audited {len(self.mine)}",
                    {"slot": self.slot, "others": self.others, "mine": self.mine},
                )
            )
        return out


def _some(hosts: Sequence[str], shown: int = 4) -> str:
    more = len(hosts) - shown
    return ", ".join(hosts[:shown]) + (f" and {more} more" if more > 0 else "")


class SharedHosts:
    """The serving hosts this auditor claims, a few at a time as it has places for them
    (``claim``), each marked ``served`` as its part ends; a heartbeat renews its leases from
    ``start()`` to ``close()``."""

    def __init__(
        self,
        book: Book,
        waves: HostPlan,
        config: LeasesConfig,
        where: Slot,
        check: Callable[[], None] = lambda: None,
        clock: Callable[[], datetime] = utcnow,
        pause: Callable[[float], None] = time.sleep,
    ):
        """``check`` raises where the cycle was aborted; ``pause`` waits between looks at the
        hosts others hold (an abort ends it early)."""
        self.book = book
        self.waves = waves
        self.config = config
        self.slot = where
        self.check = check
        self.clock = clock
        self.pause = pause
        self.hosts = [host for host, _ in waves.serving]
        self.size = self.chunk_size(config, waves)
        self.mine: list[str] = []
        self._waiting_since: float | None = None
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    @staticmethod
    def chunk_size(config: LeasesConfig, waves: HostPlan) -> int:
        """Hosts claimed at a time: ``[leases] claim``, within ``[worker] max_hosts``."""
        return max(1, config.claim if waves.size is None else min(config.claim, waves.size))

    # -- the heartbeat ---------------------------------------------------------------------
    def start(self) -> SharedHosts:
        self._beat = threading.Thread(target=self._renew, name="lease-heartbeat", daemon=True)
        self._beat.start()
        return self

    def _renew(self) -> None:
        every = self.config.expire / 3
        while not self._stop.wait(every):
            try:
                self.book.renew(self.slot.label, self.clock() + timedelta(seconds=self.config.expire))
            except Exception as exc:  # the database away for a moment: the next beat tries again
                log.warning("could not renew the leases of slot %s: %s", self.slot.label, exc)

    def close(self, run_id: int | None = None, stored: bool = False) -> None:
        """The cycle is over: with its run ``stored``, its served hosts are done; otherwise
        they go back to the others at once."""
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
            self._beat = None
        if stored:
            self.book.done(self.slot.label, run_id, self.clock())
        else:
            self.book.give_up(self.slot.label)

    # -- claiming ----------------------------------------------------------------------------
    def served(self, hosts: list[str]) -> None:
        """These hosts' part of the cycle is done (their leases end when the run is stored)."""
        self.book.served(self.slot.label, hosts, self.clock())

    def claim(self, most: int | None = None) -> list[str]:
        """The next hosts this auditor claims (``[leases] claim`` at most, and ``most``); none:
        no host is left, and the hosts other auditors hold were waited for as ``[leases] wait``
        says."""
        size = self.size if most is None else max(1, min(most, self.size))
        poll = min(5.0, max(0.5, self.config.expire / 10))
        while True:
            self.check()
            now = self.clock()
            leases = self.book.leases(self.slot.label, self.hosts)
            free = [
                h for h in self.hosts if h not in self.mine and (h not in leases or leases[h].claimable(now))
            ]
            until = now + timedelta(seconds=self.config.expire)
            got: list[str] = []
            for host in free:
                if len(got) == size:
                    break
                if self.book.claim(self.slot.label, host, now, until):
                    got.append(host)
            if got:
                self._waiting_since = None
                self.mine += got
                log.info("leases %s: claimed %s", self.slot.label, ", ".join(got))
                return got
            if free:
                continue  # another auditor was quicker for each: look again
            pending = [h for h, lease in leases.items() if h not in self.mine and lease.pending(now)]
            if not pending or self._waited(now):
                return []
            self.pause(poll)

    def _waited(self, now: datetime) -> bool:
        """Whether to stop waiting for the hosts others hold: after ``[leases] wait``, else at
        the slot's end (a named slot: not while anyone works on a host)."""
        if self._waiting_since is None:
            self._waiting_since = time.monotonic()
        if self.config.wait is not None:
            return time.monotonic() - self._waiting_since >= self.config.wait
        return self.slot.ends is not None and now >= self.slot.ends

    def shares(self) -> Shares:
        """Who has which host now (after the last claim)."""
        now = self.clock()
        leases = self.book.leases(self.slot.label, self.hosts)
        out = Shares(self.slot.label, list(self.mine))
        for host in self.hosts:
            lease = leases.get(host)
            if host in self.mine:
                if lease is not None and lease.holder != self.book.holder:  # audited twice
                    log.warning(
                        "leases %s: %s was taken over by %s (renewed too late)",
                        out.slot,
                        host,
                        lease.auditor_id,
                    )
                continue
            if lease is None:
                out.unaudited[host] = "no auditor claimed it before this one stopped waiting"
            elif lease.claimable(now):
                out.unaudited[host] = (
                    f"the lease of {lease.auditor_id} expired before it stored its results "
                    "(the auditor stopped or died), after this one stopped waiting"
                )
            else:
                out.others.setdefault(lease.auditor_id, []).append(host)
        return out
