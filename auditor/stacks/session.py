"""One way to reach a stack. ``Reach`` opens a stack's worker from the config: the stack's
interpreter, on its host through that host's transport (locally, over ssh, or behind a
command prefix), with the config's deadlines, the runtime's worker class and the worker code
the command needs. Every command that talks to a stack goes through it (the cycle, the
daemon's cycles, ``fingerprint``, ``check``, ``golden record``, ``hosts check``, the
benches), so a stack on another host is reached the same way by all of them.

``StackSession`` is a cycle's hold on one stack's worker: restarted after a crash or a
timeout, so that one bad request costs one job and not the whole stack; every death of a
started worker is recorded (a run never reads as clean after one). A failure to start is
remembered: it would only fail the same way again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from auditor.config.tables import Config, StackConfig
from auditor.runtime import RuntimeSpec
from auditor.stacks.hosts import LOCAL, per_host_limits
from auditor.stacks.launch import local_worker_env, worker_packages
from auditor.stacks.payload import Packages
from auditor.stacks.transport import CONNECTIONS
from auditor.stacks.warm import Identity, WarmPool, ZygoteInfo
from auditor.stacks.worker import StackWorker, WorkerError


@dataclass(frozen=True)
class Reach:
    """How this auditor reaches the config's stacks. ``runtime_classes``: runtime name ->
    ``"module:Class"`` of its worker side (from the runtime plugins); ``modules``: what a
    worker may import beyond the worker package (probe modules, collectors, runtime classes),
    whose packages travel with it to a remote host."""

    config: Config
    runtime_classes: Mapping[str, str] = field(default_factory=dict)
    modules: tuple[str, ...] = ()
    extra_packages: tuple[tuple[str, str], ...] = ()
    """(package, folder) pairs found elsewhere than on the auditor's Python path (a model's
    training network: ``[models.NAME] train.path``)."""
    cold_runtimes: Mapping[str, str] = field(default_factory=dict)
    """Runtime name -> why its workers always start cold (its spec opts out of warm workers)."""
    warm: WarmPool | None = None
    """The zygotes workers are forked from (auditor.stacks.warm): given (the daemon's, shared by
    its cycles), or this Reach's own, made from ``[worker] warm`` and ended by ``close()``."""

    def __post_init__(self) -> None:
        if self.warm is None:
            # Zygotes kept between cycles are the daemon's pool alone (given here); a command's or
            # a cycle's own live as long as it does, whatever the setting.
            mode = self.config.worker.warm
            pool = WarmPool("cycle" if mode == "daemon" else mode)
            # Its own: ended by close(), or when neither this Reach nor a worker holds it.
            object.__setattr__(self, "warm", pool)
            object.__setattr__(self, "_own_warm", pool)
        else:
            object.__setattr__(self, "_own_warm", None)

    def close(self) -> None:
        """End this Reach's own zygotes (its workers are closed already)."""
        own = getattr(self, "_own_warm", None)
        if own is not None:
            own.close()

    def release(self, stacks: Iterable[str]) -> None:
        """The part of a cycle of ``stacks`` is done and their workers are closed: end the
        zygotes that serve them alone and their hosts' ssh master connections (none of their
        hosts' stacks is used again this cycle, auditor.fleet.window)."""
        names = list(stacks)
        if self.warm is not None:
            self.warm.release(names)
        for host in {self.config.stacks[n].host for n in names} - {LOCAL}:
            CONNECTIONS.close(host)

    def __enter__(self) -> Reach:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @cached_property
    def packages(self) -> Packages:
        """The worker's packages with the training networks' own folders, keeping the entry
        modules a remote payload is derived from (a plain list would carry the worker's
        request loop alone: no probe, collector or runtime class would reach another host)."""
        found = worker_packages(self.modules)
        extra = {name for name, _ in self.extra_packages}
        return Packages([p for p in found if p[0] not in extra] + list(self.extra_packages), found.entries)

    def stack(self, name: str) -> StackConfig:
        return self.config.stacks[name]

    def worker(
        self,
        name: str,
        request_timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cold: bool = False,
    ) -> StackWorker:
        """The worker of stack ``name``, not started yet (``start()``, or use it as a context
        manager). ``env``: variables set on top of the stack's own (a verbose log level for
        one diagnostic load). ``cold``: its interpreter started anew, never forked from the
        stack's zygote (a rerun that must not share the first run's address layout, hash seed
        and heap)."""
        stack = self.config.stacks[name]
        warm = None if cold else self.warm
        if env:
            # One diagnostic worker with other variables: a zygote for it would cost as much as
            # the cold start it saves.
            stack = dataclasses.replace(stack, env={**stack.env, **env})
            warm = None
        reason = self.cold_runtimes.get(stack.runtime)
        if warm is not None and reason and warm.mode != "off":
            warm.cold(name, reason)
            warm = None
        return StackWorker(
            stack,
            self.config.worker.start_timeout,
            request_timeout if request_timeout is not None else self.config.worker.request_timeout,
            self.packages,
            self.runtime_classes.get(stack.runtime),
            host=self.config.hosts.get(stack.host),
            file_limits=self.config.files.limits,
            warm=warm,
        )

    def warm_identity(self, name: str) -> Identity | None:
        """The identity of the zygote stack ``name``'s workers fork from, or None where they
        start cold (another host, a runtime that opts out, no runtime class)."""
        stack = self.config.stacks[name]
        runtime_class = self.runtime_classes.get(stack.runtime)
        if stack.host != LOCAL or not runtime_class or stack.runtime in self.cold_runtimes:
            return None
        return Identity.of(stack.python, runtime_class, self.packages, local_worker_env(stack.env))

    def prepare_warm(self, names: Iterable[str]) -> list[ZygoteInfo]:
        """Start the zygotes of stacks ``names`` now, in parallel as ``[worker] parallel``
        allows (the daemon before a cycle, the test suite for its session); what each holds."""
        pool = self.warm
        if pool is None or pool.mode == "off":
            return []
        chosen = {n: i for n in names if (i := self.warm_identity(n)) is not None}
        timeout = self.config.worker.start_timeout
        size, tasks = self.parallel(
            {n: (lambda n=n, i=i: pool.prepare(n, i, timeout)) for n, i in chosen.items()}
        )
        with ThreadPoolExecutor(max_workers=max(1, size), thread_name_prefix="warm") as threads:
            found = [f.result() for f in [threads.submit(t) for t in tasks.values()]]
        return list({info.pid: info for info in found if info is not None}.values())

    def session(self, name: str, register: Callable[[StackWorker], None] | None = None) -> StackSession:
        return StackSession(self, name, register or (lambda worker: None))

    def parallel(
        self, tasks: Mapping[str, Callable[[], Any]], release: bool = False
    ) -> tuple[int, dict[str, Callable[[], Any]]]:
        """``[worker] parallel`` (or a host's own ``parallel``) applied to per-stack tasks: the
        pool size, and the tasks wrapped to respect each host's limit and ``[worker]
        max_hosts``. ``release``: a command whose tasks are all its work with each host
        (hosts check, fingerprint, config check --hosts) ends a host's warm workers and
        connection as its last task ends, so ``max_hosts`` bounds what is open, not only what
        runs (a cycle's window does this itself, auditor.fleet.window)."""
        cfg = self.config
        done = (lambda host, names: self.release(names)) if release else None
        return per_host_limits(
            dict(tasks), cfg.stacks, cfg.hosts, cfg.worker.parallel, cfg.worker.max_hosts, done
        )


