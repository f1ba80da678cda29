"""Logging for the auditor's long-lived processes: to the systemd journal with priorities
when stderr is the journal, plain lines otherwise. The daemon and its cycle child share it,
so a cycle's log lines read like the daemon's own."""

from __future__ import annotations

import logging
import os
import sys

from auditor.common.redact import RedactingFilter

_PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3, logging.CRITICAL: 2}


class JournalFormatter(logging.Formatter):
    """``<6>auditor.daemon.main: message``: journald adds the timestamp and reads the priority."""

    def format(self, record: logging.LogRecord) -> str:
        priority = _PRIORITY.get(record.levelno, 6 if record.levelno < logging.WARNING else 3)
        return f"<{priority}>{super().format(record)}"


def stderr_is_journal(environ: dict[str, str] | os._Environ[str] | None = None) -> bool:
    """True when stderr is connected to the journal (systemd sets ``$JOURNAL_STREAM`` to the
    device and inode of the stream it gave us; a redirected stderr no longer matches)."""
    value = (os.environ if environ is None else environ).get("JOURNAL_STREAM", "")
    dev, _, ino = value.partition(":")
    if not (dev.isdigit() and ino.isdigit()):
        return False
    try:
        st = os.fstat(sys.stderr.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return st.st_dev == int(dev) and st.st_ino == int(ino)


def setup_logging(level: int = logging.INFO, journal: bool | None = None) -> logging.Handler:
    journal = stderr_is_journal() if journal is None else journal
    handler = logging.StreamHandler(sys.stderr)
    if journal:
        handler.setFormatter(JournalFormatter("%(name)s: %(message)s"))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    handler.addFilter(RedactingFilter())  # no database password in the journal, whoever logs it
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # APScheduler logs every job start and end at INFO; the daemon says what matters itself.
    logging.getLogger("apscheduler").setLevel(max(level, logging.WARNING))
    logging.getLogger("alembic").setLevel(max(level, logging.WARNING))
    return handler
