"""Is the history database usable? One pass that finds what would otherwise surface as a
traceback halfway through a command: a file that is not a database, damaged pages, missing
tables, timestamps and JSON that do not parse, a file that cannot be written.

``auditor audit`` runs it before any worker starts (a cycle whose results cannot be stored
is wasted); ``auditor db check`` prints it; read commands read what they can and name the
rest (auditor.db.columns).
"""

from __future__ import annotations

from dataclasses import dataclass, field

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


def db_error(exc: BaseException) -> str:
    """What the database driver said, without SQLAlchemy's statement and link."""
    if isinstance(exc, UnicodeDecodeError):
        return f"the file holds text that is not UTF-8, it is damaged ({exc.reason} at byte {exc.start})"
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc)
    return text.split("\n[SQL:")[0].split("\n(Background on this error")[0].strip()


@dataclass
class Health:
    problems: list[str] = field(default_factory=list)
    read_only: bool = False

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


def check(engine, write: bool = True) -> Health:  # noqa: ANN001 - a SQLAlchemy engine
    """Check the database behind ``engine``; ``write``: also whether it accepts writes."""
    health = Health()
    sqlite = engine.dialect.name == "sqlite"
    try:
        with engine.connect() as conn:
            if sqlite:
                found = [
                    " ".join(str(r).split()) for r in conn.exec_driver_sql("PRAGMA quick_check(3)").scalars()
                ]
                if found != ["ok"]:
                    health.problems.append(
                        "the file is damaged (SQLite quick_check: " + "; ".join(found) + ")"
                    )
            tables = set(inspect(conn).get_table_names())
            missing = sorted(t for t in m.Base.metadata.tables if t not in tables)
            if missing:
                health.problems.append(
                    f"table{'s' if len(missing) > 1 else ''} missing: {', '.join(missing)}"
                )
            if sqlite and not health.problems:
                health.problems += _bad_values(conn, tables)
    except (SQLAlchemyError, UnicodeDecodeError) as exc:
        health.problems.append(db_error(exc))
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


__all__ = ["Health", "check", "db_error"]
