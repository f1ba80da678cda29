"""One daemon cycle in a child process, so the daemon stays as small as it started.

A cycle imports and allocates what the daemon does not need between cycles: the probes'
inputs, every runtime's results, SQLAlchemy's statement caches and SQLite's page cache,
the native libraries' pages it touched. Freed or not, most of it stays in a long-lived
process (about 9 MB a cycle, measured by bench/daemon_memory.py), so the daemon runs each
cycle in a child, ``python -m auditor.cycle_process``, that exits with it:

- the daemon writes the cycle's request to the child's stdin (one pickled frame: the config
  as loaded or reloaded, the plugin directories, the database URL, the log level), then,
  should it stop, a line ``abort <reason>``; the end of its stdin (the daemon gone) aborts too;
- the child logs to the daemon's stderr (the same journal), runs the cycle, evaluates and
  delivers the alerts, applies retention, and writes one pickled ``CycleReply`` frame on
  its stdout: the result, the open alert counts, or why the cycle did not complete;
- the daemon turns the reply into its status, Prometheus figures and sd_notify STATUS.

The child ignores SIGTERM, SIGINT and SIGHUP: stopping and reloading are the daemon's to
decide (under systemd a stop signals the whole control group). Stack workers are the child's
children, in sessions of their own, killed by an abort as before.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO

from auditor.child_process import close_pipes, describe_status, kill_group, own_package_env, wait_exit

if TYPE_CHECKING:
    from auditor.config import Config
    from auditor.results import CycleResult

log = logging.getLogger("auditor.daemon")

MODULE = "auditor.cycle_process"
_HEAD = struct.Struct(">Q")

DONE, ABORTED, SKIPPED, FAILED = "done", "aborted", "skipped", "failed"


@dataclass
class CycleRequest:
    config: Config
    plugin_dirs: list[str]
    db_url: str
    log_level: int = logging.INFO


@dataclass
class CycleReply:
    """What a cycle came to. ``kind``: done (``result`` is set), aborted (the run is marked
    aborted), skipped (no run could be recorded), failed (an unexpected error; logged)."""

    kind: str
    run_id: int | None = None
    message: str = ""
    result: CycleResult | None = None
    open_alerts: dict[str, int] | None = None
    """Open alerts by severity after this cycle's alerts; None when they could not be read."""
    started: float = 0.0
    finished: float = 0.0


def _write_frame(stream: BinaryIO, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEAD.pack(len(data)) + data)
    stream.flush()


def _read_frame(stream: BinaryIO) -> Any:
    head = stream.read(_HEAD.size)
    if len(head) < _HEAD.size:
        raise EOFError("no frame")
    (n,) = _HEAD.unpack(head)
    data = stream.read(n)
    if len(data) < n:
        raise EOFError("a truncated frame")
    return pickle.loads(data)  # our own child or parent: trusted


# -- the daemon's side ---------------------------------------------------------------------------
class ChildCycle:
    """One cycle in a child process; ``abort`` may be called from any thread, any number of
    times (the daemon repeats it until the cycle ends)."""

    def __init__(self, request: CycleRequest, python: str = sys.executable):
        self.request = request
        self.python = python
        self.proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._reason: str | None = None

    @property
    def aborted(self) -> bool:
        return self._reason is not None

    def abort(self, reason: str) -> None:
        with self._lock:
            if self._reason is None:
                self._reason = reason
            self._send_abort()

    def _send_abort(self) -> None:
        # Sent again on every call: the child aborts its run again each time, which catches
        # a worker that was being started at the moment of the first abort.
        if self.proc is None or self.proc.stdin is None or self._reason is None:
            return
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.write(f"abort {self._reason}\n".encode())
            self.proc.stdin.flush()

    def run(self) -> CycleReply:
        """Start the child, hand it the cycle and wait for its reply (and its exit)."""
        with self._lock:
            try:
                # stderr is inherited: the child's log lines go where the daemon's go. Its own
                # process group: a terminal's Ctrl-C reaches the daemon, which decides.
                self.proc = subprocess.Popen(
                    [self.python, "-m", MODULE],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    env=own_package_env(),
                    start_new_session=True,
                )
            except OSError as exc:
                return CycleReply(FAILED, message=f"cannot start the cycle process {self.python}: {exc}")
            assert self.proc.stdin is not None and self.proc.stdout is not None
            with contextlib.suppress(OSError):  # it died at once: its status says why, below
                _write_frame(self.proc.stdin, self.request)
            self._send_abort()  # an abort that came before the child existed
        problem = ""
        try:
            reply: CycleReply | None = _read_frame(self.proc.stdout)
        except (EOFError, OSError, pickle.UnpicklingError, AttributeError, ImportError) as exc:
            reply, problem = None, f"{type(exc).__name__}: {exc}"
        try:
            wait_exit(self.proc, 30)
        except subprocess.TimeoutExpired:
            kill_group(self.proc)
        with self._lock:  # not under an abort being written from another thread
            close_pipes(self.proc, None)
        if reply is None:
            return CycleReply(
                FAILED,
                message=f"the cycle process {self.proc.pid} ended without a reply "
                f"({describe_status(self.proc.returncode)}{'; ' + problem if problem else ''}); "
                "see the log above",
            )
        return reply

    def kill(self) -> None:
        """The last resort of a daemon that cannot wait any longer."""
        if self.proc is not None:
            kill_group(self.proc)


# -- the child's side -----------------------------------------------------------------------------
def run_cycle(request: CycleRequest, on_run: Callable[[Any], None] = lambda run: None) -> CycleReply:
    """The cycle itself, in the child: what ``auditor daemon`` used to run in its own thread.
    ``on_run`` gets the AuditRun as soon as it exists (the abort watcher needs it)."""
    import time

    from auditor.alerts import AlertEngine, build_sinks
    from auditor.audit_run import AuditRun, RunAborted, RunNotStored
    from auditor.plugin_manager import Plugins
    from auditor.retention import apply_retention
    from auditor.store import Store, StoreError

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


def counts_text(result: CycleResult) -> str:
    """ "3 consistent, 1 drift, stack(s) unavailable: ms20": a cycle in a few words."""
    from auditor.results import STATUS_ORDER

    statuses = [r.status for r in result.results]
    parts = [f"{statuses.count(s)} {s}" for s in STATUS_ORDER if s in statuses]
    broken = [n for n, s in result.stacks.items() if s.error]
    if broken:
        parts.append(f"stack(s) unavailable: {', '.join(broken)}")
    return ", ".join(parts) or "nothing to check"


def main() -> int:
    """The child: one cycle, one reply."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever a library prints goes to the log, never into the reply
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    stdin = sys.stdin.buffer
    try:
        request: CycleRequest = _read_frame(stdin)
    except (EOFError, pickle.UnpicklingError) as exc:
        print(f"auditor cycle process: no cycle request on stdin ({exc})", file=sys.stderr)
        return 2
    from auditor.daemon import setup_logging

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
    _write_frame(out, reply)
    out.close()
    # No interpreter shutdown: the abort watcher may be blocked in a read of stdin, and
    # finalizing under it aborts the process. The workers are closed, the store too.
    logging.shutdown()
    os._exit(0)


if __name__ == "__main__":
    # Run as auditor.cycle_process, not __main__: the reply's classes must pickle by the
    # name the daemon imports them by.
    from auditor.cycle_process import main as module_main

    sys.exit(module_main())
