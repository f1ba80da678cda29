"""Gymnasium environments stepped in a child process, so the auditor never imports gymnasium.

A rollout needs an environment, but the daemon that runs it every cycle should not carry
gymnasium (about 90 modules and 2-4 MB of resident memory that stay) between cycles. So the
environments live in a short-lived child, ``sys.executable -m auditor.policy.env_process``, that
imports only gymnasium, numpy and this module, and answers framed requests over its
stdin/stdout (``auditor.worker.protocol``, the stack workers' framing: arrays travel bit
for bit):

    hello -> gymnasium version        check(id, path) -> why it cannot be made, or None
    make(id, path) -> handle, spaces  reset(env, seed) -> obs
    step([(env, action), ...]) -> obs, reward, terminated, truncated of each
    close(env)

The parent (``EnvProcess``) starts it on first use, gives every request a deadline, kills the
child when it misses one, and always reaps it on close (a context manager), also when a policy
raises mid-episode; a waiting child whose parent dies reads end of file and exits. Whatever fails
(gymnasium missing, an id not registered, the environment raising, the child dying or
hanging) is an ``EnvError`` that names it, with the child's stderr tail.

An id is a registered gymnasium id ("Pendulum-v1"), "package.module:Name-v0" (the module
registers it when imported: gymnasium's own form) or "package.module:function", a function of
the user's that returns their own ``gymnasium.Env``; ``path``, a folder put first on the child's
import path, holds a package the auditor's Python does not have installed.
"""

from __future__ import annotations

import collections
import contextlib
import difflib
import importlib
import os
import selectors
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from auditor.common.child_process import (
    close_pipes,
    describe_status,
    kill_group,
    own_package_env,
    spawn,
    wait_exit,
)
from auditor.worker import protocol

MODULE = "auditor.policy.env_process"
START_TIMEOUT = 60.0
"""Seconds for the child to start and import gymnasium."""
REQUEST_TIMEOUT = 60.0
"""Seconds for one make/reset/step/close before the child is killed."""
STDERR_LINES = 200


class EnvError(Exception):
    """A request to the environment process did not produce an answer.

    kind: "start" (the child or gymnasium is missing), "unknown" (the id is not registered),
    "error" (the environment raised), "timeout", "crash" (the child died), "protocol".
    """

    def __init__(self, op: str, kind: str, message: str, log: str = ""):
        self.op, self.kind, self.message, self.log = op, kind, message, log
        super().__init__(message)

    def describe(self) -> str:
        """The message, and the last lines the environment process wrote."""
        tail = self.log.strip().splitlines()[-25:]
        if not tail:
            return self.message
        return (
            self.message
            + "\n  environment process log (last lines):\n"
            + "\n".join("    " + line for line in tail)
        )


