"""Split mode: exports published through the history database (see auditor.config.fleet).

A train-side auditor publishes, per train stack and probe variant, three content-addressed
artifacts: the exported MindIR, the inputs, and the train stack's outputs on those inputs
(encoded like golden baselines, auditor.policy.baseline.encode_outputs). They are written in the same
transaction as the run's results, the ``publications`` row first and its ``completed_at``
last: a publication without ``completed_at`` (a publisher that died half-way, or one written
by hand) is never consumed. The same MindIR published again adds no artifact row.

An infer-side auditor reads the latest complete publication of a remote train stack, runs
the MindIR on its local infer stacks with the published inputs, and compares with the
published outputs: the pair's result is stored as in single-auditor mode, against the same
stack row the publisher writes. Publications go with their run (retention); their artifacts
go once nothing refers to them.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from auditor.db import fingerprints
from auditor.db import schema as m
from auditor.db.blobs import add_artifact
from auditor.history.baselines import decode_outputs, encode_outputs
from auditor.results import Latency, fingerprint_digest


@dataclass
class PublishedItem:
    """One probe variant as published: what the infer side needs to run and compare it."""

    job_key: str
    probe: str
    probe_version: str
    variant: str
    mindir: bytes
    mindir_info: dict[str, Any]
    inputs: list[np.ndarray]
    outputs: list[np.ndarray]
    latency: Latency | None = None
    rerun: list[np.ndarray] | None = None
    """The outputs again in a fresh worker process, for variants checked for repeatability."""


@dataclass
class PublicationSet:
    """What one train stack publishes in one run."""

    stack: str
    host: str
    fingerprint: dict[str, Any] | None
    items: list[PublishedItem] = field(default_factory=list)


@dataclass(frozen=True)
class PublicationSummary:
    """A publication without its artifacts: what a person needs to tell which export a pair
    was compared with, and how old it is (printed by both sides, listed by ``auditor
    publications``)."""

    id: int | None
    stack: str
    host: str
    auditor_id: str
    run_id: int | None
    completed_at: datetime | None
    """UTC, naive (as stored); None for a set being published in this run, or never completed."""
    items: tuple[tuple[str, str, str], ...] = ()
    """(probe, variant, sha256 of the MindIR) of each probe variant."""

    def age_seconds(self, now: datetime | None = None) -> float | None:
        if self.completed_at is None:
            return None
        now = now or datetime.now(UTC).replace(tzinfo=None)
        return max(0.0, (now - self.completed_at).total_seconds())

    def describe(self, now: datetime | None = None) -> str:
        """``publication 12 of ms20 by train-zone (run 40, 2026-05-01 10:00:00 UTC, 5 min old):
        3 exports``."""
        when = []
        if self.run_id is not None:
            when.append(f"run {self.run_id}")
        if self.completed_at is not None:
            when.append(f"{self.completed_at:%Y-%m-%d %H:%M:%S} UTC")
            when.append(f"{age_words(self.age_seconds(now) or 0.0)} old")
        head = (
            f"publication {self.id} of {self.stack}"
            if self.id is not None
            else f"publication of {self.stack}"
        )
        by = f" by {self.auditor_id}" if self.auditor_id else ""
        return (
            f"{head}{by} ({', '.join(when)}): {len(self.items)} export{'s' if len(self.items) != 1 else ''}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "stack": self.stack,
            "host": self.host,
            "auditor_id": self.auditor_id,
            "run_id": self.run_id,
            "completed_at": self.completed_at.isoformat() + "Z" if self.completed_at else None,
            "age_seconds": self.age_seconds(),
            "items": [{"probe": p, "variant": v, "mindir_sha256": sha} for p, v, sha in self.items],
        }


def age_words(seconds: float) -> str:
    """A duration for a person: ``45 s``, ``12 min``, ``5.2 h``, ``3.1 d``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


@dataclass
class Publication(PublicationSet):
    """A complete publication read back from the database."""

    id: int = 0
    run_id: int = 0
    auditor_id: str = ""
    completed_at: datetime | None = None

    def item(self, job_key: str) -> PublishedItem | None:
        return next((i for i in self.items if i.job_key == job_key), None)

    def describe(self) -> str:
        return (
            f"publication {self.id} of stack {self.stack} by auditor {self.auditor_id} "
            f"(run {self.run_id}, {self.completed_at:%Y-%m-%d %H:%M:%S} UTC)"
        )

    def summary(self) -> PublicationSummary:
        return summary_of(self, self.id, self.auditor_id, self.run_id, self.completed_at)


