"""The units of work of a cycle: a probe variant to export once (``ProbeJob``), what its
train side produced (``TrainOutcome``) and what each infer side did with it
(``InferOutcome``), shared by the cycle and its suites."""

from __future__ import annotations

import hashlib
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

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
from auditor.config.thresholds import ProbeConfig
from auditor.extend.probe_spec import ProbeSpec, dtype_variant_name
from auditor.results import CONSISTENT, DRIFT, Artifact, Finding, Latency, ProbeResult
from auditor.runtime import MINDIR, ArtifactFormat
from auditor.stacks.worker import WorkerError


class CycleAborted(Exception):
    """The cycle was stopped from outside (signal, Ctrl-C) before it finished."""


@dataclass(frozen=True)
class ProbeJob:
    """One variant of a probe with its resolved parameters, exported in one format: one
    export, which several pairs may share. ``variant`` defaults to the name of the params'
    dtype ("fp32", ...); ``format`` is what the pairs' infer runtime loads."""

    spec: ProbeSpec
    params: dict[str, Any]
    variant: str = ""
    format: ArtifactFormat = MINDIR

    def __post_init__(self) -> None:
        if not self.variant:
            object.__setattr__(self, "variant", dtype_variant_name(self.params))

    @property
    def key(self) -> str:
        digest = hashlib.sha256(repr(sorted(self.params.items())).encode()).hexdigest()[:10]
        key = f"{self.spec.name}-{self.variant}-{digest}"
        return key if self.format.name == MINDIR.name else f"{key}-{self.format.name}"

    @property
    def dtype(self) -> str | None:
        dtype = self.params.get("dtype")
        return str(dtype) if dtype is not None else None

    @property
    def batch(self) -> int:
        return int(self.params.get("batch", 1))

    @property
    def rerun(self) -> bool:
        """Whether this variant is run again in a fresh worker process, to check repeatability."""
        return self.variant in self.spec.rerun


@dataclass
class TrainOutcome:
    outputs: list[np.ndarray] | None = None
    latency: Latency | None = None
    export: Path | None = None
    """The export, staged for the infer side to load."""
    artifact: Artifact | None = None
    error: WorkerError | None = None
    inputs: list[np.ndarray] | None = None
    """The inputs the outputs belong to, when they came from a publication (split mode)."""
    rerun: list[np.ndarray] | WorkerError | None = None
    """Outputs of the same build and inputs in a fresh worker process (jobs with ``rerun``)."""
    # probe suite (auditor.cycle.suite): other batch sizes
    latencies: list[Latency] = field(default_factory=list)
    batch_exports: dict[int, Path] = field(default_factory=dict)
    suite_errors: list[str] = field(default_factory=list)
    classes: dict[str, tuple[Any, list[np.ndarray]]] = field(default_factory=dict)
    """Input class -> (its batch, the outputs) (auditor.compare.input_classes)."""
    layers: dict[str, list[np.ndarray]] = field(default_factory=dict)
    """Input class ("random": the probe's own inputs) -> the exposed layers' outputs, from
    the probe built with its layers exposed (auditor.cycle.suite, for the side checks)."""
    layers_export: Path | None = None
    """That model's export (in the job's format), for the infer sides."""


@dataclass
class Behaviour:
    """The models run on actions drawn from the infer side's distribution (auditor.compare.ratios):
    the k batches of inputs and each side's in-graph log-probability of them, (k, states)."""

    output: str
    """The comparator's name for them: ``logp@behaviour``."""
    inputs: list[list[np.ndarray]]
    infer: np.ndarray
    train: np.ndarray | None = None


@dataclass
class InferOutcome:
    outputs: list[np.ndarray] | None = None
    latency: Latency | None = None
    error: WorkerError | None = None
    rerun: list[np.ndarray] | WorkerError | None = None
    blocked: Finding | None = None
    """A rule's finding that made loading pointless (the load was not attempted)."""
    load_log: str = ""
    """The runtime's log of the load (its warnings belong to a first call's failure)."""
    conversion: Artifact | None = None
    """What the stack's converter made of the export and ran (``[stacks.X.convert]``)."""
    # probe suite (auditor.cycle.suite): other batch sizes
    latencies: list[Latency] = field(default_factory=list)
    batch_models: dict[int, str] = field(default_factory=dict)
    suite_errors: list[str] = field(default_factory=list)
    classes: dict[str, tuple[Any, list[np.ndarray]]] = field(default_factory=dict)
    layers: dict[str, list[np.ndarray]] = field(default_factory=dict)
    behaviour: Behaviour | None = None
    """Both models on actions drawn from this side's policy (the importance ratios' samples)."""


def probe_code_error(stack: str, job: ProbeJob, exc: Exception) -> WorkerError:
    """A probe's auditor-side code (make_inputs, make_weights) raised: an error for this job
    only, with the traceback, like a failure inside the worker."""
    return WorkerError(
        stack,
        "probe",
        "error",
        f"probe {job.spec.name} ({job.spec.module}) raised {type(exc).__name__}: {exc}",
        traceback="".join(traceback.format_exception(exc)),
        error_type=type(exc).__name__,
    )