def not_registered(env_id: str, registered: Iterable[str]) -> str:
    """The message for an unknown id, with the close matches as a hint."""
    close = difflib.get_close_matches(env_id, sorted(registered), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return f"no gymnasium environment {env_id!r} is registered{hint}"


@dataclass(frozen=True)
class Spaces:
    """What the auditor needs of an environment's spaces; ``act_low``/``act_high``/``act_dtype``
    are None when the action space is not a Box."""

    obs_shape: tuple[int, ...] | None
    act_shape: tuple[int, ...] | None
    act_low: np.ndarray | None
    act_high: np.ndarray | None
    act_dtype: str | None
    act_n: int | None = None
    """A Discrete action space's number of actions (None for any other space)."""


Step = tuple[np.ndarray, float, bool, bool]
"""Observation, reward, terminated, truncated (the info dict stays in the child)."""


class RemoteEnv:
    """One environment in the child: the part of gymnasium's ``Env`` a rollout uses."""

    def __init__(self, process: EnvProcess, handle: int, env_id: str, spaces: Spaces):
        self.process, self.handle, self.env_id, self.spaces = process, handle, env_id, spaces
        self.closed = False

    def reset(self, seed: int) -> np.ndarray:
        return np.asarray(self.process.request("reset", env=self.handle, seed=seed)["obs"])

    def step(self, action: np.ndarray) -> Step:
        return self.process.step([(self, action)])[0]

    def close(self) -> None:
        """Close it in the child; nothing to do once the child is gone."""
        if not self.closed and self.process.alive:
            self.closed = True
            self.process.request("close", env=self.handle)
        self.closed = True

    def __enter__(self) -> RemoteEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
        else:  # the first error is the one to report
            with contextlib.suppress(EnvError):
                self.close()


class EnvProcess:
    """The parent's side of one environment child; started on first use, reaped by close()."""

    def __init__(
        self,
        request_timeout: float = REQUEST_TIMEOUT,
        start_timeout: float = START_TIMEOUT,
        python: str = sys.executable,
    ):
        self.request_timeout = request_timeout
        self.start_timeout = start_timeout
        self.python = python
        self.proc: subprocess.Popen[bytes] | None = None
        self.gymnasium = ""
        """The child's gymnasium version, once started."""
        self._stderr: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self._reader: threading.Thread | None = None
        self._out: _PipeReader | None = None
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        if self._closed:
            raise EnvError("start", "start", "the environment process was already closed")
        env = own_package_env()
        try:
            # Its own process group: Ctrl-C reaches the auditor, which closes the child.
            self.proc = spawn([self.python, "-m", MODULE], env)
        except OSError as exc:
            raise EnvError("start", "start", f"cannot start the environment process ({exc})") from None
        assert self.proc.stdout is not None
        self._out = _PipeReader(self.proc.stdout.fileno())
        self._reader = threading.Thread(target=self._drain_stderr, name="stderr-env", daemon=True)
        self._reader.start()
        self.gymnasium = self.request("hello", timeout=self.start_timeout)["gymnasium"]

    def close(self, grace: float = 5.0) -> None:
        """End of stdin asks the child to exit; it is killed if it does not, and always reaped."""
        self._closed = True
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            try:
                wait_exit(self.proc, grace)
            except subprocess.TimeoutExpired:
                self.kill()
        self.kill()
        if self._out is not None:
            self._out.close()
        close_pipes(self.proc, self._reader)

    def kill(self) -> None:
        """Kill the child's process group and reap it; no child is started after this (an
        aborted cycle kills its environment process as it kills its workers, from any thread)."""
        self._closed = True
        if self.proc is not None:
            kill_group(self.proc)

    def __enter__(self) -> EnvProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _drain_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        with contextlib.suppress(OSError, ValueError):
            for raw in iter(self.proc.stderr.readline, b""):
                self._stderr.append(raw.decode("utf-8", "replace").rstrip("\n"))

    def _log(self) -> str:
        if self._reader is not None and not self.alive:
            self._reader.join(timeout=2)  # everything the dead child wrote
        return "\n".join(self._stderr)

    # -- requests --------------------------------------------------------------------------
    def request(self, op: str, timeout: float | None = None, **payload: Any) -> dict[str, Any]:
        if self.proc is None:
            self.start()
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        if self.proc.poll() is not None:
            raise EnvError(
                op,
                "crash",
                f"the environment process is not running ({describe_status(self.proc.returncode)})",
                self._log(),
            )
        timeout = self.request_timeout if timeout is None else timeout
        try:
            self.proc.stdin.write(protocol.encode(dict(payload, op=op)))
            self.proc.stdin.flush()
        except OSError:
            self.proc.wait()
            raise EnvError(
                op,
                "crash",
                f"the environment process ended ({describe_status(self.proc.returncode)}) before '{op}'",
                self._log(),
            ) from None
        try:
            assert self._out is not None
            self._out.deadline = time.monotonic() + timeout
            frame = protocol.read_frame(self._out)
        except TimeoutError:
            self.kill()
            raise EnvError(
                op,
                "timeout",
                f"the environment gave no answer to '{op}' within {timeout:g} s; its process was killed",
                self._log(),
            ) from None
        except (EOFError, protocol.ProtocolError, ValueError) as exc:
            if isinstance(exc, protocol.ProtocolError):
                self.kill()
                raise EnvError(
                    op, "protocol", f"unreadable answer from the environment process: {exc}", self._log()
                ) from None
            frame = None
        if frame is None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()
            raise EnvError(
                op,
                "crash",
                f"the environment process died during '{op}' ({describe_status(self.proc.returncode)})",
                self._log(),
            )
        if not frame.get("ok"):
            err = frame.get("error") or {}
            log = "\n".join(filter(None, [self._log(), err.get("traceback", "")]))
            raise EnvError(op, err.get("kind", "error"), err.get("message", "unknown error"), log)
        return frame.get("result") or {}

    # -- what a rollout asks ---------------------------------------------------------------
    def problem(self, env_id: str, path: str = "") -> str | None:
        """Why ``env_id`` cannot be made (not registered, its module not importable), or None."""
        return self.request("check", id=env_id, path=path)["problem"]

    def step(self, moves: Sequence[tuple[RemoteEnv, np.ndarray]]) -> list[Step]:
        """Step several environments of this process, each with its action, in one request:
        a rollout steps its two sides together, one round trip per step instead of two."""
        r = self.request(
            "step", moves=[{"env": env.handle, "action": np.asarray(action)} for env, action in moves]
        )
        return [
            (np.asarray(o["obs"]), float(o["reward"]), bool(o["terminated"]), bool(o["truncated"]))
            for o in r["steps"]
        ]

    def make(self, env_id: str, path: str = "") -> RemoteEnv:
        r = self.request("make", id=env_id, path=path)
        low, high = r.get("act_low"), r.get("act_high")
        spaces = Spaces(
            obs_shape=None if r.get("obs_shape") is None else tuple(r["obs_shape"]),
            act_shape=None if r.get("act_shape") is None else tuple(r["act_shape"]),
            act_low=None if low is None else np.asarray(low),
            act_high=None if high is None else np.asarray(high),
            act_dtype=r.get("act_dtype"),
            act_n=None if r.get("act_n") is None else int(r["act_n"]),
        )
        return RemoteEnv(self, int(r["env"]), env_id, spaces)


def using(envs: EnvProcess | None) -> contextlib.AbstractContextManager[EnvProcess]:
    """``envs`` as it is (its owner closes it), or a new process closed on exit when None."""
    return EnvProcess() if envs is None else contextlib.nullcontext(envs)


class _PipeReader:
    """Reads of the child's stdout that give up at a deadline (TimeoutError). A read takes
    whatever the pipe holds and keeps what was not asked for: a frame's parts (head, header,
    arrays) then cost one wait and one system call, not one each."""

    def __init__(self, fd: int):
        self.fd = fd
        self.deadline = 0.0
        self.buffer = bytearray()
        self.selector = selectors.DefaultSelector()
        self.selector.register(fd, selectors.EVENT_READ)

    def read(self, n: int) -> bytes:
        if not self.buffer:
            left = self.deadline - time.monotonic()
            if left <= 0 or not self.selector.select(left):
                raise TimeoutError
            self.buffer += os.read(self.fd, max(n, 1 << 16))
            if not self.buffer:
                return b""  # end of file: the child is gone
        out = bytes(self.buffer[:n])
        del self.buffer[:n]
        return out

    def close(self) -> None:
        self.selector.close()


# -- the child ---------------------------------------------------------------------------------
class _Fault(Exception):
    def __init__(self, kind: str, message: str):
        self.kind, self.message = kind, message
        super().__init__(message)


def _shape(space: Any) -> list[int] | None:
    shape = getattr(space, "shape", None)
    return None if shape is None else [int(n) for n in shape]


class _Child:
    def __init__(self) -> None:
        try:
            import gymnasium
        except ImportError as exc:
            self.gym: Any = None
            self.missing = (
                f"gymnasium is not installed for {sys.executable} ({exc}); install it: pip install gymnasium"
            )
        else:
            self.gym = gymnasium
        self.envs: dict[int, Any] = {}
        self.ids: dict[int, str] = {}
        self.current: Any = None
        """The environment a multi-environment request is stepping."""
        self.next = 1

    def _env(self, handle: Any) -> Any:
        try:
            return self.envs[int(handle)]
        except (KeyError, TypeError, ValueError):
            raise _Fault("protocol", f"no environment {handle!r} in the environment process") from None

    def name(self, msg: dict[str, Any]) -> str:
        """The id of the environment a request is about, for messages."""
        if msg.get("op") == "make":
            return str(msg.get("id"))
        try:
            return self.ids[int(msg.get("env", self.current))]
        except (KeyError, TypeError, ValueError):
            return "?"

    def answer(self, msg: dict[str, Any]) -> dict[str, Any]:
        op = msg.get("op")
        if self.gym is None:
            raise _Fault("start", self.missing)
        if op == "hello":
            return {"gymnasium": self.gym.__version__}
        if op == "check":
            try:
                self.lookup(str(msg.get("id")), str(msg.get("path") or ""))
            except _Fault as exc:
                if exc.kind != "unknown":
                    raise
                return {"problem": exc.message}
            return {"problem": None}
        if op == "make":
            return self.make(str(msg.get("id")), str(msg.get("path") or ""))
        if op == "reset":
            obs, _info = self._env(msg.get("env")).reset(seed=int(msg["seed"]))
            return {"obs": np.asarray(obs)}
        if op == "step":
            steps = []
            for move in msg.get("moves", []):
                self.current = move.get("env")
                obs, reward, terminated, truncated, _info = self._env(self.current).step(move["action"])
                steps.append(
                    {
                        "obs": np.asarray(obs),
                        "reward": float(reward),
                        "terminated": bool(terminated),
                        "truncated": bool(truncated),
                    }
                )
            return {"steps": steps}
        if op == "close":
            env = self._env(msg.get("env"))
            del self.envs[int(msg["env"])]
            env.close()  # the id stays known: its message names it if close raises
            return {}
        raise _Fault("protocol", f"unknown request {op!r}")

    def lookup(self, env_id: str, path: str = "") -> Callable[[], Any]:
        """What makes ``env_id``: the user's function of a "package.module:function" id, else
        gymnasium's ``make`` of a registered id (after importing the module named in a
        "package.module:Env-v0" id: importing it registers the id). An "unknown" fault when
        neither is found; ``path`` goes first on the import path."""
        from gymnasium.envs.registration import registry

        if path and path not in sys.path:
            sys.path.insert(0, path)
        module, _, name = env_id.rpartition(":")
        if module:
            try:
                imported = importlib.import_module(module)
            except ImportError as exc:
                where = f" (path {path})" if path else ""
                raise _Fault(
                    "unknown", f"cannot import {module!r}{where} for environment {env_id!r}: {exc}"
                ) from None
            factory = getattr(imported, name, None) if name.isidentifier() else None
            if factory is not None:
                if not callable(factory):
                    raise _Fault("unknown", f"{env_id}: {name} is not a function that returns an environment")
                return factory
        if name not in registry:
            raise _Fault("unknown", not_registered(name, registry))
        return lambda: self.gym.make(env_id)

    def make(self, env_id: str, path: str = "") -> dict[str, Any]:
        env = self.lookup(env_id, path)()
        for attr in ("reset", "step", "action_space", "observation_space"):
            if not hasattr(env, attr):
                close = getattr(env, "close", None)
                if callable(close):
                    with contextlib.suppress(Exception):
                        close()
                raise _Fault(
                    "error",
                    f"{env_id} returned {type(env).__name__}, not a gymnasium environment (no {attr})",
                )
        handle, self.next = self.next, self.next + 1
        self.envs[handle], self.ids[handle] = env, env_id
        act = env.action_space
        box = all(hasattr(act, k) for k in ("low", "high", "dtype"))
        return {
            "env": handle,
            "obs_shape": _shape(env.observation_space),
            "act_shape": _shape(act),
            "act_low": np.asarray(act.low) if box else None,
            "act_high": np.asarray(act.high) if box else None,
            "act_dtype": np.dtype(act.dtype).str if box else None,
            "act_n": int(act.n)
            if not box and isinstance(getattr(act, "n", None), (int, np.integer))
            else None,
        }


def serve() -> None:
    """The child's loop: one answer per request, until end of stdin."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # what an environment prints goes to stderr, not into the answers
    sys.stdout = sys.stderr
    inp = sys.stdin.buffer
    child = _Child()
    try:
        while True:
            msg = protocol.read_frame(inp)
            if msg is None:
                break
            try:
                reply: dict[str, Any] = {"ok": True, "result": child.answer(msg)}
            except _Fault as exc:
                reply = {"ok": False, "error": {"kind": exc.kind, "message": exc.message}}
            except Exception as exc:  # the environment's own error, for the person reading
                reply = {
                    "ok": False,
                    "error": {
                        "kind": "error",
                        "message": f"environment {child.name(msg)}: '{msg.get('op')}' raised "
                        f"{type(exc).__name__}: {exc}",
                        "traceback": traceback.format_exc(),
                    },
                }
            out.write(protocol.encode(reply))
            out.flush()
    finally:
        for env in child.envs.values():
            with contextlib.suppress(Exception):
                env.close()


if __name__ == "__main__":
    serve()


_ENV_KNOWN: set[tuple[str, str]] = set()


def env_problem(env_id: str, path: str = "") -> str | None:
    """Why gymnasium cannot make ``env_id`` (not registered, with close matches; its module not
    importable), asked of a short-lived child (once per process for a good id): the daemon never imports
    gymnasium (auditor.policy.env_process). None when it can, or when the child cannot tell (gymnasium
    missing, the child failing): the cycle's rollout then reports it."""
    if (env_id, path) in _ENV_KNOWN:
        return None
    try:
        with EnvProcess() as envs:
            problem = envs.problem(env_id, path)
    except EnvError:
        return None
    if problem is None:  # a problem is asked again: the user may be fixing it (reload)
        _ENV_KNOWN.add((env_id, path))
    return problem
