"""The outcome of one audit cycle, as plain data: what the report prints, what the history
database stores and what ``--json`` emits.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from auditor.compare.presets import PRESETS
from auditor.compare.ratio_names import MEAN_TERMS, by_trainer
from auditor.compare.verdicts import MetricCheck, OutputComparison

CONSISTENT, DRIFT, INCOMPATIBLE, ERROR = "consistent", "drift", "incompatible", "error"
UNSUPPORTED = "unsupported"
"""The inference runtime cannot load or run an operator this probe variant uses (a random op,
say): a fact about the runtime, reported for the variant, not a failure of the probe."""
UNCHECKED = "unchecked"
"""Something the config asks for could not be checked (a collector that failed, a watched
glob that could not be read, a model file that is missing, a publication missing or older
than its limit, a plugin that did not import, a rule that raised): nothing is known about it,
so the run cannot be called consistent. A result with this status, or a finding of this kind,
says what was not checked and why."""
STATUS_ORDER = (CONSISTENT, UNCHECKED, DRIFT, UNSUPPORTED, INCOMPATIBLE, ERROR)
"""Every status, from the best to the worst: a run's outcome is the worst of its parts."""
STATUS_SEVERITY = {
    DRIFT: "warning",
    UNSUPPORTED: "warning",
    UNCHECKED: "warning",
    INCOMPATIBLE: "critical",
    ERROR: "error",
}
"""The severity of the finding a result of each status (other than consistent) gives."""
RULE_ERROR = "rule-error"
"""The kind of finding of a rule that raised: its checks did not run (a status of unchecked)."""
FAILING_SEVERITIES = ("error", "critical")
"""A finding of these severities makes a run's outcome at least error (or its own status when
its kind is one: ``finding_status``), hence its exit status 1."""


def worst(statuses: Iterable[str]) -> str | None:
    """The worst of ``statuses`` in STATUS_ORDER (an unknown status ranks as consistent);
    None for none."""
    return max(statuses, key=lambda s: STATUS_ORDER.index(s) if s in STATUS_ORDER else 0, default=None)


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
        import numpy as np  # here, not at the top: the daemon reads results without numpy

        us = np.asarray(ns, dtype=np.float64) / 1000.0
        p50, p90, p99 = np.percentile(us, [50, 90, 99])
        return cls(batch, len(ns), float(p50), float(p90), float(p99), float(us.mean()))

    @property
    def throughput(self) -> float:
        """Samples per second at the median call time (batch / p50)."""
        return self.batch / (self.p50_us / 1e6) if self.p50_us > 0 else float("inf")


@dataclass(frozen=True)
class Throughput:
    """Samples per second the serving (infer) side runs at one batch size: batch / p50 of the
    timed calls (auditor.policy.latency)."""

    batch: int
    samples_per_s: float


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
    cause: str = ""
    """What went wrong, without where: the findings of one cycle that share a cause are
    reported as one (auditor.cycle.causes), keyed by it, so that alerts follow the cause and
    not each stack, pair or variant it shows on. Empty: the finding is a cause of its own."""
    summary: str = ""
    """The cause in words, without the place ("NaN masked to -10 by obs_normalizer"); the
    reported message is "<summary> on <where it holds>"."""
    place: tuple[str, str] = ("", "")
    """Where this finding holds: (stack or pair, variant or "")."""
    example: str = ""
    """One occurrence in figures (a value, an input), shown after the places."""


def finding_status(f: Finding) -> str | None:
    """The status a finding gives the run it belongs to: its kind when the kind is a status (a
    result's own finding, an unchecked one), unchecked for a rule that raised, error for any
    other finding of severity error or critical; None for warnings and information, which the
    report lists without changing the outcome."""
    if f.kind in STATUS_ORDER:
        return f.kind
    if f.kind == RULE_ERROR:
        return UNCHECKED
    if f.severity in FAILING_SEVERITIES:
        return ERROR
    return None


