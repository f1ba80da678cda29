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
import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import Engine, delete, select
from sqlalchemy.orm import Session

from auditor import models as m
from auditor.compare import Tolerance, compare_output
from auditor.results import CONSISTENT, Finding
from auditor.shared_rows import add_once

KIND = "outputs"
NEW, EQUAL, CHANGED, DRIFTED, INCOMPARABLE = "new", "equal", "changed", "drift", "incomparable"

Key = tuple[str, str, str, str, str]
"""(host, stack, probe, variant, source)"""


def encode_outputs(arrays: Sequence[np.ndarray]) -> bytes:
    """A canonical byte form of a list of tensors: a JSON header line (dtype, shape of each),
    then each tensor's bytes in C order. Equal tensors give equal bytes, hence equal digests."""
    arrays = [np.asarray(a) for a in arrays]  # not ascontiguousarray: it makes a scalar 1-d
    header = json.dumps([{"dtype": a.dtype.str, "shape": list(a.shape)} for a in arrays]).encode()
    return header + b"\n" + b"".join(a.tobytes(order="C") for a in arrays)


def decode_outputs(data: bytes) -> list[np.ndarray]:
    header, _, body = data.partition(b"\n")
    out, pos = [], 0
    for spec in json.loads(header):
        dtype = np.dtype(spec["dtype"])
        count = int(np.prod(spec["shape"], dtype=np.int64))
        size = count * dtype.itemsize
        out.append(np.frombuffer(body[pos : pos + size], dtype=dtype).reshape(spec["shape"]).copy())
        pos += size
    if pos != len(body):
        raise ValueError(f"outputs blob has {len(body) - pos} bytes more than its header describes")
    return out


def inputs_digest(inputs: Sequence[np.ndarray]) -> str:
    return hashlib.sha256(encode_outputs(inputs)).hexdigest()


def summarize(names: Sequence[str], arrays: Sequence[np.ndarray]) -> dict[str, dict[str, float]]:
    """Mean, std, min, max of each output over its finite elements (what `baseline show` prints)."""
    out = {}
    for name, a in zip(names, arrays, strict=True):
        x = np.asarray(a, dtype=np.float64).ravel()
        x = x[np.isfinite(x)]
        out[name] = (
            {"mean": float(x.mean()), "std": float(x.std()), "min": float(x.min()), "max": float(x.max())}
            if x.size
            else {"mean": 0.0, "std": 0.0, "min": 0.0, "max": 0.0}
        )
    return out


@dataclass(frozen=True)
class Golden:
    host: str
    stack: str
    probe: str
    variant: str
    source: str
    side: str
    probe_version: str
    inputs_sha256: str
    outputs_sha256: str
    run_id: int | None
    created_at: datetime
    summary: dict[str, Any]
    outputs: list[np.ndarray] = field(default_factory=list, repr=False)

    @property
    def key(self) -> Key:
        return (self.host, self.stack, self.probe, self.variant, self.source)


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


# -- the database ---------------------------------------------------------------------------------
def load_goldens(engine: Engine) -> dict[Key, Golden]:
    """Every golden with its outputs, by (host, stack, probe, variant, source)."""
    out: dict[Key, Golden] = {}
    with Session(engine) as s:
        rows = s.execute(
            select(m.Baseline, m.Stack, m.Artifact)
            .join(m.Stack, m.Baseline.stack_id == m.Stack.id)
            .join(m.Artifact, m.Baseline.outputs_sha256 == m.Artifact.sha256)
        ).all()
        for b, stack, artifact in rows:
            g = Golden(
                stack.host,
                stack.name,
                b.probe,
                b.variant,
                b.source,
                b.side,
                b.probe_version,
                b.inputs_sha256,
                b.outputs_sha256,
                b.run_id,
                b.created_at,
                dict(b.summary),
                decode_outputs(artifact.data) if artifact.data is not None else [],
            )
            out[g.key] = g
    return out


def record(
    session: Session, run_id: int, results: Iterable[Any], stack_ids: dict[str, int], blobs: dict[str, bytes]
) -> int:
    """Keep as golden each side of an accepted (consistent) result that has none yet; called in
    the run's transaction. Returns how many goldens were created."""
    now = datetime.now(UTC).replace(tzinfo=None)
    created = 0
    for r in results:
        if r.status != CONSISTENT:
            continue
        for c in getattr(r, "baseline", ()):
            if c.status != NEW or c.stack not in stack_ids:
                continue
            exists = session.scalars(
                select(m.Baseline.id).where(
                    m.Baseline.stack_id == stack_ids[c.stack],
                    m.Baseline.probe == r.probe,
                    m.Baseline.variant == r.variant,
                    m.Baseline.source == c.source,
                )
            ).first()
            if exists is not None:
                continue
            data = blobs.get(c.outputs_sha256)
            if session.get(m.Artifact, c.outputs_sha256) is None:
                if data is None:
                    raise ValueError(
                        f"outputs {c.outputs_sha256[:12]} of {c.stack} are not in the cycle's blobs"
                    )
                add_once(
                    session,
                    m.Artifact,
                    sha256=c.outputs_sha256,
                    kind=KIND,
                    size=len(data),
                    created_at=now,
                    info={"probe": r.probe, "variant": r.variant, "stack": c.stack},
                    data=data,
                )
            session.add(
                m.Baseline(
                    stack_id=stack_ids[c.stack],
                    probe=r.probe,
                    variant=r.variant,
                    source=c.source,
                    side=c.side,
                    probe_version=c.probe_version,
                    inputs_sha256=c.inputs_sha256,
                    outputs_sha256=c.outputs_sha256,
                    run_id=run_id,
                    created_at=now,
                    summary=c.summary,
                )
            )
            session.flush()
            created += 1
    return created


def _filtered(stmt: Any, probe: str | None, variant: str | None, stack: str | None) -> Any:
    if probe:
        stmt = stmt.where(m.Baseline.probe == probe)
    if variant:
        stmt = stmt.where(m.Baseline.variant == variant)
    if stack:
        stmt = stmt.where(m.Baseline.stack_id.in_(select(m.Stack.id).where(m.Stack.name == stack)))
    return stmt


def show(
    engine: Engine, probe: str | None = None, variant: str | None = None, stack: str | None = None
) -> list[dict[str, Any]]:
    """The goldens, as plain rows, ordered by stack, probe, variant, source."""
    with Session(engine) as s:
        stmt = _filtered(
            select(m.Baseline, m.Stack).join(m.Stack, m.Baseline.stack_id == m.Stack.id),
            probe,
            variant,
            stack,
        ).order_by(m.Stack.name, m.Baseline.probe, m.Baseline.variant, m.Baseline.source)
        return [
            {
                "host": st.host,
                "stack": st.name,
                "side": b.side,
                "source": b.source,
                "probe": b.probe,
                "variant": b.variant,
                "probe_version": b.probe_version,
                "run_id": b.run_id,
                "created_at": b.created_at.isoformat() + "Z",
                "outputs_sha256": b.outputs_sha256,
                "inputs_sha256": b.inputs_sha256,
                "summary": b.summary,
            }
            for b, st in s.execute(stmt).all()
        ]


def reset(
    engine: Engine, probe: str | None = None, variant: str | None = None, stack: str | None = None
) -> int:
    """Forget the matching goldens (all of them without filters); returns how many."""
    with Session(engine) as s, s.begin():
        result = s.execute(_filtered(delete(m.Baseline), probe, variant, stack))
        return int(result.rowcount or 0)


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
