"""Database URLs as users write them, and as the auditor shows them.

A user writes ``postgresql://user@host:5432/auditor`` (or ``postgres://...``, as libpq and
most tools accept); SQLAlchemy would pick psycopg2 for that, which the auditor does not
depend on. The installed driver is psycopg 3 (``pip install 'auditor[postgres]'``), so
the plain scheme is mapped to ``postgresql+psycopg``. A URL that names a driver explicitly
is left as written. Passwords never reach a log, a message or the terminal: everything
the auditor prints goes through ``redact``.
"""

from __future__ import annotations

import os

from sqlalchemy.engine import URL, make_url

from auditor.common.redact import redact_url

ENV = "AUDITOR_DB_URL"
"""Environment variable that overrides the config's ``[storage] url`` (``--db`` overrides both)."""

POSTGRES_DRIVER = "postgresql+psycopg"
INSTALL_HINT = "pip install 'auditor[postgres]' (installs psycopg 3)"
BACKENDS = ("sqlite", "postgresql")
"""The databases a history lives in."""


def parse(url: str) -> URL:
    """The SQLAlchemy URL for ``url``, with a bare PostgreSQL scheme mapped to psycopg 3.
    Raises ValueError (with the password hidden) when it is not a URL."""
    try:
        parsed = make_url(url)
    except Exception as exc:  # noqa: BLE001 - SQLAlchemy raises several types here
        raise ValueError(f"not a database URL: {redact(url)!r} ({type(exc).__name__})") from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername=POSTGRES_DRIVER)
    if parsed.get_backend_name() not in BACKENDS:  # said here, not when a cycle opens it
        scheme = parsed.drivername.split("+")[0]
        raise ValueError(
            f"not a database URL the history can use: {redact(url)!r} (no database {scheme!r}; "
            "SQLite or PostgreSQL: sqlite:///... or postgresql://...)"
        )
    return parsed


def redact(url: str | URL) -> str:
    """``url`` with its password replaced by ``***`` (auditor.common.redact.redact_url)."""
    if isinstance(url, URL):
        return url.render_as_string(hide_password=True)
    return redact_url(url)


def from_environment() -> str | None:
    """``$AUDITOR_DB_URL`` when set and not empty."""
    return os.environ.get(ENV) or None


def is_postgres(url: URL) -> bool:
    return url.get_backend_name() == "postgresql"


def driver_missing(url: URL, exc: BaseException) -> str | None:
    """A message naming the missing driver and how to install it, when ``exc`` (raised by
    create_engine or on connect) is an ImportError of the URL's driver; else None."""
    if not isinstance(exc, ImportError) and "No module named" not in str(exc):
        return None
    if is_postgres(url):
        return f"the PostgreSQL driver for {redact(url)} is not installed ({exc}); {INSTALL_HINT}"
    return f"the database driver for {redact(url)} is not installed ({exc})"


__all__ = ["ENV", "INSTALL_HINT", "driver_missing", "from_environment", "is_postgres", "parse", "redact"]
