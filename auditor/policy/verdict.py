"""The verdict of a policy on one serving stack against its reference: one function for every
policy (auditor.policy.subject), the cycle's and ``auditor compare``'s.

In order: a serving stack a rule blocked (unsupported, incompatible); a reference that failed;
a serving side that failed to load or run (read with its runtime's failure forms) or failed
later; then the outputs compared element-wise (Polygraphy's rule, a policy's rounding envelope
where it has one), each side against its own rerun in a process started cold (where the
policy's repeatability decides), the policy's comparators (importance ratios on its head), and
the input classes compared per class. Drift names each failing output and check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from auditor.compare import input_classes
from auditor.compare.floor import RERUN
from auditor.compare.outputs import (
    Comparator,
    MetricCheck,
    OutputComparison,
    Tolerance,
    check_text,
    compare_output,
    failure_text,
)
from auditor.compare.ratios import BEHAVIOUR
from auditor.config.thresholds import DTYPE_TOLERANCES
from auditor.policy.side import Side
from auditor.policy.subject import REFERENCE, SERVED, Subject
from auditor.results import CONSISTENT, DRIFT, ERROR, INCOMPATIBLE, UNSUPPORTED, ProbeResult
from auditor.rules.engine import with_remedy
from auditor.stacks.failures import Diagnosis
from auditor.stacks.worker import WorkerError


class CheckError(Exception):
    """A comparator, a rounding envelope or a rerun could not produce its checks: the result
    is an error."""


@dataclass(frozen=True)
class Sides:
    """Who the two sides of a verdict are, in the words its messages use."""

    reference: str
    """"train side", or "the reference (network ... on ms20)"."""
    served: str
    """"infer side", or the serving stack's name."""
    file: str = ""
    """The served file's path, said before a load or first call's failure (a model's)."""
    reference_label: str = "train side"
    """How the count of outputs names the reference: "train side", "the reference (ms20)"."""


def judged(
    base: dict[str, Any],
    comparisons: Sequence[OutputComparison],
    checks: Sequence[MetricCheck],
    note: str = "",
    unlike: str | None = None,
) -> ProbeResult:
    """The verdict on element-wise comparisons and checks: drift saying each failing output and
    check, else consistent (``note`` is added to the message either way). ``unlike``: why the
    reference is not the served file's to begin with (a golden recorded for another file): a
    difference is then no evidence about the stacks, an error saying so first; a pass still
    passes, with it said. Each limited check's limit is recorded in ``base``'s thresholds,
    under its output ("*": the whole)."""
    thresholds = base.setdefault("thresholds", {})
    for c in checks:
        if c.limit is not None:
            thresholds.setdefault(c.output or "*", {})[c.metric] = c.limit
    failed = [failure_text(c) for c in comparisons if not c.passed]
    failed += [check_text(c) for c in checks if not c.passed]
    status, message = (DRIFT, "; ".join(failed)) if failed else (CONSISTENT, "all outputs within tolerance")
    if unlike and failed:
        status, message = ERROR, f"{unlike}; measured: {message}"
    elif unlike:
        note += f" ({unlike})"
    return ProbeResult(
        status=status, message=message + note, outputs=tuple(comparisons), checks=tuple(checks), **base
    )


def rerun_checks(
    side: str, names: list[str], first: list[np.ndarray], again: list[np.ndarray], how: str = ""
) -> list[MetricCheck]:
    """One side's outputs against its own rerun in another process: bitwise the same, or the
    side does not repeat itself (``{side}_rerun_max_abs`` per output, limit 0). ``how``: how
    that process started, said where it does not repeat ("a cold process")."""
    checks = []
    where = how or "a fresh process"
    for n, a, b in zip(names, first, again, strict=False):
        c = compare_output(n, np.asarray(a), np.asarray(b), Tolerance(0.0, 0.0))
        words = "" if c.passed else f"{side} side gives other numbers in {where}"
        max_abs = c.metrics["max_abs"]
        checks.append(MetricCheck(f"{side}_rerun_max_abs", max_abs, c.passed, 0.0, n, words, "<="))
    return checks


def rerun_floor(
    names: list[str], first: list[np.ndarray], again: Any, tolerances: dict[str, Tolerance]
) -> dict[str, np.ndarray]:
    """The serving side's rerun as the comparators' noise floor (``std@rerun``, auditor.compare.
    floor), where it repeats itself within the policy's tolerances; nothing where it does not:
    a runtime that computes other values in another process (Lite 2.0 reading freed memory) is
    not noisy but wrong, its rerun check says so, and its rerun must not excuse the drift."""
    if not isinstance(again, list) or len(again) != len(names) or len(first) != len(names):
        return {}
    for n, a, b in zip(names, first, again, strict=True):
        if not compare_output(n, np.asarray(a), np.asarray(b), tolerances[n]).passed:
            return {}
    return {f"{n}{RERUN}": np.asarray(x) for n, x in zip(names, again, strict=True)}