def reach(
    config: Config,
    runtimes: Mapping[str, RuntimeSpec],
    probe_modules: Iterable[str] = (),
    collectors: Iterable[str] = (),
    warm: WarmPool | None = None,
) -> Reach:
    """A Reach whose workers carry the probes' and collectors' modules, every runtime's worker
    class and the packages of the models' training networks (what a cycle needs; fewer modules
    make a smaller remote payload). ``warm``: zygotes to share (the daemon's); else its own."""
    runtime_classes = {n: r.worker_class for n, r in runtimes.items()}
    cold = {n: f"runtime {n} opts out of warm workers: {r.cold}" for n, r in runtimes.items() if r.cold}
    modules = [*probe_modules, *(c.partition(":")[0] for c in runtime_classes.values()), *collectors]
    extra = []
    for model in config.models.values():
        if model.train is not None:
            modules.append(model.train.module)
            package = model.train.package()
            if package is not None:
                extra.append(package)
    return Reach(
        config,
        runtime_classes,
        tuple(dict.fromkeys(modules)),
        tuple(dict.fromkeys(extra)),
        cold,
        warm,
    )


class StackSession:
    """A stack's worker for the cycle, started on first use and restarted after a death."""

    def __init__(self, reach: Reach, name: str, register: Callable[[StackWorker], None], cold: bool = False):
        self.reach, self.name, self.register = reach, name, register
        self.cold = cold
        """Its workers start cold (auditor.stacks.session.Reach.worker)."""
        self.stack = reach.stack(name)
        self.worker: StackWorker | None = None
        self.start_error: WorkerError | None = None
        self.hello: dict[str, Any] | None = None
        self.problems: list[str] = []
        """Each death of a started worker (crash, kill, timeout), restarted or not: the run
        records them, so that no worker is replaced silently."""

    def fresh(self, cold: bool = False) -> StackSession:
        """Another session of the same stack: a worker process of its own (reruns); ``cold``:
        started anew, not forked from the stack's zygote."""
        return StackSession(self.reach, self.name, self.register, cold)

    def _record_death(self, restarted: bool) -> None:
        assert self.worker is not None
        self.problems.append(self.worker.death("restarted" if restarted else ""))

    def ensure(self) -> StackWorker:
        if self.start_error is not None:
            raise self.start_error
        if self.worker is None or not self.worker.alive:
            if self.worker is not None:
                self._record_death(restarted=True)
                self.worker.close()
                self.worker = None
            worker = self.reach.worker(self.name, cold=self.cold)
            self.register(worker)
            try:
                self.hello = worker.start()
            except WorkerError as exc:
                worker.close()
                self.start_error = exc
                raise
            self.worker = worker
        return self.worker

    def close(self) -> None:
        if self.worker is not None:
            if not self.worker.alive:
                self._record_death(restarted=False)
            self.worker.close()
            self.worker = None


def close_sessions(sessions: Sequence[StackSession]) -> None:
    """Close every session at once: each close waits for its worker to exit (a runtime's
    teardown, a remote supervisor and its ssh session ending), and those waits need not
    add up, least of all with a fleet of hosts."""
    if not sessions:
        return
    with ThreadPoolExecutor(max_workers=len(sessions), thread_name_prefix="close") as pool:
        futures = [pool.submit(session.close) for session in sessions]
    for future in futures:
        future.result()  # a bug in one close is raised after every worker was closed
