"""A run stores the hosts of a shared cycle only while it still holds their jobs.

In the store's own transaction (auditor.history.store calls it before it writes a result):
the run's host jobs are locked, each must still be ``doing`` under this auditor's worker;
then each host is recorded once for the cycle (``cycle_hosts``, whose key refuses a second
record) and its job finished as ``succeeded``. An auditor that stalled past the timeout and
lost a host to another (its job retried and taken) cannot store: the transaction rolls back
and nothing of its run is written. Everything is judged by the database, in its own time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import Connection, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import IntegrityError

from auditor.db import schema as m
from auditor.db.queue_tables import FINISH, HELD
from auditor.queue.cycles import CycleId


class HostsLost(Exception):
    """Hosts of this run were taken over by another auditor: the run cannot be stored."""

    def __init__(self, cycle: CycleId, lost: Mapping[str, str]):
        self.cycle = cycle
        self.lost = dict(lost)
        said = "; ".join(f"{host}: {why}" for host, why in sorted(self.lost.items()))
        super().__init__(
            f"{len(self.lost)} host(s) of cycle {cycle.label} are no longer this auditor's ({said}): "
            "it stalled past [queue] timeout (stopped, overloaded or cut from the database) and "
            "another auditor took them; this run is not stored"
        )


@dataclass(frozen=True)
class Fence:
    """What the store checks and records for one run of a shared cycle."""

    cycle: CycleId
    worker_id: int
    jobs: Mapping[str, int]
    """Host -> the id of its job, for every serving host the run holds results of."""
    auditor_id: str

    def __call__(self, conn: Connection, run_id: int) -> None:
        if not self.jobs:
            return
        rows = conn.execute(HELD, {"ids": list(self.jobs.values())}).all()
        held = {r[0]: (str(r[1]), r[2]) for r in rows}
        lost = {}
        for host, job in self.jobs.items():
            status, worker = held.get(job, ("gone", None))
            if status != "doing" or worker != self.worker_id:
                lost[host] = f"job {job} is {status}" + (f" under worker {worker}" if worker else "")
        if lost:
            raise HostsLost(self.cycle, lost)
        insert = postgresql.insert(m.CycleHost.__table__).values(
            [
                {
                    "pool": self.cycle.pool,
                    "cycle": self.cycle.label,
                    "host": host,
                    "run_id": run_id,
                    "auditor_id": self.auditor_id,
                    "stored_at": text("timezone('utc', now())"),
                }
                for host in sorted(self.jobs)
            ]
        )
        try:
            conn.execute(insert)
        except IntegrityError as exc:
            raise HostsLost(self.cycle, {h: "already stored in this cycle" for h in self.jobs}) from exc
        for job in self.jobs.values():
            conn.execute(FINISH, {"id": job})
