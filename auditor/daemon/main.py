"""``auditor daemon``: audit cycles on a schedule, as a well-behaved service.

- **Schedule**: APScheduler 3 runs the cycle job on ``[schedule]`` (an interval or a cron
  expression, optional jitter), one at a time: a single-thread executor, ``max_instances=1``,
  ``coalesce`` (runs missed while one was running or the host slept collapse into one) and a
  misfire grace time. ``run_on_start`` starts a cycle immediately. With ``[telemetry]
  interval``, a second job samples every host's NPUs between cycles (in the same executor:
  never while a cycle runs, which samples them itself), stores the points and updates the
  gauges; a host without NPUs is said once in the log, not at every sample.
- **Each cycle runs in a child process** (``auditor.daemon.cycle_process``) that exits with it, so the
  daemon between cycles holds what it held at start: the cycle's imports, caches and native
  pages go with the child. The daemon hands it the config it loaded (or reloaded), reads
  back a summary of the result (auditor.exposition.families), and keeps status, Prometheus figures
  and the stop/abort decisions.
- **The config and the database are read by a child too** (auditor.daemon.setup), at start
  and at each SIGHUP: the plugins (numpy with them) and SQLAlchemy never load in the daemon,
  which holds the parsed config, the database's URL and what its warm workers need.
- **One daemon per state directory**: an exclusive ``flock`` on ``daemon.lock`` there; the
  kernel drops it when the process dies, so a crash never leaves a stale lock.
- **Signals** are turned into bytes on a pipe (``signal.set_wakeup_fd``) that the main
  thread waits on, so nothing runs inside a signal handler. SIGTERM/SIGINT: stop taking new
  cycles, let the running one finish for ``[daemon] stop_timeout`` seconds, then abort it
  (workers killed, run marked aborted); a second signal aborts at once. SIGHUP: re-read the
  config; a valid one takes effect from the next cycle, an invalid one is logged with every
  problem and the old one stays.
- **Warm workers** (``[worker] warm = "daemon"``): the daemon keeps one zygote per local stack
  (auditor.stacks.warm) between cycles, in ``<state_dir>/zygotes``, started before the first
  cycle that needs it, and each cycle child forks its workers from them (``AUDITOR_ZYGOTES``);
  each zygote's memory is logged when it starts and served as Prometheus gauges. A reload
  (from the next cycle on), a stack whose fingerprint changed (a version-drift finding) and a
  zygote that died get fresh ones. With ``cycle`` (the default) each cycle child keeps its own.
  The cycle children themselves are then forked from a fork server that imported the cycle
  once (auditor.daemon.forks): no cycle pays the auditor's own imports (1.1-1.7 CPU-s) again;
  the server lives until the daemon stops.
- **systemd**: READY=1 once listening and scheduled, STATUS= after each cycle, WATCHDOG=1
  from the main loop, RELOADING=1 / STOPPING=1 (``auditor.daemon.sd_notify``). Logs go to stderr;
  under systemd (``$JOURNAL_STREAM`` is our stderr) without timestamps and with ``<N>``
  syslog priority prefixes, which journald turns into the entry's priority.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from auditor.common.paths import state_dir as default_state_dir
from auditor.config.schedule import (
    cycle_tick,
    describe_schedule,
    make_trigger,
    schedule_period,
    schedule_timezone,
)
from auditor.config.selection import cycle_stacks
from auditor.config.tables import Config
from auditor.daemon.cycle_process import (
    ABORTED,
    CYCLE,
    DONE,
    FAILED,
    TELEMETRY,
    ChildCycle,
    CycleRequest,
)
from auditor.daemon.sd_notify import Notifier
from auditor.daemon.setup import DaemonSetup, SetupError
from auditor.exposition.prometheus import MetricsExporter
from auditor.queue import cycles
from auditor.results import HostTelemetry
from auditor.stacks.hosts import LOCAL
from auditor.stacks.launch import local_worker_env, worker_packages
from auditor.stacks.warm import WARM_DIR_ENV, Identity, WarmPool, ZygoteInfo

if TYPE_CHECKING:
    from apscheduler.schedulers.background import BackgroundScheduler

log = logging.getLogger("auditor.daemon")

JOB_ID = "audit-cycle"
TELEMETRY_JOB_ID = "npu-telemetry"
ABORT_GRACE = 20.0  # seconds for an aborted cycle to kill its workers and record the abort


class DaemonError(Exception):
    """The daemon cannot start (lock held, database, listening address)."""


# -- single instance -------------------------------------------------------------------------
class StateLock:
    """An exclusive lock on ``<state_dir>/daemon.lock`` holding the owner's pid."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.path = directory / "daemon.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise DaemonError(f"cannot create the lock file {self.path}: {exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise DaemonError(
                f"another auditor daemon (pid {owner}) is already running with the state directory "
                f"{self.directory}; stop it first, or give this one another [daemon] state_dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing drops the flock
            self._fd = None


