"""The job queue's tables (procrastinate's, auditor.queue) where the auditor reads or writes
them itself rather than through procrastinate: the store's fence, putting back the jobs one
worker still holds, and retention. procrastinate creates and migrates these tables; the
auditor only relies on the columns and functions named here (auditor.queue.jobs checks that
the functions exist before it uses the queue)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, text

from auditor.db.queue_names import QUEUE_PREFIX

HELD = text("SELECT id, status, worker_id FROM procrastinate_jobs WHERE id = ANY(:ids) FOR UPDATE")
"""The run's host jobs, locked for the rest of the store's transaction."""

FINISH = text("SELECT procrastinate_finish_job_v1(:id, 'succeeded', false)")

RETRY_HELD = """
WITH held AS (
    SELECT id FROM procrastinate_jobs
     WHERE id = ANY(%s) AND status = 'doing' AND worker_id IS NOT DISTINCT FROM %s
       FOR UPDATE
)
SELECT id, procrastinate_retry_job_v2(id, NULL, NULL, NULL, NULL) FROM held
"""
"""procrastinate's retry (``doing`` -> ``todo``) of the jobs one worker still holds (psycopg's
placeholders: it runs on the queue's own connection)."""


def prune(conn: Connection, cutoff: datetime) -> dict[str, int]:
    """The auditor's jobs with nothing since ``cutoff`` (naive UTC; every status: a job still
    open that long belongs to a cycle long over), their once-only keys, and the workers whose
    last beat is older than it. Nothing where the database has no queue."""
    if conn.dialect.name != "postgresql" or not conn.scalar(text("SELECT to_regclass('procrastinate_jobs')")):
        return {}
    at = cutoff.isoformat() + "+00:00"
    jobs = conn.execute(
        text(
            "DELETE FROM procrastinate_jobs j WHERE j.queue_name LIKE :prefix AND NOT EXISTS ("
            "SELECT 1 FROM procrastinate_events e WHERE e.job_id = j.id AND e.at >= CAST(:at AS timestamptz))"
        ),
        {"prefix": QUEUE_PREFIX + "%", "at": at},
    ).rowcount
    keys = conn.execute(
        text("DELETE FROM procrastinate_periodic_defers WHERE job_id IS NULL AND periodic_id LIKE :prefix"),
        {"prefix": QUEUE_PREFIX + "%"},
    ).rowcount
    workers = conn.execute(
        text("DELETE FROM procrastinate_workers WHERE last_heartbeat < CAST(:at AS timestamptz)"), {"at": at}
    ).rowcount
    return {"queue jobs": jobs or 0, "queue keys": keys or 0, "queue workers": workers or 0}
