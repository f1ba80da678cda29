"""The history database: open (and migrate) it, and write a cycle's results atomically.

A run row is committed as ``running`` when a cycle starts; everything the cycle found is
written in one transaction at the end, which also marks the run ``complete``. A cycle that
is interrupted is marked ``aborted`` with nothing else written, and a run left ``running``
by a process that no longer exists (killed, power loss) is marked aborted on the next start.
So the history holds complete runs and aborted runs, never half of one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import socket
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, create_engine, event, select, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

import auditor.migrations
from auditor.common import tempdirs
from auditor.common.paths import state_dir
from auditor.db import fingerprints
from auditor.db import health as db_health
from auditor.db import schema as m
from auditor.db import url as db_url
from auditor.db.blobs import add_artifact
from auditor.db.content import Figure, figures, metric_sets, threshold_sets
from auditor.db.rows import stack_row
from auditor.history import baselines, publication, series, telemetry
from auditor.results import (
    MODES,
    CycleResult,
    Latency,
    LearnedMaximum,
    LearnedOperator,
    RolloutResult,
    open_loop_status,
)

if TYPE_CHECKING:
    from alembic.config import Config as AlembicConfig

# Alembic (with Mako and Pygments, about 12 MB resident) is imported only when the schema
# must change or be inspected: a daemon that opens an up-to-date database never loads it.
MIGRATIONS_DIR = Path(auditor.migrations.__file__).resolve().parent
_REVISION = re.compile(r"^revision\s*(?::[^=\n]*)?=\s*[\"']([^\"']+)[\"']", re.M)
_DOWN_REVISION = re.compile(r"^down_revision\s*(?::[^=\n]*)?=(.*)$", re.M)


def shipped_head() -> str | None:
    """The newest migration this auditor ships, read from the version files' ``revision`` and
    ``down_revision`` lines without importing Alembic; None when that is not one revision."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (MIGRATIONS_DIR / "versions").glob("*.py"):
        source = path.read_text(encoding="utf-8")
        rev = _REVISION.search(source)
        if rev is None:
            continue
        revisions.add(rev.group(1))
        down = _DOWN_REVISION.search(source)
        if down is not None:
            parents.update(re.findall(r"[\"']([^\"']+)[\"']", down.group(1)))
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


class StoreError(Exception):
    """The history database cannot be opened or written. ``reached``: False when it could not
    be reached at all (not a URL, no such file, no driver, no server answering), so there is
    nothing to read either."""

    def __init__(self, message: str, reached: bool = True):
        super().__init__(message)
        self.reached = reached


def _unreached(exc: BaseException) -> bool:
    """Whether a database error says the server was not reached or refused the login."""
    text = str(getattr(exc, "orig", None) or exc).lower()
    return any(
        words in text
        for words in (
            "connection failed",
            "could not connect",
            "connection refused",
            "could not translate host name",
            "password authentication failed",
            "no password supplied",
            "does not exist",
            "timeout expired",
            "unable to open database file",
        )
    )


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _write_lock(session: Session) -> None:
    """Take the write lock a prune takes (auditor.history.retention) before the run's writes
    begin: the run refers to content-addressed rows it found stored (metric sets, fingerprints),
    and a prune between finding one and referring to it would delete it as unreferenced.
    Other runs' stores do not wait for each other on PostgreSQL (ROW EXCLUSIVE is shared)."""
    conn = session.connection()
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    elif conn.dialect.name == "postgresql":
        conn.exec_driver_sql("LOCK TABLE runs IN ROW EXCLUSIVE MODE")


def _sqlite_pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
    cur = dbapi_connection.cursor()
    with contextlib.suppress(sqlite3.OperationalError):
        cur.execute("PRAGMA journal_mode=WAL")  # a read-only database keeps its mode, and is read
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def alembic_config(engine_url: str) -> AlembicConfig:
    from alembic.config import Config as AlembicConfig

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", engine_url.replace("%", "%%"))
    return cfg


MIGRATION_LOCK = 0x61756469746F72  # "auditor": the PostgreSQL advisory lock held while migrating
CONNECT_TIMEOUT = 10
"""Seconds to wait for a database server before the run fails (not the default: forever)."""


def auditor_identity(configured: str = "") -> str:
    """Who writes a run: ``[storage] auditor_id`` when set, else the host name. Several auditors
    sharing one database need distinct identities (retention and alerts are per auditor)."""
    return configured.strip() or socket.gethostname()


