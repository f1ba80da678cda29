"""What the parts of one cycle share: the config and how its stacks are reached, each stack's
session, the history the cycle reads, the exported bytes kept for the store, and the abort
flag every part checks. The cycle (auditor.cycle.cycle) owns one; its probe suite, its model
suite and its compatibility checks are handed the same one, so a part reads shared state by
name and type instead of through a mixin's ``self``.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from auditor.config.tables import Config, ConvertTable, StackConfig
from auditor.history.store import Store
from auditor.policy import convert
from auditor.results import Artifact, CycleAborted, Latency
from auditor.stacks.session import Reach, StackSession
from auditor.stacks.worker import WorkerError
from auditor.worker import files


class Killable(Protocol):
    """A child an abort must take down: a stack worker, the rollout's environment process."""

    def kill(self) -> None: ...


@dataclass(frozen=True)
class Loaded:
    """A model loaded in a stack's worker as the stack serves it."""

    conversion: Artifact | None
    """What the stack's converter made of the file and was loaded (None: the file itself)."""
    log: str
    """The runtime's log of the load (its warnings belong to a first call's failure)."""


@dataclass
class CycleState:
    config: Config
    reach: Reach
    history: Store | None = None
    """The store that holds earlier runs (version drift, learned limits, golden baselines,
    latency regressions, publications); None: this cycle reads no history."""
    tamper: Callable[[bytes], bytes] | None = None
    """Rewrites every exported model before the infer side loads it (tests: a perturbed
    artifact must be caught and localized)."""
    save_outputs: Path | None = None
    """Where each side's outputs are written (``audit --save-outputs``,
    auditor.cycle.saved_outputs); None: nowhere."""
    sessions: dict[str, StackSession] = field(default_factory=dict)
    artifacts: dict[str, bytes] = field(default_factory=dict)
    """Content-addressed bytes the store keeps with the run (exports, goldens' outputs)."""
    tmp: Path | None = None
    """The cycle's own temporary directory (staged exports and conversions)."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    _aborted: threading.Event = field(default_factory=threading.Event)
    _children: weakref.WeakSet[Killable] = field(default_factory=weakref.WeakSet)
    """What an abort kills: the workers and environment processes still in use. Weak, so that a
    closed one (its session or its block let go of it) goes with its buffers: a fleet's cycle
    starts a worker per host, and each kept its stderr tail to the end of the cycle."""

    # -- abort: a signal, Ctrl-C or the daemon stops the cycle; every part checks it ---------
    def register(self, child: Killable) -> None:
        with self.lock:
            if self._aborted.is_set():
                raise CycleAborted("cycle aborted")
            self._children.add(child)

    def abort(self) -> None:
        """Stop now: kill every worker; the running jobs fail fast and the cycle raises CycleAborted."""
        self._aborted.set()
        with self.lock:
            children = list(self._children)
        for child in children:
            child.kill()

    def pause(self, seconds: float) -> None:
        """Wait, but no longer than until an abort (which then raises CycleAborted)."""
        self._aborted.wait(seconds)
        self.check()

    def check(self) -> None:
        if self._aborted.is_set():
            raise CycleAborted("cycle aborted")

    # -- helpers every part uses ---------------------------------------------------------------
    def parallel(self, tasks: Mapping[str, Callable[[], Any]]) -> dict[str, Any]:
        """Run each stack's task; ``[worker] parallel`` (or a host's own) limits each host."""
        if not tasks:
            return {}
        size, limited = self.reach.parallel(tasks)
        with ThreadPoolExecutor(max_workers=size, thread_name_prefix="stack") as pool:
            futures = {name: pool.submit(fn) for name, fn in limited.items()}
            try:
                return {name: f.result() for name, f in futures.items()}
            except BaseException:
                # Ctrl-C, SIGTERM or a bug: kill the workers first, or leaving this block would
                # wait for every running request to reach its deadline.
                self.abort()
                raise

    def time(self, worker: Any, model: str, inputs: list[np.ndarray], batch: int) -> Latency:
        """The runtime call timed inside the worker, after a warm-up (``[latency]``)."""
        lat = self.config.latency
        ns = worker.request(
            "time", model=model, inputs=inputs, warmup=lat.warmup, iterations=lat.iterations
        ).result["ns"]
        return Latency.from_ns(ns, batch)

    def load(
        self,
        worker: Any,
        stack: StackConfig,
        model: str,
        path: Path,
        table: ConvertTable | None = None,
    ) -> Loaded:
        """Load ``path`` in the stack's worker as the stack serves it: converted first with
        ``table`` (default: the stack's ``[stacks.X.convert]``), the conversion recorded and
        returned (auditor.policy.convert) with the load's log. Raises WorkerError, a failed
        conversion included."""
        table = table if table is not None else stack.convert
        if table is None:
            return Loaded(None, worker.request("load", model=model, path=str(path)).log)
        assert self.tmp is not None, "the cycle's temporary directory is set before any load"
        try:
            source = files.read_bytes(path, self.config.files.limits)
        except files.FileProblem as exc:
            raise WorkerError(stack.name, "convert", "error", str(exc)) from None
        done = convert.convert(worker, stack, table, source, model, self.tmp, self.artifacts)
        return Loaded(done.artifact, worker.request("load", model=model, path=str(done.path)).log)

    def stage(self, data: bytes, tmp: Path, suffix: str = ".mindir") -> Path:
        """Write an export for the infer side to load (after ``tamper``, when a test set one)."""
        if self.tamper is not None:
            data = self.tamper(data)
        path = Path(tmp) / f"{hashlib.sha256(data).hexdigest()}{suffix}"
        path.write_bytes(data)
        return path
