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
import time
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy.exc import SQLAlchemyError

from auditor.config.selection import Scope
from auditor.config.tables import Config
from auditor.cycle.cycle import Cycle
from auditor.db.health import db_error
from auditor.history.store import Store, StoreError
from auditor.queue.cycles import CycleId
from auditor.queue.fence import HostsLost
from auditor.queue.jobs import QueueError, check_usable
from auditor.queue.watch import AGAIN, GAVE_UP, Watched, watch
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
        shared: CycleId | None = None,
        handover: Watched | None = None,
    ):
        """``config``: narrowed already when ``scope`` says what the run covers (stored with
        the run; auditor.config.selection). ``save_outputs``: a folder for each side's outputs.
        ``shared``: with ``[queue]``, the cycle whose serving hosts the run shares with the
        other auditors (auditor.queue.cycles: the schedule's, a manual or a named one).
        ``handover``: a follow-up run's hosts, taken by its watch (``follow_up``)."""
        self.config = config
        self.plugins = plugins
        self.store = store
        self.scope = scope
        self.save_outputs = save_outputs
        self._watch_started: float | None = None
        self.cycle = Cycle(
            config,
            plugins.probes(),
            plugins.runtimes(),
            plugins.comparators(),
            plugins=plugins,
            history=store,
            save_outputs=save_outputs,
            shared=shared if store is not None else None,
            handover=handover,
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
            if self.cycle.shared is not None:
                check_usable(self.store.url)  # before any worker starts, as the database is
            selection = self.scope.to_json() if self.scope is not None else None
            self.run_id = self.store.begin_run(self.config.source, selection)
        return self.run_id

    def run(self) -> CycleResult:
        self.begin()
        try:
            return self._run()
        finally:
            self._hand_back()  # [queue] jobs not stored: another auditor takes them now

    def _hand_back(self) -> None:
        try:
            self.cycle.close_queue(give_back=True)
        except Exception as exc:  # the database away: the jobs stall and are taken after the timeout
            log.warning("could not give this cycle's hosts back to the queue: %s", exc)

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
        except (SQLAlchemyError, StoreError, QueueError) as exc:
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
                self.store.finish_run(
                    self.run_id, result, self.cycle.artifacts, self._covered(result), self.cycle.fence()
                )
            except HostsLost as exc:
                self._mark_aborted(str(exc))
                raise RunNotStored(self.run_id, result, exc) from exc
            except Exception as exc:
                self._mark_aborted(f"could not store results: {exc}")
                raise RunNotStored(self.run_id, result, exc) from exc
            result.run_id = self.run_id
            try:
                self.cycle.close_queue()
            except Exception as exc:  # stored: the hosts' jobs are done already
                log.warning("run %s is stored; leaving the job queue failed: %s", self.run_id, exc)
        return result

    def follow_up(self) -> AuditRun | None:
        """After this run of a shared cycle is stored: wait for the hosts the other auditors
        hold (auditor.queue.watch); a follow-up run of the same cycle for those that came back
        to the queue and this auditor took, or None once every host is stored (or the wait is
        over: what is still open was said in this run's report)."""
        shared = self.cycle.shared
        if shared is None or self.store is None or self.run_id is None or self.aborted:
            return None
        started = self._watch_started if self._watch_started is not None else time.monotonic()

        def check() -> None:
            if self.aborted:
                raise CycleAborted(self._abort_reason or "abort")

        watched = watch(self.store.url, shared, self.config.queue, started, check=check)
        if watched.outcome == GAVE_UP:
            log.warning(
                "cycle %s: stopped waiting for %d host(s) other auditors still hold: %s",
                shared.label,
                len(watched.open),
                ", ".join(watched.open),
            )
        if watched.outcome != AGAIN:
            return None
        log.info(
            "cycle %s: a follow-up run takes %s, back in the queue",
            shared.label,
            ", ".join(j.host for j in watched.taken),
        )
        nxt = AuditRun(
            self.config, self.plugins, self.store, self.scope, self.save_outputs, shared, handover=watched
        )
        nxt._watch_started = started
        return nxt

    def _covered(self, result: CycleResult) -> dict | None:
        """What a run under ``[queue]`` covered (its held stacks and the hosts it took): stored
        as a narrowed run, so it resolves no alert about another auditor's hosts."""
        if result.shared is None:
            return None
        selectors = {
            **(self.scope.selectors if self.scope is not None else {}),
            "cycle": [result.shared["cycle"]],
        }
        return Scope.within(self.config, result.shared["stacks"], selectors).to_json()

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
