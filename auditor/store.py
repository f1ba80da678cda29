"""The history database: open (and migrate) it, and write a cycle's results atomically.

A run row is committed as ``running`` when a cycle starts; everything the cycle found is
written in one transaction at the end, which also marks the run ``complete``. A cycle that
is interrupted is marked ``aborted`` with nothing else written, and a run left ``running``
by a process that no longer exists (killed, power loss) is marked aborted on the next start.
So the history holds complete runs and aborted runs, never half of one.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import Engine, create_engine, event, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

import auditor.migrations
from auditor import baseline, db_health, rollout, tempdirs
from auditor import models as m
from auditor.results import CycleResult, Latency, LearnedMaximum, fingerprint_digest

MIGRATIONS_DIR = Path(auditor.migrations.__file__).resolve().parent


class StoreError(Exception):
    """The history database cannot be opened or written."""


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _sqlite_pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
    cur = dbapi_connection.cursor()
    with contextlib.suppress(sqlite3.OperationalError):
        cur.execute("PRAGMA journal_mode=WAL")  # a read-only database keeps its mode, and is read
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def alembic_config(engine_url: str) -> AlembicConfig:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", engine_url.replace("%", "%%"))
    return cfg


class Store:
    def __init__(self, url: str):
        self.url = url
        try:
            parsed = make_url(url)
        except Exception as exc:  # noqa: BLE001 - SQLAlchemy raises several types here
            raise StoreError(f"not a database URL: {url!r} ({exc})") from None
        uri = str(parsed.query.get("uri", "")).lower() in ("true", "1")  # file:...?mode=ro
        if (
            parsed.get_backend_name() == "sqlite"
            and parsed.database not in (None, "", ":memory:")
            and not uri
        ):
            path = Path(parsed.database).expanduser()
            parsed = parsed.set(database=str(path))
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create the directory for {path}: {exc}") from None
        try:
            self.engine: Engine = create_engine(parsed)
        except Exception as exc:  # noqa: BLE001 - unknown dialect, missing driver, bad arguments
            raise StoreError(f"unsupported database URL {url!r}: {exc}") from None
        if parsed.get_backend_name() == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)

    @classmethod
    def open(cls, url: str) -> Store:
        """Open the database and bring its schema up to date."""
        store = cls(url)
        store.upgrade()
        return store

    def upgrade(self, revision: str = "head") -> None:
        cfg = alembic_config(self.url)
        try:
            with self.engine.begin() as conn:
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, revision)
        except (SQLAlchemyError, UnicodeDecodeError) as exc:
            raise StoreError(
                f"cannot open or migrate the history database {self.url}: {db_health.db_error(exc)}"
            ) from None
        except CommandError as exc:
            # Typically a revision this auditor does not know: a newer auditor wrote the database.
            raise StoreError(
                f"cannot migrate the history database {self.url}: {exc} "
                "(was it written by a newer auditor? upgrade this one, or use another --db)"
            ) from None

    def current_revision(self) -> str | None:
        with self.engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()

    def head_revision(self) -> str | None:
        return ScriptDirectory.from_config(alembic_config(self.url)).get_current_head()

    def current_heads(self) -> tuple[str, ...]:
        """The revisions the database is at (several while migration branches are unmerged)."""
        try:
            with self.engine.connect() as conn:
                return tuple(sorted(MigrationContext.configure(conn).get_current_heads()))
        except SQLAlchemyError as exc:
            raise StoreError(
                f"cannot read the schema revision of {self.url}: {db_health.db_error(exc)}"
            ) from None

    def head_revisions(self) -> tuple[str, ...]:
        """The newest revisions this auditor ships."""
        return tuple(sorted(ScriptDirectory.from_config(alembic_config(self.url)).get_heads()))

    def pending_revisions(self) -> list[str]:
        """Revisions this auditor ships that the database has not applied yet, oldest first."""
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
        health = db_health.check(self.engine)
        if not health.ok:
            raise StoreError(
                f"the history database {self.url} cannot be used: {health.summary()}; "
                "no cycle was run (`auditor db check` lists the problems; use another --db, "
                "or restore or repair this one)"
            )

    # -- runs ------------------------------------------------------------------------------
    def begin_run(self, config_path: str) -> int:
        """Record that a cycle started; first mark runs orphaned by dead processes aborted."""
        self.reap_orphans()
        with Session(self.engine) as s, s.begin():
            run = m.Run(
                started_at=_now(),
                status="running",
                host=socket.gethostname(),
                pid=os.getpid(),
                config_path=config_path,
            )
            s.add(run)
            s.flush()
            return run.id

    def abort_run(self, run_id: int, reason: str) -> None:
        with Session(self.engine) as s, s.begin():
            run = s.get(m.Run, run_id)
            if run is not None and run.status == "running":
                run.status, run.finished_at, run.note = "aborted", _now(), reason

    def reap_orphans(self) -> int:
        """Mark aborted the runs left 'running' on this host by processes that are gone."""
        host = socket.gethostname()
        count = 0
        with Session(self.engine) as s, s.begin():
            for run in s.scalars(select(m.Run).where(m.Run.status == "running", m.Run.host == host)):
                if orphaned(run.status, run.host, run.pid):
                    run.status, run.finished_at = "aborted", _now()
                    run.note = orphan_note(run.pid)
                    count += 1
        return count

    def finish_run(self, run_id: int, result: CycleResult, artifacts: dict[str, bytes]) -> None:
        """Write everything the cycle found, and mark the run complete, in one transaction."""
        try:
            self._write_results(run_id, result, artifacts)
        except SQLAlchemyError as exc:
            raise StoreError(f"could not store run {run_id}: {exc}") from exc

    def _write_results(self, run_id: int, result: CycleResult, artifacts: dict[str, bytes]) -> None:
        with Session(self.engine) as s, s.begin():
            run = s.get(m.Run, run_id)
            if run is None:
                raise StoreError(f"run {run_id} is not in the database")
            stack_ids: dict[str, int] = {}
            for name, rep in result.stacks.items():
                stack = s.scalars(
                    select(m.Stack).where(m.Stack.host == rep.host, m.Stack.name == name)
                ).first()
                if stack is None:
                    stack = m.Stack(host=rep.host, name=name)
                    s.add(stack)
                stack.role, stack.runtime, stack.python, stack.device = (
                    rep.role,
                    rep.runtime,
                    rep.python,
                    rep.device,
                )
                s.flush()
                stack_ids[name] = stack.id
                digest = None
                if rep.fingerprint is not None:
                    digest = fingerprint_digest(rep.fingerprint)
                    if s.get(m.Fingerprint, digest) is None:
                        s.add(m.Fingerprint(digest=digest, created_at=_now(), document=rep.fingerprint))
                s.add(
                    m.RunStack(
                        run_id=run_id,
                        stack_id=stack.id,
                        fingerprint_digest=digest,
                        error="\n".join(filter(None, [rep.error, *rep.problems])) or None,
                    )
                )
            for r in result.results:
                if r.artifact is not None and s.get(m.Artifact, r.artifact.sha256) is None:
                    s.add(
                        m.Artifact(
                            sha256=r.artifact.sha256,
                            kind=r.artifact.kind,
                            size=r.artifact.size,
                            created_at=_now(),
                            info=r.artifact.info,
                            data=artifacts.get(r.artifact.sha256),
                        )
                    )
                    s.flush()
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
                    thresholds=r.thresholds,
                )
                row.metrics = m.MetricRow.many(
                    [(c.output, k, v) for c in r.outputs for k, v in c.metrics.items()]
                    # A comparator's figure, in the same long format; "*": about the probe as a whole.
                    + [(c.output or "*", c.metric, c.value) for c in r.checks]
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
                s.add(row)
            # Probe suite: rollouts as probe results, and goldens of first accepted results.
            rollout.store_rows(s, run_id, result.rollouts, stack_ids)
            baseline.record(s, run_id, result.results, stack_ids, artifacts)
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
            run.status, run.outcome, run.finished_at = "complete", result.outcome, _now()

    def runs(self, limit: int = 20) -> list[m.Run]:
        """The newest runs; one left 'running' by a process of this host that is gone reads
        as aborted (without writing: a read-only database is read the same way)."""
        with Session(self.engine) as s:
            rows = list(s.scalars(select(m.Run).order_by(m.Run.id.desc()).limit(limit)))
            s.expunge_all()
        for run in rows:
            if orphaned(run.status, run.host, run.pid):
                run.status, run.note = "aborted", orphan_note(run.pid)
        return rows

    # -- history that rules and drift read (auditor.rules, auditor.drift) ----------------------
    @staticmethod
    def _write_mindir_limits(s: Session, run_id: int, learned: list[LearnedMaximum]) -> None:
        for lim in learned:
            row = s.get(m.MindIRLimit, (lim.package, lim.version))
            if row is None:
                row = m.MindIRLimit(package=lim.package, version=lim.version)
                s.add(row)
            row.max_mind_ir_version, row.message = lim.max_mind_ir_version, lim.message
            row.learned_at, row.run_id = _now(), run_id

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

    def fingerprints(self, digests: list[str]) -> dict[str, dict]:
        with Session(self.engine) as s:
            rows = s.scalars(select(m.Fingerprint).where(m.Fingerprint.digest.in_(set(digests))))
            return {r.digest: r.document for r in rows}


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


__all__ = ["Store", "StoreError", "alembic_config", "orphan_note", "orphaned"]
