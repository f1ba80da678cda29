"""Golden baselines in the database: each probe variant's first accepted outputs per stack
(content-addressed, an artifact of kind "outputs") with their digest and summary, written in
the run's transaction, read back by the next cycle, listed and reset by `auditor baseline`.
The comparison against them is the cycle's (auditor.policy.baseline). Also the canonical byte
form of a list of tensors, shared with publications."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import Engine, delete, select
from sqlalchemy.orm import Session

from auditor.db import schema as m
from auditor.db.blobs import add_artifact
from auditor.results import CONSISTENT

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
            if session.scalar(select(m.Artifact.sha256).where(m.Artifact.sha256 == c.outputs_sha256)) is None:
                if data is None:
                    raise ValueError(
                        f"outputs {c.outputs_sha256[:12]} of {c.stack} are not in the cycle's blobs"
                    )
                add_artifact(
                    session,
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
    engine: Engine,
    probe: str | None = None,
    variant: str | None = None,
    stack: str | None = None,
    auditors: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """The goldens, as plain rows, ordered by stack, probe, variant, source; ``auditors``: only
    those kept by their runs."""
    with Session(engine) as s:
        stmt = _filtered(
            select(m.Baseline, m.Stack, m.Run.auditor_id)
            .join(m.Stack, m.Baseline.stack_id == m.Stack.id)
            .outerjoin(m.Run, m.Run.id == m.Baseline.run_id),
            probe,
            variant,
            stack,
        ).order_by(m.Stack.name, m.Baseline.probe, m.Baseline.variant, m.Baseline.source)
        if auditors:
            stmt = stmt.where(m.Run.auditor_id.in_(list(auditors)))
        return [
            {
                "auditor_id": auditor,
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
            for b, st, auditor in s.execute(stmt).all()
        ]


def reset(
    engine: Engine, probe: str | None = None, variant: str | None = None, stack: str | None = None
) -> int:
    """Forget the matching goldens (all of them without filters); returns how many."""
    with Session(engine) as s, s.begin():
        result = s.execute(_filtered(delete(m.Baseline), probe, variant, stack))
        return int(result.rowcount or 0)