class CycleAborted(Exception):
    """The cycle was stopped from outside (signal, Ctrl-C) before it finished."""


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
    # -- probe suite (auditor.policy.latency, auditor.policy.localize, auditor.policy.baseline) --
    train_latencies: tuple[Latency, ...] = ()
    """Latency at the other batch sizes of ``[latency] batches`` (the probe's own is train_latency)."""
    infer_latencies: tuple[Latency, ...] = ()
    localization: Any = None
    """auditor.policy.localize.Localization of a drifting variant: the first layer out of tolerance."""
    baseline: tuple[Any, ...] = ()
    """auditor.policy.baseline.BaselineCheck per side: the outputs against their golden."""
    samples: int = 0
    """How many samples (rows of the input batch) both sides ran and were compared on."""
    throughput: tuple[Throughput, ...] = ()
    """The serving side's samples/s at each batch it was timed at (its own, ``[latency]
    batches`` and ``sweep``), smallest batch first."""
    saturation_batch: int | None = None
    """The smallest of those batches whose throughput reaches ``[latency] saturation`` of the
    highest (None: fewer than two batches timed)."""
    conversion: Artifact | None = None
    """What the serving stack's MindSpore Lite converter made of ``artifact`` and ran in its
    place (auditor.policy.convert): digest, format, options, converter version, source."""
    coverage: dict[str, str] = field(default_factory=dict)
    """Each check of auditor.policy.checks: "ran", "on a drift" (armed), or why it did not run
    (in ``--json``; an all-clear rests on what ran)."""
    fix: dict[str, Any] | None = None
    """A drift `auditor fix` can address (auditor.cycle.fix_hints): ``command``, and
    ``available`` (the newest fix found for this policy on this pair, from the history) or None."""


@dataclass(frozen=True)
class LearnedMaximum:
    """The highest MindIR version a runtime build loads, as its own rejection message said.
    Stored, so that later cycles check it before attempting a load (see auditor.rules.engine)."""

    package: str
    version: str
    max_mind_ir_version: int
    message: str = ""
    learned_at: datetime | None = None


NPU_TELEMETRY, TELEMETRY_UNAVAILABLE = "npu-telemetry", "telemetry-unavailable"
"""Finding kinds of NPU telemetry (auditor.cycle.telemetry): a value at or above a limit; an NPU
or host whose views could not be read."""


@dataclass(frozen=True)
class ChipTelemetry:
    """What one chip of an NPU (or its card's MCU, chip ``mcu``) reported in one sample:
    metric -> value (auditor.worker.npu_metrics names them)."""

    chip: str
    values: dict[str, float]


@dataclass(frozen=True)
class NpuTelemetry:
    npu: int
    chips: tuple[ChipTelemetry, ...] = ()
    errors: tuple[str, ...] = ()
    """The npu-smi views that failed for this NPU, each with npu-smi's own words."""
    unsupported: tuple[str, ...] = ()
    """Views this device does not offer (not an error)."""


