"""NPU telemetry of a cycle's hosts: one sample per host, taken through one of the host's
stacks' workers, and judged against ``[telemetry]`` thresholds.

A host's NPUs are the same whichever of its stacks asks, so the first stack by name on each
host samples it, with that stack's ``npu_smi`` and ``npu_smi_timeout``. The worker runs the
``npu_telemetry`` collector module (plugins/collectors/npu_telemetry.py) through its
collector request, the one fingerprints use; the values never enter a fingerprint.

The cycle samples once, after the fingerprints; ``auditor telemetry sample`` and the daemon's
``[telemetry] interval`` schedule sample between cycles (``sample_hosts``: a worker per host,
started through the config's ``Reach`` and closed again) and store the points without a run.

Findings, judged at each cycle on its own sample and the highest value of each series the
daemon sampled since the previous run ended:

- ``npu-telemetry``: a value at or above a limit, at the highest level it reaches; one per
  series (``HOST/npuN/chipC/METRIC/npu-telemetry``), so an alert opens once and resolves
  when a later cycle no longer sees it;
- ``telemetry-unavailable``: a host whose npu-smi cannot list its NPUs, or whose NPUs'
  views failed: their thresholds were not checked (one finding per host, naming the NPUs,
  since one npu-smi and one driver fail them alike).

A host without npu-smi or without NPU cards has nothing to watch: no finding, nothing
stored, one line in the report.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import select

from auditor.config.tables import Config, StackConfig, TelemetryConfig
from auditor.db import schema as m
from auditor.history.telemetry import Key, worst_since
from auditor.results import (
    NPU_TELEMETRY,
    TELEMETRY_UNAVAILABLE,
    ChipTelemetry,
    CycleAborted,
    Finding,
    HostTelemetry,
    NpuTelemetry,
)
from auditor.stacks.launch import TELEMETRY_COLLECTOR
from auditor.stacks.session import Reach
from auditor.stacks.worker import StackWorker, WorkerError
from auditor.worker.npu_metrics import METRICS, unit

MODULE = TELEMETRY_COLLECTOR
KIND, UNAVAILABLE = NPU_TELEMETRY, TELEMETRY_UNAVAILABLE
SLACK = 30.0


def samplers(config: Config, names: Iterable[str]) -> dict[str, str]:
    """Host -> the stack that samples it: the first by name among ``names`` on that host."""
    out: dict[str, str] = {}
    for name in sorted(names):
        out.setdefault(config.stacks[name].host, name)
    return out


def context_for(stack: StackConfig, cfg: TelemetryConfig) -> dict[str, Any]:
    """The collector's context (the worker adds its own environment, for npu-smi's PATH)."""
    return {"npu_smi": stack.npu_smi, "timeout": stack.npu_smi_timeout, "views": list(cfg.views)}


def deadline(stack: StackConfig, base: float) -> float:
    """Long enough for one hanging npu-smi call to be killed and reported (the collector asks
    nothing more of a host after a timeout)."""
    return max(base, 3 * stack.npu_smi_timeout + SLACK)


def sample(worker: StackWorker, stack: StackConfig, cfg: TelemetryConfig) -> HostTelemetry:
    """One sample of the worker's host; a worker that gives no answer is a failed sample."""
    try:
        reply = worker.request(
            "fingerprint",
            timeout=deadline(stack, worker.request_timeout),
            collectors=[MODULE],
            context=context_for(stack, cfg),
        )
    except WorkerError as exc:
        return failed(stack, f"no telemetry: {exc.describe()}")
    document = (reply.result.get("fingerprint") or {}).get("npu_telemetry") or {}
    return from_document(stack.host, stack.name, document, time.time())


def failed(stack: StackConfig, reason: str) -> HostTelemetry:
    return HostTelemetry(stack.host, stack.name, time.time(), False, reason, failed=True)


