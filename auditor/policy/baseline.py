"""Golden baselines: drift over time, not only between the two sides of a pair.

A pair comparison cannot see a change that hits both sides alike (a shared kernel library
upgraded on both hosts, a numpy that rounds differently in input generation). So the first
accepted (consistent) result of each probe variant on each stack is kept as its *golden*:
the outputs themselves (content-addressed, an artifact of kind "outputs"), their digest,
summary statistics, and on the infer side the pair's metrics. Every later run compares
each side's outputs with its golden (bitwise, then within the probe's tolerance) and the
pair's metrics with the golden's, and raises a ``baseline-drift`` finding when they moved.

An infer stack runs what a train stack exported, so its golden is kept per exporting train
stack (``source``). ``auditor baseline reset`` forgets goldens; the next accepted result
becomes the new one.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from auditor.compare.outputs import Tolerance, compare_output
from auditor.history.baselines import (
    CHANGED,
    DRIFTED,
    EQUAL,
    INCOMPARABLE,
    NEW,
    Golden,
    encode_outputs,
    summarize,
)
from auditor.results import Finding


@dataclass(frozen=True)
class BaselineCheck:
    """One side of a probe result against its golden. status: new (no golden yet; this result
    becomes it if accepted), equal (bitwise), changed (not bitwise, within tolerance), drift
    (out of tolerance), incomparable (the golden was taken with another probe version or
    other inputs)."""

    side: str
    stack: str
    source: str
    status: str
    message: str
    outputs_sha256: str
    inputs_sha256: str
    probe_version: str
    golden_run: int | None = None
    max_abs: float | None = None
    metric_changes: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    """Pair metrics (infer side) that differ from the golden's: output -> metric -> [golden, now]."""
    summary: dict[str, Any] = field(default_factory=dict)
    """What a new golden keeps: {"outputs": {name: stats}, "metrics": {output: {metric: value}}}."""


def check(
    golden: Golden | None,
    *,
    side: str,
    stack: str,
    source: str,
    probe_version: str,
    inputs_sha256: str,
    names: Sequence[str],
    outputs: Sequence[np.ndarray],
    tolerance_for: Callable[[str], Tolerance],
    pair_metrics: dict[str, dict[str, float]] | None = None,
) -> tuple[BaselineCheck, bytes]:
    """Compare one side's outputs with its golden; also return the outputs' canonical bytes
    (to be stored if this result becomes the golden)."""
    blob = encode_outputs(outputs)
    digest = hashlib.sha256(blob).hexdigest()
    summary: dict[str, Any] = {"outputs": summarize(names, outputs)}
    if pair_metrics is not None:
        summary["metrics"] = pair_metrics
    base = dict(
        side=side,
        stack=stack,
        source=source,
        outputs_sha256=digest,
        inputs_sha256=inputs_sha256,
        probe_version=probe_version,
        summary=summary,
    )
    if golden is None:
        return BaselineCheck(status=NEW, message="no golden yet: kept as golden if accepted", **base), blob
    base["golden_run"] = golden.run_id
    of_run = f"the golden of run {golden.run_id}" if golden.run_id is not None else "the golden"
    if golden.probe_version != probe_version or golden.inputs_sha256 != inputs_sha256:
        what = (
            f"probe version {golden.probe_version}, now {probe_version}"
            if golden.probe_version != probe_version
            else "other inputs (probe parameters changed)"
        )
        return (
            BaselineCheck(
                status=INCOMPARABLE,
                message=f"{of_run} was taken with {what}; `auditor baseline reset` to take a new one",
                **base,
            ),
            blob,
        )
    changes = _metric_changes(golden.summary.get("metrics", {}), pair_metrics or {})
    if digest == golden.outputs_sha256:
        status, message, max_abs = EQUAL, f"bitwise equal to {of_run}", 0.0
    elif len(golden.outputs) != len(outputs):
        status, max_abs = DRIFTED, math.inf
        message = f"{len(outputs)} outputs, {of_run} has {len(golden.outputs)}"
    else:
        comparisons = [
            compare_output(n, g, o, tolerance_for(n))
            for n, g, o in zip(names, golden.outputs, outputs, strict=True)
        ]
        max_abs = max((c.metrics["max_abs"] for c in comparisons), default=0.0)
        failed = [c for c in comparisons if not c.passed]
        if failed:
            status = DRIFTED
            message = f"out of tolerance against {of_run}: " + "; ".join(
                f"{c.output} {c.failing}/{c.total} elements (max abs {c.metrics['max_abs']:.3g})"
                for c in failed
            )
        else:
            status = CHANGED
            message = f"not bitwise equal to {of_run}, within tolerance (max abs {max_abs:.3g})"
    if changes:
        message += "; pair metrics moved: " + ", ".join(
            f"{out} {name} {_num(a)} -> {_num(b)}"
            for out, ms in changes.items()
            for name, (a, b) in ms.items()
        )
    return (
        BaselineCheck(status=status, message=message, max_abs=max_abs, metric_changes=changes, **base),
        blob,
    )


