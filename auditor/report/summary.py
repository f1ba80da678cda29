"""What the compact report says about a cycle, as plain data: one line per probe variant or
model, the failing outputs and checks of a failing one, each finding cause once, and the
outcome (the worst status and the count of every status). ``auditor audit`` prints it as text
(auditor.report.text) and puts the same structure under ``"report"`` in ``--json``.

A pair whose every variant is consistent, or whose every variant is stopped by one and the
same cause, is folded into one line; in a pair with failures, the consistent variants are
counted in one line (``rest``), and a failing variant that fails exactly as one above it says
so (``same_as``) instead of repeating its outputs. ``--verbose`` prints the full tables instead.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from auditor.compare.ratio_names import CORRECTIONS
from auditor.compare.verdicts import MetricCheck, OutputComparison
from auditor.config.tables import SEVERITIES
from auditor.history.publication import summary_of
from auditor.policy import baseline
from auditor.report import fleet_view
from auditor.results import (
    CONSISTENT,
    DRIFT,
    ERROR,
    INCOMPATIBLE,
    STATUS_ORDER,
    UNSUPPORTED,
    CycleResult,
    Finding,
    HostTelemetry,
    ProbeResult,
    RolloutResult,
    blocked_by,
)

RESULT_KINDS = (DRIFT, ERROR, INCOMPATIBLE, UNSUPPORTED)
"""Kinds of the findings a cycle makes of its own results (one per result that is not
consistent): the result's line says them, so they are not listed again as causes."""

ROLLOUT_KINDS = ("rollout-divergence",)

MAX_CHECKS = 3
"""Failing checks named on a failing variant's line; the rest are counted."""


@dataclass(frozen=True)
class FailingOutput:
    """One output out of tolerance: how far, how much of it, and what tolerance would pass."""

    output: str
    failing: int
    total: int
    max_abs: float
    max_rel: float
    min_atol: float
    """The smallest atol (at the configured rtol) that would have passed."""
    min_rtol: float
    nan_inf: int
    """Elements that are NaN/Inf on one side only (no tolerance passes those)."""
    atol: float | None = None
    rtol: float | None = None
    shape_mismatch: str | None = None

    @property
    def share(self) -> float:
        return self.failing / self.total if self.total else 1.0

    @classmethod
    def of(cls, c: OutputComparison, tolerance: Mapping[str, float]) -> FailingOutput:
        m = c.metrics
        return cls(
            c.output,
            c.failing,
            c.total,
            float(m.get("max_abs", math.nan)),
            float(m.get("max_rel", math.nan)),
            float(m.get("min_atol", math.nan)),
            float(m.get("min_rtol", math.nan)),
            int(m.get("nan_inf_mismatch", 0) or 0),
            tolerance.get("atol"),
            tolerance.get("rtol"),
            c.shape_mismatch,
        )


@dataclass(frozen=True)
class FailingCheck:
    metric: str
    output: str | None
    value: float
    limit: float | None
    bound: str
    """"<=" (the value must be at most the limit), ">=" (at least) or "" (reported only)."""

    @classmethod
    def of(cls, k: MetricCheck) -> FailingCheck:
        return cls(k.metric, k.output, k.value, k.limit, k.bound())


