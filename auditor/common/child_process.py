"""What the auditor's child processes (stack workers, the rollout's environment process) share.

Each is started with three pipes in a session of its own: its own process group, so that a
kill reaches whatever it started, and with the kernel's autogroup scheduling its own share of
the CPU, whatever else runs in the auditor's session. Each is killed as a whole group and
always reaped; its end is described in words for the person reading the message.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path


def own_package_env() -> dict[str, str]:
    """This environment, with this package's root first on PYTHONPATH: a child started with
    ``python -m auditor.<module>`` finds the package where the parent found it, installed or
    run from a checkout, whatever its working directory."""
    root = str(Path(__file__).resolve().parents[2])  # the folder that holds auditor/
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return env


def spawn(argv: Sequence[str], env: dict[str, str] | None = None, cwd: str | Path | None = None):
    """Start ``argv`` with stdin/stdout/stderr pipes in a new session; OSError when it cannot run."""
    return subprocess.Popen(
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=env,
        start_new_session=True,
    )


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's whole process group, wherever it is stuck, and reap the child."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """``proc.wait(timeout)``, woken by the exit itself: Popen.wait with a timeout sleeps in
    steps of up to 50 ms, and every close of a cycle would wait for the next step."""
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # no pidfd (not Linux >= 5.3), or already reaped
        proc.wait(timeout=timeout)
        return
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            if not selector.select(timeout):
                raise subprocess.TimeoutExpired(proc.args, timeout)
    finally:
        os.close(fd)
    proc.wait()


def describe_status(status: int | None) -> str:
    """A return code in words: "exit status 3", "killed by SIGKILL", "still running"."""
    if status is None:
        return "still running"
    if status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"exit status {status}"


def close_pipes(proc: subprocess.Popen[bytes], stderr_reader: threading.Thread | None) -> None:
    """Close a reaped child's pipes once the thread draining its stderr has read it all.

    Closed here, not left to the garbage collector: a daemon that keeps its last cycle's
    objects would hold a pipe per child per cycle (the soak's fd slope)."""
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    if stderr_reader is not None:
        stderr_reader.join(timeout=2)
    if proc.stderr is not None and (stderr_reader is None or not stderr_reader.is_alive()):
        with contextlib.suppress(OSError):
            proc.stderr.close()