@dataclass(frozen=True)
class HostTelemetry:
    """One telemetry sample of a host's NPUs (auditor.cycle.telemetry), taken through one of
    its stacks' workers. Volatile: never part of a fingerprint."""

    host: str
    stack: str
    at: float
    """When the sample arrived (the auditor's clock, Unix time)."""
    available: bool
    reason: str | None = None
    """Why there is no sample: no npu-smi, no NPU (``failed`` False), or npu-smi failing."""
    failed: bool = False
    """npu-smi is there but could not list the NPUs: nothing was checked (not "no NPUs")."""
    npus: tuple[NpuTelemetry, ...] = ()
    seconds: float = 0.0
    calls: int = 0

    def points(self) -> list[tuple[int, str, str, float]]:
        """(npu, chip, metric, value) of every value of the sample."""
        return [(n.npu, c.chip, k, v) for n in self.npus for c in n.chips for k, v in c.values.items()]


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
    """Per rolled-out pair (closed and open loop; auditor.policy.rollout)."""
    learned_operators: list[LearnedOperator] = field(default_factory=list)
    """Operators a load failed on (stored; auditor.rules.operator_support)."""
    publications: list[Any] = field(default_factory=list)
    """auditor.history.publication.PublicationSet per publishing train stack (split mode)."""
    telemetry: list[HostTelemetry] = field(default_factory=list)
    """One NPU telemetry sample per host (auditor.cycle.telemetry)."""

    read_publications: list[Any] = field(default_factory=list)
    """auditor.history.publication.PublicationSummary of each publication read this run for a
    ``source = "db"`` stack (split mode: which export its pairs were compared with)."""
    shared: dict[str, Any] | None = None
    """With ``[queue]``: the pool and cycle, the serving hosts this auditor audited (``mine``),
    those other auditors took (``others``), those nobody audited (``unaudited``), those it took
    over from a stalled auditor (``taken_over``) and the stacks the run covers
    (auditor.queue.shared.Shares)."""

    def _own_findings(self) -> set[str]:
        """Keys of the findings that restate a result's or a rollout's status, or a stack's
        failure, and of the rule findings that blocked probe variants of this run (an
        incompatibility, an unsupported operator: the blocked results say it): counted once,
        as those parts. Only parts that are themselves not consistent stand for a finding, so
        no severe finding is left out of the outcome."""
        failing = [r for r in self.results if r.status != CONSISTENT]
        keys = {_result_key(r) for r in failing}
        said = {(r.status, r.message) for r in failing}
        keys |= {
            f.key
            for f in self.findings
            if any((f.kind, m) in said for m in _messages(f)) or any(blocked_by(f, r) for r in failing)
        }
        keys |= {
            f"{r.pair}/{r.probe}/{r.variant}/rollout/{ERROR}" for r in self.rollouts if r.status == ERROR
        }
        broken = [n for n, s in self.stacks.items() if s.error or s.problems]
        keys |= {f"{n}/{kind}" for n in broken for kind in ("stack-unavailable", "worker-failure")}
        keys |= {  # one finding for the members of a group that failed alike (auditor.cycle.causes)
            f.key
            for f in self.findings
            if f.kind in ("stack-unavailable", "worker-failure")
            and all(w.get("subject") in broken for w in f.details.get("where") or [{"subject": f.subject}])
        }
        return keys

    def status_counts(self) -> dict[str, int]:
        """How many parts of the run have each status (in STATUS_ORDER, those present): every
        probe result, every rollout, every stack that could not start or whose worker failed,
        and every other finding that gives a status (``finding_status``)."""
        found = [r.status for r in self.results] + [r.status for r in self.rollouts]
        found += [ERROR for s in self.stacks.values() if s.error or s.problems]
        own = self._own_findings()
        found += [status for f in self.findings if f.key not in own and (status := finding_status(f))]
        return {s: found.count(s) for s in STATUS_ORDER if s in found}

    @property
    def outcome(self) -> str:
        """The worst status of the run (STATUS_ORDER): consistent only when every part is, so
        never with a finding of severity error or critical (``finding_status``)."""
        return worst(self.status_counts()) or CONSISTENT

    @property
    def unchecked(self) -> list[str]:
        """What was not checked, and why: one line each."""
        own = self._own_findings()
        lines = [
            f"{r.pair} {r.probe} [{r.variant}]: {r.message}" for r in self.results if r.status == UNCHECKED
        ]
        return lines + [
            f.message for f in self.findings if f.key not in own and finding_status(f) == UNCHECKED
        ]

    @property
    def failing_findings(self) -> list[Finding]:
        """Findings severe enough (error, critical) that the run is not clean whatever its
        probes say: another graph deployed, say (auditor.rules.deployed)."""
        return [f for f in self.findings if f.severity in FAILING_SEVERITIES]

    @property
    def exit_code(self) -> int:
        """0 exactly when the outcome is consistent: the outcome word and the exit status
        always agree (a severe finding makes the outcome at least error)."""
        return 0 if self.outcome == CONSISTENT else 1

    def to_json(self) -> dict[str, Any]:
        def result_json(r: ProbeResult) -> dict[str, Any]:
            d = asdict(r)
            d["outputs"] = [asdict(o) for o in r.outputs]
            d["checks"] = [asdict(c) for c in r.checks]
            # the importance-ratio figures under each trainer's own logged names, where it has them
            named = by_trainer({c.metric: c.value for c in r.checks if c.output is None})
            if named:
                d["in_trainer_terms"] = named
            return d

        return {
            "run_id": self.run_id,
            "config": self.config,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "outcome": self.outcome,
            "statuses": self.status_counts(),
            "unchecked": self.unchecked,
            "stacks": {
                n: {**asdict(s), "fingerprint_digest": s.fingerprint_digest} for n, s in self.stacks.items()
            },
            "results": [result_json(r) for r in self.results],
            "rollouts": [
                {**asdict(r), "summary": {mode: r.summary(mode) for mode in ("closed-loop", "open-loop")}}
                for r in self.rollouts
            ],
            "findings": [asdict(f) for f in self.findings],
            "telemetry": [asdict(t) for t in self.telemetry],
            "shared": self.shared,
        }


def _result_key(r: ProbeResult) -> str:
    """The key of the finding a result of another status than consistent gives."""
    return f"{r.pair}/{r.probe}/{r.variant}/{r.status}"


def _messages(f: Finding) -> list[str]:
    """A finding's message and, for one merged from several places (auditor.cycle.causes),
    each place's own message: any of them may restate a result."""
    where = f.details.get("where") or ()
    return [f.message] + [w.get("message", "") for w in where if isinstance(w, dict)]


