"""The auditor's side of a stack worker: start it with the stack's interpreter, send
framed requests with a deadline, kill its whole process group when it misses one.

A worker runs in its own session (process group), so a runtime that forks helper
processes or hangs in native code is taken down completely. Its stderr is drained by a
thread into a bounded buffer, so a chatty runtime can never block on a full pipe, and the
tail is attached to every error a person will read.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import PurePath, PurePosixPath
from typing import Any

from auditor.common import tempdirs
from auditor.common.child_process import close_pipes, describe_status, kill_group, spawn, wait_exit
from auditor.config.tables import HostConfig, StackConfig
from auditor.stacks import payload as worker_payload
from auditor.stacks.hosts import LOCAL
from auditor.stacks.launch import local_worker_env, worker_packages
from auditor.stacks.transport import CONNECTIONS, HostError, explain, remote_argv
from auditor.stacks.warm import ForkedProcess, Identity, WarmPool, stderr_note
from auditor.worker import files, protocol
from auditor.worker.bootstrap import SOURCE
from auditor.worker.fingerprint import WORKER_MARK, WORKER_SET_ENV
from auditor.worker.remote_boot import CONNECT as REMOTE_CONNECT
from auditor.worker.remote_boot import LAUNCH as REMOTE_LAUNCH
from auditor.worker.remote_boot import SOURCE as REMOTE_SOURCE
from auditor.worker.remote_boot import ZYGOTE_SOURCE as REMOTE_ZYGOTE_SOURCE

STDERR_LINES = 400
TAIL_CHARS = 4000


class WorkerError(Exception):
    """A request to a stack worker did not produce an answer.

    kind: "start" (interpreter missing or failed to start), "timeout", "crash"
    (the process died), "protocol" (garbage on the pipe) or "error" (the runtime raised).
    """

    def __init__(
        self,
        stack: str,
        op: str,
        kind: str,
        message: str,
        log: str = "",
        error_type: str = "",
        traceback: str = "",
    ):
        self.stack, self.op, self.kind, self.message = stack, op, kind, message
        self.log, self.error_type, self.traceback = log, error_type, traceback
        self.host = ""
        """The stack's host when it is not this machine."""
        self.lost = False
        """The worker was lost with its warm zygote (killed, or dead), not by what it was asked:
        the same work on a fresh worker is a fair second try."""
        super().__init__(f"{stack}: {op}: {message}")

    def describe(self) -> str:
        """A message for a person: what failed, and the last lines the worker wrote."""
        where = f"stack {self.stack} on host {self.host}" if self.host else f"stack {self.stack}"
        text = f"{where}: {self.op} failed: {self.message}"
        tail = self.log.strip()
        if tail:
            tail = tail[-TAIL_CHARS:]
            text += "\n  worker log (last lines):\n" + "\n".join(
                "    " + line for line in tail.splitlines()[-25:]
            )
        return text


@dataclass
class Reply:
    result: dict[str, Any]
    log: str
    seconds: float


