"""Compatibility rules: what the stacks' fingerprints and the exported models say before a
probe runs.

A rule is a plugin object (``auditor_rules`` hook) with a ``name``, a ``description`` and a
``check(context)`` that yields ``auditor.results.Finding`` objects. Each finding names the
facts it used (``details["facts"]``) and what to do (``details["action"]``); a fact that is
unknown (no Ascend install on a CPU host, a collector that failed) makes a rule stay silent
or say "info", never raise an alarm.

Rules run twice per cycle: rules with ``needs_artifacts=False`` as soon as every stack's
fingerprint is in, rules with ``needs_artifacts=True`` after the train stacks exported their
artifacts (MindIR, or the format each pair's infer runtime loads) and before the infer stacks
load them. A finding whose ``details["blocks"]`` lists
``{"pair", "probe", "variant"}`` entries (a missing key matches everything) makes those probe
variants pointless: the cycle reports the finding once as their result and does not attempt
them. The built-in rules are in ``auditor.plugins.default_rules``.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from auditor.config.tables import PairConfig, StackConfig
from auditor.results import Finding, LearnedMaximum
from auditor.rules.operator_support import operator_limits
from auditor.runtime import MINDIR, ArtifactFormat, RuntimeSpec

SEVERITIES = ("info", "warning", "error", "critical")


@dataclass(frozen=True)
class ExportedModel:
    """An artifact a train stack exported for one probe variant, and its summary as its format
    read it (``ArtifactFormat.read``; for a MindIR, ``auditor.worker.mindir.MindIRInfo`` as a
    dict). ``format``: the format's name."""

    train: str
    probe: str
    variant: str
    info: dict[str, Any]
    format: str = MINDIR.name


@dataclass
class RuleContext:
    """What the rules see. ``fingerprints`` holds each stack's fingerprint document (None when
    its worker did not start); ``exported`` is empty in the first pass."""

    stacks: dict[str, StackConfig]
    fingerprints: dict[str, dict[str, Any] | None]
    pairs: tuple[PairConfig, ...]
    exported: list[ExportedModel] = field(default_factory=list)
    learned_maxima: dict[tuple[str, str], LearnedMaximum] = field(default_factory=dict)
    operator_limits: dict[str, dict[str, str]] = field(default_factory=dict)
    """Stack name -> operator the stack's runtime cannot run in any graph -> where that is known
    from (the runtime plugin's table; ``auditor.rules.operator_support``)."""
    runtimes: dict[str, RuntimeSpec] = field(default_factory=dict)
    """The runtime plugins' specs by name: the format each infer runtime loads, version facts."""

    def runtime(self, stack: str) -> RuntimeSpec | None:
        """The spec of the stack's runtime, None when no plugin provides it."""
        config = self.stacks.get(stack)
        return self.runtimes.get(config.runtime) if config is not None else None

    def loads(self, stack: str) -> ArtifactFormat:
        """The format the stack's runtime loads (MindIR when unknown)."""
        spec = self.runtime(stack)
        return spec.loads if spec is not None else MINDIR

    def fingerprint(self, stack: str) -> dict[str, Any]:
        """The stack's document, {} when there is none."""
        return self.fingerprints.get(stack) or {}

    def section(self, stack: str, name: str) -> dict[str, Any]:
        """One section of a stack's document; {} when missing or when its collector failed."""
        value = self.fingerprint(stack).get(name)
        if not isinstance(value, dict) or set(value) == {"error"}:
            return {}
        return value

    def variants(self, pair: PairConfig, train: str) -> list[ExportedModel]:
        """The models ``train`` exported for the probes of ``pair``, in the format its infer
        stack loads."""
        fmt = self.loads(pair.infer).name
        return [e for e in self.exported if e.train == train and e.probe in pair.probes and e.format == fmt]


@dataclass(frozen=True)
class Rule:
    name: str
    description: str
    check: Callable[[RuleContext], Iterable[Finding]]
    needs_artifacts: bool = False


