"""Every host's latest audit at a glance (``auditor hosts list``): for each host of the config,
the newest complete run that reached one of its stacks, the worst status of that run's results
on its stacks, whether a stack could not be reached, the out-of-line findings that name one of
its stacks, and whether that run is older than the schedule allows (stale). A fleet of a
hundred hosts is then one table whose failing rows are the hosts to look at.

Five queries whatever the number of hosts: the stacks, the newest run of each, their errors,
the results and the out-of-line findings of those runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from auditor.config.tables import Config
from auditor.db import schema as m
from auditor.results import CONSISTENT, worst

NEVER = "never audited"
UNREACHED = "unreached"
OUT_OF_LINE = "out-of-line"


@dataclass
class HostStatus:
    host: str
    group: str
    """The group its stacks are members of ("" for none)."""
    stacks: list[str]
    run_id: int | None = None
    audited_at: datetime | None = None
    """When the newest complete run that reached one of its stacks ended."""
    auditor: str = ""
    status: str = NEVER
    """The worst status of that run's results served on its stacks (a host that only trains:
    consistent once reached; a train side's failure shows on the hosts it serves),
    ``unreached`` when a stack could not be started, or ``never audited``."""
    out_of_line: list[str] = field(default_factory=list)
    """That run's out-of-line findings on its stacks (their first lines)."""
    stale: bool = False
    errors: list[str] = field(default_factory=list)

    @property
    def failing(self) -> bool:
        """Needs a look: not audited, not reached, not consistent, out of line, or stale."""
        return self.status != CONSISTENT or bool(self.out_of_line) or self.stale


def host_statuses(
    conn: Connection, config: Config, now: datetime, stale_after: float, auditors: Sequence[str] = ()
) -> list[HostStatus]:
    """Each host of ``config``'s stacks, in the config's order; ``stale_after``: seconds after
    which a host's newest audit is stale; ``auditors``: only the runs of these auditors."""
    by_host: dict[str, HostStatus] = {}
    for name, stack in config.stacks.items():
        if stack.source == "db":
            continue  # read from the database: no host of this auditor's
        h = by_host.setdefault(stack.host, HostStatus(stack.host, "", []))
        h.stacks.append(name)
        h.group = h.group or (stack.group or "")
    wanted = {(s.host, n) for n, s in config.stacks.items() if s.host in by_host}
    ids = {
        (host, name): sid
        for sid, host, name in conn.execute(select(m.Stack.id, m.Stack.host, m.Stack.name))
        if (host, name) in wanted
    }
    newest = _newest_runs(conn, ids.values(), auditors)
    runs = {
        r.id: r
        for r in conn.execute(
            select(m.Run.id, m.Run.finished_at, m.Run.auditor_id).where(m.Run.id.in_(set(newest.values())))
        )
    }
    errors = {
        (run_id, sid): error
        for run_id, sid, error in conn.execute(
            select(m.RunStack.run_id, m.RunStack.stack_id, m.RunStack.error).where(
                m.RunStack.run_id.in_(set(newest.values())), m.RunStack.error.is_not(None)
            )
        )
    }
    statuses: dict[tuple[int, int], list[str]] = {}
    R = m.ProbeResultRow
    for run_id, infer, status in conn.execute(
        select(R.run_id, R.infer_stack_id, R.status).where(R.run_id.in_(set(newest.values())))
    ):
        statuses.setdefault((run_id, infer), []).append(status)
    F = m.FindingRow
    odd: dict[tuple[int, str], list[str]] = {}
    for run_id, subject, message in conn.execute(
        select(F.run_id, F.subject, F.message).where(
            F.run_id.in_(set(newest.values())), F.kind == OUT_OF_LINE
        )
    ):
        odd.setdefault((run_id, subject), []).append(message.splitlines()[0] if message else "")
    for h in by_host.values():
        seen = [(newest[sid], name, sid) for name in h.stacks if (sid := ids.get((h.host, name))) in newest]
        if not seen:
            continue
        h.run_id = max(run_id for run_id, _, _ in seen)
        run = runs[h.run_id]
        h.audited_at, h.auditor = run.finished_at, run.auditor_id
        found: list[str] = []
        for run_id, name, sid in seen:
            if (run_id, sid) in errors:
                h.errors.append(f"{name}: {errors[(run_id, sid)]}")
            found += statuses.get((run_id, sid), [])
            h.out_of_line += odd.get((run_id, name), [])
        # reached and nothing served on it failed (a host that only trains: consistent)
        h.status = UNREACHED if h.errors else worst(found) or CONSISTENT
        h.stale = h.audited_at is None or (now - h.audited_at).total_seconds() > stale_after
    return list(by_host.values())


def _newest_runs(conn: Connection, stack_ids: Iterable[int], auditors: Sequence[str]) -> dict[int, int]:
    """Stack id -> the newest complete run that reached it (it has a run_stacks row)."""
    rs = m.RunStack
    stmt = (
        select(rs.stack_id, func.max(rs.run_id))
        .join(m.Run, m.Run.id == rs.run_id)
        .where(rs.stack_id.in_(set(stack_ids)), m.Run.status == "complete")
        .group_by(rs.stack_id)
    )
    if auditors:
        stmt = stmt.where(m.Run.auditor_id.in_(list(auditors)))
    return {sid: run_id for sid, run_id in conn.execute(stmt)}