class StackWorker:
    """One running worker process for one stack."""

    def __init__(
        self,
        stack: StackConfig,
        start_timeout: float = 120.0,
        request_timeout: float = 120.0,
        packages: list[tuple[str, str]] | None = None,
        runtime_class: str | None = None,
        host: HostConfig | None = None,
        file_limits: files.Limits = files.DEFAULT_LIMITS,
        warm: WarmPool | None = None,
    ):
        """``host``: the stack's ``[hosts.NAME]`` (None for a stack on this machine);
        ``file_limits``: how a model file sent to a remote worker is read (``[files]``);
        ``warm``: the zygotes to fork it from (None: a cold start)."""
        self.stack = stack
        self.warm = warm
        self.host = host
        self.file_limits = file_limits
        self.runtime_class = runtime_class
        # Without the caller's packages, the worker carries at least its own runtime class
        # (a remote payload holds only what its entry modules import).
        entry = [runtime_class.partition(":")[0]] if runtime_class else []
        self.packages = packages if packages is not None else worker_packages(entry)
        self.start_timeout = start_timeout
        self.request_timeout = request_timeout
        self.proc: subprocess.Popen[bytes] | ForkedProcess | None = None
        self.forked = False
        """Forked from a warm zygote (auditor.stacks.warm), not started cold."""
        self._killed = threading.Event()
        self._start_deadline: float | None = None
        self.local_dir = tempdirs.make(f"auditor-{stack.name}-")
        self.workdir: PurePath = self.local_dir
        """The worker's directory on its host (exported files go there)."""
        self.remote: dict[str, Any] | None = None
        """For a worker on another host: how it was reached (ssh's SSH_CONNECTION)."""
        self._stderr: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self._reader: threading.Thread | None = None
        self.hello: dict[str, Any] = {}
        self.last_op = ""
        """The request sent last (what the worker was doing if it died)."""

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def is_remote(self) -> bool:
        return self.stack.host != LOCAL

    def start(self) -> dict[str, Any]:
        # One deadline for the whole start, however it goes: a warm worker's wait (its zygote
        # starting, or a stuck one) leaves a cold start only what is left of start_timeout,
        # never a second start_timeout.
        self._start_deadline = time.monotonic() + self.start_timeout
        try:
            return self._start_remote() if self.is_remote else self._start_local()
        except WorkerError as exc:
            exc.host = self.stack.host if self.is_remote else ""
            raise

    def _start_local(self) -> dict[str, Any]:
        python = self.stack.python
        if not os.path.isfile(python) or not os.access(python, os.X_OK):
            raise WorkerError(
                self.stack.name,
                "start",
                "start",
                f"interpreter not found or not executable: {python} "
                f"(stacks.{self.stack.name}.python; run scripts/install-stacks?)",
            )
        spec = {
            "runtime": self.stack.runtime,
            "device": self.stack.device,
            "workdir": str(self.workdir),
            "packages": self.packages,
            "runtime_class": self.runtime_class,
        }
        env = local_worker_env(self.stack.env)
        warm = self.warm is not None and bool(self.runtime_class)
        # The zygote's identity is the stack's environment, without this worker's own mark
        identity = Identity.of(python, self.runtime_class, self.packages, env) if warm else None
        # What the worker starts inherits the mark, whatever session or directory it moves to.
        env[WORKER_MARK] = str(self.local_dir)
        if self.warm is not None and identity is not None:
            self.proc = self.warm.fork(
                self.stack.name, identity, spec, env, str(self.workdir), self._start_left()
            )
            self.forked = self.proc is not None
            if self.proc is None and self._start_left() <= 0:
                # The warm worker's wait took the whole deadline (a stack that hangs): a cold
                # start now would be a second wait, no sooner over.
                raise WorkerError(
                    self.stack.name,
                    "start",
                    "timeout",
                    f"not started within {self.start_timeout:g} s ([worker] start_timeout): its warm "
                    "worker did not start in that time, so no cold start was tried after it",
                )
        if self.proc is None:
            try:
                # Its own session (auditor.common.child_process): with the kernel's autogroup
                # scheduling its own share of the CPU, as a served runtime has (the latency bench
                # relies on it).
                self.proc = spawn([python, "-c", SOURCE, json.dumps(spec)], env, self.workdir)
            except OSError as exc:
                raise WorkerError(self.stack.name, "start", "start", f"cannot run {python}: {exc}") from None
        if self._killed.is_set():
            # kill() ran between registration and Popen (an abort racing a restart): it found
            # no process, so finish its job here instead of waiting out start_timeout.
            self.kill()
            raise WorkerError(self.stack.name, "start", "crash", "killed while starting (cycle aborted)")
        self._reader = threading.Thread(
            target=self._drain_stderr, name=f"stderr-{self.stack.name}", daemon=True
        )
        self._reader.start()
        return self._hello()

    def _start_left(self) -> float:
        """Seconds left of this start's deadline (``start_timeout`` from when start() began)."""
        if self._start_deadline is None:
            return self.start_timeout
        return max(0.0, self._start_deadline - time.monotonic())

    def _hello(self) -> dict[str, Any]:
        left = self._start_left()
        try:
            if left <= 0:
                self.kill()
                raise self._failure("hello", "timeout", "no time left")
            hello = dict(self.request("hello", timeout=left).result)
        except WorkerError as exc:
            if exc.kind == "timeout":  # said against the one deadline, not what was left of it
                where = exc.message.find(" (on host ")
                exc.message = (
                    f"not started within {self.start_timeout:g} s ([worker] start_timeout, counted once "
                    "from the start, a warm worker's wait included); worker process group killed"
                ) + (exc.message[where:] if where >= 0 else "")
            raise
        # Where the worker keeps files and how it was reached change with every start:
        # they are not part of what the worker says about the stack (its fingerprint).
        workdir = hello.pop("workdir", None)
        self.remote = hello.pop("remote", None)
        if self.is_remote and workdir:
            self.workdir = PurePosixPath(workdir)
        self.hello = hello
        return self.hello

    def _start_remote(self) -> dict[str, Any]:
        """Start the worker on the stack's host: connect (one shared connection per host),
        run the interpreter there with the remote bootstrap, send the worker code on stdin."""
        name = self.stack.name
        if self.host is None:
            raise WorkerError(
                name, "start", "start", f"no [hosts.{self.stack.host}] table for stacks.{name}.host"
            )
        try:
            control = CONNECTIONS.ensure(self.host)
        except HostError as exc:
            raise WorkerError(name, "start", "start", f"cannot reach {exc}") from None
        if self._killed.is_set():
            raise WorkerError(name, "start", "crash", "killed while starting (cycle aborted)")
        code = worker_payload.build(self.packages)
        spec = {
            "runtime": self.stack.runtime,
            "device": self.stack.device,
            "packages": [[n, ""] for n, _ in self.packages],
            "runtime_class": self.runtime_class,
            "payload": code.sha256,
        }
        env = {"GLOG_v": "2", "GLOG_logtostderr": "1", **self.stack.env}
        # What the auditor added is not the stack's environment: the fingerprint leaves it out.
        env[WORKER_SET_ENV] = ",".join(k for k in ("GLOG_v", "GLOG_logtostderr") if k not in self.stack.env)
        # The environment (secrets included) goes on stdin, never on the command line: there
        # `ps` would show it to every user of both machines (auditor.worker.remote_boot).
        prefix = ["env", "-u", "PYTHONPATH", "-u", "PYTHONHOME", self.stack.python, "-c"]
        frames: tuple[bytes, ...] = (
            json.dumps(env).encode("utf-8"),
            REMOTE_SOURCE.encode("utf-8"),
            code.data,
        )
        identity = None
        address = None
        if self.warm is not None and self.runtime_class:
            # The host's zygote of this stack (started on first use; it receives the worker
            # code once), and each worker a fork of it reached by CONNECT on the host.
            identity = Identity.remote(
                self.host.name, self.stack.python, self.runtime_class, code.sha256, env
            )
            launch = remote_argv(self.host, [*prefix, REMOTE_LAUNCH, json.dumps(spec)], control)
            zygote_frames = (frames[0], REMOTE_ZYGOTE_SOURCE.encode("utf-8"), code.data)
            address = self.warm.remote_address(name, identity, launch, zygote_frames, self._start_left())
        if address is not None:
            request = {k: v for k, v in spec.items() if k != "payload"}
            words = [*prefix, REMOTE_CONNECT, json.dumps({"socket": address, "spec": request})]
            frames = ()
        else:
            words = [*prefix, REMOTE_LAUNCH, json.dumps(spec)]
        argv = remote_argv(self.host, words, control)
        try:
            self.proc = spawn(argv, cwd=self.local_dir)
        except OSError as exc:
            raise WorkerError(name, "start", "start", f"cannot run {argv[0]}: {exc}") from None
        if self._killed.is_set():
            self.kill()
            raise WorkerError(name, "start", "crash", "killed while starting (cycle aborted)")
        self._reader = threading.Thread(target=self._drain_stderr, name=f"stderr-{name}", daemon=True)
        self._reader.start()
        sent = threading.Event()
        if not frames:
            sent.set()

        def send() -> None:
            assert self.proc is not None and self.proc.stdin is not None
            with contextlib.suppress(OSError, ValueError):
                for data in frames:
                    self.proc.stdin.write(len(data).to_bytes(8, "big") + data)
                self.proc.stdin.flush()
                sent.set()

        sender = threading.Thread(target=send, name=f"payload-{name}", daemon=True)
        sender.start()
        sender.join(self._start_left())
        if not sent.is_set():
            if sender.is_alive():
                self.kill()
                taken = f"the worker code was not taken within {self.start_timeout:g} s"
                raise self._failure("start", "timeout", taken)
            self._wait_quietly()
            raise self._failure("start", "start", f"the worker exited ({describe_status(self.proc.poll())})")
        try:
            hello = self._hello()
        except WorkerError as exc:
            if address is not None and identity is not None and self.proc.poll() == 75:
                # No zygote answered on the host (it died, or its runtime changed there): this
                # worker, and the stack's next ones, start cold.
                assert self.warm is not None
                self.warm.gone(name, identity, "its warm worker on the host is gone")
                self.forked = False
                close_pipes(self.proc, self._reader)
                self._stderr.clear()
                warm, self.warm = self.warm, None
                try:
                    return self._start_remote()
                finally:
                    self.warm = warm
            if exc.kind in ("crash", "timeout") and exc.message.startswith("worker"):
                exc.kind = "start"
            raise
        self.forked = address is not None
        return hello

    def _drain_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for raw in iter(self.proc.stderr.readline, b""):
            self._stderr.append(raw.decode("utf-8", "replace").rstrip("\n"))

    def stderr_tail(self) -> str:
        return "\n".join(self._stderr)

    def death(self, then: str = "") -> str:
        """How a worker that is no longer running ended, for a person: pid, status, the request
        it was serving and its stderr tail."""
        assert self.proc is not None
        if self._reader is not None:
            self._reader.join(timeout=2)
        if self.proc.stderr is not None and (self._reader is None or not self._reader.is_alive()):
            # Closed here, not left to the garbage collector: a daemon that keeps its last
            # cycle's objects would hold one pipe per worker per cycle (the soak's fd slope).
            with contextlib.suppress(OSError):
                self.proc.stderr.close()
        text = (
            f"worker process {self.proc.pid} of stack {self.stack.name} ended "
            f"({describe_status(self.proc.poll())}) during or after its '{self.last_op or 'start'}' request"
            + (f"; {then}" if then else "")
        )
        # What it wrote outside requests, then during the last one (fd 2 goes to a file then).
        tail = "\n".join(filter(None, [self.stderr_tail(), self._request_log()])).strip()[-TAIL_CHARS:]
        lines = tail.splitlines()[-25:] or ["(nothing)"]
        return text + "\n  worker stderr (last lines):\n" + "\n".join("    " + line for line in lines)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """Kill the worker's whole process group, wherever it is stuck (or about to start).

        The pipes stay open until close(): another thread may be waiting on the answer, and
        the process's death is what wakes it (end of file), not a closed descriptor."""
        self._killed.set()
        if self.proc is not None:
            kill_group(self.proc)

    def close(self, grace: float = 5.0) -> None:
        """Ask the worker to exit (end of stdin), then kill it if it does not; and kill what it
        started in a session of its own, out of its process group (found by its working
        directory, which is the worker's), so that nothing it ran outlives it."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
                wait_exit(self.proc, grace)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
        if self.proc is not None:
            close_pipes(self.proc, self._reader)
        if not self.is_remote:
            # what it started in a session of its own: still in its directory, or marked
            left = tempdirs.processes_in(self.local_dir)
            left += tempdirs.processes_marked(WORKER_MARK, str(self.local_dir))
            for pid in dict.fromkeys(left):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.local_dir, ignore_errors=True)

    def __enter__(self) -> StackWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests --------------------------------------------------------------------------
    def _request_log(self) -> str:
        """What the worker wrote during the current request (it redirects fd 2 to this file).
        A remote worker's file is on its host: only its stderr stream is seen from here."""
        if self.is_remote:
            return ""
        try:
            data = (self.workdir / "request.log").read_bytes()
        except OSError:
            return ""
        return data[-TAIL_CHARS * 4 :].decode("utf-8", "replace")

    def _failure(self, op: str, kind: str, message: str) -> WorkerError:
        if self._reader is not None and self.proc is not None and self.proc.poll() is not None:
            self._reader.join(timeout=2)
        log = "\n".join(filter(None, [self.stderr_tail(), self._request_log()]))
        if self.is_remote and self.proc is not None and kind in ("crash", "start"):
            # ssh's exit status 255 (or the shell's 127) says the connection, not the worker, failed.
            said = explain(
                self.host, self.proc.poll(), self.stderr_tail(), self.stack.python, connected=bool(self.hello)
            )
            if said:
                return WorkerError(self.stack.name, op, kind, f"{said}\n  ({message})", log=log)
        if self.is_remote and kind == "timeout":
            message += f" (on host {self.stack.host}; its worker there ends when the connection closes)"
        lost = kind == "crash" and getattr(self.proc, "zygote_gone", False)
        error = WorkerError(self.stack.name, op, kind, message + stderr_note(self.proc), log=log)
        error.lost = bool(lost)
        return error

    def request(self, op: str, timeout: float | None = None, **payload: Any) -> Reply:
        try:
            return self._request(op, timeout, **payload)
        except WorkerError as exc:
            exc.host = self.stack.host if self.is_remote else ""
            raise

    def _request(self, op: str, timeout: float | None = None, **payload: Any) -> Reply:
        if self.proc is None:
            raise WorkerError(self.stack.name, op, "start", "worker not started")
        if self.proc.poll() is not None:
            raise self._failure(op, "crash", f"worker is not running (exit status {self.proc.returncode})")
        timeout = self.request_timeout if timeout is None else timeout
        self.last_op = op
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if op == "load" and self.is_remote and "mindir" not in payload:
            # The MindIR is a file on this machine; the worker writes it into its directory.
            try:
                payload["mindir"] = files.read_bytes(payload["path"], self.file_limits)
            except files.FileProblem as exc:
                raise WorkerError(self.stack.name, op, "error", str(exc)) from None
        try:
            sent = self._send(protocol.encode(dict(payload, op=op)), time.monotonic() + timeout)
        except (BrokenPipeError, OSError):
            self.proc.wait()
            raise self._failure(
                op, "crash", f"worker exited (status {self.proc.returncode}) before the request was sent"
            ) from None
        if not sent:
            if self._killed.is_set():
                raise self._failure(op, "crash", "worker killed while the request was sent (cycle aborted)")
            self.kill()
            raise self._failure(
                op, "timeout", f"the request was not taken within {timeout:g} s; worker process group killed"
            )
        # An answer is at most what a tensor or a file could need: a file the auditor would read
        # ([files] max_size_mb), and a margin for a batch's outputs.
        most = self.file_limits.max_bytes + FRAME_MARGIN
        frame = _read_with_deadline(self.proc.stdout, timeout, self._killed, most)
        if frame is _STOPPED:
            raise self._failure(op, "crash", "worker killed while the request ran (cycle aborted)")
        if frame is _TIMEOUT:
            self.kill()
            raise self._failure(op, "timeout", f"no answer within {timeout:g} s; worker process group killed")
        if isinstance(frame, Exception):
            status = self.proc.wait(timeout=5) if self._wait_quietly() else self.proc.poll()
            kind = "crash" if isinstance(frame, EOFError) else "protocol"
            if kind == "crash":
                if self.is_remote and status is not None and 128 < status < 160:
                    status = -(status - 128)  # the remote supervisor's exit: 128 + the signal
                message = f"worker died during the request ({describe_status(status)})"
            else:
                message = f"unreadable answer: {frame}"
                self.kill()
            raise self._failure(op, kind, message)
        problem = reply_problem(op, frame)
        if problem is not None:
            # Nothing else it says can be trusted: this stack's worker goes, the others go on.
            self.kill()
            raise self._failure(op, "protocol", f"the worker's answer is not a reply: {problem}")
        assert isinstance(frame, dict)
        if not frame["ok"]:
            err = frame["error"]
            raise WorkerError(
                self.stack.name,
                op,
                "error",
                str(err.get("message") or "unknown error"),
                log=str(frame.get("log") or ""),
                error_type=str(err.get("type") or ""),
                traceback=str(err.get("traceback") or ""),
            )
        return Reply(frame.get("result") or {}, frame.get("log") or "", float(frame.get("seconds") or 0.0))

    def _send(self, data: bytes, deadline: float) -> bool:
        """Write a request, or give up at ``deadline`` (False): a worker that does not read
        (stuck, or its host's connection stalled with a large request in flight) would block a
        plain write for ever, before the answer's deadline ever starts."""
        assert self.proc is not None and self.proc.stdin is not None
        stdin = self.proc.stdin
        stdin.flush()
        fd = stdin.fileno()
        os.set_blocking(fd, False)
        view = memoryview(data)
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_WRITE)
            while view:
                left = deadline - time.monotonic()
                if left <= 0 or self._killed.is_set():
                    return False
                if not selector.select(min(left, 0.5)):
                    continue
                try:
                    view = view[os.write(fd, view) :]
                except BlockingIOError:
                    continue
        return True

    def _wait_quietly(self) -> bool:
        assert self.proc is not None
        try:
            self.proc.wait(timeout=5)
            return True
        except subprocess.TimeoutExpired:
            self.kill()
            return False


