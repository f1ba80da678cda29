"""The stacks a cycle holds from its start to its end, behind one service.

A held stack's worker (a pair's train stack, a model's reference, a stack that publishes, and
every stack on their hosts) answers one request at a time, and every serving host's part may
need it: to score drawn actions, localize, roll out, judge a model against its reference. So
its session is reached only through ``Stacks.use``, which holds that stack's own lock for
the block (several stacks at once are taken in one order, so two parts never wait for each
other), restarts a worker that died and raises the start's error. A serving host's own stacks
are its part's alone and are used the same way, without a lock. No caller has a lock to
remember: the service takes it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping

from auditor.stacks.session import StackSession
from auditor.stacks.worker import StackWorker


class Stacks:
    """Every session of a cycle: the held ones behind a lock each, the serving hosts' without."""

    def __init__(self, sessions: Mapping[str, StackSession], held: set[str]):
        self.sessions = dict(sessions)
        self.held = set(held)
        self._locks = {name: threading.RLock() for name in self.held}

    def __contains__(self, name: object) -> bool:
        return name in self.sessions

    def session(self, name: str) -> StackSession:
        """The session itself: for what does not talk to its worker (its stack, its problems,
        a fresh session of the same stack for a rerun)."""
        return self.sessions[name]

    @contextlib.contextmanager
    def use(self, *names: str) -> Iterator[StackWorker | tuple[StackWorker, ...]]:
        """The workers of ``names`` (started, or restarted after a death), each held stack's
        lock held for the block. Raises the WorkerError of a stack that cannot start."""
        with contextlib.ExitStack() as locks:
            for name in sorted(set(names)):
                if name in self._locks:
                    locks.enter_context(self._locks[name])
            workers = tuple(self.sessions[n].ensure() for n in names)
            yield workers[0] if len(workers) == 1 else workers