def with_remedy(f: Finding) -> str:
    """A finding's message and what to do about it, as a blocked probe's result says it."""
    action = f.details.get("action")
    return f"{f.message}; remedy: {action}" if action else f.message


def finding(
    rule: str,
    severity: str,
    subject: str,
    key: str,
    message: str,
    facts: dict[str, Any],
    action: str,
    kind: str | None = None,
    cause: tuple[str, str] | None = None,
    **details: Any,
) -> Finding:
    """A rule's finding in the shape every rule uses: facts and action in ``details``.
    ``cause``: (the cause, its summary in words) when the same cause shows on several
    subjects (an infer runtime without an operator, whichever stack exported the model): the
    cycle reports it once, "<summary> on <subjects>" (auditor.cycle.causes)."""
    if severity not in SEVERITIES:
        raise ValueError(f"rule {rule}: severity must be one of {', '.join(SEVERITIES)}, not {severity!r}")
    return Finding(
        kind or rule,
        severity,
        subject,
        key,
        message,
        {"rule": rule, "facts": facts, "action": action, **details},
        *((cause[0], cause[1], (subject, "")) if cause else ()),
    )


def run_rules(rules: Iterable[Rule], context: RuleContext) -> list[Finding]:
    """Every rule's findings; a rule that raises gives one finding saying so, and the others run."""
    found: list[Finding] = []
    for rule in rules:
        try:
            found.extend(rule.check(context))
        except Exception as exc:
            found.append(
                Finding(
                    "rule-error",
                    "warning",
                    rule.name,
                    f"{rule.name}/rule-error",
                    f"rule {rule.name} failed, its checks were skipped: {type(exc).__name__}: {exc}",
                    {"rule": rule.name, "traceback": traceback.format_exc(limit=5)},
                )
            )
    return found


def file_rules(
    rules: Iterable[Rule],
    label: str,
    probe: str,
    variant: str,
    info: dict[str, Any],
    stacks: dict[str, StackConfig],
    fingerprints: dict[str, dict[str, Any] | None],
    learned_maxima: dict[tuple[str, str], LearnedMaximum],
    runtimes: dict[str, RuntimeSpec],
) -> list[Finding]:
    """Every rule on "a file -> each of ``stacks``", the file standing for an export of a train
    stack ``label`` whose MindSpore is the file's producer: its version and operators against
    each runtime, the producer's release against the serving one, and the stacks' own facts.
    ``auditor check`` and a cycle's ``[models.NAME]`` judge a file with this one evaluation,
    so they say the same of it."""
    producer = info.get("model_version")
    seen = {**fingerprints, label: {"framework": {"mindspore": {"version": producer}}} if producer else {}}
    context = RuleContext(
        dict(stacks),
        seen,
        tuple(PairConfig(label, n, (probe,)) for n in stacks),
        [ExportedModel(label, probe, variant, dict(info))],
        dict(learned_maxima),
        operator_limits(stacks, seen, runtimes),
        dict(runtimes),
    )
    return run_rules(rules, context)


def blocked(found: Iterable[Finding], pair: str, probe: str, variant: str) -> Finding | None:
    """The first finding that blocks this probe variant on this pair, if any."""
    for f in found:
        for b in f.details.get("blocks") or ():
            if (
                b.get("pair", pair) == pair
                and b.get("probe", probe) == probe
                and b.get("variant", variant) == variant
            ):
                return f
    return None


def major_minor(version: str | None) -> str | None:
    """'8.2.0.0.201' -> '8.2', '8.2.RC1' -> '8.2'; None when the text has no such prefix."""
    if not version:
        return None
    parts = str(version).split(".")
    if len(parts) < 2 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    return f"{int(parts[0])}.{int(parts[1])}"


def version_tuple(version: str | None) -> tuple[int, ...] | None:
    """The leading numeric components: '2.4.10' -> (2, 4, 10), '25.0.rc1.1' -> (25, 0)."""
    if not version:
        return None
    out: list[int] = []
    for part in str(version).split("."):
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        out.append(int(digits))
        if digits != part:
            break
    return tuple(out) or None
