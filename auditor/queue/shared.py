"""One auditor's share of a cycle's serving hosts (``[queue]``): the hosts are jobs of the
cycle's queue (auditor.queue.jobs), deferred once whoever joins first; this auditor takes
them as it has places for them (``[queue] claim`` in flight; auditor.fleet.window asks),
a host whose auditor stopped beating for ``[queue] timeout`` (by the database's clock) among
them, until none is left. Its hosts' jobs stay ``doing`` until its run is stored with them
(auditor.queue.fence); a cycle that fails gives them back at once. What the other auditors
still hold is waited for after the run is stored (auditor.queue.watch).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, select

from auditor.config.tables import QueueConfig
from auditor.db import schema as m
from auditor.fleet.window import HostPlan
from auditor.queue.cycles import CycleId
from auditor.queue.fence import Fence
from auditor.queue.jobs import HostJob, JobQueue
from auditor.results import UNCHECKED, Finding

log = logging.getLogger(__name__)


@dataclass
class Shares:
    """Who audited which serving host of the cycle, as this auditor saw it at its end."""

    cycle: CycleId
    mine: list[str] = field(default_factory=list)
    others: dict[str, list[str]] = field(default_factory=dict)
    """Another auditor (its auditor_id, or "another auditor" while it still works) -> hosts."""
    unaudited: dict[str, str] = field(default_factory=dict)
    """Host -> why nobody had audited it when this auditor stopped waiting."""
    taken_over: list[str] = field(default_factory=list)
    """Hosts this auditor took after another auditor had them (it stalled, or gave them back)."""

    def to_json(self) -> dict[str, Any]:
        return {
            **self.cycle.to_json(),
            "mine": self.mine,
            "others": self.others,
            "unaudited": self.unaudited,
            "taken_over": self.taken_over,
        }

    def findings(self) -> list[Finding]:
        """A host nobody audited is unchecked, one finding per reason however many hosts it
        holds for (auditor.cycle.causes merges them); the hosts others took are said once (info)."""
        out = [
            Finding(
                UNCHECKED,
                "warning",
                host,
                f"{host}/{UNCHECKED}/queue",
                f"{host}: not audited in cycle {self.cycle.label}: {why}",
                {"cycle": self.cycle.label, "reason": why},
                cause=f"queue/unaudited/{why}",
                summary=f"not audited in cycle {self.cycle.label}: {why}",
                place=(host, ""),
            )
            for host, why in self.unaudited.items()
        ]
        if self.others:
            said = "; ".join(f"{_some(hosts)} by {who}" for who, hosts in sorted(self.others.items()))
            total = sum(len(h) for h in self.others.values())
            out.append(
                Finding(
                    "queue",
                    "info",
                    "queue",
                    f"queue/{self.cycle.pool}",
                    f"{total} serving host{'s' if total != 1 else ''} of cycle {self.cycle.label} went to "
                    f"other auditors ([queue]): {said}; this auditor audited {len(self.mine)}",
                    {**self.cycle.to_json(), "others": self.others, "mine": self.mine},
                )
            )
        return out


def _some(hosts: list[str], shown: int = 4) -> str:
    more = len(hosts) - shown
    return ", ".join(hosts[:shown]) + (f" and {more} more" if more > 0 else "")


class SharedCycle:
    """The serving hosts this auditor takes in one cycle (``join``, then ``claim`` until it
    gives none), held until its run is stored (``fence``) or given back (``give_back``)."""

    def __init__(
        self,
        queue: JobQueue,
        cycle: CycleId,
        plan: HostPlan,
        config: QueueConfig,
        auditor_id: str,
        engine: Engine,
        check: Callable[[], None] = lambda: None,
        taken: Iterable[HostJob] = (),
    ):
        """``check`` raises where the cycle was aborted. ``taken``: jobs ``queue``'s worker
        took already (auditor.queue.watch, for a follow-up run), handed out first."""
        self.queue = queue
        self.cycle = cycle
        self.plan = plan
        self.config = config
        self.auditor_id = auditor_id
        self.engine = engine
        self.check = check
        self.hosts = plan.hosts
        self.size = self.chunk_size(config, plan)
        self.mine: dict[str, int] = {}
        """Host -> its job's id, for every host this auditor took."""
        self.taken_over: list[str] = []
        self._foreign: dict[int, str] = {}
        self._handed: list[HostJob] = list(taken)

    @staticmethod
    def chunk_size(config: QueueConfig, plan: HostPlan) -> int:
        """Hosts taken at a time: ``[queue] claim``, within ``[worker] max_hosts``."""
        return max(1, config.claim if plan.size is None else min(config.claim, plan.size))

    def join(self) -> int:
        """Defer the cycle's host jobs, each once whoever asks first; how many were new."""
        made = self.queue.defer(
            self.cycle.queue,
            ((h, self.cycle.host_key(h), self.cycle.to_json()) for h in self.hosts),
        )
        log.info(
            "queue %s: joined cycle (%d of %d host jobs deferred by this auditor)",
            self.cycle.queue,
            made,
            len(self.hosts),
        )
        return made

    def claim(self, most: int | None = None) -> list[str]:
        """The next hosts this auditor takes (``[queue] claim`` at most, and ``most``), a
        stalled auditor's among them; none: no host is left to take. It never waits for the
        hosts other auditors work on: its run is stored first, then auditor.queue.watch waits
        for theirs (a run that waited for the others' would wait for their stores, and they
        for its)."""
        size = self.size if most is None else max(1, min(most, self.size))
        while True:
            self.check()
            got = self._take(size)
            if got:
                return got
            if not self.retake_stalled():
                return []

    def retake_stalled(self) -> list[HostJob]:
        """Put back in the queue the jobs of auditors that stopped beating for ``[queue]
        timeout`` (by the database's clock), for whoever takes them next."""
        stalled = self.queue.stalled(self.cycle.queue, self.config.timeout)
        retried = [
            j
            for j in stalled
            if j.worker_id != self.queue.worker_id and self.queue.retry([j.id], j.worker_id)
        ]
        if retried:
            log.warning(
                "queue %s: %s back in the queue: the auditor holding %s stopped beating for %g s",
                self.cycle.queue,
                ", ".join(j.host for j in retried),
                "them" if len(retried) > 1 else "it",
                self.config.timeout,
            )
        return retried

    def _held(self) -> set[int]:
        return set(self.mine.values()) | set(self._foreign)

    def _take(self, size: int) -> list[str]:
        got: list[str] = []
        while len(got) < size:
            job = self._handed.pop(0) if self._handed else self.queue.fetch(self.cycle.queue)
            if job is None:
                break
            if job.host not in self.hosts:  # another auditor's config has a host this one lacks
                log.warning(
                    "queue %s: host %s is not in this auditor's config; it goes back when this cycle ends",
                    self.cycle.queue,
                    job.host,
                )
                self._foreign[job.id] = job.host
                continue
            if job.attempts > 0:  # put back before: another auditor's, stalled or given back
                self.taken_over.append(job.host)
            self.mine[job.host] = job.id
            got.append(job.host)
        if got:
            log.info("queue %s: took %s", self.cycle.queue, ", ".join(got))
        return got

    def fence(self, hosts: list[str]) -> Fence:
        """What the store checks in its transaction: this auditor still holds ``hosts``' jobs."""
        assert self.queue.worker_id is not None
        return Fence(self.cycle, self.queue.worker_id, {h: self.mine[h] for h in hosts}, self.auditor_id)

    def give_back(self) -> None:
        """Put every job this auditor holds back in the queue (its cycle failed, or a host was
        not its own): whoever is still in the cycle takes them now, not after the timeout."""
        self.queue.retry([*self.mine.values(), *self._foreign], self.queue.worker_id)
        self._foreign.clear()

    def release_foreign(self) -> None:
        """Put back the jobs of hosts this auditor's config does not have."""
        self.queue.retry(list(self._foreign), self.queue.worker_id)
        self._foreign.clear()

    def shares(self) -> Shares:
        """Who audited which host of the cycle, as the database says now."""
        out = Shares(self.cycle, sorted(self.mine), taken_over=sorted(set(self.taken_over)))
        with self.engine.connect() as conn:
            stored = conn.execute(
                select(m.CycleHost.host, m.CycleHost.auditor_id).where(
                    m.CycleHost.pool == self.cycle.pool, m.CycleHost.cycle == self.cycle.label
                )
            ).all()
        by_host = {host: who for host, who in stored}
        jobs = {j.host: j for j in self.queue.jobs(self.cycle.queue)}
        stalled = {j.host for j in self.queue.stalled(self.cycle.queue, self.config.timeout)}
        for host in self.hosts:
            if host in self.mine:
                continue
            if host in by_host:
                out.others.setdefault(by_host[host], []).append(host)
                continue
            job = jobs.get(host)
            if job is None:
                out.unaudited[host] = "its job was never deferred"
            elif host in stalled:
                out.unaudited[host] = "its auditor stopped beating (this one takes it over next)"
            elif job.status == "doing":
                out.others.setdefault("another auditor (still at work)", []).append(host)
            elif job.status == "todo":
                out.unaudited[host] = "back in the queue (this one takes it next)"
            else:
                out.unaudited[host] = f"its job ended {job.status} without a stored run"
        return out


def _open(job: HostJob) -> bool:
    return job.status in ("todo", "doing")
