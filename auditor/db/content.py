"""Content-addressed rows that results share: metric sets and threshold tables.

A fleet's consistent hosts compute the same figures as their peers and as their own last
cycle (same file, same inputs, same runtime release: bitwise the same outputs), and every
result of a probe variant is judged by the same tolerances. Stored per result, those copies
were most of a cycle's history (about 60 % in metric rows, 20 % in threshold JSON at 64
hosts). Stored by digest, a result refers to the set it shares: a cycle adds rows only for
figures nobody had before.

The digest covers every figure in order, its value exactly (``float.hex``), so two results
share a set only when a reader could not tell their figures apart. Figures measured anew
each time (the serving side's throughput) are not stored here at all: they are derived from
the latencies of the result (auditor.history.figures).

Two auditors may store the same new set at once on a shared PostgreSQL history: the insert
is ``ON CONFLICT DO NOTHING RETURNING id``. The one whose insert returns nothing waits (the
unique index makes PostgreSQL wait for the other transaction) and then reads the other's id;
only the inserter adds the set's rows, in the same transaction as the set.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from auditor.db import schema as m
from auditor.db.rows import insert_new

Figure = tuple[str, str, float]
"""(output, metric name, value)."""

_CHUNK = 500


def figures(items: Iterable[Figure]) -> list[Figure]:
    """The figures that can be stored, in order: a NaN (a figure that could not be computed,
    e.g. a cosine over NaN outputs) is left out, since SQL has no NaN and one such figure
    must not cost the whole run; ±inf is kept."""
    return [(o, n, float(v)) for o, n, v in items if not math.isnan(v)]


def metric_set_digest(items: Sequence[Figure]) -> str:
    """The digest of a result's figures in their order, each value exactly."""
    h = hashlib.sha256()
    for output, name, value in items:
        h.update(f"{output}\x1f{name}\x1f{float(value).hex()}\n".encode())
    return h.hexdigest()


def document_digest(document: Any) -> str:
    """The digest of a JSON document (keys sorted: the same table in any order is one row)."""
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()


def intern(session: Session, model: Any, items: dict[str, dict[str, Any]]) -> tuple[dict[str, int], set[str]]:
    """The ids of ``model``'s rows (a table with ``id``, unique ``digest`` and ``created_at``)
    for the digests of ``items``, inserting those missing with the item's other columns.
    Also returns the digests this session inserted: their parts are the caller's to add."""
    ids: dict[str, int] = {}
    digests = list(items)
    for start in range(0, len(digests), _CHUNK):
        chunk = digests[start : start + _CHUNK]
        found = session.execute(select(model.digest, model.id).where(model.digest.in_(chunk)))
        ids.update((digest, row_id) for digest, row_id in found)
    inserted: set[str] = set()
    now = datetime.now(UTC).replace(tzinfo=None)
    # in one order for every auditor: two that insert the same new sets wait for each other
    # in turn, never each for the other (a deadlock PostgreSQL would end by failing one)
    for digest in sorted({d for d in digests if d not in ids}):
        values = {"digest": digest, "created_at": now, **items[digest]}
        stmt = insert_new(session, model, **values)
        stmt = insert(model).values(**values) if stmt is None else stmt
        new = session.execute(stmt.returning(model.id)).scalar()
        if new is None:  # another auditor's, committed while this insert waited for it
            new = session.execute(select(model.id).where(model.digest == digest)).scalar_one()
        else:
            inserted.add(digest)
        ids[digest] = new
    return ids, inserted


def metric_sets(session: Session, per_result: Sequence[list[Figure]]) -> list[int | None]:
    """The metric set id of each result's figures (None: it has none), storing the sets not
    stored yet with their rows in one executemany."""
    digests = [metric_set_digest(f) if f else None for f in per_result]
    ids, inserted = intern(session, m.MetricSet, {d: {} for d in digests if d is not None})
    rows: list[tuple[int, Figure]] = []
    for digest, found in zip(digests, per_result, strict=True):
        if digest in inserted:
            inserted.discard(digest)  # once, though several results share it
            rows.extend((ids[digest], figure) for figure in found)
    m.MetricRow.insert_many(session, rows)
    return [None if d is None else ids[d] for d in digests]


def threshold_sets(session: Session, documents: Sequence[dict[str, Any]]) -> list[int]:
    """The threshold set id of each document, storing those not stored yet."""
    digests = [document_digest(d) for d in documents]
    items = {d: {"document": doc} for d, doc in zip(digests, documents, strict=True)}
    ids, _ = intern(session, m.ThresholdSet, items)
    return [ids[d] for d in digests]


__all__ = [
    "Figure",
    "document_digest",
    "figures",
    "intern",
    "metric_set_digest",
    "metric_sets",
    "threshold_sets",
]
