"""Is the history database usable? One pass that finds what would otherwise surface as a
traceback halfway through a command: a file that is not a database, damaged pages or
indexes, missing tables, timestamps and JSON that do not parse, a file that cannot be
written.

``auditor audit`` (and each daemon cycle) runs it before any worker starts, so that nothing
is written into a damaged file (a cycle whose results cannot be stored is wasted, and a write
through a damaged index spreads the damage); ``auditor db check`` prints it; read commands
read what they can and name the rest (auditor.db.columns).

SQLite's ``quick_check`` finds damaged pages in linear time but not an index whose entries
no longer match its table, which only ``integrity_check`` finds (about 5 times slower: 0.7
against 3.7 s on a history of 1M metric rows, measured). ``db check`` runs the whole
``integrity_check``; the cycle runs it within a time budget (``CYCLE_BUDGET``) after the
``quick_check``, which covers every history up to millions of rows and leaves larger ones
with the ``quick_check``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import JSON, DateTime, inspect
from sqlalchemy.exc import SQLAlchemyError

from auditor.db import schema as m


def from_database(exc: BaseException) -> bool:
    """Whether an exception (a UnicodeDecodeError: SQLite handing back bytes that are not
    UTF-8 from a damaged file) was raised inside the database layer."""
    tb = exc.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if "sqlalchemy" in name or "sqlite3" in name or name.endswith(("store.py", "db_health.py")):
            return True
        tb = tb.tb_next
    return False


SQLITE_FILES: set[Path] = set()
"""The SQLite files this process opened (auditor.history.store notes each): where a driver's
"disk I/O error" may mean a full file system, which is then said."""
FULL_BELOW = 1024 * 1024
"""Free bytes under which a file system reads as full to SQLite in WAL mode (its -wal and
-shm files need room to grow)."""


def db_error(exc: BaseException) -> str:
    """What the database driver said, in one line (libpq says "Connection refused" and "Is the
    server running...?" on two), without SQLAlchemy's statement and link; where SQLite says
    "disk I/O error" or "disk is full" and a file system of its files is full, that too."""
    if isinstance(exc, UnicodeDecodeError):
        return f"the file holds text that is not UTF-8, it is damaged ({exc.reason} at byte {exc.start})"
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc)
    text = text.split("\n[SQL:")[0].split("\n(Background on this error")[0]
    said = "; ".join(line.strip() for line in text.splitlines() if line.strip())
    if "disk i/o error" in said.lower() or "disk is full" in said.lower():
        full = full_disk()
        if full:
            said += f" ({full})"
    return said


def full_disk() -> str:
    """How full the file systems of this process's SQLite files are, where one is (under
    ``FULL_BELOW``): "the file system holding /var/lib/auditor/history.db is full (12 KiB
    free): free some space there and run the command again"; "" when none is."""
    for path in sorted(SQLITE_FILES):
        try:
            st = os.statvfs(path.parent)
        except OSError:
            continue
        free = st.f_bavail * st.f_frsize
        if free < FULL_BELOW:
            return (
                f"the file system holding {path} is full ({free // 1024} KiB free): free some space "
                "there and run the command again"
            )
    return ""


CYCLE_BUDGET = 10.0
"""Seconds the cycle's check may spend on SQLite's integrity_check before it goes on with the
quick_check's answer alone."""

_INDEX_ONLY = ("missing from index", "wrong # of entries in index", "non-unique entry in UNIQUE index")


@dataclass
class Health:
    problems: list[str] = field(default_factory=list)
    read_only: bool = False
    remedy: str = ""
    """What to do about the problems, when something specific can be said."""

    @property
    def ok(self) -> bool:
        return not self.problems and not self.read_only

    def summary(self) -> str:
        items = list(self.problems) + (
            ["it is read-only (results cannot be stored)"] if self.read_only else []
        )
        return "; ".join(items) if items else "ok"


def _kind(type_: object) -> str | None:
    inner = getattr(type_, "impl_instance", type_)
    if isinstance(inner, DateTime):
        return "timestamp"
    if isinstance(inner, JSON):
        return "JSON"
    return None


def _bad_values(conn, tables: set[str]) -> list[str]:  # noqa: ANN001 - a SQLAlchemy connection
    """Rows whose timestamps or JSON do not parse (SQLite: julianday() and json_valid())."""
    problems = []
    for table in m.Base.metadata.sorted_tables:
        if table.name not in tables:
            continue
        for col in table.columns:
            kind = _kind(col.type)
            if kind is None:
                continue
            test = (
                "julianday({c}) IS NULL"
                if kind == "timestamp"
                else "CASE WHEN json_valid({c}) THEN json_type({c}) != 'object' ELSE 1 END"
            )
            where = f'"{col.name}" IS NOT NULL AND ' + test.format(c=f'"{col.name}"')
            sql = f'SELECT count(*), min(rowid) FROM "{table.name}" WHERE {where}'
            count, first = conn.exec_driver_sql(sql).one()
            if count:
                problems.append(
                    f"{count} row{'s' if count != 1 else ''} of {table.name} with an unreadable "
                    f"{kind} in {col.name} (first: rowid {first})"
                )
    return problems


