"""Warm stack workers: each local stack's interpreter imports its runtime once (a zygote,
``auditor/worker/zygote.py``) and every worker the auditor needs is a child forked from it, a
fresh process in a session of its own: a crash, a hang past its deadline or a kill costs that
worker only, as with a cold start, and the framework's import (0.2-2.3 CPU-s, ~400 MB) is paid
once per stack instead of once per worker.

- ``WarmPool`` is one process's zygotes, by *identity*: the interpreter, the module of the
  runtime class (MindSpore's PyNative and graph-mode classes share one), the code it imported
  and every environment variable but the few a runtime cannot have read at import (``PATH``,
  ``HOME``, the auditor's and pytest's own, ...; a forked worker takes the requester's whole
  environment all the same). Two stacks that would import the same thing in the same way
  share a zygote.
- Lifetime (``[worker] warm``): ``cycle`` (the default) the pool's owner (a command, a cycle)
  closes it at its end; ``daemon`` the daemon keeps its zygotes between cycles in its state
  directory and its cycle children fork from them (``AUDITOR_ZYGOTES`` names that directory to
  a child, or to a command run by the same user); ``off`` every worker starts cold.
- A worker starts cold, said once per stack in the log, where fork is not possible: the
  runtime's spec opts out (``RuntimeSpec.warm``), the platform has no fork or unix sockets, the
  zygote could not start, or it died. A zygote whose runtime changed on disk refuses to fork
  and is replaced by a fresh one.

A forked worker is not the auditor's child: ``ForkedProcess`` stands in for ``Popen`` (pid,
pipes, ``poll``, ``wait``), its exit status read from the zygote's connection.
"""

from __future__ import annotations

import array
import collections
import contextlib
import hashlib
import json
import logging
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from auditor.common import tempdirs
from auditor.common.child_process import close_pipes, kill_group, spawn
from auditor.worker.bootstrap import ZYGOTE_SOURCE

log = logging.getLogger("auditor.stacks.warm")

MODES = ("cycle", "daemon", "off")
STATUS_TIMEOUT = 5.0
"""Seconds a zygote has to answer a status request before the daemon replaces it."""
WARM_DIR_ENV = "AUDITOR_ZYGOTES"
"""A directory of zygotes this process may fork from before it starts its own: set by the
daemon (``[worker] warm = "daemon"``) for its cycle children."""

INERT_ENV = frozenset(
    {
        "PATH", "HOME", "PWD", "OLDPWD", "USER", "LOGNAME", "SHELL", "TERM", "COLUMNS", "LINES",
        "MAIL", "SHLVL", "_", "HOSTNAME", "DISPLAY", "EDITOR", "VISUAL", "PAGER", "LESS",
        "INVOCATION_ID", "JOURNAL_STREAM", "NOTIFY_SOCKET", "WATCHDOG_PID", "WATCHDOG_USEC",
        "SYSTEMD_EXEC_PID", "MANAGERPID", "LS_COLORS",
    }
)  # fmt: skip
"""Environment variables a runtime reads when it runs a subprocess or a request, never while
it is imported: a forked worker takes the requester's values, and they do not make another
zygote. Every other variable (``GLOG_v``, ``OMP_NUM_THREADS``, ``ASCEND_*``, ``MS_*``,
``LD_LIBRARY_PATH``, ``TZ``, ``LANG``, ...) may be read at import, so a zygote serves only
requesters whose values it imported with."""
INERT_PREFIXES = ("AUDITOR_", "PYTEST_", "XDG_", "SSH_", "SUDO_", "COV_CORE_")
_LEN = struct.Struct(">I")
_CORE = ("auditor", "auditor.worker")


class WarmUnavailable(Exception):
    """This worker cannot be forked from a zygote; it starts cold."""


def inert(name: str) -> bool:
    return name in INERT_ENV or name.startswith(INERT_PREFIXES)


def fork_supported() -> bool:
    return hasattr(os, "fork") and hasattr(socket, "AF_UNIX") and hasattr(socket, "SCM_RIGHTS")


