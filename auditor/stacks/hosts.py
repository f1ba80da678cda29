"""Where stacks live: ``[hosts.NAME]`` tables and the ``host`` key of a stack.

A stack runs on the auditor's own machine (``host = "local"``, the default) or on a named
host reached with the system OpenSSH client (``ssh = "user@server"``) or with any argv
prefix that runs a command there with stdin/stdout attached (``command = ["docker",
"exec", "-i", "box"]``). A stack's ``python``, ``ascend_root``, ``system_root``,
``npu_smi`` and ``env`` are paths and values on its host.
The tables are validated by the config schema (``auditor.config.load.HostConfig``); this module
holds what the cycle does with them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from auditor.config.tables import HostConfig

LOCAL = "local"
__all__ = ["LOCAL", "HostConfig", "per_host_limits"]


def per_host_limits(
    tasks: Mapping[str, Callable[[], Any]],
    stacks: Mapping[str, Any],
    hosts: Mapping[str, HostConfig],
    parallel: int,
    max_hosts: int | None = None,
    done: Callable[[str, list[str]], None] | None = None,
) -> tuple[int, dict[str, Callable[[], Any]]]:
    """Run stacks of different hosts side by side, at most ``parallel`` (or the host's own
    ``parallel``) at a time on each host, and tasks of at most ``max_hosts`` hosts at a time
    (``[worker] max_hosts``: a host is in flight from its first running task to its last):
    the pool size for ``tasks`` (by stack name) and the tasks wrapped to hold their host's
    slot. A fleet of N hosts then takes about as long as one host, not N times as long.

    ``done(host, stacks)``: called once a host's last task has ended, before its slot is given
    to another host (a command that ends the host's warm workers and connection there keeps
    ``max_hosts`` in what stays open, not only in what runs). A host then holds its slot from
    its first task to its last, and the tasks come back grouped by host, in the order of their
    first stack: run in that order by a first-in-first-out pool, a host's tasks all reach a
    thread before the next host's, so a host in flight never waits behind hosts that wait for
    its slot."""
    host_of = {name: getattr(stacks.get(name), "host", LOCAL) for name in tasks}
    limit = {h: (hosts[h].parallel if h in hosts else None) or parallel for h in host_of.values()}
    slots = {h: threading.BoundedSemaphore(n) for h, n in limit.items()}
    counts: dict[str, int] = {}
    for h in host_of.values():
        counts[h] = counts.get(h, 0) + 1
    size = max(1, sum(min(limit[h], n) for h, n in counts.items()))
    gate = threading.BoundedSemaphore(max_hosts) if max_hosts and max_hosts < len(counts) else None
    entry = {h: threading.Lock() for h in counts}
    running = dict.fromkeys(counts, 0)
    left = dict(counts)
    names_of = {h: [n for n in tasks if host_of[n] == h] for h in counts}

    def enter(h: str) -> None:
        with entry[h]:  # one gate slot per host, however many of its tasks run
            first = running[h] == 0 and (done is None or left[h] == counts[h])
            if first and gate is not None:
                gate.acquire()
            running[h] += 1

    def leave(h: str) -> None:
        with entry[h]:
            running[h] -= 1
            left[h] -= 1
            if done is None:
                last = running[h] == 0
            else:
                last = left[h] == 0
                if last:
                    try:
                        done(h, names_of[h])
                    finally:
                        if gate is not None:
                            gate.release()
                    return
            if last and gate is not None:
                gate.release()

    def held(name: str, fn: Callable[[], Any]) -> Callable[[], Any]:
        def run() -> Any:
            h = host_of[name]
            enter(h)
            try:
                with slots[h]:
                    return fn()
            finally:
                leave(h)

        return run

    order = list(tasks) if done is None else [n for h in counts for n in names_of[h]]
    return size, {name: held(name, tasks[name]) for name in order}