def from_document(host: str, stack: str, doc: Mapping[str, Any], at: float) -> HostTelemetry:
    """The collector's section as plain data (a section that says ``error``: a failed sample)."""
    if "error" in doc:
        return HostTelemetry(host, stack, at, False, f"the telemetry collector failed: {doc['error']}", True)
    npus = tuple(
        NpuTelemetry(
            int(n["npu"]),
            tuple(
                ChipTelemetry(str(c["chip"]), {k: float(v) for k, v in c["values"].items() if k in METRICS})
                for c in n.get("chips", ())
            ),
            tuple(str(e) for e in n.get("errors", ())),
            tuple(str(u) for u in n.get("unsupported", ())),
        )
        for n in doc.get("npus", ())
    )
    return HostTelemetry(
        host,
        stack,
        at,
        bool(doc.get("available")),
        doc.get("reason"),
        bool(doc.get("failed")),
        npus,
        float(doc.get("seconds") or 0.0),
        int(doc.get("calls") or 0),
    )


def sample_hosts(
    reach: Reach, names: Iterable[str] | None = None, register: Callable[[StackWorker], None] | None = None
) -> list[HostTelemetry]:
    """Sample every host of the config's stacks (``names``: only these stacks' hosts), each
    through a worker started for it and closed after; outside a cycle."""
    config = reach.config
    out = []
    for name in samplers(config, names if names is not None else config.stacks).values():
        stack = config.stacks[name]
        if stack.source == "db":
            continue
        with reach.worker(name) as worker:
            if register is not None:
                register(worker)
            try:
                worker.start()
            except WorkerError as exc:
                out.append(failed(stack, f"no telemetry: {exc.describe()}"))
                continue
            out.append(sample(worker, stack, config.telemetry))
    return out


class Sampling:
    """``sample_hosts`` that another thread can stop: ``abort`` kills the workers it started
    and ``run`` raises CycleAborted (the daemon's telemetry child)."""

    def __init__(self, reach: Reach):
        self.reach = reach
        self._workers: list[StackWorker] = []
        self._lock = threading.Lock()
        self.reason: str | None = None

    @property
    def aborted(self) -> bool:
        return self.reason is not None

    def abort(self, reason: str) -> None:
        with self._lock:
            self.reason = self.reason or reason
            workers = list(self._workers)
        for worker in workers:
            worker.kill()

    def _register(self, worker: StackWorker) -> None:
        with self._lock:
            if self.reason is not None:
                raise CycleAborted(self.reason)
            self._workers.append(worker)

    def run(self) -> list[HostTelemetry]:
        with self.reach:
            samples = sample_hosts(self.reach, register=self._register)
        if self.reason is not None:
            raise CycleAborted(self.reason)
        return samples


# -- thresholds ------------------------------------------------------------------------------------
def _words(metric: str, value: float) -> str:
    if metric == "health":
        names = {0: "OK", 1: "Warning", 2: "Alarm", 3: "Critical"}
        return names.get(int(value), f"{value:g}")
    u = unit(metric)
    if u in ("errors", "pages", ""):
        return f"{value:g}"
    return f"{value:g}%" if u == "%" else f"{value:g} {u}"