@dataclass
class Line:
    """One probe variant or model on one pair (or a rollout): its status and why."""

    kind: str
    """"probe", "model" or "rollout"."""
    probe: str
    variant: str
    status: str
    text: str
    """The verdict in words: how close a consistent one came, what failed, or the reason."""
    cause: int | None = None
    """The number of the cause (below) that says why, when the reason is a finding's."""
    outputs: list[FailingOutput] = field(default_factory=list)
    checks: list[FailingCheck] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Localization of a drift, a golden baseline that moved (each a line, cut to fit)."""
    ppo: str | None = None
    """The drift in PPO terms: said whole, never cut (auditor.report.summary.ppo_sentence)."""
    same_as: str | None = None
    """The line above it in its block that failed the same way ("ppo_policy [fp16]"), if any."""

    @property
    def label(self) -> str:
        if self.kind == "rollout":
            return f"rollout {self.probe} [{self.variant}]"
        return self.probe if self.kind == "model" else f"{self.probe} [{self.variant}]"

    def failure(self) -> tuple[Any, ...]:
        """How it fails, without the numbers: the same outputs (or checks) failing, with the
        same localization, is one cause said twice (the numbers are in --verbose)."""
        outputs = tuple((o.output, o.shape_mismatch is not None) for o in self.outputs)
        checks = tuple((k.metric, k.output) for k in self.checks) if not outputs else ()
        # what `auditor fix` offers names the variant: not part of how it fails
        notes = tuple(n.split(",")[0] for n in self.notes if not n.startswith(FIX_NOTES))
        return (self.status, self.cause, outputs, checks, notes)


@dataclass
class Block:
    """A pair (or a model on a serving stack) and its lines; ``folded`` says the whole block
    in one line when every line has one status and one reason."""

    pair: str
    title: str
    lines: list[Line] = field(default_factory=list)
    folded: str | None = None
    rest: str | None = None
    """Not folded: its consistent lines counted in one ("5 probe variants (2 bitwise equal)
    and the rollout"), when there are two or more."""
    also: list[str] = field(default_factory=list)
    """The other hosts of its group stack whose block says the same as this one's host
    (auditor.report.fleet_view): a failing block is shown once, for its first host."""


@dataclass(frozen=True)
class Cause:
    """A finding, said once: what it is, how bad, and what to do."""

    ref: int
    kind: str
    severity: str
    subject: str
    text: str
    action: str | None = None


@dataclass(frozen=True)
class Outcome:
    worst: str
    counts: dict[str, int]
    """Every probe-result status (zero included), then rollouts and worker failures if any."""
    exit_code: int


@dataclass
class Summary:
    title: str
    stacks: list[dict[str, Any]]
    blocks: list[Block]
    causes: list[Cause]
    outcome: Outcome
    devices: list[str] = field(default_factory=list)
    """A line per host about its NPU telemetry (a host without NPUs says so here, once)."""
    unchecked: list[str] = field(default_factory=list)
    """What the run could not check, and why (auditor.results.CycleResult.unchecked)."""
    publications: list[str] = field(default_factory=list)
    """Split mode: what the run published and which publication it read (``publication_lines``)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def status_counts(result: CycleResult) -> dict[str, int]:
    """The count of every status (each named, zero included) over every part of the run: its
    results and rollouts, its stacks that could not start or whose worker failed, and its
    findings that give a status (auditor.results.CycleResult.status_counts)."""
    counts = dict.fromkeys(STATUS_ORDER, 0)
    counts.update(result.status_counts())
    return counts


def summarize(result: CycleResult) -> Summary:
    causes = _causes(result.findings, fleet_view.hosts_of(result.stacks))
    by_message = {}
    for f, cause in causes:
        # A finding of several places (auditor.cycle.causes) keeps each place's own message.
        for message in [f.message] + [w.get("message", "") for w in f.details.get("where", ())]:
            if message:
                by_message.setdefault(message, cause.ref)
                by_message.setdefault(message.splitlines()[0], cause.ref)
    # A result a rule stopped points at the rule's finding even where its own message says more
    # (the remedy, the load not attempted).
    blockers = [(f, cause.ref) for f, cause in causes if f.details.get("blocks")]
    blocks: dict[str, Block] = {}
    for r in result.results:
        block = blocks.get(r.pair)
        if block is None:
            block = blocks[r.pair] = Block(r.pair, _title(r))
        block.lines.append(_line(r, by_message, blockers))
    for ro in result.rollouts:
        block = blocks.setdefault(ro.pair, Block(ro.pair, ro.pair.replace("->", " → ")))
        block.lines.append(_rollout_line(ro, by_message))
    for block in blocks.values():
        block.folded = _fold(block)
        if block.folded is None:
            block.rest = _consistent(block)
            _same_as(block)
    return Summary(
        _header(result),
        fleet_view.stacks_folded([_stack(s, by_message) for s in result.stacks.values()]),
        _members_folded(list(blocks.values())),
        list({c.ref: c for _, c in causes}.values()),
        Outcome(result.outcome, status_counts(result), result.exit_code),
        [text for text, _ in fleet_view.texts_folded([host_telemetry_line(t) for t in _read(result)])],
        [text for text, _ in fleet_view.texts_folded(result.unchecked)],
        publication_lines(result),
    )


def _read(result: CycleResult) -> list[HostTelemetry]:
    """The hosts' telemetry a person reads: a host none of whose stacks started is left out
    (its stacks' failure is said, once; its telemetry's failure is the same cause)."""
    down = {s.host for s in result.stacks.values() if s.error}
    down -= {s.host for s in result.stacks.values() if not s.error}
    return [t for t in result.telemetry if t.host not in down or t.available]


def _family(block: Block) -> tuple[tuple[str, str], str] | None:
    """A block of a group member's pair: (its train side and group stack), its host."""
    train, _, infer = block.pair.rpartition("->")
    m = fleet_view.member(infer)
    return ((train, m[0]), m[1]) if m is not None else None


def _signature(block: Block) -> tuple[Any, ...]:
    """What two members' blocks must share to be said once: statuses, failures and causes."""
    return (block.folded, tuple((ln.kind, ln.label, ln.status, ln.cause, ln.failure()) for ln in block.lines))


def _members_folded(blocks: list[Block]) -> list[Block]:
    """A group's members that say the same as one block (auditor.report.fleet_view): a
    consistent one titled with its count of hosts; a failing one shown for its first host,
    titled with every host where they are a few ranges, else with the others in ``also``."""
    out = []
    for block, hosts in fleet_view.fold(blocks, _family, _signature):
        if len(hosts) > 1:
            fam = _family(block)
            assert fam is not None
            base = fam[0][1]
            if all(ln.status == CONSISTENT for ln in block.lines):
                title = block.title.replace(f"{base}@{hosts[0]}", f"{base} on {len(hosts)} hosts")
                block = replace(block, title=title)
            elif len(ranged := fleet_view.ranges(hosts)) <= fleet_view.RANGES_WIDTH:
                block = replace(block, title=block.title.replace(f"{base}@{hosts[0]}", f"{base} on {ranged}"))
            else:
                block = replace(block, also=hosts[1:])
        out.append(block)
    return out


def publication_lines(result: CycleResult) -> list[str]:
    """Split mode: what this run published (stacks, each export's MindIR digest, when) and
    which publication each ``source = "db"`` stack's pairs were compared with, and its age."""
    out = []
    when = datetime.fromtimestamp(result.finished_at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    for pub in result.publications:
        s = summary_of(pub, run_id=result.run_id)
        out.append(
            f"  published {s.stack}: {len(s.items)} export{'s' if len(s.items) != 1 else ''} at {when}"
        )
        out += [f"      {probe} [{variant}]  MindIR sha256 {sha[:16]}" for probe, variant, sha in s.items]
        if not s.items:
            out.append("      nothing: every export of this stack failed (see its results)")
    now = datetime.fromtimestamp(result.started_at, UTC).replace(tzinfo=None)
    for s in result.read_publications:
        out.append(f"  read {s.stack}: {s.describe(now)}")
        out += [f"      {probe} [{variant}]  MindIR sha256 {sha[:16]}" for probe, variant, sha in s.items]
    return ["", "Publications (split mode)", *out] if out else []


def not_checked_lines(unchecked: list[str]) -> list[str]:
    """The "Not checked" block: each thing the run could not check, with why."""
    if not unchecked:
        return []
    out = ["", "Not checked (the run cannot be called consistent)"]
    for line in unchecked:
        first, *rest = line.splitlines()
        out += [f"  ? {first}"] + [f"      {more}" for more in rest[:3]]
    return out


def _header(result: CycleResult) -> str:
    when = datetime.fromtimestamp(result.started_at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    run = f"run {result.run_id}" if result.run_id is not None else "not stored"
    took = result.finished_at - result.started_at
    return f"auditor audit · {result.config} · {run} · {when} · {took:.1f} s"


def _stack(s: Any, causes: Mapping[str, int] | None = None) -> dict[str, Any]:
    """A stack's entry: its state, its problem, and the finding that says the problem (``cause``,
    its reference in the report: the line then points at it instead of saying it again)."""
    fp = s.fingerprint or {}
    rt = fp.get("runtime") if isinstance(fp.get("runtime"), dict) else fp  # the worker's hello
    version = f"{rt.get('runtime_package', s.runtime)} {rt.get('runtime_version', '?')}" if fp else None
    if s.error:  # "stack X on host H: " is the line's own name already
        state, problem = "unavailable", _OWN_NAME.sub("", s.error.splitlines()[0], 1)
    elif s.problems:
        state, problem = "worker failed", s.problems[0].splitlines()[0]
    else:
        state, problem = ("ok" if fp else "not run"), None
    return {
        "name": s.name,
        "role": s.role,
        "runtime": s.runtime,
        "version": version,
        "python": rt.get("python") if fp else None,
        "host": s.host,
        "state": state,
        "problem": problem,
        "cause": (causes or {}).get(problem_line) if (problem_line := _first_line(s)) else None,
    }


def _first_line(s: Any) -> str:
    """The first line of a stack's error, else of its first worker problem ("" for neither)."""
    said = s.error or (s.problems[0] if s.problems else "")
    return said.splitlines()[0] if said else ""


def is_model(r: ProbeResult) -> bool:
    """A ``[models.NAME]`` result (auditor.cycle.user_models): pair ``NAME:REFERENCE->STACK``."""
    return r.variant == "model" and r.pair.startswith(f"{r.probe}:")


def reference_label(r: ProbeResult) -> str:
    """The reference side of a result as a person calls it: the train stack, the model's
    reference stack, or "golden"."""
    return r.pair.split(":", 1)[1].split("->", 1)[0] if is_model(r) else r.train


def _title(r: ProbeResult) -> str:
    if is_model(r):
        return f"model {r.probe}: {reference_label(r)} → {r.infer}"
    return r.pair.replace("->", " → ")


def result_line(r: ProbeResult) -> Line:
    """One result's line on its own (``auditor compare``)."""
    return _line(r, {})


def _line(r: ProbeResult, causes: Mapping[str, int], blockers: Sequence[tuple[Finding, int]] = ()) -> Line:
    kind = "model" if is_model(r) else "probe"
    line = Line(kind, r.probe, r.variant, r.status, "")
    failed = [c for c in r.outputs if not c.passed]
    failed_checks = [k for k in r.checks if not k.passed]
    if r.status == CONSISTENT:
        line.text = _closeness(r)
    elif r.status == DRIFT and (failed or failed_checks):
        parts = []
        if failed:
            plural = "s" if len(r.outputs) > 1 else ""
            parts.append(f"{len(failed)} of {len(r.outputs)} output{plural} out of tolerance")
        if failed_checks:
            parts.append(f"{len(failed_checks)} of {len(r.checks)} checks failed")
        line.text = ", ".join(parts)
        line.outputs = [FailingOutput.of(c, r.thresholds.get(c.output, {})) for c in failed]
        line.checks = [FailingCheck.of(k) for k in failed_checks]
    else:
        first = r.message.splitlines()[0] if r.message else ""
        # a side that failed for a cause said once (a stack that did not start): "infer side: <it>"
        line.cause = causes.get(r.message) or causes.get(first) or causes.get(_SIDE.sub("", first, 1))
        if line.cause is None:
            line.cause = next((ref for f, ref in blockers if blocked_by(f, r)), None)
        line.text = "" if line.cause is not None else (r.message.splitlines() or [""])[0]
    if kind == "model" and r.outputs:
        line.text += f" · {_samples(r)} compared with {reference_label(r)}"
    if r.localization is not None:
        line.notes.append(f"localized: {r.localization.message}")
    line.ppo = ppo_words(r, compact=True) if r.status == DRIFT else None  # does it matter to training?
    moved = baseline.report_lines(r.baseline)
    if moved and not moved[0].startswith("    baseline: "):
        line.notes += [m.strip() for m in moved]
    line.notes += conversion_words(r)  # what the serving stack really ran
    line.notes += fix_words(r)
    return line


FIX_NOTES = ("to fix: ", "fixed export: ")
"""How fix_words' notes begin."""


def fix_words(r: ProbeResult) -> list[str]:
    """What `auditor fix` offers for a drift it can address: the fixed export already found
    (auditor.cycle.fix_hints), else the command that searches it."""
    if r.fix is None or r.status != DRIFT:
        return []
    found = r.fix.get("available")
    if not found:
        return [f"{FIX_NOTES[0]}{r.fix['command']}"]
    cells = found.get("cells") or []
    kept = ", ".join(c or "own ops" for c in cells) or "no cell"
    return [f"{FIX_NOTES[1]}fix {found['id']} keeps {kept} in float32 (auditor history --fixes)"]


def ppo_words(r: ProbeResult, compact: bool = False) -> str | None:
    """The importance-ratio checks (auditor.compare.ratios) in one sentence a trainer reads: what
    the stacks' difference alone does to a PPO update. None without them."""
    words = ppo_sentence({k.metric: k.value for k in r.checks if k.output is None}, compact)
    # the trainer correction the verdict judged by ([ppo] trainer), in that trainer's words first
    judged = next((k for k in r.checks if k.metric in CORRECTIONS and k.limit is not None), None)
    if words is None or judged is None or not judged.message:
        return words
    return f"{judged.message}; {words}"


def ppo_sentence(figures: Mapping[str, float | None], compact: bool = False) -> str | None:
    """The answer in PPO terms from a result's figures (its checks in a cycle, its stored metrics
    in ``auditor show``, the HTML report): the share PPO would clip, the share truncated
    importance sampling truncates and the effective sample size, always; ``compact`` (the
    compact report's one line): nothing more; else the samples without a valid weight and the
    ratio's tail too. None without the importance ratios."""
    clip, ess = figures.get("ppo_clip_share"), figures.get("ess")
    if clip is None or ess is None:
        return None
    eps, cap = figures.get("clip_epsilon") or 0.2, figures.get("tis_cap") or 2.0
    n, bad, tis = figures.get("samples"), figures.get("invalid_samples"), figures.get("tis_share")
    truncate = f", truncate {100 * tis:.2f}% at w > {cap:g}" if tis is not None else ""
    if compact:  # one line: the shares and the ESS of how many samples
        of = f" of {int(n):,}" if n else ""
        return (
            f"in PPO terms, the stacks alone clip {100 * clip:.2f}% at ε {eps:g}{truncate}; ESS {ess:.4f}{of}"
        )
    of = f" of {int(n):,} samples" if n else ""
    words = f"in PPO terms, the stacks alone would clip {100 * clip:.2f}%{of} at epsilon {eps:g} (0 expected)"
    words += f"{truncate}; ESS {ess:.4f}"
    if bad:
        words += f"; {int(bad):,} without a valid weight"
    p99, top = figures.get("ratio_p99"), figures.get("ratio_max")
    if p99 is not None and top is not None:
        words += f"; ratio p99 {p99:.4g}, max {top:.4g}"
    f_clip, f_ess = figures.get("floor_ppo_clip_share"), figures.get("floor_ess")
    if f_clip is not None and f_ess is not None:  # what noise alone reads on the same states
        rerun = " and a rerun" if figures.get("floor_rerun") else ""
        words += f" (noise floor, rounding{rerun}: clip {100 * f_clip:.2f}%, ESS {f_ess:.4f})"
    return words


def conversion_words(r: ProbeResult) -> list[str]:
    """What the serving stack ran when it converts (auditor.policy.convert): the converter's
    output, options and version, and what the converter ignored without a word."""
    c = r.conversion
    if c is None:
        return []
    info = c.info
    opts = info.get("options") or {}
    words = [
        f"{info.get('format', '?')} {c.size} bytes sha256 {c.sha256[:12]}",
        f"optimize {opts.get('optimize')}",
    ]
    if opts.get("weight_fp16"):
        words.append("weight_fp16")
    if info.get("config_file"):
        words.append(f"config {info['config_file']}")
    version = (info.get("converter") or {}).get("version") or "?"
    out = [f"served as converted by MindSpore Lite {version}: " + ", ".join(words)]
    if info.get("ignored_input_shape"):
        names = ", ".join(info["ignored_input_shape"])
        out.append(f"! input_shape names no input of the model, the converter ignored it: {names}")
    if info.get("unknown_config_sections"):
        names = ", ".join(f"[{n}]" for n in info["unknown_config_sections"])
        out.append(f"! the converter does not know these config sections and ignored them: {names}")
    return out


def host_telemetry_line(t: HostTelemetry) -> str:
    """One host's NPU telemetry in a line: how many NPUs were read and through which stack, the
    hottest chip, the NPUs whose views failed; or why nothing was read."""
    if not t.available:
        what = "NOT READ" if t.failed else "no NPUs, nothing recorded"
        return f"host {t.host}: {what}: {(t.reason.splitlines() or [''])[0]}"
    hot = [c.values["temperature_c"] for n in t.npus for c in n.chips if "temperature_c" in c.values]
    failing = [n.npu for n in t.npus if n.errors]
    words = f"{len(t.npus)} NPU(s) read through {t.stack} ({t.calls} npu-smi calls, {t.seconds:.2f} s)"
    if hot:
        words += f", hottest {max(hot):g} °C"
    if failing:
        words += f"; views failed on NPU {', '.join(map(str, failing))}"
    return f"host {t.host}: {words}"


def _samples(r: ProbeResult) -> str:
    n = r.samples or (r.infer_latency.batch if r.infer_latency is not None else 0)
    return f"{n} sample{'s' if n != 1 else ''}" if n else "the outputs"


def _closeness(r: ProbeResult) -> str:
    """How close a consistent result came: bitwise, or its largest difference."""
    parts = []
    if r.outputs:
        if all(c.metrics.get("bitwise_equal") == 1.0 for c in r.outputs):
            parts.append("bitwise equal")
        else:
            worst = max(r.outputs, key=lambda c: c.metrics.get("max_abs", 0.0))
            parts.append(f"max abs {_num(worst.metrics.get('max_abs'))} ({worst.output})")
    if r.checks:
        parts.append(f"{len(r.checks)} check{'s' if len(r.checks) > 1 else ''} ok")
    return ", ".join(parts) or "within tolerance"


def _rollout_line(ro: RolloutResult, causes: Mapping[str, int]) -> Line:
    line = Line("rollout", ro.probe, ro.variant, ro.status, "")
    closed = ro.summary("closed-loop")
    episodes = f"{ro.env}, {len(ro.episodes)} episode{'s' if len(ro.episodes) != 1 else ''}"
    if ro.status == CONSISTENT and closed:
        line.text = f"{episodes}, max |Δaction| {_num(closed['max_action_diff'])}"
    else:
        line.text = f"{episodes}: {(ro.message.splitlines() or [''])[0]}"
    return line


def _fold(block: Block) -> str | None:
    """One line for a block whose every line says the same: all consistent, or all stopped by
    one cause."""
    statuses = {ln.status for ln in block.lines}
    probes = [ln for ln in block.lines if ln.kind != "rollout"]
    if not probes or len(statuses) != 1:
        return None
    status = statuses.pop()
    if status == CONSISTENT:
        return "consistent: " + _counted(block.lines) if len(probes) > 1 else None
    causes = {ln.cause for ln in block.lines}
    if len(causes) == 1 and None not in causes:  # all stopped by one cause said below
        rollout = " and the rollout" if len(probes) < len(block.lines) else ""
        what = f"{len(probes)} probe variants" if len(probes) > 1 else f"{probes[0].label}"
        return f"{status.upper()}: {what}{rollout} [{causes.pop()}]"
    return None


def _counted(lines: Sequence[Line]) -> str:
    """Consistent lines in words: "6 probe variants (2 bitwise equal) and the rollout"."""
    probes = [ln for ln in lines if ln.kind != "rollout"]
    bitwise = sum(ln.text.startswith("bitwise equal") for ln in probes)
    words = f"{len(probes)} probe variant{'s' if len(probes) != 1 else ''}"
    words += f" ({bitwise} bitwise equal)" if bitwise else ""
    rollouts = len(lines) - len(probes)
    if rollouts:
        words += " and the rollout" if rollouts == 1 else f" and {rollouts} rollouts"
    return words


def _consistent(block: Block) -> str | None:
    """Beside failing lines, two or more consistent ones in one ("the others")."""
    lines = [ln for ln in block.lines if ln.status == CONSISTENT]
    return _counted(lines) if 2 <= len(lines) < len(block.lines) else None


def _same_as(block: Block) -> None:
    seen: dict[tuple[Any, ...], str] = {}
    for ln in block.lines:
        if ln.status == CONSISTENT or not (ln.outputs or ln.checks):
            continue
        ln.same_as = seen.get(ln.failure())
        seen.setdefault(ln.failure(), ln.label)


def _causes(
    findings: Iterable[Finding], groups: Mapping[str, Sequence[str]] | None = None
) -> list[tuple[Finding, Cause]]:
    """Each finding cause once, the most severe first: what the rules, drift checks, side
    checks, latency and the stacks found. A cycle's findings about its own results (one per
    result that is not consistent) are said by the results' lines instead."""
    listed: list[Finding] = []
    seen: set[tuple[str, str]] = set()
    for f in findings:
        own = f.kind in RESULT_KINDS and "rule" not in f.details and "probe" in f.details
        if own or f.kind in ROLLOUT_KINDS:
            continue
        if (f.kind, f.message) in seen:
            continue
        seen.add((f.kind, f.message))
        listed.append(f)
    rank = {s: i for i, s in enumerate(SEVERITIES)}
    listed.sort(key=lambda f: -rank.get(f.severity, len(SEVERITIES)))
    # One cause said of many members of a group, host names aside, is one (fleet_view); its
    # findings share it.
    out: list[tuple[Finding, Cause]] = []
    texts = [f"{_cause_text(f)}\0{f.kind}\0{f.severity}" for f in listed]  # one kind and severity
    for ref, (text, same) in enumerate(fleet_view.texts_folded(texts), 1):
        f = listed[same[0]]
        words = fleet_view.members_in_words(text.split("\0", 1)[0], groups or {})
        cause = Cause(ref, f.kind, f.severity, f.subject, words, f.details.get("action"))
        out += [(listed[i], cause) for i in same]
    return out


_SIDE = re.compile(r"^(train|infer) side: ")
_OWN_NAME = re.compile(r"^stack \S+(?: on host \S+)?: ")


def _cause_text(f: Finding) -> str:
    if f.kind == "version-drift" and f.details.get("changes"):
        head = f.message.splitlines()[0].partition(": ")[0]
        return f"{head}: " + "; ".join(c["words"] for c in f.details["changes"])
    return " ".join(f.message.split())


def format_number(value: float | None) -> str:
    """Three significant digits for tables; "-" for a missing value, non-finite spelled out."""
    if value is None:
        return "-"
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return "0" if value == 0 else f"{value:.3g}"


_num = format_number