@dataclass(frozen=True)
class Identity:
    """What a zygote imported and how: requesters with the same key fork from the same one."""

    python: str
    runtime_class: str
    packages: tuple[tuple[str, str], ...]
    env: Mapping[str, str] = field(hash=False, compare=False)
    key: str = ""

    @classmethod
    def of(
        cls, python: str, runtime_class: str, packages: Iterable[tuple[str, str]], env: Mapping[str, str]
    ) -> Identity:
        module = runtime_class.partition(":")[0]
        packages = tuple((str(n), str(p)) for n, p in packages)
        used = tuple((n, p) for n, p in packages if n in _CORE or module == n or module.startswith(n + "."))
        # The path as written, not resolved: a venv's bin/python is a link to its base
        # interpreter, shared by every venv of that Python, and the venv is what it imports from.
        path = os.path.abspath(python)
        try:
            st = os.stat(path)
            stamp = [st.st_ino, st.st_mtime_ns]
        except OSError:
            stamp = None
        document = {
            "python": path,
            "stamp": stamp,
            "module": module,
            "code": sorted(used),
            "env": {k: v for k, v in sorted(env.items()) if not inert(k)},
        }
        key = hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:24]
        return cls(python, runtime_class, packages, dict(env), key)

    @classmethod
    def remote(
        cls, host: str, python: str, runtime_class: str, payload: str, env: Mapping[str, str]
    ) -> Identity:
        """A zygote on another host: its host, interpreter, runtime module, worker code (the
        payload's digest) and the stack's whole environment (all it has there)."""
        document = {
            "host": host,
            "python": python,
            "module": runtime_class.partition(":")[0],
            "payload": payload,
            "env": dict(sorted(env.items())),
        }
        key = hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:24]
        return cls(f"{host}:{python}", runtime_class, (), dict(env), key)


@dataclass
class ZygoteInfo:
    """A zygote as the log, ``auditor hosts`` and Prometheus state it."""

    stacks: list[str]
    pid: int
    python: str
    preloaded: list[str]
    import_cpu_seconds: float
    threads: list[str]
    rss_bytes: int | None = None
    pss_bytes: int | None = None
    forks: int = 0

    def describe(self) -> str:
        memory = f"{self.rss_bytes / 2**20:.0f} MB resident" if self.rss_bytes else "memory unknown"
        if self.pss_bytes:
            memory += f" ({self.pss_bytes / 2**20:.0f} MB proportional)"
        forked = f", {self.forks} worker(s) forked" if self.forks else ""
        return (
            f"warm worker of {', '.join(self.stacks)}: pid {self.pid}, imported "
            f"{', '.join(self.preloaded) or 'the worker code'} in {self.import_cpu_seconds:.2f} CPU-s, "
            f"{memory}, {len(self.threads)} thread(s) at fork{forked}"
        )


def memory_of(pid: int) -> tuple[int | None, int | None]:
    """(RSS, PSS) in bytes of a process, from /proc (None where it cannot be read)."""
    rss = pss = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                pss = int(line.split()[1]) * 1024
    return rss, pss