def findings(
    samples: Iterable[HostTelemetry],
    cfg: TelemetryConfig,
    worst: Mapping[Key, tuple[float, datetime]] | None = None,
) -> list[Finding]:
    """The threshold and availability findings of a cycle's samples; ``worst``: the highest
    value of each series since the previous run (the daemon's samples in between)."""
    limits = cfg.limits()
    out: list[Finding] = []
    for s in samples:
        if not s.available:
            if s.failed:
                out.append(
                    Finding(
                        UNAVAILABLE,
                        "warning",
                        s.host,
                        f"{s.host}/{UNAVAILABLE}",
                        f"host {s.host}: NPU telemetry not read, no threshold checked: {s.reason}",
                        {"host": s.host, "stack": s.stack},
                    )
                )
            continue
        failing = [n for n in s.npus if n.errors]
        if failing:  # one finding per host: its NPUs' views fail alike (one npu-smi, one driver)
            npus = ", ".join(str(n.npu) for n in failing)
            views = sum(len(n.errors) for n in failing)
            out.append(
                Finding(
                    UNAVAILABLE,
                    "warning",
                    s.host,
                    f"{s.host}/npu/{UNAVAILABLE}",
                    f"host {s.host}: {views} telemetry view(s) failed on NPU {npus}, their thresholds "
                    f"were not checked: {failing[0].errors[0]}",
                    {
                        "host": s.host,
                        "npus": [n.npu for n in failing],
                        "errors": {n.npu: list(n.errors) for n in failing},
                    },
                )
            )
        for n in s.npus:
            for c in n.chips:
                for metric, value in sorted(c.values.items()):
                    limit = limits.get(metric)
                    if limit is None:
                        continue
                    key: Key = (s.host, n.npu, c.chip, metric)
                    seen, when = value, None
                    if worst is not None and key in worst and worst[key][0] > value:
                        seen, when = worst[key]
                    level = limit.severity(seen)
                    if level is None:
                        continue
                    severity, bound = level
                    where = f"host {s.host} NPU {n.npu}" + (f" chip {c.chip}" if c.chip != "0" else "")
                    at = f" (at {when:%Y-%m-%d %H:%M:%S} UTC; now {_words(metric, value)})" if when else ""
                    out.append(
                        Finding(
                            KIND,
                            severity,
                            s.host,
                            f"{s.host}/npu{n.npu}/chip{c.chip}/{metric}/{KIND}",
                            f"{where}: {METRICS[metric][2]} {_words(metric, seen)}{at}, at or above the "
                            f"{severity} limit {_words(metric, bound)}",
                            {
                                "host": s.host,
                                "npu": n.npu,
                                "chip": c.chip,
                                "metric": metric,
                                "value": seen,
                                "limit": bound,
                            },
                        )
                    )
    return out


class DeviceTelemetry:
    """The cycle's part: sample each host through the cycle's sessions, then judge."""

    def __init__(self, state: Any):
        self.state = state

    def sample(self, sessions: Mapping[str, Any]) -> list[HostTelemetry]:
        config: Config = self.state.config
        if not config.telemetry.enabled:
            return []
        tasks = {}
        for name in samplers(config, sessions).values():
            session = sessions[name]

            def task(session: Any = session) -> HostTelemetry:
                try:
                    worker = session.ensure()
                except WorkerError as exc:
                    return failed(session.stack, f"no telemetry: {exc.describe()}")
                return sample(worker, session.stack, config.telemetry)

            tasks[name] = task  # by stack: the per-host limits of [worker] parallel apply
        return list(self.state.parallel(tasks).values())

    def findings(self, samples: list[HostTelemetry]) -> list[Finding]:
        """The samples' findings; a host whose sampling stack did not start is not said again
        (its stack-unavailable finding is the one cause; its sample line says why)."""
        sessions = self.state.sessions
        samples = [t for t in samples if t.stack not in sessions or sessions[t.stack].start_error is None]
        history = self.state.history
        worst = None
        if history is not None and samples:
            since = previous_run_end(history.engine, history.auditor_id)
            if since is not None:
                with history.engine.connect() as conn:
                    worst = worst_since(conn, history.auditor_id, since)
        return findings(samples, self.state.config.telemetry, worst)


def previous_run_end(engine: Any, auditor_id: str) -> datetime | None:
    """When this auditor's latest complete run ended: the daemon's samples since then are
    judged with a cycle's own (that run's sample, taken before it ended, is not)."""
    R = m.Run
    with engine.connect() as conn:
        return conn.scalar(
            select(R.finished_at)
            .where(R.status == "complete", R.auditor_id == auditor_id)
            .order_by(R.started_at.desc(), R.id.desc())
            .limit(1)
        )
