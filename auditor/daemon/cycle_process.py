"""One daemon cycle in a child process, so the daemon stays as small as it started.

A cycle imports and allocates what the daemon does not need between cycles: the probes'
inputs, every runtime's results, SQLAlchemy's statement caches and SQLite's page cache,
the native libraries' pages it touched. Freed or not, most of it stays in a long-lived
process (about 9 MB a cycle, measured by bench/daemon_memory.py), so the daemon runs each
cycle in a child, ``python -m auditor.daemon.cycle_child``, that exits with it:

- the daemon writes the cycle's request to the child's stdin (one pickled frame: the config
  as loaded or reloaded, the plugin directories, the database URL, the log level, the aborts
  earlier children could not write while the database was away), then,
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
import pickle
import struct
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO

from auditor.common.child_process import close_pipes, describe_status, kill_group, own_package_env, wait_exit
from auditor.daemon.forks import ForkedChild, fork

if TYPE_CHECKING:
    from auditor.config.tables import Config
    from auditor.exposition.families import CycleSummary
    from auditor.queue.cycles import CycleId
    from auditor.results import HostTelemetry

log = logging.getLogger("auditor.daemon")

MODULE = "auditor.daemon.cycle_child"
PRELOAD = "auditor.daemon.cycle_preload"
"""What the fork server imports once (auditor.daemon.forks)."""
_HEAD = struct.Struct(">Q")

DONE, ABORTED, SKIPPED, FAILED = "done", "aborted", "skipped", "failed"
CYCLE, TELEMETRY = "cycle", "telemetry"


@dataclass
class CycleRequest:
    config: Config
    plugin_dirs: list[str]
    db_url: str
    log_level: int = logging.INFO
    kind: str = CYCLE
    """cycle: an audit cycle; telemetry: one NPU telemetry sample of every host, stored
    without a run (the daemon's ``[telemetry] interval``; auditor.cycle.telemetry)."""
    unrecorded: dict[int, str] = field(default_factory=dict)
    """Aborts of earlier cycles that could not be written (the database was away), run id to
    note: the child writes them before it begins its own run."""
    shared: CycleId | None = None
    """With ``[queue]``: the schedule's cycle this one is (every auditor's daemon on the
    schedule finds the same; auditor.queue.cycles)."""


@dataclass
class CycleReply:
    """What a cycle came to. ``kind``: done (``summary`` is set), aborted (the run is marked
    aborted), skipped (no run could be recorded), failed (an unexpected error; logged)."""

    kind: str
    run_id: int | None = None
    message: str = ""
    summary: CycleSummary | None = None
    """What the daemon keeps of the cycle (auditor.exposition.families): its result stays in the child."""
    open_alerts: dict[str, int] | None = None
    """Open alerts by severity after this cycle's alerts; None when they could not be read."""
    started: float = 0.0
    finished: float = 0.0
    telemetry: list[HostTelemetry] = field(default_factory=list)
    """A telemetry request's samples (a cycle's are in its result)."""
    unrecorded: str | None = None
    """Aborted, but the database was away: the note the run is to be marked aborted with."""
    drifted: list[str] = field(default_factory=list)
    """The stacks whose fingerprint changed since their previous run (a version-drift finding):
    the daemon's warm workers of those stacks are replaced before the next cycle."""
    cpu_seconds: float = 0.0
    """The child's own CPU time (user and system), imports included where it imported anything."""
    workers_cpu_seconds: float = 0.0
    """The CPU time of the child's own children it reaped (its cold workers, its environment
    process; a warm worker is its zygote's child)."""


def write_frame(stream: BinaryIO, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEAD.pack(len(data)) + data)
    stream.flush()


def read_frame(stream: BinaryIO) -> Any:
    head = stream.read(_HEAD.size)
    if len(head) < _HEAD.size:
        raise EOFError("no frame")
    (n,) = _HEAD.unpack(head)
    data = stream.read(n)
    if len(data) < n:
        raise EOFError("a truncated frame")
    return pickle.loads(data)  # our own child or parent: trusted


# -- the daemon's side ---------------------------------------------------------------------------
_cold_said = False


def forked(python: str, env: dict[str, str]) -> ForkedChild | None:
    """A cycle child forked from the fork server (auditor.daemon.forks), or None where the
    server cannot start: the child starts cold then, said once in the log."""
    global _cold_said
    try:
        return fork(python, [PRELOAD], MODULE, "forked", env)
    except (OSError, EOFError, ValueError, RuntimeError) as exc:
        if not _cold_said:
            log.warning(
                "cycle children start cold (each imports the cycle): the fork server did not start: %s", exc
            )
            _cold_said = True
        return None


class ChildCycle:
    """One cycle in a child process; ``abort`` may be called from any thread, any number of
    times (the daemon repeats it until the cycle ends)."""

    def __init__(self, request: CycleRequest, python: str | None = None, env: dict[str, str] | None = None):
        """``python``: start the child cold with that interpreter (``python -m``); by default
        it is forked from the fork server of this interpreter (auditor.daemon.forks), or
        started cold with it where the server cannot start. ``env``: variables set for the
        child on top of the daemon's own (``AUDITOR_ZYGOTES``: where the daemon's warm workers
        listen)."""
        self.request = request
        self.python = python or sys.executable
        self.fork = python is None
        self.env = dict(env or {})
        self.proc: subprocess.Popen[bytes] | ForkedChild | None = None
        self._lock = threading.Lock()
        self._reason: str | None = None
        self._stopping = False

    @property
    def aborted(self) -> bool:
        return self._reason is not None

    def abort(self, reason: str) -> None:
        with self._lock:
            if self._reason is None:
                self._reason = reason
            self._send_abort()

    def stopping(self) -> None:
        """The daemon is stopping: a child that has not begun its run yet begins none (it
        replies skipped); one that has goes on, until the daemon aborts it."""
        with self._lock:
            self._stopping = True
            self._send_stopping()

    def _send_stopping(self) -> None:
        if self.proc is None or self.proc.stdin is None or not self._stopping:
            return
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.write(b"stopping\n")
            self.proc.stdin.flush()

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
            if self.fork:
                self.proc = forked(self.python, {**own_package_env(), **self.env})
            if self.proc is None:
                try:
                    # stderr is inherited: the child's log lines go where the daemon's go. Its own
                    # process group: a terminal's Ctrl-C reaches the daemon, which decides.
                    self.proc = subprocess.Popen(
                        [self.python, "-m", MODULE],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        env={**own_package_env(), **self.env},
                        start_new_session=True,
                    )
                except OSError as exc:
                    return CycleReply(FAILED, message=f"cannot start the cycle process {self.python}: {exc}")
            assert self.proc.stdin is not None and self.proc.stdout is not None
            try:
                with contextlib.suppress(OSError):  # it died at once: its status says why, below
                    write_frame(self.proc.stdin, self.request)
            except BaseException:  # a request that does not pickle: no child left waiting for it
                kill_group(self.proc)
                close_pipes(self.proc, None)
                raise
            self._send_stopping()  # a stop or an abort that came before the child existed
            self._send_abort()
        problem = ""
        try:
            reply: CycleReply | None = read_frame(self.proc.stdout)
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


if __name__ == "__main__":
    # Run as auditor.daemon.cycle_process, not __main__: the reply's classes must pickle by the
    # name the daemon imports them by.
    from auditor.daemon.cycle_process import main as module_main

    sys.exit(module_main())
