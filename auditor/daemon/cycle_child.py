"""The daemon's cycle child (``python -m auditor.daemon.cycle_child``): reads one cycle
request, runs the cycle, delivers its alerts, applies retention and writes one reply; see
auditor.daemon.cycle_process for the protocol and the daemon's side. This module imports
the cycle; the daemon never imports it."""

from __future__ import annotations

import logging
import os
import pickle
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, BinaryIO

from sqlalchemy.exc import SQLAlchemyError

from auditor.alerts.engine import alert_runs
from auditor.common.logs import setup_logging
from auditor.common.memory import tune_malloc
from auditor.cycle.audit_run import AuditRun, RunAborted, RunNotStored
from auditor.cycle.telemetry import Sampling
from auditor.daemon.cycle_process import (
    ABORTED,
    DONE,
    FAILED,
    SKIPPED,
    TELEMETRY,
    CycleReply,
    CycleRequest,
    log,
    read_frame,
    write_frame,
)
from auditor.db.health import db_error
from auditor.exposition.families import counts_text, summarize
from auditor.extend.manager import Plugins
from auditor.fingerprint.drift import KIND as DRIFT_KIND
from auditor.history.publication import summary_of
from auditor.history.retention import apply_retention
from auditor.history.store import Store, StoreError
from auditor.history.telemetry import store_samples
from auditor.queue.jobs import QueueError
from auditor.results import CycleAborted, CycleResult
from auditor.stacks.transport import CONNECTIONS

HISTORY_ERRORS = (SQLAlchemyError, StoreError)
"""What a history database that went away raises: said in one line (db_error), not a traceback."""


# -- the child's side -----------------------------------------------------------------------------
def run_cycle(
    request: CycleRequest,
    on_run: Callable[[Any], None] = lambda run: None,
    stopping: Callable[[], bool] = lambda: False,
) -> CycleReply:
    """The cycle itself, in the child: what ``auditor daemon`` used to run in its own thread.
    ``on_run`` gets the AuditRun as soon as it exists (the abort watcher needs it);
    ``stopping``: the daemon received SIGTERM, so no run begins (one begun goes on)."""
    if request.kind == TELEMETRY:
        return run_telemetry(request, on_run)
    config = request.config
    started = time.time()
    try:
        store = Store.open(request.db_url, config.auditor_id)
    except StoreError as exc:
        log.error("cannot open the history, cycle skipped: %s", exc)
        return CycleReply(SKIPPED, message="history database unavailable", started=started)
    plugins = Plugins(request.plugin_dirs)
    run = AuditRun(config, plugins, store, shared=request.shared)
    on_run(run)
    try:
        try:
            if stopping():
                log.info("the daemon is stopping: no cycle started")
                return CycleReply(SKIPPED, message="the daemon is stopping", started=started)
            for earlier, note in request.unrecorded.items():  # before begin() reaps them as orphans
                store.abort_run(earlier, note)
                log.info("run %s marked aborted now that the history database is back", earlier)
            run_id = run.begin()
        except (StoreError, QueueError) as exc:
            log.error("cannot record a new run, cycle skipped: %s", exc)
            return CycleReply(SKIPPED, message="history database unavailable", started=started)
        log.info("cycle started: run %s", run_id)
        try:
            result = run.run()
        except (RunAborted, RunNotStored) as exc:
            if run.unrecorded is None:
                log.warning("cycle of run %s did not complete: %s; run marked aborted", run_id, exc)
            else:
                log.warning(
                    "cycle of run %s did not complete: %s; the run is marked aborted when the "
                    "history database is back",
                    run_id,
                    exc,
                )
            return CycleReply(
                ABORTED, run_id, str(exc), started=started, finished=time.time(), unrecorded=run.unrecorded
            )
        log.info(
            "cycle done: run %s %s in %.1f s (%s)",
            run_id,
            result.outcome.upper(),
            result.finished_at - result.started_at,
            counts_text(result),
        )
        for pub in result.publications:  # split mode: what this side published, what it read
            log.info("published %s", summary_of(pub, run_id=result.run_id).describe())
        for read in result.read_publications:
            log.info("compared with %s", read.describe())
        for line in result.unchecked:
            log.warning("not checked: %s", line.splitlines()[0])
        stored = [result.run_id, *(r.run_id for r in _follow_ups(run, on_run))]
        open_alerts = None
        try:
            open_alerts = alert_runs(
                store.engine,
                config.alerts,
                plugins.alert_sinks(),
                stored,
                store.auditor_id,
                plugins.builtin_probes(),
                should_stop=lambda: run.aborted,
            )
        except HISTORY_ERRORS as exc:  # the database went away after the run was stored
            log.error(
                "alerts of run %s not processed (the history database: %s); deliveries still pending "
                "are retried by the next cycle",
                run_id,
                db_error(exc),
            )
        except Exception:
            log.exception("alerts of run %s could not be processed; pending ones are retried later", run_id)
        try:
            done = apply_retention(store, config.keep_days)
        except HISTORY_ERRORS as exc:
            log.error("retention not applied (%s); tried again after the next cycle", db_error(exc))
        except Exception:
            log.exception("retention failed; the history is kept as it is until the next cycle")
        else:
            if done is not None and done.runs:
                log.info("retention: deleted %d run(s) older than %d days", done.runs, config.keep_days)
        return CycleReply(
            DONE,
            run_id,
            summary=summarize(result),
            open_alerts=open_alerts,
            started=started,
            finished=time.time(),
            drifted=sorted({f.subject for f in result.findings if f.kind == DRIFT_KIND}),
        )
    finally:
        store.close()