_TIMEOUT = object()
_STOPPED = object()
FRAME_MARGIN = 256 * 1024 * 1024
"""Bytes an answer may hold beyond the largest file the auditor reads (a batch's outputs)."""

ANSWERS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "run": {"outputs": list},
    "export": {"artifact": bytes},
    "time": {"ns": list},
    "signature": {"inputs": (list, dict, str, type(None))},
    "import": {"results": list},
}
"""What the result of each request must hold (what its callers read), beyond being a mapping."""


def _kind(value: object) -> str:
    """``an int``, ``a str``: what a value is, in words."""
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def reply_problem(op: str, frame: object) -> str | None:
    """What is wrong with a worker's frame as the answer to ``op``, or None: a mapping with
    ``ok`` true and a mapping ``result`` (holding what ``op``'s callers read), or ``ok`` false
    and an ``error`` mapping; ``log`` text and ``seconds`` a number when present."""
    if not isinstance(frame, dict):
        return f"{_kind(frame)}, not a reply"
    ok = frame.get("ok")
    if not isinstance(ok, bool):
        return f"its ok is {_kind(ok)}, not true or false"
    log, seconds = frame.get("log", ""), frame.get("seconds", 0.0)
    if not isinstance(log, str):
        return f"its log is {_kind(log)}, not text"
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        return f"its seconds is {_kind(seconds)}, not a number"
    if not ok:
        error = frame.get("error")
        if not isinstance(error, dict):
            return f"its error is {_kind(error)}, not a description"
        return None
    result = frame.get("result")
    if result is None:
        result = {}
    if not isinstance(result, dict):
        return f"its result is {_kind(result)}, not a mapping"
    for key, kinds in ANSWERS.get(op, {}).items():
        if key not in result:
            return f"{op}: no {key}"
        if not isinstance(result[key], kinds):
            wanted = kinds.__name__ if isinstance(kinds, type) else " or ".join(k.__name__ for k in kinds)
            return f"{op}: {key} is {_kind(result[key])}, not a {wanted}"
    return None