class CheckError(Exception):
    """A comparator or a rerun could not produce its checks: the result is an error."""


def judged(
    base: dict[str, Any],
    comparisons: Sequence[OutputComparison],
    checks: Sequence[MetricCheck],
    note: str = "",
) -> ProbeResult:
    """The verdict of a probe variant or a model on its element-wise comparisons and its
    checks: drift saying each failing output and check, else consistent (``note`` is added
    to the message either way). Each limited check's limit is recorded in ``base``'s
    thresholds, under its output ("*": the whole). A cycle, its model probes and ``auditor
    compare`` decide with this one function."""
    thresholds = base.setdefault("thresholds", {})
    for c in checks:
        if c.limit is not None:
            thresholds.setdefault(c.output or "*", {})[c.metric] = c.limit
    failed = [failure_text(c) for c in comparisons if not c.passed]
    failed += [check_text(c) for c in checks if not c.passed]
    status, message = (DRIFT, "; ".join(failed)) if failed else (CONSISTENT, "all outputs within tolerance")
    return ProbeResult(
        status=status, message=message + note, outputs=tuple(comparisons), checks=tuple(checks), **base
    )


def _own(outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The probe's own outputs, without those on drawn actions (``logp@behaviour``)."""
    return {k: v for k, v in outputs.items() if BEHAVIOUR not in k}


def rerun_checks(
    side: str, names: list[str], first: list[np.ndarray], again: list[np.ndarray]
) -> list[MetricCheck]:
    """One side's outputs against its own run in a fresh worker process: bitwise the same, or
    the side does not repeat itself (``{side}_rerun_max_abs`` per output, limit 0)."""
    checks = []
    for n, a, b in zip(names, first, again, strict=False):
        c = compare_output(n, np.asarray(a), np.asarray(b), Tolerance(0.0, 0.0))
        words = "" if c.passed else f"{side} side gives other numbers in a fresh process"
        max_abs = c.metrics["max_abs"]
        checks.append(MetricCheck(f"{side}_rerun_max_abs", max_abs, c.passed, 0.0, n, words, "<="))
    return checks


def own_inputs(job: ProbeJob, inputs: list[np.ndarray] | None) -> bool:
    """Are these the probe's own inputs (what its rounding envelopes are computed on)?"""
    if inputs is None:
        return True
    own = job.spec.make_inputs(job.params)
    return len(own) == len(inputs) and all(
        np.shape(x) == np.shape(y) and np.array_equal(x, y) for x, y in zip(own, inputs, strict=True)
    )


def rounding(job: ProbeJob, inputs: list[np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """The probe's rounding envelope per output (``rounding(params)``), where the outputs belong to
    its own inputs; none for other inputs. A hook that raises is a CheckError."""
    try:
        envelopes = job.spec.rounding(job.params)
        return envelopes if envelopes and own_inputs(job, inputs) else {}
    except Exception as exc:
        raise CheckError(
            f"probe {job.spec.name} [{job.variant}]: its rounding(params) raised {type(exc).__name__}: {exc}"
        ) from exc


def comparator_checks(
    job: ProbeJob,
    comparators: Mapping[str, Comparator],
    probe_cfg: ProbeConfig,
    train: dict[str, np.ndarray],
    infer: dict[str, np.ndarray],
    envelopes: Mapping[str, np.ndarray] | None = None,
) -> list[MetricCheck]:
    """The probe's comparators on one variant's outputs (train side as reference), each with
    its options for this variant and dtype: the probe's own, then the config's. A cycle and
    ``auditor compare`` judge outputs with this one function. ``envelopes``: the probe's
    rounding envelopes of these outputs (``rounding``), given to every comparator as the
    option ``rounding`` (output name -> array)."""
    defaults = job.spec.comparator_defaults(job.params)
    checks: list[MetricCheck] = []
    for name in job.spec.comparators:
        comparator = comparators.get(name)
        if comparator is None:
            raise CheckError(
                f"probe {job.spec.name} uses comparator {name!r}, which no loaded plugin provides "
                f"(loaded: {', '.join(sorted(comparators)) or 'none'})"
            )
        options = {**defaults.get(name, {}), **probe_cfg.comparator_options(name, job.variant, job.dtype)}
        if envelopes:
            options["rounding"] = dict(envelopes)
        sides = (train, infer) if comparator.drawn else (_own(train), _own(infer))
        try:
            found = comparator.compare(*sides, options)
        except Exception as exc:
            raise CheckError(
                f"comparator {name} failed on probe {job.spec.name} [{job.variant}] "
                f"(options from probes.{job.spec.name}.comparators.{name}): {type(exc).__name__}: {exc}"
            ) from exc
        checks.extend(found)
    return checks