def _follow_ups(run: AuditRun, on_run: Callable[[Any], None]) -> list[CycleResult]:
    """[queue]: once the run is stored, wait for the hosts the other auditors hold; a host
    that comes back to the queue (its auditor stalled or died) is audited by a follow-up run
    of the same cycle. The follow-ups' results (stored; logged here)."""
    out = []
    while True:
        try:
            nxt = run.follow_up()
        except CycleAborted as exc:  # stopping: what is stored stays; the others take the rest
            log.info("stopped waiting for the other auditors' hosts (%s)", exc)
            break
        except (StoreError, QueueError, *HISTORY_ERRORS) as exc:
            log.warning("cannot wait for the other auditors' hosts: %s", exc)
            break
        if nxt is None:
            break
        run = nxt
        on_run(run)
        try:
            run.begin()
            result = run.run()
        except (StoreError, QueueError, RunAborted, RunNotStored) as exc:
            log.warning("follow-up run %s of the shared cycle did not complete: %s", run.run_id, exc)
            break
        log.info("follow-up run %s done: %s (%s)", run.run_id, result.outcome.upper(), counts_text(result))
        out.append(result)
    return out


def run_telemetry(request: CycleRequest, on_run: Callable[[Any], None] = lambda run: None) -> CycleReply:
    """One NPU telemetry sample of every host, stored without a run (``[telemetry] interval``)."""
    started = time.time()
    try:
        store = Store.open(request.db_url, request.config.auditor_id)
    except StoreError as exc:
        log.error("cannot open the history, telemetry sample skipped: %s", exc)
        return CycleReply(SKIPPED, message="history database unavailable", started=started)
    try:
        sampling = Sampling(Plugins(request.plugin_dirs).reach(request.config))
        on_run(sampling)
        try:
            samples = sampling.run()
        except CycleAborted as exc:
            return CycleReply(ABORTED, message=str(exc), started=started, finished=time.time())
        try:
            store_samples(store.engine, store.auditor_id, samples)
        except Exception as exc:  # the database went away: the gauges still get the sample
            log.error("NPU telemetry not stored: %s", db_error(exc))
        return CycleReply(DONE, telemetry=samples, started=started, finished=time.time())
    finally:
        store.close()


def main() -> int:
    """The child started cold (``python -m auditor.daemon.cycle_child``): one cycle, one reply."""
    return serve(sys.stdin.buffer, os.fdopen(os.dup(1), "wb"))


def forked(stdin: BinaryIO, out: BinaryIO) -> int:
    """The child forked from the daemon's fork server (auditor.daemon.forks): the same."""
    return serve(stdin, out)


def serve(stdin: BinaryIO, out: BinaryIO) -> int:
    """Read the request from ``stdin``, run it, write the reply on ``out``; the process ends
    here (``os._exit``) once a request was read."""
    tune_malloc()  # before any thread (auditor.common.memory)
    os.dup2(2, 1)  # whatever a library prints goes to the log, never into the reply
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    try:
        request: CycleRequest = read_frame(stdin)
    except (EOFError, pickle.UnpicklingError) as exc:
        print(f"auditor cycle process: no cycle request on stdin ({exc})", file=sys.stderr)
        return 2
    setup_logging(request.log_level)
    runs: list[Any] = []
    reasons: list[str] = []
    lock = threading.Lock()

    def abort(reason: str) -> None:
        with lock:
            reasons.append(reason)
            for run in runs:
                run.abort(reason)

    def on_run(run: Any) -> None:
        with lock:
            runs.append(run)
            if reasons:  # an abort that came before the run existed
                run.abort(reasons[0])

    stopping = threading.Event()

    def watch() -> None:
        # "abort <reason>" from the daemon, "stopping" (begin no run), or the end of stdin:
        # the daemon is gone.
        for raw in iter(stdin.readline, b""):
            line = raw.decode("utf-8", "replace").strip()
            if line == "stopping":
                stopping.set()
            elif line.startswith("abort"):
                abort(line[len("abort") :].strip() or "aborted by the daemon")
        abort("the daemon is gone")

    threading.Thread(target=watch, name="abort-watch", daemon=True).start()
    try:
        reply = run_cycle(request, on_run, stopping.is_set)
    except Exception as exc:
        log.exception("the audit cycle failed unexpectedly; the daemon carries on")
        reply = CycleReply(FAILED, message=f"{type(exc).__name__}: {exc}")
    me, workers = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    reply.cpu_seconds = me.ru_utime + me.ru_stime
    reply.workers_cpu_seconds = workers.ru_utime + workers.ru_stime
    try:
        write_frame(out, reply)
        out.close()
    finally:
        # No interpreter shutdown: the abort watcher may be blocked in a read of stdin, and
        # finalizing under it aborts the process. The workers are closed, the store too;
        # what atexit would have done is done here: the ssh masters and their socket
        # directory (auditor-ssh-*) go.
        CONNECTIONS.shutdown()
        logging.shutdown()
        os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
