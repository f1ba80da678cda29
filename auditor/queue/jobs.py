"""The job queue itself: procrastinate's jobs and workers in the PostgreSQL history.

Why procrastinate, and how it is used: it keeps no lock while a job runs (a host's part takes
minutes; a transaction held that long would pin vacuum): taking a job is one short statement
(``FOR UPDATE SKIP LOCKED`` only while it picks) that marks it ``doing`` for a worker; each
worker beats a heartbeat in the database's own time, and the jobs of a worker whose beat is
older than a timeout are *stalled* and retried (``doing`` -> ``todo``). Its periodic defer
inserts a job once however many ask (a unique key per cycle and host). The auditor uses its
job manager directly rather than its worker loop: a host's job is not done when the host's
part ends but when the run holding its results is stored, in the store's transaction
(auditor.queue.fence), so the job stays ``doing`` until then.

procrastinate is asynchronous; a ``JobQueue`` runs its own event loop in one thread, where the
heartbeat beats, and every call from the cycle's threads waits for its answer there.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from auditor.db.queue_tables import RETRY_HELD
from auditor.db.url import INSTALL_HINT, parse, redact

log = logging.getLogger(__name__)

T = TypeVar("T")

HOST_TASK = "auditor.audit_host"
"""The task name of a serving host's job (the auditor runs it itself, never a procrastinate
worker: no module is imported by that name)."""

ADVISORY_KEY = 0x617564_6974_71
"""pg_advisory_xact_lock key while the queue's schema is created (two auditors starting at once)."""

NEEDED = (
    "procrastinate_defer_periodic_job_v2",
    "procrastinate_fetch_job_v2",
    "procrastinate_finish_job_v1",
    "procrastinate_retry_job_v2",
    "procrastinate_register_worker_v1",
    "procrastinate_update_heartbeat_v1",
)
"""The queue's functions the auditor calls: a schema without them is older than the
procrastinate installed."""


class QueueError(Exception):
    """The job queue cannot be used (not installed, not PostgreSQL, an old schema, unreachable)."""


@dataclass(frozen=True)
class HostJob:
    id: int
    host: str
    status: str
    worker_id: int | None
    attempts: int = 0


def conninfo(url: str) -> str:
    """The libpq URI of the history's SQLAlchemy URL (psycopg takes it as it is)."""
    parsed = parse(url)
    if parsed.get_backend_name() != "postgresql":
        raise QueueError(
            f"[queue] needs a PostgreSQL history; {redact(parsed)} is {parsed.get_backend_name()} "
            "(one auditor on SQLite needs no queue: [queue] enabled = false)"
        )
    return parsed.set(drivername="postgresql").render_as_string(hide_password=False)


def check_usable(url: str) -> None:
    """Raise QueueError now where the queue cannot work at all (not PostgreSQL, procrastinate
    missing), before a cycle starts a worker."""
    conninfo(url)
    _procrastinate()


def _procrastinate() -> Any:
    try:
        import procrastinate
    except ImportError as exc:
        raise QueueError(f"[queue] needs procrastinate ({exc}); {INSTALL_HINT}") from None
    return procrastinate


