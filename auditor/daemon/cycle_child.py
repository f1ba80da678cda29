"""The daemon's cycle child (``python -m auditor.daemon.cycle_child``): reads one cycle
request, runs the cycle, delivers its alerts, applies retention and writes one reply; see
auditor.daemon.cycle_process for the protocol and the daemon's side. This module imports
the cycle; the daemon never imports it."""

from __future__ import annotations

import logging
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from auditor.alerts.engine import AlertEngine, build_sinks
from auditor.common.logs import setup_logging
from auditor.cycle.audit_run import AuditRun, RunAborted, RunNotStored
from auditor.daemon.cycle_process import (
    ABORTED,
    DONE,
    FAILED,
    SKIPPED,
    CycleReply,
    CycleRequest,
    counts_text,
    log,
    read_frame,
    write_frame,
)
from auditor.extend.manager import Plugins
from auditor.history.retention import apply_retention
from auditor.history.store import Store, StoreError


# -- the child's side -----------------------------------------------------------------------------
def run_cycle(request: CycleRequest, on_run: Callable[[Any], None] = lambda run: None) -> CycleReply:
    """The cycle itself, in the child: what ``auditor daemon`` used to run in its own thread.
    ``on_run`` gets the AuditRun as soon as it exists (the abort watcher needs it)."""
    config = request.config
    started = time.time()
    try:
        store = Store.open(request.db_url, config.auditor_id)
    except StoreError as exc:
        log.error("cannot open the history, cycle skipped: %s", exc)
        return CycleReply(SKIPPED, message="history database unavailable", started=started)
    plugins = Plugins(request.plugin_dirs)
    run = AuditRun(config, plugins, store)
    on_run(run)
    try:
        try:
            run_id = run.begin()
        except StoreError as exc:
            log.error("cannot record a new run, cycle skipped: %s", exc)
            return CycleReply(SKIPPED, message="history database unavailable", started=started)
        log.info("cycle started: run %s", run_id)
        try:
            result = run.run()
        except (RunAborted, RunNotStored) as exc:
            log.warning("cycle of run %s did not complete: %s; run marked aborted", run_id, exc)
            return CycleReply(ABORTED, run_id, str(exc), started=started, finished=time.time())
        log.info(
            "cycle done: run %s %s in %.1f s (%s)",
            run_id,
            result.outcome.upper(),
            result.finished_at - result.started_at,
            counts_text(result),
        )
        open_alerts = None
        try:
            alerts = AlertEngine(
                store.engine,
                config.alerts,
                build_sinks(config.alerts, plugins.alert_sinks()),
                auditor_id=store.auditor_id,
                builtin_probes=plugins.builtin_probes(),
            )
            if result.run_id is not None:
                alerts.evaluate(result.run_id)
            alerts.deliver(should_stop=lambda: run.aborted)
            open_alerts = alerts.open_counts()
        except Exception:
            log.exception("alerts of run %s could not be processed; pending ones are retried later", run_id)
        try:
            done = apply_retention(store, config.keep_days)
        except Exception:
            log.exception("retention failed; the history is kept as it is until the next cycle")
        else:
            if done is not None and done.runs:
                log.info("retention: deleted %d run(s) older than %d days", done.runs, config.keep_days)
        return CycleReply(
            DONE,
            run_id,
            result=result,
            open_alerts=open_alerts,
            started=started,
            finished=time.time(),
        )
    finally:
        store.close()


def main() -> int:
    """The child: one cycle, one reply."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever a library prints goes to the log, never into the reply
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    stdin = sys.stdin.buffer
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

    def watch() -> None:
        # "abort <reason>" from the daemon, or the end of stdin: the daemon is gone.
        for raw in iter(stdin.readline, b""):
            line = raw.decode("utf-8", "replace").strip()
            if line.startswith("abort"):
                abort(line[len("abort") :].strip() or "aborted by the daemon")
        abort("the daemon is gone")

    threading.Thread(target=watch, name="abort-watch", daemon=True).start()
    try:
        reply = run_cycle(request, on_run)
    except Exception as exc:
        log.exception("the audit cycle failed unexpectedly; the daemon carries on")
        reply = CycleReply(FAILED, message=f"{type(exc).__name__}: {exc}")
    write_frame(out, reply)
    out.close()
    # No interpreter shutdown: the abort watcher may be blocked in a read of stdin, and
    # finalizing under it aborts the process. The workers are closed, the store too.
    logging.shutdown()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
