"""After a run of a shared cycle is stored: wait for the hosts other auditors still hold.

A run never waits for the other auditors' hosts before it stores its own (they would wait for
its store as it waits for theirs). Once stored, the auditor watches the cycle's queue until
every host's job has ended: it has nothing more to do when all are stored; a host back in
the queue (its auditor gave it back, or stopped beating for ``[queue] timeout`` and lost it,
before or after serving it) needs a *follow-up run* of the same cycle, which takes it like
any other. The watch ends, with what is still open said, at ``[queue] wait``, else when the
schedule's next cycle is due (a manual or named cycle: after an hour).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from auditor.config.tables import QueueConfig
from auditor.queue.cycles import MANUAL_WAIT, CycleId
from auditor.queue.jobs import HostJob, JobQueue

log = logging.getLogger(__name__)

DONE, AGAIN, GAVE_UP = "done", "again", "gave up"


@dataclass
class Watched:
    outcome: str
    """done: every host of the cycle is stored; again: this auditor took hosts that were back
    in the queue (``queue`` and ``taken``: a follow-up run audits them); gave up: the wait
    ended with hosts still held by others (``open``)."""
    open: list[str] = field(default_factory=list)
    """The hosts not stored when the watch ended."""
    queue: JobQueue | None = None
    """With again: this auditor's worker on the queue, holding ``taken`` (the follow-up run's)."""
    taken: list[HostJob] = field(default_factory=list)


def watch(
    url: str,
    cycle: CycleId,
    config: QueueConfig,
    started: float | None = None,
    pause: Callable[[float], None] = time.sleep,
    check: Callable[[], None] = lambda: None,
) -> Watched:
    """Wait until the cycle's hosts are all stored (done), or until this auditor takes hosts
    back in the queue, a stalled auditor's put back first (again), at most until the wait
    ends (gave up). ``started``: when this auditor's watch of the cycle began
    (time.monotonic), so that follow-up runs share one wait. ``check`` raises to stop.

    The hosts are taken here, by a worker the follow-up run goes on with: of two auditors
    that see the same stalled host, one takes it and the other keeps watching, rather than
    both starting a run."""
    since = time.monotonic() if started is None else started
    poll = min(5.0, max(0.2, config.timeout / 4))
    queue = JobQueue(url, config.heartbeat).open()
    handed = False
    try:
        while True:
            check()
            open_ = [j for j in queue.jobs(cycle.queue) if j.status in ("todo", "doing")]
            if not open_:
                return Watched(DONE)
            for job in queue.stalled(cycle.queue, config.timeout):
                if job.worker_id != queue.worker_id and queue.retry([job.id], job.worker_id):
                    log.warning(
                        "queue %s: %s back in the queue: its auditor stopped beating for %g s",
                        cycle.queue,
                        job.host,
                        config.timeout,
                    )
            taken = []
            while len(taken) < config.claim and (job := queue.fetch(cycle.queue)) is not None:
                taken.append(job)
            if taken:
                handed = True
                return Watched(AGAIN, sorted(j.host for j in open_), queue, taken)
            if _over(config, cycle, since):
                return Watched(GAVE_UP, sorted(j.host for j in open_))
            pause(poll)
    finally:
        if not handed:
            queue.close()


def _over(config: QueueConfig, cycle: CycleId, since: float) -> bool:
    waited = time.monotonic() - since
    if config.wait is not None:
        return waited >= config.wait
    if cycle.ends is not None:
        return datetime.now(UTC) >= cycle.ends
    return waited >= MANUAL_WAIT.total_seconds()
