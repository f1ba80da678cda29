"""The outcome of one audit cycle, as plain data: what the report prints, what the history
database stores and what ``--json`` emits.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from auditor.compare import MetricCheck, OutputComparison

CONSISTENT, DRIFT, INCOMPATIBLE, ERROR = "consistent", "drift", "incompatible", "error"
UNSUPPORTED = "unsupported"
"""The inference runtime cannot load or run an operator this probe variant uses (a random op,
say): a fact about the runtime, reported for the variant, not a failure of the probe."""
STATUS_ORDER = (CONSISTENT, DRIFT, UNSUPPORTED, INCOMPATIBLE, ERROR)


@dataclass(frozen=True)
class Latency:
    """Per-call latency measured inside the worker around the runtime call only."""

    batch: int
    samples: int
    p50_us: float
    p90_us: float
    p99_us: float
    mean_us: float

    @classmethod
    def from_ns(cls, ns: list[int], batch: int) -> Latency:
        us = np.asarray(ns, dtype=np.float64) / 1000.0
        p50, p90, p99 = np.percentile(us, [50, 90, 99])
        return cls(batch, len(ns), float(p50), float(p90), float(p99), float(us.mean()))

    @property
    def throughput(self) -> float:
        """Samples per second at p50."""
        return self.batch / (self.p50_us / 1e6) if self.p50_us > 0 else float("inf")


@dataclass(frozen=True)
class Artifact:
    """An exported model, content-addressed by its sha256."""

    sha256: str
    kind: str
    size: int
    info: dict[str, Any]


@dataclass(frozen=True)
class StackReport:
    name: str
    role: str
    runtime: str
    python: str
    device: str
    host: str
    fingerprint: dict[str, Any] | None
    error: str | None = None
    problems: tuple[str, ...] = ()
    """What went wrong with the stack's worker after it started (it died or was killed and
    restarted, its fingerprint could not be taken), each with the worker's stderr tail. Any
    makes the cycle's outcome an error: such a run must not read as clean."""

    @property
    def fingerprint_digest(self) -> str | None:
        return fingerprint_digest(self.fingerprint) if self.fingerprint is not None else None


def fingerprint_digest(document: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(document).encode()).hexdigest()


def canonical_json(document: Any) -> str:
    return json.dumps(document, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Finding:
    kind: str
    severity: str
    subject: str
    key: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ProbeResult:
    pair: str
    train: str
    infer: str
    probe: str
    probe_version: str
    variant: str
    status: str
    message: str
    outputs: tuple[OutputComparison, ...] = ()
    thresholds: dict[str, dict[str, float]] = field(default_factory=dict)
    """Limits by output ("*": the probe as a whole): atol/rtol, and each limited check's metric."""
    train_latency: Latency | None = None
    infer_latency: Latency | None = None
    artifact: Artifact | None = None
    log: str = ""
    checks: tuple[MetricCheck, ...] = ()
    """What the probe's comparators (and the fresh-process rerun) measured, beyond ``outputs``."""
    # -- probe suite (auditor.latency, auditor.localize, auditor.baseline) --
    train_latencies: tuple[Latency, ...] = ()
    """Latency at the other batch sizes of ``[latency] batches`` (the probe's own is train_latency)."""
    infer_latencies: tuple[Latency, ...] = ()
    localization: Any = None
    """auditor.localize.Localization of a drifting variant: the first layer out of tolerance."""
    baseline: tuple[Any, ...] = ()
    """auditor.baseline.BaselineCheck per side: the outputs against their golden."""


@dataclass(frozen=True)
class LearnedMaximum:
    """The highest MindIR version a runtime build loads, as its own rejection message said.
    Stored, so that later cycles check it before attempting a load (see auditor.rules)."""

    package: str
    version: str
    max_mind_ir_version: int
    message: str = ""
    learned_at: datetime | None = None


@dataclass
class CycleResult:
    started_at: float
    finished_at: float
    config: str
    stacks: dict[str, StackReport]
    results: list[ProbeResult]
    findings: list[Finding]
    run_id: int | None = None
    learned_maxima: list[LearnedMaximum] = field(default_factory=list)
    rollouts: list[Any] = field(default_factory=list)
    """auditor.rollout.RolloutResult per rolled-out pair (closed and open loop)."""
    learned_operators: list[Any] = field(default_factory=list)
    """auditor.operator_support.LearnedOperator: operators a load failed on (stored)."""
    publications: list[Any] = field(default_factory=list)
    """auditor.publication.PublicationSet per publishing train stack (split mode)."""

    @property
    def outcome(self) -> str:
        """The worst status of the cycle: consistent < drift < incompatible < error."""
        statuses = {r.status for r in self.results} | {r.status for r in self.rollouts}
        if any(s.error or s.problems for s in self.stacks.values()):
            statuses.add(ERROR)
        return max(statuses or {CONSISTENT}, key=STATUS_ORDER.index)

    @property
    def exit_code(self) -> int:
        return 0 if self.outcome == CONSISTENT else 1

    def to_json(self) -> dict[str, Any]:
        def result_json(r: ProbeResult) -> dict[str, Any]:
            d = asdict(r)
            d["outputs"] = [asdict(o) for o in r.outputs]
            d["checks"] = [asdict(c) for c in r.checks]
            return d

        return {
            "run_id": self.run_id,
            "config": self.config,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "outcome": self.outcome,
            "stacks": {
                n: {**asdict(s), "fingerprint_digest": s.fingerprint_digest} for n, s in self.stacks.items()
            },
            "results": [result_json(r) for r in self.results],
            "rollouts": [
                {**asdict(r), "summary": {mode: r.summary(mode) for mode in ("closed-loop", "open-loop")}}
                for r in self.rollouts
            ],
            "findings": [asdict(f) for f in self.findings],
        }
