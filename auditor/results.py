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

from auditor.compare.outputs import MetricCheck, OutputComparison

CONSISTENT, DRIFT, INCOMPATIBLE, ERROR = "consistent", "drift", "incompatible", "error"
UNSUPPORTED = "unsupported"
"""The inference runtime cannot load or run an operator this probe variant uses (a random op,
say): a fact about the runtime, reported for the variant, not a failure of the probe."""
STATUS_ORDER = (CONSISTENT, DRIFT, UNSUPPORTED, INCOMPATIBLE, ERROR)
FAILING_SEVERITIES = ("error", "critical")
"""A finding of these severities makes a run's exit status 1."""


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
    # -- probe suite (auditor.cycle.latency, auditor.cycle.localize, auditor.cycle.baseline) --
    train_latencies: tuple[Latency, ...] = ()
    """Latency at the other batch sizes of ``[latency] batches`` (the probe's own is train_latency)."""
    infer_latencies: tuple[Latency, ...] = ()
    localization: Any = None
    """auditor.cycle.localize.Localization of a drifting variant: the first layer out of tolerance."""
    baseline: tuple[Any, ...] = ()
    """auditor.cycle.baseline.BaselineCheck per side: the outputs against their golden."""
    samples: int = 0
    """How many samples (rows of the input batch) both sides ran and were compared on."""


@dataclass(frozen=True)
class LearnedMaximum:
    """The highest MindIR version a runtime build loads, as its own rejection message said.
    Stored, so that later cycles check it before attempting a load (see auditor.rules.engine)."""

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
    rollouts: list[RolloutResult] = field(default_factory=list)
    """Per rolled-out pair (closed and open loop; auditor.cycle.rollout)."""
    learned_operators: list[LearnedOperator] = field(default_factory=list)
    """Operators a load failed on (stored; auditor.rules.operator_support)."""
    publications: list[Any] = field(default_factory=list)
    """auditor.history.publication.PublicationSet per publishing train stack (split mode)."""

    @property
    def outcome(self) -> str:
        """The worst status of the cycle: consistent < drift < incompatible < error."""
        statuses = {r.status for r in self.results} | {r.status for r in self.rollouts}
        if any(s.error or s.problems for s in self.stacks.values()):
            statuses.add(ERROR)
        return max(statuses or {CONSISTENT}, key=STATUS_ORDER.index)

    @property
    def failing_findings(self) -> list[Finding]:
        """Findings severe enough (error, critical) that the run is not clean whatever its
        probes say: another graph deployed, say (auditor.rules.deployed)."""
        return [f for f in self.findings if f.severity in FAILING_SEVERITIES]

    @property
    def exit_code(self) -> int:
        return 0 if self.outcome == CONSISTENT and not self.failing_findings else 1

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


MODES = ("closed-loop", "open-loop")


@dataclass(frozen=True)
class Episode:
    """One seed. Steps are numbered from 1 (the first action)."""

    seed: int
    steps: int
    action_diff: tuple[float, ...]
    """Closed loop: max |a_train - a_infer| over action dimensions, per step (clipped actions)."""
    open_action_diff: tuple[float, ...]
    """Open loop: the same, with the infer stack fed the train stack's observations."""
    obs_diff: tuple[float, ...]
    """Closed loop: max |obs_train - obs_infer| after each step."""
    train_return: float
    infer_return: float
    first_exceed: int | None
    open_first_exceed: int | None

    @property
    def return_diff(self) -> float:
        return abs(self.train_return - self.infer_return)


@dataclass(frozen=True)
class RolloutResult:
    pair: str
    train: str
    infer: str
    probe: str
    variant: str
    env: str
    status: str
    message: str
    action_atol: float
    return_atol: float
    episodes: tuple[Episode, ...] = ()
    log: str = ""

    def summary(self, mode: str) -> dict[str, float]:
        """The figures stored per mode ("closed-loop", "open-loop") over all episodes; a
        first-exceed step of 0 means "never"."""
        eps = self.episodes
        if not eps:
            return {}
        if mode == "closed-loop":
            diffs = [d for e in eps for d in e.action_diff]
            firsts = [e.first_exceed for e in eps if e.first_exceed is not None]
            return {
                "max_action_diff": max(diffs, default=0.0),
                "mean_action_diff": float(np.mean(diffs)) if diffs else 0.0,
                "first_exceed_step": float(min(firsts, default=0)),
                "episodes_exceeding": float(len(firsts)),
                "max_obs_diff": max((d for e in eps for d in e.obs_diff), default=0.0),
                "train_return": float(np.mean([e.train_return for e in eps])),
                "infer_return": float(np.mean([e.infer_return for e in eps])),
                "max_return_diff": max(e.return_diff for e in eps),
                "steps": float(sum(e.steps for e in eps)),
            }
        diffs = [d for e in eps for d in e.open_action_diff]
        firsts = [e.open_first_exceed for e in eps if e.open_first_exceed is not None]
        return {
            "max_action_diff": max(diffs, default=0.0),
            "mean_action_diff": float(np.mean(diffs)) if diffs else 0.0,
            "first_exceed_step": float(min(firsts, default=0)),
            "episodes_exceeding": float(len(firsts)),
            "steps": float(sum(e.steps for e in eps)),
        }

    def episode_metrics(self) -> dict[str, dict[str, dict[str, float]]]:
        """mode -> "seed<N>" -> figures of that episode, for the history database."""
        closed: dict[str, dict[str, float]] = {}
        opened: dict[str, dict[str, float]] = {}
        for e in self.episodes:
            closed[f"seed{e.seed}"] = {
                "max_action_diff": max(e.action_diff, default=0.0),
                "first_exceed_step": float(e.first_exceed or 0),
                "max_obs_diff": max(e.obs_diff, default=0.0),
                "train_return": e.train_return,
                "infer_return": e.infer_return,
                "return_diff": e.return_diff,
            }
            opened[f"seed{e.seed}"] = {
                "max_action_diff": max(e.open_action_diff, default=0.0),
                "first_exceed_step": float(e.open_first_exceed or 0),
            }
        return {"closed-loop": closed, "open-loop": opened}


def open_loop_status(r: RolloutResult) -> str:
    if r.status == ERROR:
        return ERROR
    return DRIFT if any(e.open_first_exceed is not None for e in r.episodes) else CONSISTENT


@dataclass(frozen=True)
class LearnedOperator:
    """An operator a runtime build failed to load, as its own error said."""

    package: str
    version: str
    target: str
    operator: str
    message: str = ""
    learned_at: datetime | None = None