def blocked_by(f: Finding, r: ProbeResult) -> bool:
    """Whether rule finding ``f`` blocked result ``r`` (``details["blocks"]``: entries of
    pair, probe and variant, a missing key matching everything; auditor.rules.engine)."""
    return any(
        isinstance(b, dict)
        and b.get("pair", r.pair) == r.pair
        and b.get("probe", r.probe) == r.probe
        and b.get("variant", r.variant) == r.variant
        for b in f.details.get("blocks") or ()
    )


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
    log_ratio_sum: float | None = None
    """Sampled mode: sum over the infer side's steps of log pi_train(a|s) - log pi_infer(a|s),
    the episode's sequence-level log importance weight (None: deterministic mode)."""
    ppo_clip_share: float | None = None
    """Sampled mode: share of its steps whose ratio PPO would clip."""
    ess: float | None = None
    """Sampled mode: effective sample size of its steps' ratios (1.0: no loss)."""
    log_ratio_mean: float | None = None
    """Sampled mode: the mean of its steps' log-weights, the log of its geometric-mean ratio
    (comparable across episode lengths, unlike the sum; inf: a step without a valid weight)."""
    log_ratio_min: float | None = None
    log_ratio_max: float | None = None
    """Sampled mode: its worst steps' log-weights, downwards and upwards."""
    removed: dict[str, float] = field(default_factory=dict)
    """Sampled mode: per trainer preset (auditor.compare.presets), the share of its steps that
    correction removes (1.0: the whole episode rejected)."""
    terms: dict[str, float] = field(default_factory=dict)
    """Sampled mode: its steps' mismatch under the names trainers use (auditor.compare.ratios
    MismatchTerms: KL both ways, JS, chi2, NeMo's and verl's forms, ...)."""

    @property
    def return_diff(self) -> float:
        return abs(self.train_return - self.infer_return)

    @property
    def sampled(self) -> bool:
        return self.log_ratio_sum is not None

    def ratio_figures(self) -> dict[str, float]:
        """The sampled mode's figures of the episode (empty in deterministic mode)."""
        if self.log_ratio_sum is None or self.ppo_clip_share is None or self.ess is None:
            return {}
        out = {"log_ratio_sum": self.log_ratio_sum, "ppo_clip_share": self.ppo_clip_share, "ess": self.ess}
        for key in ("log_ratio_mean", "log_ratio_min", "log_ratio_max"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


def removed_summary(episodes: Iterable[Episode]) -> dict[str, float]:
    """Per trainer preset over sampled episodes: ``NAME_share``, the share of episodes it
    touches (rejects, or removes a step of), and ``NAME_step_share``, the share of all their
    steps it removes (empty where no episode carries the presets' figures)."""
    eps = [e for e in episodes if e.removed]
    steps = sum(e.steps for e in eps)
    out: dict[str, float] = {}
    for p in PRESETS:
        shares = [(e.removed[p.name], e.steps) for e in eps if p.name in e.removed]
        if not shares:
            continue
        out[p.metric] = sum(1 for s, _ in shares if s > 0) / len(shares)
        out[f"{p.name}_step_share"] = sum(s * n for s, n in shares) / max(steps, 1)
    return out


def terms_summary(episodes: Iterable[Episode]) -> dict[str, float]:
    """The mismatch terms over every sampled step: each mean term weighted by the episodes'
    steps, the lowest ratio and the largest |log w| over all (empty without them)."""
    eps = [e for e in episodes if e.terms]
    steps = sum(e.steps for e in eps)
    if not eps or not steps:
        return {}
    out = {
        name: sum(e.terms[name] * e.steps for e in eps) / steps
        for name in MEAN_TERMS
        if all(name in e.terms for e in eps)
    }
    if all("ratio_min" in e.terms for e in eps):
        out["ratio_min"] = min(e.terms["ratio_min"] for e in eps)
    if all("abs_log_ratio_max" in e.terms for e in eps):
        out["abs_log_ratio_max"] = max(e.terms["abs_log_ratio_max"] for e in eps)
    return out


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
        import numpy as np  # here, not at the top: the daemon reads results without numpy

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
                **self.sampled_summary(),
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

    def sampled_summary(self) -> dict[str, float]:
        """Sampled mode, over every episode: the largest clip share, the lowest ESS and the
        range of the episodes' log weights (empty in deterministic mode)."""
        figures = [e.ratio_figures() for e in self.episodes if e.sampled]
        if not figures:
            return {}
        out = {
            "max_ppo_clip_share": max(f["ppo_clip_share"] for f in figures),
            "min_ess": min(f["ess"] for f in figures),
            "min_log_ratio_sum": min(f["log_ratio_sum"] for f in figures),
            "max_log_ratio_sum": max(f["log_ratio_sum"] for f in figures),
        }
        means = [abs(f["log_ratio_mean"]) for f in figures if "log_ratio_mean" in f]
        if means:  # the episode furthest from 1 in geometric mean, whatever its length
            out["max_abs_log_ratio_mean"] = max(means)
        out.update(removed_summary([e for e in self.episodes if e.sampled]))
        out.update(terms_summary([e for e in self.episodes if e.sampled]))
        return out

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
                **e.ratio_figures(),
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