class JobQueue:
    """This auditor's worker on the queue of one history database: ``open()`` registers it
    and starts its heartbeat, ``close()`` ends both."""

    def __init__(self, url: str, heartbeat: float):
        self.url = url
        self.heartbeat = heartbeat
        self.worker_id: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._beat: asyncio.Task[None] | None = None
        self._connector: Any = None
        self._manager: Any = None
        self.beats_failed = 0
        self.created_schema = False
        """Whether opening created the queue's tables (the database had none)."""

    # -- the loop thread ---------------------------------------------------------------------
    def _call(self, coro: Coroutine[Any, Any, T], timeout: float = 120.0) -> T:
        assert self._loop is not None, "JobQueue used before open()"
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def open(self, register: bool = True) -> JobQueue:
        """Connect (the queue's schema created if the database has none); ``register``: as a
        worker that takes jobs, with a heartbeat (False: only to look)."""
        procrastinate = _procrastinate()
        info = conninfo(self.url)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="job-queue", daemon=True)
        self._thread.start()
        self._connector = procrastinate.PsycopgConnector(conninfo=info, min_size=1, max_size=3)
        self._manager = procrastinate.manager.JobManager(self._connector)
        try:
            self._call(self._open(register))
        except QueueError:
            self.close()
            raise
        except Exception as exc:
            self.close()
            raise QueueError(f"the job queue in {redact(self.url)} cannot be used: {exc}") from exc
        return self

    async def _open(self, register: bool) -> None:
        await self._connector.open_async()
        await self._ensure_schema()
        if register:
            self.worker_id = await self._manager.register_worker()
            self._beat = asyncio.get_running_loop().create_task(self._beating())

    async def _ensure_schema(self) -> None:
        """Create procrastinate's tables and functions if the database has none (once, under
        an advisory lock), and check that those it has are the ones the auditor calls."""
        pool = self._connector.pool
        async with pool.connection() as conn:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (ADVISORY_KEY,))
                cur = await conn.execute("SELECT to_regclass('procrastinate_jobs') IS NOT NULL")
                row = await cur.fetchone()
                if not (row and row[0]):
                    schema = _procrastinate().schema.SchemaManager.get_schema()
                    await conn.execute(schema)
                    self.created_schema = True
                    log.info("created the job queue's tables (procrastinate) in %s", redact(self.url))
            cur = await conn.execute("SELECT proname FROM pg_proc WHERE proname = ANY(%s)", (list(NEEDED),))
            have = {r[0] for r in await cur.fetchall()}
        missing = [n for n in NEEDED if n not in have]
        if missing:
            version = getattr(_procrastinate(), "__version__", "installed")
            raise QueueError(
                f"the job queue's schema in {redact(self.url)} is older than procrastinate {version} "
                f"(no {', '.join(missing)}): apply its migrations (procrastinate's documentation, "
                "'Migrations'), or let the auditor create it in a database that has none"
            )

    async def _beating(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat)
            try:
                await self._manager.update_heartbeat(self.worker_id)
                self.beats_failed = 0
            except Exception as exc:  # the database away for a moment: the next beat tries again
                self.beats_failed += 1
                log.warning("job queue heartbeat failed (%d in a row): %s", self.beats_failed, exc)

    def close(self) -> None:
        """Stop beating and leave (the worker's row goes: jobs still ``doing`` under it count as
        stalled at once, which is what an auditor that gives up on them wants)."""
        loop = self._loop
        if loop is None:
            return
        try:
            if self._manager is not None and self._connector is not None:
                self._call(self._close(), timeout=30)
        except Exception as exc:  # noqa: BLE001 - closing: the database may be gone
            log.warning("could not leave the job queue cleanly: %s", exc)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None:
                self._thread.join(10)
            loop.close()
            self._loop = self._thread = None

    async def _close(self) -> None:
        if self._beat is not None:
            self._beat.cancel()
            self._beat = None
        try:
            if self.worker_id is not None:
                await self._manager.unregister_worker(self.worker_id)
        finally:
            await self._connector.close_async()

    # -- jobs --------------------------------------------------------------------------------
    def defer(self, queue: str, hosts: Iterable[tuple[str, str, dict[str, Any]]]) -> int:
        """Defer each ``(host, key, args)`` job once: a host whose job ``key`` was deferred
        before (by anyone) is left as it is. How many this call deferred."""
        return self._call(self._defer(queue, list(hosts)))

    async def _defer(self, queue: str, hosts: list[tuple[str, str, dict[str, Any]]]) -> int:
        jobs = _procrastinate().jobs
        count = 0
        for host, key, args in hosts:
            job = jobs.Job(
                id=None,
                queue=queue,
                lock=None,
                queueing_lock=None,
                task_name=HOST_TASK,
                task_kwargs={**args, "host": host, "timestamp": 0},
            )
            if await self._manager.defer_periodic_job(job, periodic_id=key, defer_timestamp=0) is not None:
                count += 1
        return count

    def fetch(self, queue: str) -> HostJob | None:
        """Take the next host of the queue (``doing`` under this worker), or None."""
        job = self._call(self._manager.fetch_job([queue], self.worker_id))
        return None if job is None else _host_job(job)

    def jobs(self, queue: str) -> list[HostJob]:
        """Every host job of the queue as the database has it now."""
        rows = self._call(self._manager.list_jobs_async(queue=queue, task=HOST_TASK))
        return [_host_job(j) for j in rows]

    def stalled(self, queue: str, timeout: float) -> list[HostJob]:
        """The queue's jobs ``doing`` under a worker whose last beat is older than ``timeout``
        seconds by the database's clock (or that left)."""
        found = self._call(
            self._manager.get_stalled_jobs(queue=queue, task_name=HOST_TASK, seconds_since_heartbeat=timeout)
        )
        return [_host_job(j) for j in found]

    def retry(self, job_ids: Iterable[int], holder: int | None) -> list[int]:
        """Put the jobs back to ``todo`` that are still ``doing`` under worker ``holder`` (a
        stalled one's, or this auditor's given back; None: a worker that left), in one
        statement that locks them first: a job another auditor has taken since it was seen
        stalled stays with it. The ids put back."""
        ids = list(job_ids)
        if not ids:
            return []
        return self._call(self._retry(ids, holder))

    async def _retry(self, ids: list[int], holder: int | None) -> list[int]:
        async with self._connector.pool.connection() as conn:
            cur = await conn.execute(RETRY_HELD, (ids, holder))
            return [r[0] for r in await cur.fetchall()]


def _host_job(job: Any) -> HostJob:
    kwargs = job.task_kwargs or {}
    return HostJob(job.id, str(kwargs.get("host", "")), str(job.status), job.worker_id, job.attempts)