def _own(outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The policy's own outputs, without those on drawn actions (``logp@behaviour``) or from a
    rerun (``std@rerun``)."""
    return {k: v for k, v in outputs.items() if BEHAVIOUR not in k and RERUN not in k}


@dataclass(frozen=True)
class Settings:
    """Comparator options from beyond the policy, by comparator: ``under`` what the policy's own
    options set (``[ppo]``), and ``over`` them (a pair's own ``trainer``)."""

    under: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    over: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def apply(self, name: str, options: Mapping[str, Any]) -> dict[str, Any]:
        return {**self.under.get(name, {}), **options, **self.over.get(name, {})}


def comparator_checks(
    subject: Subject,
    comparators: Mapping[str, Comparator],
    reference: dict[str, np.ndarray],
    served: dict[str, np.ndarray],
    envelopes: Mapping[str, np.ndarray] | None = None,
    where: str = "",
    settings: Settings = Settings(),
) -> list[MetricCheck]:
    """The policy's comparators on one pair of outputs (the reference side as reference), each
    with its options for this variant (with ``settings`` around them). ``envelopes``: the
    policy's rounding envelopes of these outputs, given to every comparator as the option
    ``rounding``. ``where``: the config key the options come from, for the error's words."""
    checks: list[MetricCheck] = []
    for name in subject.comparators:
        comparator = comparators.get(name)
        if comparator is None:
            raise CheckError(
                f"{subject.kind} {subject.name} uses comparator {name!r}, which no loaded plugin provides "
                f"(loaded: {', '.join(sorted(comparators)) or 'none'})"
            )
        options = settings.apply(name, subject.options(name))
        if envelopes:
            options["rounding"] = dict(envelopes)
        sides = (reference, served) if comparator.drawn else (_own(reference), _own(served))
        try:
            found = comparator.compare(*sides, options)
        except Exception as exc:
            source = (where or "probes.{name}.comparators.{comparator}").format(
                name=subject.name, comparator=name
            )
            raise CheckError(
                f"comparator {name} failed on {subject.kind} {subject.name} [{subject.variant}] "
                f"(options from {source}): {type(exc).__name__}: {exc}"
            ) from exc
        checks.extend(found)
    return checks


def envelopes_of(subject: Subject, inputs: list[np.ndarray] | None) -> dict[str, np.ndarray]:
    """The policy's rounding envelopes of outputs computed on ``inputs`` (None: its own); a
    hook that raises is a CheckError."""
    try:
        return subject.envelopes(inputs)
    except Exception as exc:
        raise CheckError(
            f"{subject.kind} {subject.name} [{subject.variant}]: its rounding(params) raised "
            f"{type(exc).__name__}: {exc}"
        ) from exc


def class_checks(
    subject: Subject, names: list[str], reference: Side, served: Side, served_name: str
) -> list[MetricCheck]:
    """The two sides compared on each input class, and a class the serving side could not run
    (a runtime that fails on NaN input) as a failing check. A policy drawing from seeded random
    ops in its graph is left out: the generator's state moves on with every call. Where the
    policy computes in float16 and nothing evaluates it in float64, a sweep's elements beyond
    tolerance are counted, not judged (its rounding grows with the sweep's magnitudes)."""
    if subject.stochastic:
        return []
    judge_sweeps = not subject.fp16 or subject.declared.reference is not None
    dtypes = {n: str(np.asarray(o).dtype) for n, o in zip(names, reference.outputs or (), strict=False)}
    checks = input_classes.pair_checks(
        names,
        reference.classes,
        served.classes,
        lambda name: subject.tolerance(name, dtypes.get(name)),
        swept_limit=judge_sweeps,
    )
    checks += [
        MetricCheck(
            "class_run", 1.0, False, 0.0, f"@{cls}", f"{served_name} did not run the {cls} inputs: {why}"
        )
        for cls, why in served.class_errors.items()
    ]
    return checks


def fp16_note(subject: Subject, comparisons: Sequence[OutputComparison], dtypes: list[str]) -> str:
    """What a result says of a file that computes in fp16 inside: that it does, which
    thresholds judged its wider outputs, and the tolerance that would pass each of them."""
    info = subject.file_info
    if subject.inside is None or info is None:
        return ""
    wide = [
        (c, d)
        for c, d in zip(comparisons, dtypes, strict=False)
        if d not in DTYPE_TOLERANCES and not c.shape_mismatch
    ]
    ops = ", ".join((info.float16_ops or ())[:6])
    text = f" (the file computes in float16 inside: {ops} in float16"
    if not wide:
        return text + ")"
    said = [
        f"{c.output} ({d}) with "
        + ("your thresholds" if subject.user_set(c.output) else "the float16 thresholds")
        + (
            f", passes at atol {c.metrics['min_atol']:.3g} or rtol {c.metrics['min_rtol']:.3g}"
            if c.passed
            else ""
        )
        for c, d in wide
    ]
    return text + "; judged " + "; ".join(said) + ")"


def another_file(subject: Subject) -> str | None:
    """A golden recorded for another file than the one served: the difference both sides show
    is the files', never the stacks'."""
    golden, info = subject.golden, subject.file_info
    return None if golden is None or info is None else golden.another_file(subject.name, info.sha256)


def judge(
    subject: Subject,
    reference: Side,
    served: Side,
    base: dict[str, Any],
    comparators: Mapping[str, Comparator],
    words: Sides,
    diagnose: Callable[[WorkerError, str], Diagnosis],
    reference_failure: Callable[[WorkerError], tuple[str, str] | None] = lambda error: None,
    settings: Settings = Settings(),
) -> ProbeResult:
    """The verdict of ``subject`` served on one stack (``served``) against its ``reference``.
    ``base``: the result's identity (pair, stacks, policy, artifact, samples). ``diagnose``: a
    serving side's failed load or first call read with its runtime's forms (the load's log
    given). ``reference_failure``: what a failed reference means where it is not an error
    (an operator its exporter cannot write; a publication not there yet): (status, message)."""
    base = {**base}
    base["train_latency"] = reference.latency
    base["infer_latency"] = served.latency
    base["conversion"] = served.conversion
    names = subject.names(len(reference.outputs or served.outputs or subject.output_names))
    base["thresholds"] = {o: asdict(subject.tolerance(o)) for o in names}
    if served.blocked is not None:
        status = UNSUPPORTED if served.blocked.kind == UNSUPPORTED else INCOMPATIBLE
        return ProbeResult(status=status, message=with_remedy(served.blocked), **base)
    if reference.error is not None:
        said = reference_failure(reference.error)
        status, message = (
            said if said is not None else (ERROR, f"{words.reference}: {reference.error.describe()}")
        )
        return ProbeResult(status=status, message=message, log=reference.error.log, **base)
    if served.error is not None:
        err = served.error
        if err.op not in ("load", "run"):  # a later request (timing, input classes...)
            return ProbeResult(status=ERROR, message=f"{words.served}: {err.describe()}", log=err.log, **base)
        d = diagnose(err, served.load_log)
        text = f"{words.file}: {d.text()}" if words.file else d.text()
        return ProbeResult(status=d.status, message=text, log=err.log, **base)
    assert reference.outputs is not None and served.outputs is not None
    if len(served.outputs) != len(reference.outputs):
        return ProbeResult(
            status=ERROR,
            message=f"{words.reference_label} gave {len(reference.outputs)} outputs, "
            f"{words.served} {len(served.outputs)}",
            **base,
        )
    names = subject.names(len(reference.outputs))
    dtypes = [str(np.asarray(r).dtype) for r in reference.outputs]
    tolerances = {n: subject.tolerance(n, d) for n, d in zip(names, dtypes, strict=True)}
    base["thresholds"] = {o: asdict(t) for o, t in tolerances.items()}
    try:
        envelopes = envelopes_of(subject, reference.inputs)
    except CheckError as exc:
        return ProbeResult(status=ERROR, message=str(exc), **base)
    comparisons = tuple(
        compare_output(n, np.asarray(r), np.asarray(s), tolerances[n], envelopes.get(n))
        for n, r, s in zip(names, reference.outputs, served.outputs, strict=True)
    )
    note = fp16_note(subject, comparisons, dtypes)
    by_name = (
        {n: np.asarray(x) for n, x in zip(names, reference.outputs, strict=True)},
        {n: np.asarray(x) for n, x in zip(names, served.outputs, strict=True)},
    )
    drawn = served.behaviour
    if drawn is not None and drawn.train is not None:  # both models on the same drawn actions
        by_name[0][drawn.output], by_name[1][drawn.output] = drawn.train, drawn.infer
    by_name[1].update(rerun_floor(names, served.outputs or [], served.rerun, tolerances))
    checks: list[MetricCheck] = []
    for role, side, label in ((REFERENCE, reference, "train"), (SERVED, served, "infer")):
        if role not in subject.repeat or side.rerun is None:
            continue
        if isinstance(side.rerun, WorkerError):
            who = words.reference if role == REFERENCE else words.served
            return ProbeResult(
                status=ERROR,
                message=f"{who}, rerun in {side.rerun_words or 'a fresh process'}: {side.rerun.describe()}",
                log=side.rerun.log,
                outputs=comparisons,
                **base,
            )
        checks += rerun_checks(label, names, side.outputs or [], side.rerun, side.rerun_words)
    try:
        checks += comparator_checks(
            subject, comparators, *by_name, envelopes, subject.options_source, settings
        )
    except CheckError as exc:
        return ProbeResult(status=ERROR, message=str(exc), outputs=comparisons, **base)
    checks += class_checks(subject, names, reference, served, words.served)
    return judged(base, comparisons, checks, note, another_file(subject))