# -- the daemon ------------------------------------------------------------------------------
class Daemon:
    """``setup``: what it starts with (auditor.daemon.setup, read by a child); ``load``: reads
    it again for a reload (raises SetupError); it is swapped as a whole, so a running cycle
    keeps its own."""

    def __init__(self, setup: DaemonSetup, load: Callable[[], DaemonSetup], notifier: Notifier | None = None):
        config = setup.config
        self.load = load
        self.notifier = notifier or Notifier()
        self.state_dir = Path(config.daemon.state_dir) if config.daemon.state_dir else default_state_dir()
        self.lock = StateLock(self.state_dir)
        self.exporter = MetricsExporter(self.warm_workers)
        self._config = config
        self._setup: DaemonSetup = setup
        self._scheduler: BackgroundScheduler | None = None
        self._state = threading.Lock()
        self._current: ChildCycle | None = None
        self._idle = threading.Event()
        self._idle.set()
        self._stopping = False
        self._last_status = "no cycle yet"
        self._unrecorded: dict[tuple[str, int], str] = {}
        """(database URL, run id) to the note of aborts a cycle child could not write (the
        database was away): the next child writes them."""
        self._wake_r: int | None = None
        self._telemetry_notes: dict[str, str | None] = {}
        """Per host, why its NPUs were not read last time (None: they were): said once."""
        self.warm: WarmPool | None = None
        """The zygotes kept between cycles ([worker] warm = "daemon"), else None."""
        self._warm_stale = False
        """The config was reloaded: fresh zygotes before the next cycle."""

    # -- start-up ---------------------------------------------------------------------------
    def run(self) -> int:
        """Serve until SIGTERM/SIGINT; the exit status."""
        try:
            self.lock.acquire()
        except DaemonError as exc:
            log.error("%s", exc)
            return 1
        wake_r, wake_w = os.pipe()
        self._wake_r = wake_r
        try:
            for line in self._setup.warnings:
                log.warning("%s", line)
            self.exporter.record_alerts(self._setup.open_alerts)
            self._record_schedule()
            prom = self._config.prometheus
            if prom.enabled:
                try:
                    host, port = self.exporter.serve(prom.address, prom.port)
                except OSError as exc:
                    log.error("cannot serve Prometheus metrics on %s:%s: %s", prom.address, prom.port, exc)
                    return 1
                log.info("Prometheus metrics on http://%s:%d/metrics", _url_host(host), port)
            previous = self._install_signals(wake_w)
            try:
                self._start_scheduler()
                log.info(
                    "auditor daemon started (pid %d): config %s, history %s, state %s, schedule %s",
                    os.getpid(),
                    self._config.source,
                    self._setup.display_url,
                    self.state_dir,
                    describe_schedule(self._config.schedule),
                )
                self.notifier.ready(f"started; {self._next_text()}")
                return self._stop(self._serve(wake_r))
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
                signal.set_wakeup_fd(-1)
        finally:
            os.close(wake_r)
            os.close(wake_w)
            self.exporter.close()
            self.lock.release()

    def _install_signals(self, wake_w: int) -> dict[int, Any]:
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        previous = {}
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            # The handler does nothing: the C-level handler has already written the signal
            # number to the wakeup pipe, which the main loop reads.
            previous[sig] = signal.signal(sig, lambda _signum, _frame: None)
        return previous

    def _start_scheduler(self) -> None:
        from apscheduler.executors.pool import ThreadPoolExecutor
        from apscheduler.schedulers.background import BackgroundScheduler

        schedule = self._config.schedule
        scheduler = BackgroundScheduler(
            executors={"default": ThreadPoolExecutor(max_workers=1)},
            job_defaults={
                "coalesce": True,
                "max_instances": 1,
                "misfire_grace_time": int(max(1, schedule.misfire_grace)),
            },
            timezone=schedule_timezone(schedule),
        )
        kwargs: dict[str, Any] = {}
        if schedule.run_on_start:
            kwargs["next_run_time"] = datetime.now(schedule_timezone(schedule))
        trigger = make_trigger(schedule, shared=self._config.queue.enabled)
        scheduler.add_job(self._job, trigger, id=JOB_ID, name="audit cycle", **kwargs)
        self._schedule_telemetry(scheduler, self._config)
        scheduler.start()
        self._scheduler = scheduler

    def _schedule_telemetry(self, scheduler: BackgroundScheduler, config: Config) -> None:
        """Add, change or remove the NPU telemetry job as ``[telemetry] interval`` says."""
        from apscheduler.triggers.interval import IntervalTrigger

        telemetry = config.telemetry
        job = scheduler.get_job(TELEMETRY_JOB_ID)
        if telemetry.enabled and telemetry.interval > 0:
            trigger = IntervalTrigger(seconds=telemetry.interval)
            if job is None:
                scheduler.add_job(
                    self._job, trigger, args=[TELEMETRY], id=TELEMETRY_JOB_ID, name="NPU telemetry"
                )
            else:
                scheduler.reschedule_job(TELEMETRY_JOB_ID, trigger=trigger)
        elif job is not None:
            scheduler.remove_job(TELEMETRY_JOB_ID)

    def _next_text(self) -> str:
        job = self._scheduler.get_job(JOB_ID) if self._scheduler else None
        when = job.next_run_time if job is not None else None
        return f"next cycle {when:%Y-%m-%d %H:%M:%S %Z}" if when else "no cycle scheduled"

    # -- main loop --------------------------------------------------------------------------
    def _serve(self, wake_r: int) -> str:
        """Wait for signals, feeding the watchdog; returns the name of the stop signal."""
        interval = self.notifier.watchdog_interval
        tick = min(interval, 30.0) if interval else 30.0
        self.notifier.watchdog()
        while True:
            try:
                readable, _, _ = select.select([wake_r], [], [], tick)
            except InterruptedError:  # pragma: no cover - PEP 475 retries select itself
                readable = []
            self.notifier.watchdog()
            if not readable:
                continue
            for signum in os.read(wake_r, 256):
                if signum == signal.SIGHUP:
                    self.reload()
                elif signum in (signal.SIGTERM, signal.SIGINT):
                    name = signal.Signals(signum).name
                    log.info("%s received: stopping", name)
                    return name

    # -- reload -----------------------------------------------------------------------------
    def reload(self) -> bool:
        """Re-read the config; keep the old one if the new one is not usable."""
        self.notifier.reloading()
        try:
            ok = self._reload()
        finally:
            self.notifier.ready(self._last_status)
        return ok

    def _reload(self) -> bool:
        log.info("SIGHUP: reloading the configuration")
        try:
            setup = self.load()
        except SetupError as exc:
            failure = exc.failure
            for line in failure.warnings:
                log.warning("%s", line)
            if failure.errors:
                log.error(
                    "config %s not reloaded (%d problem(s)); still running with the previous one:",
                    failure.source,
                    len(failure.errors),
                )
                for e in failure.errors:
                    log.error("  %s", e)
            else:
                said = " ".join(line.removeprefix("auditor: ") for line in failure.lines)
                log.error("config not reloaded: %s; still running with the previous one", said)
            return False
        for line in setup.warnings:
            log.warning("%s", line)
        old = self._setup.config
        config = setup.config
        for what, a, b in (
            ("[prometheus]", old.prometheus, config.prometheus),
            ("[daemon]", old.daemon, config.daemon),
        ):
            if a != b:
                log.warning("%s changed: restart the daemon to apply it", what)
        with self._state:
            self._setup = setup
            self._config = config
            self._warm_stale = True  # a running cycle keeps forking from the ones it has
        shared = config.queue.enabled
        if (config.schedule, shared) != (old.schedule, old.queue.enabled) and self._scheduler is not None:
            self._scheduler.reschedule_job(JOB_ID, trigger=make_trigger(config.schedule, shared=shared))
            self._record_schedule()
            log.info("schedule is now %s; %s", describe_schedule(config.schedule), self._next_text())
        if config.telemetry != old.telemetry and self._scheduler is not None:
            self._schedule_telemetry(self._scheduler, config)
        log.info("config %s reloaded; it applies from the next cycle", config.source)
        return True

    # -- stop -------------------------------------------------------------------------------
    def _stop(self, reason: str) -> int:
        with self._state:
            self._stopping = True
            current = self._current
        if current is not None:  # a cycle that has not begun its run begins none
            current.stopping()
        self.notifier.stopping("stopping" + (": finishing the running cycle" if current else ""))
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=False)
        timeout = self._config.daemon.stop_timeout
        if current is not None and not self._idle.is_set():
            log.info("waiting up to %g s for the running cycle to finish", timeout)
            if not self._wait_idle(timeout, interruptible=True):
                log.warning("the running cycle did not finish within %g s: aborting it", timeout)
                current.abort(reason)
        # Abort again on every tick: a worker that was being started at the moment of the
        # abort escapes it, and would otherwise wait for its hello until the start timeout.
        tick = (lambda: current.abort(reason)) if current is not None and current.aborted else None
        if not self._wait_idle(ABORT_GRACE, tick=tick):
            log.error("the cycle thread did not end %g s after the abort; exiting anyway", ABORT_GRACE)
            if current is not None:
                current.kill()
            self._close()
            logging.shutdown()
            os._exit(1)  # a stuck thread would block the interpreter's exit forever
        self._close()
        log.info("auditor daemon stopped")
        return 0

    def _wait_idle(
        self, timeout: float, interruptible: bool = False, tick: Callable[[], None] | None = None
    ) -> bool:
        """Wait for the cycle thread to be idle, feeding the watchdog and calling ``tick``
        about every 0.2 s. When ``interruptible``, a second SIGTERM/SIGINT ends the wait
        early (the caller then aborts the cycle)."""
        deadline = time.monotonic() + timeout
        while not self._idle.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self._wake_r is None:
                return self._idle.wait(left)
            readable, _, _ = select.select([self._wake_r], [], [], min(left, 0.2))
            self.notifier.watchdog()
            if tick is not None:
                tick()
            if readable:
                signals = os.read(self._wake_r, 256)
                if interruptible and (signal.SIGTERM in signals or signal.SIGINT in signals):
                    log.warning("second stop signal: not waiting for the cycle any longer")
                    return False
        return True

    def _close(self) -> None:
        if self.warm is not None:
            self.warm.close()
            self.warm = None

    # -- warm workers -----------------------------------------------------------------------
    def _prepare_warm(self, config: Config) -> dict[str, str]:
        """Before a cycle (in the job thread: never while one runs): the zygotes of every local
        stack the cycle starts, fresh ones after a reload, a drift or a death; the variables
        that point its child at them."""
        if config.worker.warm != "daemon":
            if self.warm is not None:
                log.info("[worker] warm is %s now: the warm workers kept so far end", config.worker.warm)
                self.warm.close()
                self.warm = None
            return {}
        if self.warm is None:
            self.warm = WarmPool("daemon", directory=self.state_dir / "zygotes", shared="")
        elif self._warm_stale:
            log.info("the configuration was reloaded: the warm workers start afresh")
            self.warm.reopen()
        self._warm_stale = False
        self.warm.check()
        runtimes = self._setup.runtimes
        identities = {}
        for name in cycle_stacks(config):
            stack, spec = config.stacks[name], runtimes.get(config.stacks[name].runtime)
            if stack.host != LOCAL or spec is None or spec.cold:
                continue  # another host's zygote lives with the cycle; an opted-out runtime, none
            module = spec.worker_class.partition(":")[0]
            env = local_worker_env(stack.env)
            identities[name] = Identity.of(stack.python, spec.worker_class, worker_packages([module]), env)
        pool = self.warm
        timeout = config.worker.start_timeout
        with ThreadPoolExecutor(max_workers=max(1, config.worker.parallel), thread_name_prefix="warm") as run:
            for future in [run.submit(pool.prepare, n, i, timeout) for n, i in identities.items()]:
                future.result()
        return {WARM_DIR_ENV: str(pool.directory())}

    def warm_workers(self) -> list[ZygoteInfo]:
        """What the kept zygotes hold now (Prometheus reads it at each scrape)."""
        return self.warm.zygotes() if self.warm is not None else []

    # -- one cycle (in the scheduler's thread, run by a child process) ----------------------
    def _job(self, kind: str = CYCLE) -> None:
        with self._state:
            if self._stopping or self._setup is None:
                return
            setup = self._setup
            url = setup.db_url
            unrecorded = {run_id: note for (u, run_id), note in self._unrecorded.items() if u == url}
            self._current = None
            self._idle.clear()
        try:
            env = self._prepare_warm(setup.config)
            with self._state:
                run = ChildCycle(
                    CycleRequest(
                        setup.config,
                        setup.plugin_dirs,
                        url,
                        logging.getLogger().getEffectiveLevel(),
                        kind,
                        unrecorded if kind == CYCLE else {},
                        self._shared_cycle(setup.config) if kind == CYCLE else None,
                    ),
                    # warm = "daemon": the cycle child too is forked from a process that
                    # imported the cycle once (auditor.daemon.forks), not started cold
                    python=None if setup.config.worker.warm == "daemon" else sys.executable,
                    env=env,
                )
                self._current = run
                if self._stopping:
                    return
            self._cycle(run)
        except Exception:
            log.exception("the audit cycle failed unexpectedly; the daemon carries on")
            self._last_status = "last cycle failed (see the log)"
            self.notifier.status(self._last_status)
        finally:
            with self._state:
                self._current = None
                self._idle.set()

    @staticmethod
    def _shared_cycle(config: Config) -> cycles.CycleId | None:
        """With [queue]: the schedule's cycle due now, the same one every auditor's daemon on
        the schedule finds (auditor.config.schedule.cycle_tick), however late this one fires."""
        if not config.queue.enabled:
            return None
        tick, following = cycle_tick(config.schedule, datetime.now(schedule_timezone(config.schedule)))
        return cycles.scheduled(config.queue.pool, tick, following)

    def _record_schedule(self) -> None:
        schedule = self._config.schedule
        self.exporter.record_schedule(schedule_period(schedule, datetime.now(schedule_timezone(schedule))))

    def _cycle(self, run: ChildCycle) -> None:
        """Run the cycle in a child process (auditor.daemon.cycle_process: it logs the cycle, its
        alerts and retention itself) and turn its reply into status and metrics here."""
        reply = run.run()
        when = time.strftime("%H:%M:%S")
        if run.request.kind == TELEMETRY:
            if reply.kind == DONE:
                self.exporter.record_telemetry(reply.telemetry)
                self._say_telemetry(reply.telemetry)
            elif reply.kind == FAILED:
                log.error("the NPU telemetry sample failed: %s", reply.message)
            return  # the status line is about cycles
        self._record_schedule()  # a cron line's gap changes from cycle to cycle
        url = run.request.db_url
        if reply.kind in (DONE, ABORTED) and reply.run_id is not None:  # begun: earlier aborts written
            for run_id in run.request.unrecorded:
                self._unrecorded.pop((url, run_id), None)
        if reply.kind == ABORTED and reply.unrecorded is not None and reply.run_id is not None:
            self._unrecorded[(url, reply.run_id)] = reply.unrecorded
        if reply.drifted and self.warm is not None:
            ended = self.warm.forget(reply.drifted)
            if ended:
                log.info("%s changed: its warm worker starts afresh before the next cycle", ", ".join(ended))
        if reply.kind == DONE and reply.summary is not None:
            summary = reply.summary
            if reply.open_alerts is not None:
                self.exporter.record_alerts(reply.open_alerts)
            self.exporter.record_cycle(summary)
            self._say_telemetry(summary.telemetry)
            open_alerts = sum((reply.open_alerts or {}).values())
            self._last_status = (
                f"last cycle: run {reply.run_id} {summary.outcome} at {when} "
                f"({summary.counts}); {open_alerts} open alert(s)"
            )
        elif reply.kind == ABORTED:
            self.exporter.record_aborted(reply.run_id, reply.started, reply.finished)
            self._last_status = f"last cycle: run {reply.run_id} aborted at {when}"
        elif reply.kind == FAILED:
            log.error("the audit cycle failed: %s; the daemon carries on", reply.message)
            self._last_status = "last cycle failed (see the log)"
        else:
            self._last_status = f"last cycle skipped: {reply.message}"
        self.notifier.status(self._last_status)

    def _say_telemetry(self, samples: list[HostTelemetry]) -> None:
        """Log a host whose NPUs could not be read, once until that changes: a host without
        NPUs would otherwise say so at every sample."""
        for s in samples:
            note = None if s.available else s.reason
            if self._telemetry_notes.get(s.host, None) == note and s.host in self._telemetry_notes:
                continue
            self._telemetry_notes[s.host] = note
            if note is None:
                log.info("host %s: NPU telemetry of %d NPU(s) read through %s", s.host, len(s.npus), s.stack)
            elif s.failed:
                log.warning("host %s: NPU telemetry not read: %s", s.host, note)
            else:
                log.info("host %s: no NPUs (%s): no telemetry recorded", s.host, note)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def run_daemon(setup: DaemonSetup, load: Callable[[], DaemonSetup], notifier: Notifier | None = None) -> int:
    return Daemon(setup, load, notifier).run()
