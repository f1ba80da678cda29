"""Run one audit cycle and store it: what ``auditor audit`` does once and the daemon does on
its schedule.

The run row is committed as ``running`` before the cycle starts, and the results are written
in one transaction when it ends. Whatever stops the cycle early (a signal, Ctrl-C, ``abort()``
from another thread, a bug) kills the workers and marks the run aborted with the reason,
so the history never holds half a run.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy.exc import SQLAlchemyError

from auditor.config.selection import Scope
from auditor.config.tables import Config
from auditor.cycle.cycle import Cycle
from auditor.db.health import db_error
from auditor.history.store import Store, StoreError
from auditor.results import CycleAborted, CycleResult

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from auditor.extend.manager import Plugins


class RunAborted(Exception):
    """The cycle was stopped before it finished; its run (if stored) is marked aborted."""

    def __init__(self, run_id: int | None, reason: str):
        self.run_id = run_id
        self.reason = reason
        super().__init__(f"cycle interrupted ({reason})")


class HistoryFailed(RunAborted):
    """The history database failed under the cycle (a PostgreSQL server stopped, a network
    cut): what the cycle reads from it (drift, baselines, learned limits) and what it would
    write are gone; the run is aborted."""

    def __init__(self, run_id: int | None, said: str):
        super().__init__(run_id, f"the history database failed during the cycle: {said}")

    def __str__(self) -> str:
        return self.reason


class RunNotStored(Exception):
    """The cycle finished but its results could not be written; the run is marked aborted."""

    def __init__(self, run_id: int, result: CycleResult, error: Exception):
        self.run_id = run_id
        self.result = result
        self.error = error
        super().__init__(f"could not store the results of run {run_id}: {error}")


class Interrupted(Exception):
    """Raised by a signal handler in the thread running the cycle (``auditor audit``)."""


class AuditRun:
    """One cycle over ``config``, stored in ``store`` (None: not stored).

    ``run()`` blocks; ``abort(reason)`` may be called from any thread and makes ``run()``
    raise RunAborted after the workers are killed.
    """

    def __init__(
        self,
        config: Config,
        plugins: Plugins,
        store: Store | None,
        scope: Scope | None = None,
        save_outputs: Path | None = None,
        slot: str | None = None,
    ):
        """``config``: narrowed already when ``scope`` says what the run covers (stored with
        the run; auditor.config.selection). ``save_outputs``: a folder for each side's outputs.
        ``slot``: the ``[leases]`` slot by name (None: the period the run starts in)."""
        self.config = config
        self.store = store
        self.scope = scope
        self.cycle = Cycle(
            config,
            plugins.probes(),
            plugins.runtimes(),
            plugins.comparators(),
            plugins=plugins,
            history=store,
            save_outputs=save_outputs,
            lease_slot=slot,
        )
        self.run_id: int | None = None
        self.unrecorded: str | None = None
        """The note of an abort that could not be written (the database was away): the run
        stays 'running' until it is written (the daemon's next cycle) or reaped as orphaned."""
        self._abort_reason: str | None = None
        self._lock = threading.Lock()

    @property
    def aborted(self) -> bool:
        return self._abort_reason is not None

    def abort(self, reason: str) -> None:
        with self._lock:
            if self._abort_reason is None:
                self._abort_reason = reason
        self.cycle.abort()

    def begin(self) -> int | None:
        """Record the run as started (separate from run() so a caller can report the id, and a
        database that cannot be opened fails before any worker starts)."""
        if self.store is not None and self.run_id is None:
            self.store.check_usable()
            selection = self.scope.to_json() if self.scope is not None else None
            self.run_id = self.store.begin_run(self.config.source, selection)
        return self.run_id

    def run(self) -> CycleResult:
        self.begin()
        try:
            return self._run()
        finally:
            self._hand_back()  # [leases] not done: another auditor takes them now

    def _hand_back(self) -> None:
        try:
            self.cycle.close_leases()
        except Exception as exc:  # the database away: the leases expire instead
            log.warning("could not hand back this cycle's leases: %s", exc)

    def _run(self) -> CycleResult:
        try:
            result = self.cycle.run()
        except (KeyboardInterrupt, Interrupted, CycleAborted) as exc:
            self.cycle.abort()
            if isinstance(exc, KeyboardInterrupt):
                reason = "SIGINT"
            elif isinstance(exc, Interrupted):
                reason = str(exc) or "a signal"
            else:
                reason = self._abort_reason or str(exc) or "abort"
            self._mark_aborted(f"interrupted by {reason}")
            raise RunAborted(self.run_id, reason) from exc
        except (SQLAlchemyError, StoreError) as exc:
            self.cycle.abort()
            failed = HistoryFailed(self.run_id, db_error(exc))  # a StoreError says it in one line too
            self._mark_aborted(failed.reason)
            raise failed from None
        except BaseException as exc:
            self.cycle.abort()
            if not self._mark_aborted(f"internal error: {type(exc).__name__}: {exc}"):
                log.warning("run %s could not be marked aborted: the history database is away", self.run_id)
            raise
        if self.store is not None and self.run_id is not None:
            try:
                self.store.finish_run(self.run_id, result, self.cycle.artifacts, self._covered(result))
            except Exception as exc:
                self._mark_aborted(f"could not store results: {exc}")
                raise RunNotStored(self.run_id, result, exc) from exc
            result.run_id = self.run_id
            try:
                self.cycle.close_leases(self.run_id, stored=True)
            except Exception as exc:  # stored: the leases expire, another auditor audits again
                log.warning("run %s is stored, but its leases could not be marked done: %s", self.run_id, exc)
        return result

    def _covered(self, result: CycleResult) -> dict | None:
        """What a run under ``[leases]`` covered (its held stacks and the hosts it claimed):
        stored as a narrowed run, so it resolves no alert about another auditor's hosts."""
        if result.leases is None:
            return None
        selectors = {
            **(self.scope.selectors if self.scope is not None else {}),
            "slot": [result.leases["slot"]],
        }
        return Scope.within(self.config, result.leases["stacks"], selectors).to_json()

    def _mark_aborted(self, note: str) -> bool:
        """Write the run's abort; False when the database is away (``unrecorded`` keeps the
        note for whoever can write it later; the caller says so)."""
        if self.store is None or self.run_id is None:
            return True
        try:
            self.store.abort_run(self.run_id, note)
        except StoreError:
            self.unrecorded = note
            return False
        return True