_OPEN_RUNS: set[tuple[str, int]] = set()
"""(database URL, run id) of the runs this process has begun and not yet finished or aborted,
over every Store it opened (the daemon opens a new one on reload while a cycle may run)."""


def sqlite_directory_problem(path: Path) -> str | None:
    """Why a new SQLite history at ``path`` will not be created, or None. The default directory
    (under the state directory) is made when missing; any other must exist, so that a typo in
    --db or [storage] url (``/typo-dir/h.db``) is an error, not a directory quietly made at
    the root of the file system."""
    parent = path.parent.absolute()
    default = state_dir().absolute()
    if parent.is_dir() or parent == default or default in parent.parents:
        return None
    what = "is not a directory" if parent.exists() else "does not exist"
    return (
        f"cannot create the history database {path}: its directory {parent} {what} (check --db, "
        f"${db_url.ENV} or [storage] url; make the directory first if the path is right)"
    )


def _sqlite_directory(path: Path) -> None:
    problem = sqlite_directory_problem(path)
    if problem is not None:
        raise StoreError(problem, reached=False)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create the directory for {path}: {exc}") from None


SQLITE_NEEDED = (3, 35, 0)
"""The oldest SQLite the history works on: every write of fingerprints and content rows uses
``INSERT ... RETURNING`` (SQLite 3.35, March 2021)."""


def sqlite_usable(version: tuple[int, int, int] | None = None) -> None:
    """Raise StoreError where Python's SQLite library is older than the history needs, naming
    both versions and how to get a newer one (before anything is opened or written)."""
    found = version or sqlite3.sqlite_version_info
    if tuple(found) < SQLITE_NEEDED:
        have, need = ".".join(map(str, found)), ".".join(map(str, SQLITE_NEEDED))
        raise StoreError(
            f"this Python's SQLite library is {have}; the history database needs SQLite {need} or "
            "newer (INSERT ... RETURNING). Use a Python built with a newer SQLite (python.org and "
            "distribution builds of 3.11 have one), or a PostgreSQL history ([storage] url)",
            reached=False,
        )