def summary_of(
    pub: PublicationSet,
    id: int | None = None,  # noqa: A002 - the row's id
    auditor_id: str = "",
    run_id: int | None = None,
    completed_at: datetime | None = None,
) -> PublicationSummary:
    """The summary of a set (one being published in this run has no id and no time yet)."""
    items = tuple((i.probe, i.variant, str(i.mindir_info.get("sha256") or _sha(i.mindir))) for i in pub.items)
    return PublicationSummary(id, pub.stack, pub.host, auditor_id, run_id, completed_at, items)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write(session: Session, run_id: int, auditor_id: str, sets: list[PublicationSet], now: datetime) -> None:
    """Add ``sets`` to the run's transaction; ``completed_at`` is set after every item is in."""
    for pub in sets:
        digest = None
        if pub.fingerprint is not None:
            digest = fingerprint_digest(pub.fingerprint)
            fingerprints.store(session, {digest: pub.fingerprint}, now)
        row = m.Publication(
            run_id=run_id,
            auditor_id=auditor_id,
            stack=pub.stack,
            host=pub.host,
            fingerprint_digest=digest,
            created_at=now,
            completed_at=None,
        )
        session.add(row)
        session.flush()
        for item in pub.items:
            shas: dict[str, str | None] = {"rerun": None}
            about = {"probe": item.probe, "variant": item.variant}
            blobs = [
                ("mindir", item.mindir, item.mindir_info),
                ("inputs", encode_outputs(item.inputs), about),
                ("outputs", encode_outputs(item.outputs), about),
            ]
            if item.rerun is not None:
                blobs.append(("rerun", encode_outputs(item.rerun), about))
            for kind, data, info in blobs:
                sha = item.mindir_info.get("sha256") if kind == "mindir" else None
                sha = sha or _sha(data)
                add_artifact(
                    session,
                    sha256=sha,
                    kind=kind,
                    size=len(data),
                    created_at=now,
                    info=info,
                    data=data,
                )
                shas[kind] = sha
            session.add(
                m.PublicationItem(
                    publication_id=row.id,
                    job_key=item.job_key,
                    probe=item.probe,
                    probe_version=item.probe_version,
                    variant=item.variant,
                    mindir_sha256=shas["mindir"],
                    inputs_sha256=shas["inputs"],
                    outputs_sha256=shas["outputs"],
                    rerun_sha256=shas["rerun"],
                    latency=asdict(item.latency) if item.latency is not None else None,
                )
            )
        session.flush()
        row.completed_at = now  # last: the marker that the set is whole


def latest(engine: Engine, stack: str) -> Publication | None:
    """The newest complete publication of train stack ``stack``, with its artifacts; None if none."""
    with Session(engine) as s:
        row = s.scalars(
            select(m.Publication)
            .where(m.Publication.stack == stack, m.Publication.completed_at.is_not(None))
            .order_by(m.Publication.completed_at.desc(), m.Publication.id.desc())
            .limit(1)
        ).first()
        if row is None:
            return None
        fingerprint = None
        if row.fingerprint_digest is not None:
            fingerprint = fingerprints.read(s, [row.fingerprint_digest]).get(row.fingerprint_digest)
        pub = Publication(
            stack=row.stack,
            host=row.host,
            fingerprint=fingerprint,
            id=row.id,
            run_id=row.run_id,
            auditor_id=row.auditor_id,
            completed_at=row.completed_at,
        )
        for it in s.scalars(
            select(m.PublicationItem)
            .where(m.PublicationItem.publication_id == row.id)
            .order_by(m.PublicationItem.id)
        ):
            blobs = {
                a.sha256: a
                for a in s.scalars(
                    select(m.Artifact).where(
                        m.Artifact.sha256.in_(
                            [it.mindir_sha256, it.inputs_sha256, it.outputs_sha256, it.rerun_sha256 or ""]
                        )
                    )
                )
            }
            mindir = blobs[it.mindir_sha256]
            pub.items.append(
                PublishedItem(
                    job_key=it.job_key,
                    probe=it.probe,
                    probe_version=it.probe_version,
                    variant=it.variant,
                    mindir=bytes(mindir.data or b""),
                    mindir_info=dict(mindir.info or {}),
                    inputs=decode_outputs(bytes(blobs[it.inputs_sha256].data or b"")),
                    outputs=decode_outputs(bytes(blobs[it.outputs_sha256].data or b"")),
                    latency=Latency(**it.latency) if it.latency else None,
                    rerun=decode_outputs(bytes(blobs[it.rerun_sha256].data or b""))
                    if it.rerun_sha256
                    else None,
                )
            )
        return pub


def listing(
    engine: Engine,
    stacks: tuple[str, ...] = (),
    limit: int = 20,
    complete: bool = False,
    auditors: tuple[str, ...] = (),
) -> list[PublicationSummary]:
    """The newest ``limit`` publications (0: all), of ``stacks`` and by ``auditors`` when given,
    newest first, with their items; ``complete``: only those an infer side would read. Two
    statements."""
    with Session(engine) as s:
        query = select(m.Publication).order_by(m.Publication.created_at.desc(), m.Publication.id.desc())
        if stacks:
            query = query.where(m.Publication.stack.in_(stacks))
        if auditors:
            query = query.where(m.Publication.auditor_id.in_(auditors))
        if complete:
            query = query.where(m.Publication.completed_at.is_not(None))
        if limit:
            query = query.limit(limit)
        rows = list(s.scalars(query))
        items: dict[int, list[tuple[str, str, str]]] = {}
        if rows:
            for it in s.scalars(
                select(m.PublicationItem)
                .where(m.PublicationItem.publication_id.in_([r.id for r in rows]))
                .order_by(m.PublicationItem.id)
            ):
                items.setdefault(it.publication_id, []).append((it.probe, it.variant, it.mindir_sha256))
        return [
            PublicationSummary(
                r.id, r.stack, r.host, r.auditor_id, r.run_id, r.completed_at, tuple(items.get(r.id, ()))
            )
            for r in rows
        ]


__all__ = [
    "Publication",
    "PublicationSet",
    "PublicationSummary",
    "PublishedItem",
    "age_words",
    "latest",
    "listing",
    "summary_of",
    "write",
]