# -- a forked worker, as the auditor sees it ------------------------------------------------------
class ForkedProcess:
    """A worker forked by a zygote: what the auditor uses of ``Popen``. Its exit status comes
    from the zygote over ``conn``; should the zygote die first, the worker died with it
    (PR_SET_PDEATHSIG) and reads as killed by SIGKILL."""

    def __init__(self, pid: int, conn: socket.socket, stdin: Any, stdout: Any, stderr: Any, args: list[str]):
        self.pid, self.conn, self.args = pid, conn, args
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self.returncode: int | None = None
        self.zygote_gone = False
        self._buffer = b""
        self._lock = threading.Lock()
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self._pidfd = None

    def _settle(self, status: int) -> None:
        self.returncode = status
        with contextlib.suppress(OSError):
            self.conn.close()
        if self._pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self._pidfd)
            self._pidfd = None

    def _read(self, timeout: float) -> None:
        """Read what the zygote said within ``timeout`` seconds; sets returncode on its exit line."""
        with self._lock:
            if self.returncode is not None:
                return
            try:
                readable, _, _ = select.select([self.conn], [], [], max(0.0, timeout))
            except (OSError, ValueError):
                readable = [self.conn]
            if not readable:
                return
            try:
                data = self.conn.recv(4096)
            except OSError:
                data = b""
            if not data:
                # The zygote is gone: so is this worker (it dies with its zygote).
                self.zygote_gone = True
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    if self._pidfd is None or not _exited(self._pidfd):
                        os.killpg(self.pid, signal.SIGKILL)
                self._settle(-signal.SIGKILL)
                return
            self._buffer += data
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                with contextlib.suppress(ValueError):
                    message = json.loads(line)
                    if isinstance(message, dict) and isinstance(message.get("exit"), int):
                        self._settle(message["exit"])
                        return

    def poll(self) -> int | None:
        if self.returncode is None:
            self._read(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        exited_at: float | None = None
        while self.returncode is None:
            left = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
            if deadline is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            self._read(left)
            if self.returncode is None and self._pidfd is not None and _exited(self._pidfd):
                # Exited, and the zygote has not said so: give it a moment, then stop waiting on
                # a zygote that may be stopped or stuck (its worker is dead all the same).
                exited_at = exited_at or time.monotonic()
                if time.monotonic() - exited_at > 10:
                    self.zygote_gone = True
                    self._settle(-signal.SIGKILL)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _exited(pidfd: int) -> bool:
    try:
        readable, _, _ = select.select([pidfd], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def _read_line(conn: socket.socket, deadline: float) -> tuple[dict[str, Any], bytes]:
    """The first JSON line on ``conn`` and what came after it."""
    buffer = b""
    while b"\n" not in buffer:
        left = deadline - time.monotonic()
        if left <= 0:
            raise WarmUnavailable("the zygote did not answer in time")
        readable, _, _ = select.select([conn], [], [], left)
        if not readable:
            continue
        data = conn.recv(4096)
        if not data:
            raise WarmUnavailable("the zygote closed the connection (it died or was replaced)")
        buffer += data
    line, rest = buffer.split(b"\n", 1)
    try:
        message = json.loads(line)
    except ValueError:
        raise WarmUnavailable(f"the zygote answered {line[:200]!r}") from None
    if not isinstance(message, dict):
        raise WarmUnavailable(f"the zygote answered {line[:200]!r}")
    return message, rest


def zygote_status(address: str, timeout: float = 5.0) -> dict[str, Any]:
    """What the zygote at ``address`` says of itself: pid, workers forked, running, threads,
    memory. Raises WarmUnavailable."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as conn:
        conn.settimeout(timeout)
        try:
            conn.connect(address)
            body = b'{"status": true}'
            conn.sendall(_LEN.pack(len(body)) + body)
        except OSError as exc:
            raise WarmUnavailable(f"cannot reach the zygote at {address}: {exc}") from None
        conn.settimeout(None)
        message, _ = _read_line(conn, time.monotonic() + timeout)
    return message


def fork_from(address: str, request: dict[str, Any], timeout: float, label: str) -> ForkedProcess:
    """Ask the zygote listening at ``address`` for a worker; raises WarmUnavailable."""
    ours: list[int] = []
    theirs: list[int] = []
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        for _ in range(3):
            r, w = os.pipe2(os.O_CLOEXEC)
            ours.append(r)
            ours.append(w)
        child_stdin, our_stdin = ours[0], ours[1]
        our_stdout, child_stdout = ours[2], ours[3]
        our_stderr, child_stderr = ours[4], ours[5]
        theirs = [child_stdin, child_stdout, child_stderr]
        conn.settimeout(timeout)
        try:
            conn.connect(address)
            body = json.dumps(request).encode("utf-8")
            data = _LEN.pack(len(body)) + body
            sent = conn.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", theirs))])
            if sent < len(data):
                conn.sendall(data[sent:])
        except OSError as exc:
            raise WarmUnavailable(f"cannot reach the zygote at {address}: {exc}") from None
        for fd in theirs:
            os.close(fd)
        ours = [our_stdin, our_stdout, our_stderr]
        theirs = []
        conn.settimeout(None)
        message, rest = _read_line(conn, time.monotonic() + timeout)
        if not isinstance(message.get("pid"), int):
            raise WarmUnavailable(str(message.get("error") or message))
        proc = ForkedProcess(
            message["pid"],
            conn,
            os.fdopen(our_stdin, "wb"),
            os.fdopen(our_stdout, "rb"),
            os.fdopen(our_stderr, "rb"),
            [f"<worker forked by the zygote of {label}>"],
        )
        proc._buffer = rest
        return proc
    except BaseException:
        for fd in ours + theirs:
            with contextlib.suppress(OSError):
                os.close(fd)
        conn.close()
        raise


# -- a zygote, as its owner sees it ----------------------------------------------------------------
class Zygote:
    """One zygote process this auditor started (and ends: closing its stdin ends it)."""

    def __init__(self, identity: Identity, address: str, stacks: list[str]):
        self.identity, self.address = identity, address
        self.stacks = stacks
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready: dict[str, Any] = {}
        self.forks = 0
        self.started = 0.0
        self.remote = False
        """On another host (reached through ssh or a command): its memory is as it said at start."""
        self._stderr: collections.deque[str] = collections.deque(maxlen=200)
        self._reader: threading.Thread | None = None
        self._sender: threading.Thread | None = None

    def start(self, timeout: float, cwd: Path) -> None:
        """Start it on this machine with the stack's interpreter."""
        spec = {
            "packages": [list(p) for p in self.identity.packages],
            "runtime_class": self.identity.runtime_class,
            "socket": self.address,
        }
        argv = [self.identity.python, "-c", ZYGOTE_SOURCE, json.dumps(spec)]
        self.launch(argv, dict(self.identity.env), cwd, (), timeout)

    def launch(
        self, argv: list[str], env: dict[str, str] | None, cwd: Path, frames: Iterable[bytes], timeout: float
    ) -> None:
        """Run ``argv`` (locally, or ssh to its host), send ``frames`` on its stdin (each an
        8-byte length and the bytes: a remote zygote's environment, source and worker code),
        and wait for its ready line; its ``socket`` is where it listens (on its host)."""
        try:
            self.proc = spawn(argv, env, cwd)
        except OSError as exc:
            raise WarmUnavailable(f"cannot run {argv[0]}: {exc}") from None
        frames = list(frames)
        if frames:
            assert self.proc.stdin is not None
            stdin = self.proc.stdin

            def send() -> None:
                with contextlib.suppress(OSError, ValueError):
                    for data in frames:
                        stdin.write(len(data).to_bytes(8, "big") + data)
                    stdin.flush()

            self._sender = threading.Thread(target=send, name="zygote-payload", daemon=True)
            self._sender.start()
        self._reader = threading.Thread(target=self._drain, name="zygote-stderr", daemon=True)
        self._reader.start()
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        line = b""
        fd = self.proc.stdout.fileno()
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                raise WarmUnavailable(f"it did not import its runtime within {timeout:g} s")
            readable, _, _ = select.select([fd], [], [], left)
            if not readable:
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                self.close()
                raise WarmUnavailable(f"it exited while importing its runtime{self._tail()}")
            line += chunk
        try:
            ready = json.loads(line)
        except ValueError:
            self.close()
            raise WarmUnavailable(f"it answered {line[:200]!r}") from None
        if not isinstance(ready, dict) or "error" in ready or not isinstance(ready.get("pid"), int):
            self.close()
            raise WarmUnavailable(f"{ready.get('error') if isinstance(ready, dict) else ready}{self._tail()}")
        self.ready = ready
        self.address = str(ready.get("socket") or self.address)
        self.started = time.time()

    def _drain(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for raw in iter(self.proc.stderr.readline, b""):
            self._stderr.append(raw.decode("utf-8", "replace").rstrip("\n"))

    def _tail(self) -> str:
        """What it said last, without a traceback's frames (its last words name the cause)."""
        if self._reader is not None:
            self._reader.join(timeout=1)
        lines = [
            line.strip()
            for line in self._stderr
            if line.strip() and not line.startswith((" ", "\t", "Traceback (most recent call last)"))
        ][-2:]
        return ("; it said: " + " | ".join(lines)) if lines else ""

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def fork(self, request: dict[str, Any], timeout: float) -> ForkedProcess:
        if not self.alive:
            raise WarmUnavailable("its zygote died" + self._tail())
        proc = fork_from(self.address, request, timeout, ", ".join(self.stacks))
        self.forks += 1
        return proc

    def info(self) -> ZygoteInfo:
        forks = self.forks
        if self.remote or not self.alive or self.proc is None:
            rss = (self.ready.get("rss_kib") or 0) * 1024 or None
            pss = None
        else:
            rss, pss = memory_of(self.proc.pid)
            with contextlib.suppress(WarmUnavailable, OSError):
                # Counted by the zygote: other processes (the daemon's cycles) fork from it too.
                forks = int(zygote_status(self.address, 2.0).get("forks", forks))
        return ZygoteInfo(
            list(self.stacks),
            int(self.ready.get("pid", 0)),
            str(self.ready.get("python", "")),
            list(self.ready.get("preloaded") or []),
            float(self.ready.get("cpu_seconds") or 0.0),
            list(self.ready.get("threads") or []),
            rss,
            pss,
            forks,
        )

    def close(self) -> None:
        """End the zygote (end of its stdin), then make sure: kill its group, reap it."""
        if self.proc is None:
            return
        if self._sender is not None and self._sender.is_alive():
            # It never took its frames (a host stalled before reading them): closing its stdin
            # would wait for the blocked write for ever. Killed, it breaks the pipe and the write.
            kill_group(self.proc)
            self._sender.join(timeout=5)
        with contextlib.suppress(OSError, ValueError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        kill_group(self.proc)
        close_pipes(self.proc, self._reader)
        with contextlib.suppress(OSError):
            os.unlink(self.address)


# -- the pool ---------------------------------------------------------------------------------------
class WarmPool:
    """This process's zygotes. ``mode``: ``[worker] warm``; ``directory``: where its zygotes
    listen (a private temporary directory unless given: the daemon's state directory keeps
    them findable for its cycle children); ``shared``: a directory of zygotes another process
    owns, tried first (``AUDITOR_ZYGOTES``)."""

    def __init__(self, mode: str = "cycle", directory: Path | None = None, shared: str | None = None):
        if mode not in MODES:
            raise ValueError(f"warm must be one of {', '.join(MODES)}, not {mode!r}")
        self.mode = mode
        self.shared = os.environ.get(WARM_DIR_ENV) if shared is None else shared
        self._directory = directory
        self._own_dirs: list[Path] = []
        self._zygotes: dict[str, Zygote] = {}
        self._failed: dict[str, str] = {}
        self._shared_failed: set[str] = set()
        self._said: set[tuple[str, str]] = set()
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._closed = False
        self.warm_starts = 0
        self.cold_starts = 0
        # A pool nobody holds any more (no Reach, no worker) ends its zygotes, as at exit.
        weakref.finalize(self, _end, self._zygotes, self._own_dirs)

    # -- where zygotes live
    def directory(self) -> Path:
        with self._lock:
            if self._directory is not None and not _too_long_for_sockets(self._directory):
                self._directory.mkdir(mode=0o700, parents=True, exist_ok=True)
                return self._directory
            if not self._own_dirs:
                self._own_dirs.append(tempdirs.make("auditor-zygotes-", root=tempdirs.socket_root()))
                if self._directory is not None:
                    # No socket could be bound there (its path is limited to 107 bytes).
                    log.info(
                        "%s is too long a path for a unix socket: the warm workers listen in %s",
                        self._directory,
                        self._own_dirs[0],
                    )
            return self._own_dirs[0]

    def address(self, key: str) -> str:
        return str(self.directory() / f"{key[:16]}.sock")

    # -- starting workers
    def identity(
        self, python: str, runtime_class: str, packages: Iterable[tuple[str, str]], env: Mapping[str, str]
    ) -> Identity:
        return Identity.of(python, runtime_class, packages, env)

    def cold(self, stack: str, reason: str) -> None:
        """Say once per stack and reason that its workers start cold."""
        with self._lock:
            self.cold_starts += 1
            if (stack, reason) in self._said:
                return
            self._said.add((stack, reason))
        log.warning("stack %s: its workers start cold (%s)", stack, reason)

    def fork(
        self,
        stack: str,
        identity: Identity,
        spec: Mapping[str, Any],
        env: Mapping[str, str] | None,
        workdir: str | None,
        timeout: float,
    ) -> ForkedProcess | None:
        """A worker for ``stack`` forked from a zygote of ``identity`` (the shared directory's,
        else this pool's, started on first use), or None: start it cold (said in the log)."""
        if self.mode == "off":
            return None
        if not fork_supported():
            self.cold(stack, "this platform cannot fork a warm worker")
            return None
        request = {"spec": dict(spec), "env": dict(env) if env is not None else None, "workdir": workdir}
        if self.shared:
            address = os.path.join(self.shared, f"{identity.key[:16]}.sock")
            with self._lock:
                skipped = address in self._shared_failed
            if os.path.exists(address) and not skipped:
                started = time.monotonic()
                try:
                    proc = fork_from(address, request, timeout, stack)
                except WarmUnavailable as exc:
                    # Not asked again this process: a stuck zygote would cost each worker its
                    # whole deadline (the daemon replaces it before its next cycle).
                    with self._lock:
                        self._shared_failed.add(address)
                    log.warning(
                        "stack %s: the daemon's warm worker in %s cannot serve: %s", stack, self.shared, exc
                    )
                    timeout = timeout - (time.monotonic() - started)  # one deadline, not two
                    if timeout <= 0:
                        return None
                else:
                    with self._lock:
                        self.warm_starts += 1
                    return proc
        try:
            zygote = self._zygote(stack, identity, timeout)
        except WarmUnavailable as exc:
            self.cold(stack, str(exc))
            return None
        try:
            proc = zygote.fork(request, timeout)
        except WarmUnavailable as exc:
            if str(exc).startswith("stale:") and zygote.alive:
                # Its runtime changed on disk: a fresh zygote imports the new one.
                log.info("stack %s: %s; starting a fresh one", stack, exc)
                self._drop(identity.key, zygote)
                return self.fork(stack, identity, spec, env, workdir, timeout)
            with self._lock:
                self._failed[identity.key] = str(exc)
            self._drop(identity.key, zygote)
            self.cold(stack, f"its warm worker cannot fork: {exc}")
            return None
        with self._lock:
            self.warm_starts += 1
            if stack not in zygote.stacks:
                zygote.stacks.append(stack)
        return proc

    def _drop(self, key: str, zygote: Zygote) -> None:
        with self._lock:
            if self._zygotes.get(key) is zygote:
                del self._zygotes[key]
        zygote.close()

    def _zygote(
        self,
        stack: str,
        identity: Identity,
        timeout: float,
        start: Callable[[Zygote], None] | None = None,
    ) -> Zygote:
        with self._lock:
            if self._closed:
                raise WarmUnavailable("the pool is closed")
            if identity.key in self._failed:
                raise WarmUnavailable(self._failed[identity.key])
            existing = self._zygotes.get(identity.key)
            if existing is not None and existing.alive:
                return existing
            lock = self._locks.setdefault(identity.key, threading.Lock())
        with lock:
            with self._lock:
                existing = self._zygotes.get(identity.key)
            if existing is not None:
                if existing.alive:
                    return existing
                # It died: its workers died with it; the rest of this pool's life starts cold.
                reason = "its warm worker died" + existing._tail()
                with self._lock:
                    self._failed[identity.key] = reason
                self._drop(identity.key, existing)
                raise WarmUnavailable(reason)
            zygote = Zygote(identity, self.address(identity.key), [stack])
            try:
                if start is None:
                    zygote.start(timeout, self.directory())
                else:
                    start(zygote)
            except WarmUnavailable as exc:
                reason = f"its warm worker did not start: {exc}"
                with self._lock:
                    self._failed[identity.key] = reason
                raise WarmUnavailable(reason) from None
            with self._lock:
                if self._closed:
                    zygote.close()
                    raise WarmUnavailable("the pool is closed")
                self._zygotes[identity.key] = zygote
            # Said at INFO where zygotes are kept (the daemon's); a cycle's own, at DEBUG.
            log.log(logging.INFO if self.mode == "daemon" else logging.DEBUG, "%s", zygote.info().describe())
            return zygote

    def remote_address(
        self,
        stack: str,
        identity: Identity,
        argv: list[str],
        frames: Iterable[bytes],
        timeout: float,
    ) -> str | None:
        """Where the zygote of a stack on another host listens, there (started through ``argv``
        with ``frames`` on first use, and ended with this pool), or None: start it cold."""
        if self.mode == "off":
            return None

        def start(zygote: Zygote) -> None:
            zygote.remote = True
            zygote.launch(argv, None, self.directory(), frames, timeout)

        try:
            zygote = self._zygote(stack, identity, timeout, start)
        except WarmUnavailable as exc:
            self.cold(stack, str(exc))
            return None
        with self._lock:
            self.warm_starts += 1
            zygote.forks += 1
            if stack not in zygote.stacks:
                zygote.stacks.append(stack)
        return zygote.address

    def gone(self, stack: str, identity: Identity, why: str) -> None:
        """A worker could not be forked by the zygote of ``identity`` (it died, or refused): drop
        it; the stack's workers start cold from now on (said once)."""
        with self._lock:
            zygote = self._zygotes.get(identity.key)
            self._failed[identity.key] = why
        if zygote is not None:
            self._drop(identity.key, zygote)
        self.cold(stack, why)

    def prepare(self, stack: str, identity: Identity, timeout: float) -> ZygoteInfo | None:
        """Start the zygote of ``identity`` now (the daemon, before a cycle); None if it cannot."""
        if self.mode == "off" or not fork_supported():
            return None
        try:
            return self._zygote(stack, identity, timeout).info()
        except WarmUnavailable as exc:
            if not self._closed:  # closed while it started (the owner is done): nothing to say
                self.cold(stack, str(exc))
            return None

    # -- what it holds
    def zygotes(self) -> list[ZygoteInfo]:
        with self._lock:
            held = list(self._zygotes.values())
        return [z.info() for z in held if z.alive]

    def forget(self, stacks: Iterable[str]) -> list[str]:
        """End the zygotes that serve any of ``stacks`` (their fingerprint changed), and forget
        earlier failures: the next worker starts from a fresh one. The stacks ended."""
        wanted = set(stacks)
        ended: list[str] = []
        with self._lock:
            chosen = [(k, z) for k, z in self._zygotes.items() if wanted & set(z.stacks)]
            self._failed.clear()
        for key, zygote in chosen:
            ended += zygote.stacks
            self._drop(key, zygote)
        return ended

    def release(self, stacks: Iterable[str]) -> list[str]:
        """End the zygotes that serve only ``stacks`` (their hosts' part of a cycle is done,
        auditor.fleet.window); remembered failures stay. The stacks ended."""
        done = set(stacks)
        with self._lock:
            chosen = [(k, z) for k, z in self._zygotes.items() if z.stacks and set(z.stacks) <= done]
        for key, zygote in chosen:
            self._drop(key, zygote)
        return [s for _, z in chosen for s in z.stacks]

    def check(self, answer_within: float = STATUS_TIMEOUT) -> list[str]:
        """Drop zygotes that died, and those alive that do not answer a status request within
        ``answer_within`` seconds (stopped, or stuck: every fork from them would wait its whole
        deadline, cycle after cycle), each said in the log: the next request starts a fresh one.
        The stacks whose zygote was dropped."""
        with self._lock:
            zygotes = list(self._zygotes.items())
            self._failed.clear()
        dropped = []
        for key, zygote in zygotes:
            if not zygote.alive:
                why = f"died{zygote._tail()}"
            elif zygote.remote:
                continue  # reached through its host's connection: its cycle judges it
            else:
                try:
                    zygote_status(zygote.address, answer_within)
                    continue
                except WarmUnavailable as exc:
                    why = f"did not answer within {answer_within:g} s ({exc}): ended"
            log.warning("the warm worker of %s %s; a fresh one starts", ", ".join(zygote.stacks), why)
            self._drop(key, zygote)
            dropped += zygote.stacks
        return dropped

    def close(self) -> None:
        with self._lock:
            self._closed = True
        _end(self._zygotes, self._own_dirs)

    def reopen(self) -> None:
        """Close every zygote (a reload), and take requests again."""
        self.close()
        with self._lock:
            self._closed = False
            self._failed.clear()
            self._said.clear()


SOCKET_PATH_MAX = 107
"""The longest path a unix socket can be bound to on Linux (``sun_path``: 108 bytes with the NUL)."""


def _too_long_for_sockets(directory: Path) -> bool:
    """Whether a zygote's socket in ``directory`` (``<16 hex digits>.sock``) would be too long."""
    return len(os.fsencode(str(directory))) + len("/0123456789abcdef.sock") > SOCKET_PATH_MAX


def _end(zygotes: dict[str, Zygote], own_dirs: list[Path]) -> None:
    """Close a pool's zygotes and remove its own directory (also its finalizer)."""
    held = list(zygotes.values())
    zygotes.clear()
    for zygote in held:
        zygote.close()
    for path in own_dirs:
        shutil.rmtree(path, ignore_errors=True)
    own_dirs.clear()


def stderr_note(proc: Any) -> str:
    """How a worker started, for a death message: forked workers die with their zygote."""
    if isinstance(proc, ForkedProcess) and proc.zygote_gone:
        return " (its warm worker's zygote died, and the worker with it)"
    return ""