def check(  # noqa: ANN001 - a SQLAlchemy engine
    engine, write: bool = True, thorough: bool = False, budget: float | None = None
) -> Health:
    """Check the database behind ``engine``; ``write``: also whether it accepts writes.
    SQLite: ``quick_check`` always; ``thorough``: then the whole ``integrity_check``;
    ``budget``: the ``integrity_check`` for at most that many seconds (its verdict when it
    finishes in time, nothing when it does not)."""
    health = Health()
    sqlite = engine.dialect.name == "sqlite"
    try:
        with engine.connect() as conn:
            if sqlite:
                found = _pragma(conn, "quick_check(3)")
                if found != ["ok"]:
                    said = "; ".join(found)
                    health.problems.append(f"the file is damaged (SQLite quick_check: {said})")
                    health.remedy = _remedy(engine, index_only=False)
                elif thorough or budget is not None:
                    found = _integrity(conn, None if thorough else budget)
                    if found not in (None, ["ok"]):
                        index_only = all(any(w in f for w in _INDEX_ONLY) for f in found)
                        what = "an index is damaged" if index_only else "the file is damaged"
                        health.problems.append(f"{what} (SQLite integrity_check: {'; '.join(found)})")
                        health.remedy = _remedy(engine, index_only)
            tables = set(inspect(conn).get_table_names())
            missing = sorted(t for t in m.Base.metadata.tables if t not in tables)
            if missing:
                health.problems.append(
                    f"table{'s' if len(missing) > 1 else ''} missing: {', '.join(missing)}"
                )
            if sqlite and not health.problems:
                health.problems += _bad_values(conn, tables)
    except (SQLAlchemyError, UnicodeDecodeError) as exc:
        said = db_error(exc)
        if sqlite and corrupt(exc):  # a page SQLite needs before it can check any (its schema's)
            health.problems.append(f"the file is damaged (SQLite: {said})")
            health.remedy = damaged_remedy(engine)
        else:
            health.problems.append(said)
        return health
    if write and sqlite:
        try:
            with engine.connect() as conn:
                # A write that changes nothing, rolled back: fails on a read-only file.
                version = conn.exec_driver_sql("PRAGMA user_version").scalar()
                conn.exec_driver_sql("BEGIN IMMEDIATE")
                try:
                    conn.exec_driver_sql(f"PRAGMA user_version = {int(version or 0)}")
                finally:
                    conn.exec_driver_sql("ROLLBACK")
        except (SQLAlchemyError, UnicodeDecodeError) as exc:
            if "readonly" in db_error(exc).replace("-", "").replace(" ", "").lower():
                health.read_only = True
            else:
                health.problems.append(db_error(exc))
    return health


def corrupt(exc: BaseException) -> bool:
    """SQLite said its file is damaged (SQLITE_CORRUPT: "database disk image is malformed")."""
    orig = getattr(exc, "orig", exc)
    name = getattr(orig, "sqlite_errorname", "")
    return name.startswith("SQLITE_CORRUPT") or "malformed" in str(orig)


def _pragma(conn, pragma: str) -> list[str]:  # noqa: ANN001
    return [" ".join(str(r).split()) for r in conn.exec_driver_sql(f"PRAGMA {pragma}").scalars()]


def _integrity(conn, budget: float | None) -> list[str] | None:  # noqa: ANN001
    """``integrity_check(3)``'s lines; None when ``budget`` seconds ran out first (SQLite's
    progress handler interrupts the statement)."""
    if budget is None:
        return _pragma(conn, "integrity_check(3)")
    raw = conn.connection.dbapi_connection
    deadline = time.monotonic() + budget
    raw.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 20000)
    try:
        return _pragma(conn, "integrity_check(3)")
    except SQLAlchemyError as exc:
        if "interrupted" in str(exc):
            return None
        raise
    finally:
        raw.set_progress_handler(None, 0)


def damaged_remedy(engine) -> str:  # noqa: ANN001
    """What to do with an SQLite file that is damaged beyond its indexes."""
    return _remedy(engine, index_only=False)


def _remedy(engine, index_only: bool) -> str:  # noqa: ANN001
    path = engine.url.database or "FILE"
    if index_only:
        return f"rebuild the indexes from the tables: sqlite3 {path} 'REINDEX' (then `auditor db check`)"
    return (
        f"restore {path} from a backup; or try to save what can still be read "
        f"(sqlite3 {path} .recover > recovered.sql, then sqlite3 NEW.db < recovered.sql); or move it "
        "aside and let the auditor start a new history"
    )


__all__ = ["CYCLE_BUDGET", "Health", "check", "corrupt", "damaged_remedy", "db_error"]