class Store:
    def __init__(self, url: str, auditor_id: str = "", create: bool = True):
        """``create``: an SQLite file that does not exist yet is made (with its directory) on
        first use; without it (a read or a check) its absence is a StoreError and nothing is
        created, so a typo'd path never leaves directories behind."""
        self.url = url
        self.display_url = db_url.redact(url)
        """The URL with its password hidden: the only form of it that is ever printed."""
        self.auditor_id = auditor_identity(auditor_id)
        self._sqlite_path: Path | None = None
        try:
            parsed = db_url.parse(url)
        except ValueError as exc:
            raise StoreError(str(exc), reached=False) from None
        options: dict = {}
        if parsed.get_backend_name() == "sqlite":
            sqlite_usable()
        uri = str(parsed.query.get("uri", "")).lower() in ("true", "1")  # file:...?mode=ro
        if (
            parsed.get_backend_name() == "sqlite"
            and parsed.database not in (None, "", ":memory:")
            and not uri
        ):
            path = Path(parsed.database).expanduser()
            parsed = parsed.set(database=str(path))
            self._sqlite_path = path
            db_health.SQLITE_FILES.add(path.absolute())
            if not create and not path.exists():
                raise StoreError(
                    f"no history database at {path}: nothing was recorded there (check --db, "
                    f"${db_url.ENV} or [storage] url; `auditor audit` creates it)",
                    reached=False,
                )
            _sqlite_directory(path)
        elif db_url.is_postgres(parsed):
            # A server that went away between cycles is reconnected, not reported as broken.
            options = {"pool_pre_ping": True, "connect_args": {"connect_timeout": CONNECT_TIMEOUT}}
        try:
            self.engine: Engine = create_engine(parsed, **options)
        except Exception as exc:  # noqa: BLE001 - unknown dialect, missing driver, bad arguments
            message = db_url.driver_missing(parsed, exc)
            raise StoreError(
                message or f"unsupported database URL {self.display_url!r}: {exc}", reached=False
            ) from None
        if parsed.get_backend_name() == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)

    @classmethod
    def open(cls, url: str, auditor_id: str = "", create: bool = True) -> Store:
        """Open the database and bring its schema up to date."""
        store = cls(url, auditor_id, create)
        if not store.at_shipped_head():
            store.upgrade()
        return store

    def at_shipped_head(self) -> bool:
        """Whether the database is at the newest shipped revision (one query, no Alembic)."""
        head = shipped_head()
        if head is None:
            return False
        try:
            with self.engine.connect() as conn:
                versions = [r[0] for r in conn.execute(text("SELECT version_num FROM alembic_version"))]
        except SQLAlchemyError:  # no alembic_version table yet: a new database
            return False
        return versions == [head]

    def upgrade(self, revision: str = "head") -> None:
        """Migrate to ``revision``. Auditors that start at once take turns: one migrates while
        the others wait for its lock, then find nothing left to do."""
        self._migrate_to(revision, down=False)

    def downgrade(self, revision: str) -> None:
        """Migrate back to ``revision`` (an older auditor's schema), as safely as ``upgrade``."""
        self._migrate_to(revision, down=True)

    def _migrate_to(self, revision: str, down: bool) -> None:
        from alembic.util.exc import CommandError

        cfg = alembic_config(self.url)
        try:
            with self._migration_lock(), self.engine.connect() as conn:
                sqlite = conn.dialect.name == "sqlite"
                if sqlite:
                    # A migration that rebuilds a table (Alembic's batch mode: copy, DROP, rename)
                    # must not enforce foreign keys: DROP TABLE of probe_results would delete
                    # every row that refers to it ON DELETE CASCADE (its latencies). SQLite's
                    # own procedure for altering tables: keys off outside the transaction,
                    # foreign_key_check before the commit, keys on again.
                    conn.exec_driver_sql("PRAGMA foreign_keys=OFF")
                    conn.commit()
                try:
                    with conn.begin():
                        self._migrate(conn, cfg, revision, down)
                finally:
                    if sqlite:  # the pooled connection keeps the setting: every other use enforces
                        conn.exec_driver_sql("PRAGMA foreign_keys=ON")
                        conn.commit()
        except (SQLAlchemyError, UnicodeDecodeError) as exc:
            if self.engine.dialect.name == "sqlite" and db_health.corrupt(exc):
                # damaged where SQLite reads first (its schema): said as `db check` says it
                raise StoreError(
                    f"the history database {self.display_url} cannot be used: the file is damaged "
                    f"(SQLite: {db_health.db_error(exc)}); nothing was written "
                    f"({db_health.damaged_remedy(self.engine)}; `auditor db check` lists the problems)"
                ) from None
            raise StoreError(
                f"cannot open or migrate the history database {self.display_url}: {db_health.db_error(exc)}",
                reached=not _unreached(exc),
            ) from None
        except CommandError as exc:
            # Typically a revision this auditor does not know: a newer auditor wrote the database.
            raise StoreError(
                f"cannot migrate the history database {self.display_url}: {exc} "
                "(was it written by a newer auditor? upgrade this one, or use another --db)"
            ) from None

    def _migrate(self, conn: Any, cfg: AlembicConfig, revision: str, down: bool) -> None:
        """Alembic's upgrade (or downgrade) on ``conn``, in the transaction the caller began."""
        from alembic import command

        if conn.dialect.name == "sqlite":
            # One transaction for the whole schema, as on PostgreSQL: Python's sqlite3 opens
            # none before DDL (each CREATE would commit alone), so a disk that fills up halfway
            # would leave half a schema that no later start could migrate ("table ... already
            # exists"). SQLite's DDL is transactional.
            conn.exec_driver_sql("BEGIN")
        if conn.dialect.name == "postgresql":
            # Held until this transaction ends; PostgreSQL's DDL is transactional, so a waiting
            # auditor sees either no schema or the whole migrated one.
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATION_LOCK})
        cfg.attributes["connection"] = conn
        (command.downgrade if down else command.upgrade)(cfg, revision)
        if conn.dialect.name == "sqlite":
            broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
            if broken:
                table, rowid, parent, _ = broken[0]
                raise StoreError(
                    f"migrating the history database {self.display_url} would leave {len(broken)} "
                    f"row(s) referring to missing ones (e.g. {table} row {rowid} -> {parent}); "
                    "nothing was changed"
                )

    @contextlib.contextmanager
    def _migration_lock(self) -> Iterator[None]:
        """On an SQLite file, an exclusive lock on ``<file>.migrate-lock`` (flock, not the
        database file: closing another descriptor of that file would drop SQLite's own locks).
        Where the lock cannot be created (a read-only directory) this process cannot migrate
        either; it goes on without the lock and only reads."""
        if self._sqlite_path is None:
            yield
            return
        lock_path = self._sqlite_path.with_name(self._sqlite_path.name + ".migrate-lock")
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            yield
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def current_revision(self) -> str | None:
        from alembic.runtime.migration import MigrationContext

        with self.engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()

    def head_revision(self) -> str | None:
        from alembic.script import ScriptDirectory

        return ScriptDirectory.from_config(alembic_config(self.url)).get_current_head()

    def current_heads(self) -> tuple[str, ...]:
        """The revisions the database is at (several while migration branches are unmerged)."""
        from alembic.runtime.migration import MigrationContext

        try:
            with self.engine.connect() as conn:
                return tuple(sorted(MigrationContext.configure(conn).get_current_heads()))
        except SQLAlchemyError as exc:
            raise StoreError(
                f"cannot read the schema revision of {self.display_url}: {db_health.db_error(exc)}",
                reached=not _unreached(exc),
            ) from None

    def head_revisions(self) -> tuple[str, ...]:
        """The newest revisions this auditor ships."""
        from alembic.script import ScriptDirectory

        return tuple(sorted(ScriptDirectory.from_config(alembic_config(self.url)).get_heads()))

    def pending_revisions(self) -> list[str]:
        """Revisions this auditor ships that the database has not applied yet, oldest first."""
        from alembic.script import ScriptDirectory

        script = ScriptDirectory.from_config(alembic_config(self.url))
        applied: set[str] = set()
        for rev in script.iterate_revisions(self.current_heads() or (), "base"):
            applied.add(rev.revision)
        return [
            rev.revision
            for rev in reversed(list(script.walk_revisions("base", "heads")))
            if rev.revision not in applied
        ]

    def close(self) -> None:
        self.engine.dispose()

    def check_usable(self) -> None:
        """Raise StoreError with one message if a cycle's results could not be stored here
        (damaged file, missing tables, unreadable rows, read-only): checked before a cycle
        spends minutes on the stacks."""
        health = db_health.check(self.engine, budget=db_health.CYCLE_BUDGET)
        if not health.ok:
            remedy = health.remedy or "use another --db, or restore or repair this one"
            raise StoreError(
                f"the history database {self.display_url} cannot be used: {health.summary()}; "
                f"no cycle was run, nothing was written ({remedy}; `auditor db check` lists the problems)"
            )

    # -- runs ------------------------------------------------------------------------------
    def begin_run(self, config_path: str, selection: dict[str, Any] | None = None) -> int:
        """Record that a cycle started; first mark runs orphaned by dead processes aborted.
        ``selection``: what a narrowed run covers (auditor.config.selection.Scope), None for
        the whole config. A database that cannot be reached is a StoreError: the cycle does
        not start (the auditor keeps no results of its own; see docs/hosts.md, "A fleet")."""
        try:
            self.reap_orphans()
            with Session(self.engine) as s, s.begin():
                run = m.Run(
                    started_at=_now(),
                    status="running",
                    host=socket.gethostname(),
                    auditor_id=self.auditor_id,
                    pid=os.getpid(),
                    config_path=config_path,
                    selection=selection,
                )
                s.add(run)
                s.flush()
                run_id = run.id
        except SQLAlchemyError as exc:
            raise StoreError(
                f"cannot record a new run in {self.display_url}: {db_health.db_error(exc)}"
            ) from None
        _OPEN_RUNS.add((self.url, run_id))
        return run_id

    def abort_run(self, run_id: int, reason: str) -> None:
        _OPEN_RUNS.discard((self.url, run_id))
        try:
            with Session(self.engine) as s, s.begin():
                run = s.get(m.Run, run_id)
                if run is not None and run.status == "running":
                    run.status, run.finished_at, run.note = "aborted", _now(), reason
        except SQLAlchemyError as exc:
            # Left 'running'; the next begin_run of this process (or, after it ended, of any
            # auditor on this host) marks it aborted once the database is back.
            raise StoreError(
                f"cannot mark run {run_id} aborted in {self.display_url}: {db_health.db_error(exc)}"
            ) from None

    def reap_orphans(self) -> int:
        """Mark aborted the runs left 'running' on this host by processes that are gone, and
        this process's own runs that it no longer writes (the database was unreachable when
        their cycle ended, so neither the results nor the abort could be written then)."""
        host = socket.gethostname()
        count = 0
        with Session(self.engine) as s, s.begin():
            for run in s.scalars(select(m.Run).where(m.Run.status == "running", m.Run.host == host)):
                if run.pid == os.getpid():
                    if (self.url, run.id) in _OPEN_RUNS:
                        continue
                    note = "the history database was unreachable when the run ended"
                elif orphaned(run.status, run.host, run.pid):
                    note = orphan_note(run.pid)
                else:
                    continue
                run.status, run.finished_at, run.note = "aborted", _now(), note
                count += 1
        return count

    def finish_run(
        self,
        run_id: int,
        result: CycleResult,
        artifacts: dict[str, bytes],
        selection: dict[str, Any] | None = None,
        fence: Callable[[Connection, int], None] | None = None,
    ) -> None:
        """Write everything the cycle found, and mark the run complete, in one transaction.
        ``selection``: what the run turned out to cover (a run under ``[queue]``), replacing
        what it was started with. ``fence``: called first in the transaction with its
        connection and the run id; what it raises (a host no longer this auditor's,
        auditor.queue.fence) rolls everything back and is raised as it is."""
        try:
            self._write_results(run_id, result, artifacts, selection, fence)
        except SQLAlchemyError as exc:
            raise StoreError(
                f"could not store run {run_id} in {self.display_url}: {db_health.db_error(exc)}"
            ) from exc
        _OPEN_RUNS.discard((self.url, run_id))

    def _write_results(
        self,
        run_id: int,
        result: CycleResult,
        artifacts: dict[str, bytes],
        selection: dict[str, Any] | None,
        fence: Callable[[Connection, int], None] | None = None,
    ) -> None:
        with Session(self.engine) as s, s.begin():
            _write_lock(s)
            run = s.get(m.Run, run_id)
            if run is None:
                raise StoreError(f"run {run_id} is not in the database")
            if fence is not None:
                fence(s.connection(), run_id)
            if selection is not None:
                run.selection = selection
            stack_ids: dict[str, int] = {}
            digests = {n: rep.fingerprint_digest for n, rep in result.stacks.items()}
            documents = {
                digests[n]: rep.fingerprint for n, rep in result.stacks.items() if rep.fingerprint is not None
            }
            fingerprints.store(s, documents, _now())
            for name, rep in result.stacks.items():
                stack = stack_row(
                    s,
                    rep.host,
                    name,
                    role=rep.role,
                    runtime=rep.runtime,
                    python=rep.python,
                    device=rep.device,
                )
                stack_ids[name] = stack.id
                s.add(
                    m.RunStack(
                        run_id=run_id,
                        stack_id=stack.id,
                        fingerprint_digest=digests[name],
                        error="\n".join(filter(None, [rep.error, *rep.problems])) or None,
                    )
                )
            rows: list[m.ProbeResultRow] = []
            found: list[list[Figure]] = []
            for r in result.results:
                for artifact in (r.artifact, r.conversion):
                    if artifact is not None:
                        add_artifact(
                            s,
                            sha256=artifact.sha256,
                            kind=artifact.kind,
                            size=artifact.size,
                            created_at=_now(),
                            info=artifact.info,
                            data=artifacts.get(artifact.sha256),
                        )
                row = m.ProbeResultRow(
                    run_id=run_id,
                    pair=r.pair,
                    train_stack_id=stack_ids[r.train],
                    infer_stack_id=stack_ids[r.infer],
                    probe=r.probe,
                    probe_version=r.probe_version,
                    variant=r.variant,
                    status=r.status,
                    message=r.message,
                    artifact_sha256=r.artifact.sha256 if r.artifact else None,
                    converted_sha256=r.conversion.sha256 if r.conversion else None,
                    localization=r.localization.message if r.localization is not None else None,
                )
                rows.append(row)
                found.append(
                    figures(
                        [(c.output, k, v) for c in r.outputs for k, v in c.metrics.items()]
                        # A comparator's figure, in the same long format; "*": about the probe as a whole.
                        + [(c.output or "*", c.metric, c.value) for c in r.checks]
                        # Where the serving side's samples/s saturate (the samples/s themselves are
                        # derived from its latencies: auditor.history.figures).
                        + (
                            [("sweep", "saturation_batch", float(r.saturation_batch))]
                            if r.saturation_batch
                            else []
                        )
                    )
                )
                row.latencies = [
                    _latency_row(side, stack_ids[stack], lat)
                    for side, stack, lat in (
                        ("train", r.train, r.train_latency),
                        ("infer", r.infer, r.infer_latency),
                        *(("train", r.train, lat) for lat in r.train_latencies),
                        *(("infer", r.infer, lat) for lat in r.infer_latencies),
                    )
                    if lat is not None
                ]
            # A fleet's results mostly repeat figures and tolerances stored before (their peers',
            # their last cycle's): each refers to the one stored set (auditor.db.content).
            sets = metric_sets(s, found)
            tolerances = threshold_sets(s, [r.thresholds for r in result.results])
            for row, set_id, thresholds_id in zip(rows, sets, tolerances, strict=True):
                row.metric_set_id, row.thresholds_id = set_id, thresholds_id
                s.add(row)
            # Probe suite: rollouts as probe results, and goldens of first accepted results.
            store_rows(s, run_id, result.rollouts, stack_ids)
            baselines.record(s, run_id, result.results, stack_ids, artifacts)
            for f in result.findings:
                s.add(
                    m.FindingRow(
                        run_id=run_id,
                        kind=f.kind,
                        severity=f.severity,
                        subject=f.subject,
                        key=f.key,
                        message=f.message,
                        details=f.details,
                    )
                )
            self._write_mindir_limits(s, run_id, result.learned_maxima)
            self._write_operator_limits(s, run_id, result.learned_operators)
            publication.write(s, run_id, run.auditor_id, result.publications, _now())
            telemetry.record(s, run.auditor_id, result.telemetry)
            s.flush()
            series.record_run(s, run_id)
            run.status, run.outcome, run.finished_at = "complete", result.outcome, _now()

    def runs(self, limit: int = 20, auditors: Sequence[str] = ()) -> list[m.Run]:
        """The newest runs (of ``auditors`` only, if given); one left 'running' by a process of
        this host that is gone reads as aborted (without writing: a read-only database is read
        the same way)."""
        stmt = select(m.Run).order_by(m.Run.id.desc()).limit(limit)
        if auditors:
            stmt = stmt.where(m.Run.auditor_id.in_(list(auditors)))
        with Session(self.engine) as s:
            rows = list(s.scalars(stmt))
            s.expunge_all()
        for run in rows:
            if orphaned(run.status, run.host, run.pid):
                run.status, run.note = "aborted", orphan_note(run.pid)
        return rows

    # -- history that rules and drift read (auditor.rules.engine, auditor.fingerprint.drift) -------
    @staticmethod
    def _write_mindir_limits(s: Session, run_id: int, learned: list[LearnedMaximum]) -> None:
        for lim in learned:
            row = s.get(m.MindIRLimit, (lim.package, lim.version))
            if row is None:
                row = m.MindIRLimit(package=lim.package, version=lim.version)
                s.add(row)
            row.max_mind_ir_version, row.message = lim.max_mind_ir_version, lim.message
            row.learned_at, row.run_id = _now(), run_id

    @staticmethod
    def _write_operator_limits(s: Session, run_id: int, learned: list[LearnedOperator]) -> None:
        for op in learned:
            key = (op.package, op.version, op.target, op.operator)
            row = s.get(m.OperatorLimit, key)
            if row is None:
                row = m.OperatorLimit(
                    package=op.package, version=op.version, target=op.target, operator=op.operator
                )
                s.add(row)
            row.message, row.learned_at, row.run_id = op.message, _now(), run_id

    def operator_limits(self) -> list[LearnedOperator]:
        """The operators runtime builds failed to load (auditor.rules.operator_support)."""
        with Session(self.engine) as s:
            return [
                LearnedOperator(r.package, r.version, r.target, r.operator, r.message, r.learned_at)
                for r in s.scalars(select(m.OperatorLimit))
            ]

    def mindir_limits(self) -> dict[tuple[str, str], LearnedMaximum]:
        """The learned maxima, by (runtime package, version)."""
        with Session(self.engine) as s:
            return {
                (r.package, r.version): LearnedMaximum(
                    r.package, r.version, r.max_mind_ir_version, r.message, r.learned_at
                )
                for r in s.scalars(select(m.MindIRLimit))
            }

    def fingerprint_history(self, name: str, host: str | None = None) -> list[tuple[int, datetime, str, str]]:
        """(run id, started at, host, digest) of every run that fingerprinted stack ``name``, oldest first."""
        stmt = (
            select(m.RunStack.run_id, m.Run.started_at, m.Stack.host, m.RunStack.fingerprint_digest)
            .join(m.Run, m.Run.id == m.RunStack.run_id)
            .join(m.Stack, m.Stack.id == m.RunStack.stack_id)
            .where(m.Stack.name == name, m.RunStack.fingerprint_digest.is_not(None))
            .order_by(m.RunStack.run_id)
        )
        if host is not None:
            stmt = stmt.where(m.Stack.host == host)
        with Session(self.engine) as s:
            return [(r[0], r[1], r[2], r[3]) for r in s.execute(stmt)]

    def previous_fingerprint(self, host: str, name: str) -> tuple[int, str, dict] | None:
        """(run id, digest, document) of the latest run that has a good fingerprint for the
        stack: a document whose collection failed (stored by older auditors) is skipped, so
        drift is judged against the last fingerprint that was actually taken."""
        history = self.fingerprint_history(name, host)
        documents = self.fingerprints([digest for *_, digest in history])
        for run_id, _, _, digest in reversed(history):
            document = documents.get(digest)
            if document is not None and "fingerprint_error" not in document:
                return run_id, digest, document
        return None

    def fingerprints(self, digests: list[str]) -> dict[str, dict | None]:
        with Session(self.engine) as s:
            return fingerprints.read(s, digests)


