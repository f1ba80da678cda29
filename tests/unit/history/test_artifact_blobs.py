"""Migration 0017 moves every stored artifact's bytes into the blob of their content
(auditor.db.blobs): exports that differ only in the order of their primitive definitions
share one, metadata-only artifacts get none, and going back down gives each artifact bytes
again."""

from __future__ import annotations

import hashlib
from datetime import datetime

from sqlalchemy import text

from auditor.history.store import Store


def mindir(*primitives: bytes) -> bytes:
    """A MindIR's top level as the wire format has it: field 7 (the graph), then one field 12
    (a primitive definition) each."""
    return b"\x3a\x02ab" + b"".join(b"\x62" + bytes([len(p)]) + p for p in primitives)


def test_migration_0017_moves_bytes_into_one_blob_per_content_and_back(db_url):
    first, again, other = mindir(b"xx", b"yy"), mindir(b"yy", b"xx"), mindir(b"xx", b"zz")
    outputs = b"not a MindIR: digested as it is"
    files = {
        hashlib.sha256(d).hexdigest(): (k, d)
        for k, d in (("mindir", first), ("mindir", again), ("lite-mindir", other), ("outputs", outputs))
    }
    bare = "f" * 64  # stored without its bytes
    store = Store(db_url)
    try:
        store.upgrade("0016")
        with store.engine.begin() as conn:
            for sha, (kind, data) in [*files.items(), (bare, ("mindir", None))]:
                conn.execute(
                    text(
                        "INSERT INTO artifacts (sha256, kind, size, created_at, info, data) "
                        "VALUES (:s, :k, :n, :t, '{}', :d)"
                    ),
                    {"s": sha, "k": kind, "n": len(data or b""), "t": datetime(2026, 1, 1), "d": data},
                )
        store.upgrade()
        with store.engine.connect() as conn:
            blobs = dict(conn.execute(text("SELECT digest, data FROM artifact_blobs")).all())
            refs = dict(conn.execute(text("SELECT sha256, blob_digest FROM artifacts")).all())
        assert sorted(bytes(d) for d in blobs.values()) == sorted([first, other, outputs])
        sha = {data: s for s, (_, data) in files.items()}
        assert refs[sha[first]] == refs[sha[again]] != refs[sha[other]]
        assert refs[sha[outputs]] == sha[outputs]  # not a MindIR: its own sha256
        assert refs[bare] is None
        store.downgrade("0016")
        with store.engine.connect() as conn:
            back = {
                s: d and bytes(d) for s, d in conn.execute(text("SELECT sha256, data FROM artifacts")).all()
            }
        # each artifact has bytes again; the one that shared its content gets the first's
        assert back == {
            sha[first]: first,
            sha[again]: first,
            sha[other]: other,
            sha[outputs]: outputs,
            bare: None,
        }
    finally:
        store.close()
