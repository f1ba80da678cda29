"""A part of a cycle: what the stacks of one host do in it, as an object of its own.

There are two kinds of part. The **held part** is the stacks every other part needs (the
train stacks, the models' references, every stack on their hosts: auditor.cycle.held), started
first and kept to the end of the cycle; a **serving host's part** is one other host's stacks,
run in the window of hosts in flight (auditor.fleet.window) and ended the moment it is done.
Either part does the same steps on its own stacks: fingerprint them (with one NPU sample per
host), run drift and the rules on every stack fingerprinted so far (its blocks are known before
it loads anything), serve every policy they serve through the one pipeline
(auditor.cycle.serving), and check the converted files they serve. A serving host's part also
waits for the held part's exports before it serves, and then releases its host: its workers,
its warm zygote and its ssh connection end (with [queue], its job stays the auditor's until
the run is stored).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from auditor.cycle.compatibility import Compatibility
from auditor.cycle.models import Models
from auditor.cycle.serving import Audit, PartServed, Serving
from auditor.cycle.state import CycleState
from auditor.cycle.telemetry import DeviceTelemetry
from auditor.policy.convert import served_results
from auditor.results import ERROR, HostTelemetry, ProbeResult
from auditor.stacks.session import close_sessions
from auditor.stacks.worker import WorkerError


@dataclass
class PartResult:
    """What one part of a cycle served."""

    served: PartServed
    failed: dict[tuple[str, str], ProbeResult]
    """Models that could not be audited, by (model, serving stack)."""
    conversions: list[ProbeResult]
    samples: list[HostTelemetry] = field(default_factory=list)


@dataclass
class Part:
    """The stacks of one host (or the held stacks) in one cycle."""

    stacks: Sequence[str]
    state: CycleState
    compat: Compatibility
    telemetry: DeviceTelemetry
    serving: Serving
    models: Models
    audits: Callable[[], list[Audit]]
    """The probes' audits, known once the held part has exported."""
    host: str = ""
    """The serving host ("": the held part)."""
    samples: list[HostTelemetry] = field(default_factory=list)

    def fingerprint(self) -> Part:
        """Its stacks' fingerprints and NPU samples, then drift and the rules on every stack
        fingerprinted so far."""
        sessions = {n: self.state.sessions[n] for n in self.stacks}
        self.compat.collect(sessions)
        self.samples = self.telemetry.sample(sessions)
        self.compat.check()
        return self

    def serve(self) -> PartResult:
        """Every probe variant and model on its stacks, through the one pipeline, then the
        ``[stacks.X.convert]`` files they serve. Its outcomes end with it (a fleet's
        input-class and layer outputs would otherwise be held for the whole cycle); a group's
        peers keep their outputs."""
        here = set(self.stacks)
        models, failed = self.models.audits(here)
        probes = [a for a in self.audits() if here & set(a.targets)]
        served = self.serving.serve([*probes, *models], self.stacks)
        return PartResult(served, failed, self._conversions(), self.samples)

    def run(self, exported: threading.Event) -> PartResult:
        """A serving host's part whole: fingerprint, wait for the held part's exports, serve,
        release."""
        self.fingerprint()
        while not exported.wait(0.5):  # the held stacks are still exporting
            self.state.check()
        self.state.check()
        out = self.serve()
        self.release()
        return out

    def release(self) -> None:
        """End its stacks' workers, its host's warm zygote and ssh connection; a later request
        would start them again."""
        if not self.stacks:
            return
        close_sessions([self.state.sessions[n] for n in self.stacks])
        self.state.reach.release(self.stacks)

    def _conversions(self) -> list[ProbeResult]:
        """Each converted file a stack serves against a fresh conversion of its source."""
        out: list[ProbeResult] = []
        for name in self.stacks:
            session = self.state.sessions[name]
            table = session.stack.convert
            if table is None or not table.served:
                continue
            self.state.check()
            try:
                worker = session.ensure()
            except WorkerError as exc:
                out += [
                    ProbeResult(
                        f"{name}:served",
                        name,
                        name,
                        Path(f).name,
                        "",
                        "served-conversion",
                        ERROR,
                        exc.describe(),
                    )
                    for f in sorted(table.served)
                ]
                continue
            out += served_results(worker, session.stack, self.compat.fingerprints.get(name))
        return out