def _latency_row(side: str, stack_id: int, lat: Latency) -> m.LatencyRow:
    return m.LatencyRow(
        stack_id=stack_id,
        side=side,
        batch=lat.batch,
        samples=lat.samples,
        p50_us=lat.p50_us,
        p90_us=lat.p90_us,
        p99_us=lat.p99_us,
        mean_us=lat.mean_us,
    )


def orphaned(status: str | None, host: str | None, pid: int | None) -> bool:
    """Whether a run is 'running' on this host in a process that no longer exists (killed,
    power loss): it was interrupted. Another host's process cannot be checked from here."""
    return (
        status == "running"
        and host == socket.gethostname()
        and pid is not None
        and pid != os.getpid()
        and not tempdirs.pid_alive(pid)
    )


def orphan_note(pid: int | None) -> str:
    return f"interrupted: process {pid} ended before the run finished"


__all__ = ["Store", "StoreError", "alembic_config", "auditor_identity", "orphan_note", "orphaned"]


def store_rows(
    session: Any, run_id: int, rollouts: Sequence[RolloutResult], stack_ids: dict[str, int]
) -> None:
    """Each rollout as two probe_results rows (variant "<variant>:closed-loop" and
    "<variant>:open-loop") with its figures as metrics: output "all" (over every episode) and
    "seed<N>" (one episode); a first-exceed step of 0 means never."""

    for r in rollouts:
        per_episode = r.episode_metrics()
        tolerances = {"action": {"atol": r.action_atol}, "return": {"atol": r.return_atol}, "env": {}}
        for mode in MODES:
            found = figures(
                [("all", k, v) for k, v in r.summary(mode).items()]
                + [
                    (seed, k, v)
                    for seed, per_seed in per_episode.get(mode, {}).items()
                    for k, v in per_seed.items()
                ]
            )
            (set_id,), (thresholds_id,) = metric_sets(session, [found]), threshold_sets(session, [tolerances])
            row = m.ProbeResultRow(
                run_id=run_id,
                pair=r.pair,
                train_stack_id=stack_ids[r.train],
                infer_stack_id=stack_ids[r.infer],
                probe=r.probe,
                probe_version="",
                variant=f"{r.variant}:{mode}",
                status=r.status if mode == "closed-loop" else open_loop_status(r),
                message=r.message,
                artifact_sha256=None,
                thresholds_id=thresholds_id,
                metric_set_id=set_id,
            )
            session.add(row)
