"""Hosts in waves: ``[worker] max_hosts`` caps how many hosts have workers at any one time.

A cycle needs some stacks from its start to its end: the train side of every pair, the
stacks that publish, the reference of every model (their workers export, score drawn actions,
localize and roll out for every serving host). Their hosts are *held*. Every other host (a
group's serving hosts) only serves: its part of a cycle is its own fingerprint, loads, runs,
follow-ups and conversions. Those hosts are split into *chunks* of ``max_hosts`` minus the
held hosts (at least one), in the order of their names. The cycle takes the held stacks with
the first chunk, then one chunk after another: each is fingerprinted, checked by the rules
(on every stack fingerprinted so far), served, and its workers, warm zygotes and ssh
connections are ended before the next starts, so each host is reached once. Without
``max_hosts``, or where every host fits, there is one chunk: every host at once. With
``[leases]`` (auditor.fleet.leases) the chunks are the hosts this auditor claimed.

Why chunks and not a sliding window: the held workers are shared by every serving host and
answer one request at a time; a chunk's hosts run side by side through the same phases as a
whole cycle does (``[worker] parallel`` per host), so each phase keeps the code and the
ordering it has without a cap (as Ansible's ``serial`` batches hosts). A host that cannot be
reached fails at its start and costs its chunk only its own start deadline.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from auditor.config.tables import Config


@dataclass(frozen=True)
class Waves:
    held: tuple[str, ...]
    """Stacks whose workers live the whole cycle (on the held hosts)."""
    chunks: tuple[tuple[str, ...], ...]
    """The other stacks, whole hosts per chunk; one chunk when no cap applies."""
    cap: int | None
    held_hosts: tuple[str, ...] = ()
    serving: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Every serving host, in natural order, with its stacks (held hosts are not serving)."""

    @property
    def capped(self) -> bool:
        return len(self.chunks) > 1

    @property
    def size(self) -> int | None:
        """Serving hosts per chunk under the cap (None: no cap)."""
        return max(1, self.cap - len(self.held_hosts)) if self.cap is not None else None

    def stacks_of(self, hosts: Iterable[str]) -> tuple[str, ...]:
        """The stacks of these serving hosts, in the order of the plan."""
        wanted = set(hosts)
        return tuple(n for host, names in self.serving if host in wanted for n in names)

    def released(self, wave: Iterable[str]) -> list[str]:
        """The stacks of ``wave`` whose workers end with it (never the held ones)."""
        held = set(self.held)
        return [n for n in wave if n not in held]


def needed_throughout(config: Config) -> set[str]:
    """The stacks every serving host's part may need: pairs' train stacks, publishers, and
    the models' reference stacks (a training network's stack included)."""
    needed = {p.train for p in config.pairs} | set(config.fleet.publish)
    needed |= {m.reference_stack for m in config.models.values() if m.reference_stack}
    return needed


def natural(name: str) -> list[object]:
    """infer-2 before infer-10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def plan(config: Config, stacks: Iterable[str], split: bool = False) -> Waves:
    """The waves of a cycle over ``stacks`` (the stacks it reaches); ``split``: the serving
    hosts are never held, even where every host fits (``[leases]`` claims them)."""
    names = list(stacks)
    host_of = {n: config.stacks[n].host for n in names}
    needed = needed_throughout(config)
    held_hosts = sorted({host_of[n] for n in names if n in needed}, key=natural)
    others = sorted({host_of[n] for n in names} - set(held_hosts), key=natural)
    serving = tuple((h, tuple(n for n in names if host_of[n] == h)) for h in others)
    cap = config.worker.max_hosts
    if not split and (cap is None or len(held_hosts) + len(others) <= cap):
        return Waves(tuple(names), ((),), cap, tuple(held_hosts), serving)
    held = tuple(n for n in names if host_of[n] in held_hosts)
    waves = Waves(held, (), cap, tuple(held_hosts), serving)
    size = waves.size or len(others) or 1
    chunks = tuple(waves.stacks_of(others[i : i + size]) for i in range(0, len(others), size))
    return Waves(held, chunks, cap, tuple(held_hosts), serving)
