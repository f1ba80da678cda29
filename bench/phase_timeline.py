"""Where a cycle's wall time goes: a timeline of its phases, for the benches.

While active, it wraps the auditor's own steps (opening an ssh master, checking one,
building the payload, starting a worker up to its hello, each request, closing a worker,
closing the masters) and counts the ssh processes the cycle ran. Nothing in the product
changes: this only records when each step began and ended, and on which thread.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from auditor.stacks import payload, transport
from auditor.stacks import worker as stack_worker


class Timeline:
    """``with Timeline() as t: t.reset(); run a cycle; print(t.render(title))``."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, float, float]] = []
        self.ssh_processes = 0
        self.t0 = time.perf_counter()
        self._undo: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def reset(self) -> None:
        with self._lock:
            self.events.clear()
            self.ssh_processes = 0
            self.t0 = time.perf_counter()

    def _wrap(self, owner: Any, name: str, label: Callable[[tuple, dict], str]) -> None:
        original = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                ended = time.perf_counter()
                with self._lock:
                    self.events.append((threading.current_thread().name, label(args, kwargs), started, ended))

        setattr(owner, name, timed)
        self._undo.append(lambda: setattr(owner, name, original))

    def __enter__(self) -> Timeline:
        w, c = stack_worker.StackWorker, transport.Connections
        self._wrap(w, "start", lambda a, k: f"{a[0].stack.name}: start (until hello)")
        self._wrap(w, "request", lambda a, k: f"{a[0].stack.name}: {a[1]}")
        self._wrap(w, "close", lambda a, k: f"{a[0].stack.name}: close")
        self._wrap(c, "_open", lambda a, k: f"{a[1].name}: ssh master opened")
        self._wrap(c, "_check", lambda a, k: f"{a[1].name}: ssh -O check")
        self._wrap(c, "close_all", lambda a, k: "ssh masters closed")
        self._wrap(payload, "build", lambda a, k: "payload built")
        popen_init = subprocess.Popen.__init__

        def counting(popen: Any, args: Any, *rest: Any, **kwargs: Any) -> None:
            if isinstance(args, list | tuple) and args and str(args[0]) == "ssh":
                with self._lock:
                    self.ssh_processes += 1
            popen_init(popen, args, *rest, **kwargs)

        subprocess.Popen.__init__ = counting  # type: ignore[method-assign]
        self._undo.append(lambda: setattr(subprocess.Popen, "__init__", popen_init))
        self.reset()
        return self

    def __exit__(self, *exc: object) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()

    def render(self, title: str, short: float = 0.02) -> str:
        """One line per step, in order of start (steps shorter than ``short`` s are left out)."""
        with self._lock:
            events = sorted(self.events, key=lambda e: e[2])
            count = self.ssh_processes
        lines = [
            f"   timeline of {title}: {count} ssh processes; steps under {short * 1000:.0f} ms left out",
            "       start     end   took  thread        step",
        ]
        for thread, label, started, ended in events:
            if ended - started < short and not label.endswith(("opened", "close")):
                continue
            lines.append(
                f"     {started - self.t0:7.3f} {ended - self.t0:7.3f} {ended - started:6.3f}  "
                f"{thread:<12}  {label}"
            )
        return "\n".join(lines)