class _Stopped(Exception):
    """The worker was killed from another thread while this one waited for its answer."""


class _DeadlineReader:
    """A file-like view of a pipe whose reads give up at a deadline, or soon after ``stop``
    is set. The pipe may be closed by kill() in another thread; epoll forgets a closed fd
    without waking its waiters, so waits are sliced and the stop flag checked between them."""

    SLICE = 0.25

    def __init__(self, stream: Any, deadline: float, stop: threading.Event):
        self.fd = stream.fileno()
        self.deadline = deadline
        self.stop = stop
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.fd, selectors.EVENT_READ)

    def read(self, n: int) -> bytes:
        while True:
            if self.stop.is_set():
                raise _Stopped
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            if self.selector.select(min(left, self.SLICE)):
                try:
                    return os.read(self.fd, n)
                except OSError:  # closed underneath us by kill()
                    raise _Stopped from None


def _read_with_deadline(stream: Any, timeout: float, stop: threading.Event, most: int) -> object:
    reader = _DeadlineReader(stream, time.monotonic() + timeout, stop)
    try:
        frame = protocol.read_frame(reader, most)
    except _Stopped:
        return _STOPPED
    except TimeoutError:
        return _TIMEOUT
    except (EOFError, protocol.ProtocolError, ValueError) as exc:
        return exc
    finally:
        reader.selector.close()
    if frame is None:
        return EOFError("end of stream")
    return frame
