"""An artifact's bytes, stored once per content.

An artifact row is a file by its exact bytes (``artifacts.sha256``: what a result, a golden or
a publication names). Its bytes go to ``artifact_blobs`` under a *content* digest, so files
that differ only where a runtime writes in no fixed order share one blob: MindSpore writes a
MindIR's top-level primitive definitions in another order at every export, and Lite's
converter at every conversion (measured), so a probe exported each cycle, by each auditor of
a fleet, was a new 30 KB row every time. ``auditor.worker.mindir.canonical_sha256`` digests
a MindIR with those sorted; every other kind is digested as it is.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from auditor.db import schema as m
from auditor.db.rows import add_once
from auditor.worker.mindir import canonical_sha256


def content_digest(kind: str, data: bytes) -> str:
    """The digest a blob is stored under: a MindIR's canonical digest (``kind`` ``mindir`` or
    ``lite-mindir``), the bytes' sha256 otherwise (and for a MindIR that does not parse)."""
    if kind.endswith("mindir"):
        canonical = canonical_sha256(data)
        if canonical is not None:
            return canonical
    return hashlib.sha256(data).hexdigest()


def add_artifact(
    session: Session,
    *,
    sha256: str,
    kind: str,
    size: int,
    created_at: datetime,
    info: dict[str, Any],
    data: bytes | None,
) -> None:
    """The artifact ``sha256`` with its bytes (None: metadata only), unless it is stored
    already: then nothing is read from ``data`` or sent (a served model of hundreds of MB is
    not digested or shipped again every cycle). Its bytes go to the blob of their content,
    added only where no artifact stored that content before."""
    if session.scalar(select(m.Artifact.sha256).where(m.Artifact.sha256 == sha256)) is not None:
        return
    blob = None
    if data is not None:
        blob = content_digest(kind, data)
        if session.scalar(select(m.ArtifactBlob.digest).where(m.ArtifactBlob.digest == blob)) is None:
            add_once(session, m.ArtifactBlob, digest=blob, size=len(data), created_at=created_at, data=data)
    add_once(
        session,
        m.Artifact,
        sha256=sha256,
        kind=kind,
        size=size,
        created_at=created_at,
        info=info,
        blob_digest=blob,
    )


__all__ = ["add_artifact", "content_digest"]
