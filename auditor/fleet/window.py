"""Hosts in flight: ``[worker] max_hosts`` caps how many hosts have workers at any one time.

A cycle needs some stacks from its start to its end: the train side of every pair, the
stacks that publish, the reference of every model (their workers export, score drawn actions,
localize and roll out for every serving host). Their hosts are *held*. Every other host (a
group's serving hosts) only serves: its part of a cycle is its own fingerprint, loads, runs,
follow-ups and conversions. Each serving host's part runs on its own (``Window``): at most
``max_hosts`` minus the held hosts (at least one) at once, in the order of their names; the
moment a host's part is done, its workers, warm zygote and ssh connection end and the next
host starts. A host that cannot be reached, or is slow, holds its own place only. Without
``max_hosts``, or where every host fits, every serving host is in flight at once. With
``[queue]`` (auditor.queue.shared) the hosts are those this auditor takes from the cycle's
job queue, a few at a time as places free up.

What the hosts' parts share (the held workers, which answer one request at a time, and the
cycle's bookkeeping) each part takes under one lock (``CycleState.held``), as a cycle without
a fleet does one after the other; what a host does on its own workers (fingerprint, loads,
runs, repeats, models served) runs beside the other hosts'.
"""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from auditor.config.tables import Config


@dataclass(frozen=True)
class HostPlan:
    held: tuple[str, ...]
    """Stacks whose workers live the whole cycle (on the held hosts)."""
    cap: int | None
    held_hosts: tuple[str, ...] = ()
    serving: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Every serving host, in natural order, with its stacks (held hosts are not serving)."""

    @property
    def capped(self) -> bool:
        """Whether the cap keeps some serving hosts waiting for a place."""
        return self.size is not None and self.size < len(self.serving)

    @property
    def size(self) -> int | None:
        """Serving hosts in flight at once under the cap (None: no cap)."""
        return max(1, self.cap - len(self.held_hosts)) if self.cap is not None else None

    @property
    def hosts(self) -> list[str]:
        return [host for host, _ in self.serving]

    def stacks_of(self, hosts: Iterable[str]) -> tuple[str, ...]:
        """The stacks of these serving hosts, in the order of the plan."""
        wanted = set(hosts)
        return tuple(n for host, names in self.serving if host in wanted for n in names)


def needed_throughout(config: Config) -> set[str]:
    """The stacks every serving host's part may need: pairs' train stacks, publishers, and
    the models' reference stacks (a training network's stack included)."""
    needed = {p.train for p in config.pairs} | set(config.fleet.publish)
    needed |= {m.reference_stack for m in config.models.values() if m.reference_stack}
    return needed


def natural(name: str) -> list[object]:
    """infer-2 before infer-10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def plan(config: Config, stacks: Iterable[str]) -> HostPlan:
    """The held stacks and the serving hosts of a cycle over ``stacks`` (the stacks it reaches)."""
    names = list(stacks)
    host_of = {n: config.stacks[n].host for n in names}
    needed = needed_throughout(config)
    held_hosts = sorted({host_of[n] for n in names if n in needed}, key=natural)
    others = sorted({host_of[n] for n in names} - set(held_hosts), key=natural)
    serving = tuple((h, tuple(n for n in names if host_of[n] == h)) for h in others)
    held = tuple(n for n in names if host_of[n] in held_hosts)
    return HostPlan(held, config.worker.max_hosts, tuple(held_hosts), serving)


class Window:
    """Each host's ``part`` in a thread of its own, at most ``size`` at once. ``claim(n)`` gives
    the next hosts (a list, at most ``n`` where that matters; empty or None: no more), asked
    only when ``n`` places are free and no host claimed before waits (queued hosts are taken
    as they are used, never ahead). The first part that raises
    calls ``stop`` (the cycle's abort: the other parts fail fast) and is raised by ``join``
    once every part in flight has ended."""

    def __init__(
        self,
        size: int,
        part: Callable[[str], None],
        claim: Callable[[int], list[str] | None],
        stop: Callable[[], None],
    ):
        self.size = max(1, size)
        self.part, self.claim, self.stop = part, claim, stop
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Window:
        self._thread = threading.Thread(target=self._run, name="hosts-in-flight", daemon=True)
        self._thread.start()
        return self

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        waiting: deque[str] = deque()
        running: set[Future[None]] = set()
        claimed_all = False
        with ThreadPoolExecutor(max_workers=self.size, thread_name_prefix="host") as pool:
            try:
                while True:
                    while len(running) < self.size:
                        if not waiting and not claimed_all:
                            got = self.claim(self.size - len(running))
                            claimed_all = not got
                            waiting.extend(got or ())
                        if not waiting:
                            break
                        running.add(pool.submit(self.part, waiting.popleft()))
                    if not running:
                        return
                    done, running = wait(running, return_when=FIRST_COMPLETED)
                    for future in done:
                        future.result()
            except BaseException as exc:  # noqa: BLE001 - raised by join, in the cycle's thread
                self.error = exc
                self.stop()
                wait(running)
