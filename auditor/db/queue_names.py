"""The names the auditor gives its queues and once-only keys in the job queue's tables.

Its own module, without SQLAlchemy: the daemon names a cycle's queue (auditor.queue.cycles)
and must not map SQLAlchemy to do so (it idles without it; its children open the database)."""

QUEUE_PREFIX = "auditor/"
"""Every queue (one per shared cycle) and every once-only key the auditor defers starts so."""
