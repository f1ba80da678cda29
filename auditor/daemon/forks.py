"""Cycle children forked from a server that imported the cycle once.

A cycle child started as ``python -m auditor.daemon.cycle_child`` imports the cycle (SQLAlchemy,
numpy, pydantic's config models, the queue, the report) before it does anything: 1.1-1.7 CPU-s
at every cycle, the larger part of a small fleet's cycle, and paid again by every auditor that
shares a fleet (bench/fleet.py). The daemon never imports the cycle itself (it stays as small
as it started, auditor.daemon.cycle_process), so the import is done once, by Python's own fork
server (``multiprocessing``'s ``forkserver`` start method): a single-threaded process started
with the daemon's interpreter and path, which imports ``preload`` and then forks one child per
cycle. A child is still a fresh process that exits with its cycle; only the imported modules
are shared, copy-on-write, with the server, which never runs a cycle.

The child's stdin and stdout are two pipes handed over by descriptor; it makes its own session
(a kill of its group reaches what it started, as ``start_new_session`` did) and takes the
environment the daemon gives it for this cycle, whole. ``ForkedChild`` stands in for the
``Popen`` of a cold child (pid, pipes, ``poll``, ``wait``, ``returncode``): the forked process is
the server's child, its exit status comes from the server.

As with any ``multiprocessing`` child, the parent's main script is imported in the child under
the name ``__mp_main__`` (not for ``python -m``): a script that forks cycles guards its own
work with ``if __name__ == "__main__"``, as the ``auditor`` command does.

Where the server cannot start (no fork, no descriptor passing, an interpreter that does not run)
the caller starts the child cold, as before.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import subprocess
import threading
from multiprocessing.connection import Connection
from typing import Any, BinaryIO

_LOCK = threading.Lock()


class ForkedChild:
    """A process forked from the fork server, standing in for ``subprocess.Popen``."""

    def __init__(self, process: Any, stdin: BinaryIO, stdout: BinaryIO):
        self.process = process
        self.pid: int = process.pid
        self.args = [f"forked cycle child {process.pid}"]
        self.stdin: BinaryIO | None = stdin
        self.stdout: BinaryIO | None = stdout
        self.stderr = None

        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.process.exitcode
            if self.returncode is not None:
                self.process.close()  # its descriptors go with it, not with the GC
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.process.join(timeout)
        code = self.poll()
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code


def fork(python: str, preload: list[str], module: str, function: str, env: dict[str, str]) -> ForkedChild:
    """Fork ``module.function(stdin, stdout)``, in the environment ``env`` (whole), from the
    fork server of ``python``, starting the server first if it is not running (or died); one
    server per process, which imports the ``preload`` of the call that starts it. Raises
    what starting it raised (OSError, EOFError, ...): the caller starts the child cold."""
    context = multiprocessing.get_context("forkserver")
    request_r, request_w = os.pipe()
    reply_r, reply_w = os.pipe()
    theirs = (Connection(request_r, writable=False), Connection(reply_w, readable=False))
    try:
        with _LOCK:  # one server per process, configured before its first start
            context.set_executable(python)
            context.set_forkserver_preload(preload)
            process = context.Process(
                target=_run, args=(module, function, *theirs, env), name="auditor-cycle", daemon=False
            )
            process.start()
            # Ours to wait for and to kill, as a Popen would be: multiprocessing would join it
            # when this process exits, and a daemon whose child hangs would never exit.
            multiprocessing.process._children.discard(process)  # type: ignore[attr-defined]
    except BaseException:
        for fd in (request_w, reply_r):
            os.close(fd)
        raise
    finally:
        for conn in theirs:  # the child holds its own copies
            conn.close()
    return ForkedChild(process, os.fdopen(request_w, "wb"), os.fdopen(reply_r, "rb"))


def _run(module: str, function: str, stdin: Connection, stdout: Connection, env: dict[str, str]) -> None:
    """In the forked child: a session of its own, the cycle's environment, then the entry point
    (already imported by the server: the import is a lookup)."""
    os.setsid()
    # The environment whole, as a cold child's: what the server's imports set in theirs stays
    # there (threadpoolctl sets KMP_DUPLICATE_LIB_OK, which would change the identity of the
    # daemon's warm workers, auditor.stacks.warm).
    os.environ.clear()
    os.environ.update(env)
    entry = getattr(importlib.import_module(module), function)
    streams = []
    for conn, mode in ((stdin, "rb"), (stdout, "wb")):
        streams.append(os.fdopen(os.dup(conn.fileno()), mode))
        conn.close()
    entry(*streams)