def _num(value: float) -> str:
    return f"{value:.3g}"


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _metric_changes(
    golden: dict[str, dict[str, float]], now: dict[str, dict[str, float]]
) -> dict[str, dict[str, list[float]]]:
    changes: dict[str, dict[str, list[float]]] = {}
    for output, metrics in now.items():
        for name, value in metrics.items():
            before = golden.get(output, {}).get(name)
            if before is not None and not _same(float(before), float(value)):
                changes.setdefault(output, {})[name] = [float(before), float(value)]
    return changes


def findings(results: Iterable[Any]) -> Iterable[Finding]:
    """A ``baseline-drift`` finding per side that moved (once per stack, probe, variant and
    source, however many pairs share that side): warning when out of tolerance, info when only
    the bits changed or the pair's metrics moved."""
    seen: set[str] = set()
    for r in results:
        for c in getattr(r, "baseline", ()):
            moved = c.status in (CHANGED, DRIFTED) or (c.status == EQUAL and c.metric_changes)
            if not moved:
                continue
            where = f"{c.stack} ({c.source} export)" if c.source else c.stack
            key = f"{c.stack}/{r.probe}/{r.variant}/baseline-drift" + (f"/{c.source}" if c.source else "")
            if key in seen:
                continue
            seen.add(key)
            yield Finding(
                "baseline-drift",
                "warning" if c.status == DRIFTED else "info",
                c.stack,
                key,
                f"{where} {r.probe} [{r.variant}]: {c.message}",
                {
                    "probe": r.probe,
                    "variant": r.variant,
                    "side": c.side,
                    "source": c.source,
                    "golden_run": c.golden_run,
                    "max_abs": c.max_abs,
                    "metric_changes": c.metric_changes,
                },
            )


def report_lines(checks: Sequence[BaselineCheck]) -> list[str]:
    """One line when every side is as its golden (or has none yet), else one per side that moved."""
    if not checks:
        return []
    quiet = [c for c in checks if c.status in (EQUAL, NEW) and not c.metric_changes]
    if len(quiet) == len(checks):
        runs = sorted({c.golden_run for c in checks if c.golden_run is not None})
        statuses = {c.status for c in checks}
        if statuses == {NEW}:
            return ["    baseline: no golden yet (kept when this result is accepted)"]
        text = "bitwise equal to golden" + (f" (run {', '.join(map(str, runs))})" if runs else "")
        return [f"    baseline: {text}" + ("; a side without golden gets one" if NEW in statuses else "")]
    lines = []
    for c in checks:
        if c in quiet:
            continue
        where = f"{c.stack} ({c.source} export)" if c.source else c.stack
        lines.append(f"    baseline {where}: {c.status.upper()}: {c.message}")
    return lines
