"""Queries over the history database: filtered results and metrics, one run in full, trends,
and the fingerprint changes that explain them.

Every function takes an open SQLAlchemy ``Connection`` and issues a fixed number of
statements, whatever the number of rows (joins and ``IN`` batches, never one query per
row); the long listings are generators that stream rows as the database returns them.

On SQLite the planner needs table statistics to choose the indexed path on a large history
(without them it may walk a million metric rows to find a week of one pair);
``refresh_statistics`` keeps them current and the CLI calls it before it queries.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import groupby, islice
from operator import itemgetter
from typing import Any

from sqlalchemy import (
    Connection,
    Integer,
    Select,
    String,
    and_,
    bindparam,
    cast,
    func,
    literal,
    or_,
    select,
    text,
    union,
)
from sqlalchemy.exc import OperationalError, SQLAlchemyError
from sqlalchemy.orm import aliased

from auditor.db import fingerprints
from auditor.db import schema as m
from auditor.db.health import db_error
from auditor.db.prepared import prepared
from auditor.fingerprint.drift import diff
from auditor.history import figures
from auditor.history import series as series_index
from auditor.history.filters import (
    FIELDS,
    Filters,
    HistoryError,
    bound_in,
    filter_shape,
    is_latency_metric,
    iso,
    latency_metric,
    where_bound,
    where_results,
)
from auditor.history.store import orphan_note, orphaned

R, P, M, L = m.Run, m.ProbeResultRow, m.MetricRow, m.LatencyRow
# Aliases made once: an ORM alias adapts its columns on first use, which costs more than the
# whole query on a short listing if done per call.
LT, LI, L_FIRST = aliased(L, name="lt"), aliased(L, name="li"), aliased(L, name="l_first")
S_TRAIN, S_INFER = aliased(m.Stack, name="s_train"), aliased(m.Stack, name="s_infer")


KEY_COLUMNS = ("run", "started_at", "auditor", "pair", "probe", "variant", "status")
RESULT_COLUMNS = (*KEY_COLUMNS, "train_p50_us", "infer_p50_us", "message")
METRIC_COLUMNS = (*KEY_COLUMNS, "output", "metric", "value")


RESULT_KEY = (R.id, R.started_at, R.auditor_id, P.pair, P.probe, P.variant, P.status)
"""The first columns of both listings: which run (when, whose) and which result."""


def _limit(stmt: Select, limited: bool) -> Select:
    return stmt.limit(bindparam("limit", type_=Integer())) if limited else stmt


def _listing(
    conn: Connection, key: tuple, build: Callable[[bool], Select], f: Filters, values: dict
) -> Iterator[tuple]:
    """Rows of the prepared listing ``build`` makes for ``key``: fetched at once when a small
    limit bounds them, streamed otherwise."""
    limited = f.limit is not None
    if limited:
        values["limit"] = f.limit
    statement = prepared(conn, (*key, limited), lambda: build(limited))
    return statement.rows(conn, values, stream=not limited or f.limit > 2000)


def primary_latency(lat: Any, side: str | None = None) -> Any:
    """The condition that ``lat`` is the latency row of the probe's own batch: a result stores
    that one first for each side, then one per extra batch size of ``[latency] batches``."""
    first = L_FIRST
    return lat.id == (
        select(func.min(first.id))
        .where(first.result_id == lat.result_id, first.side == (lat.side if side is None else side))
        .scalar_subquery()
    )


def result_rows(conn: Connection, f: Filters) -> Iterator[tuple]:
    """One row per probe result (columns ``RESULT_COLUMNS``), newest run first, with the p50
    latency of each side."""
    shape, values = filter_shape(f)

    def build(limited: bool) -> Select:
        lt, li = LT, LI
        stmt = (
            select(*RESULT_KEY, lt.p50_us, li.p50_us, P.message)
            .select_from(P)
            .join(R, R.id == P.run_id)
            .outerjoin(lt, and_(lt.result_id == P.id, lt.side == "train", primary_latency(lt, "train")))
            .outerjoin(li, and_(li.result_id == P.id, li.side == "infer", primary_latency(li, "infer")))
            .order_by(R.started_at.desc(), R.id.desc(), P.id)
        )
        return _limit(where_bound(stmt, shape), limited)

    return _listing(conn, ("result_rows", shape), build, f, values)


def metric_rows(conn: Connection, f: Filters) -> Iterator[tuple]:
    """One row per (probe result, output, metric) (columns ``METRIC_COLUMNS``), newest run first:
    the rows of each result's metric set, then its derived throughput (auditor.history.figures)."""
    shape, values = filter_shape(f)
    values.update({f"metric{i}": v for i, v in enumerate(f.metrics)})
    values.update({f"output{i}": v for i, v in enumerate(f.outputs)})
    stored_names = [n for n in f.metrics if n != figures.THROUGHPUT]

    def build(limited: bool) -> Select:
        stmt = (
            select(*RESULT_KEY, M.output, M.name, M.value, P.id, M.id)
            .select_from(M)
            .join(P, P.metric_set_id == M.set_id)
            .join(R, R.id == P.run_id)
            .order_by(R.started_at.desc(), R.id.desc(), P.id, M.id)
        )
        stmt = where_bound(stmt, shape)
        if f.metrics:
            stmt = stmt.where(bound_in(M.name, "metric", len(f.metrics)))
        if f.outputs:
            stmt = stmt.where(bound_in(M.output, "output", len(f.outputs)))
        return _limit(stmt, limited)

    def build_served(limited: bool) -> Select:
        output = figures.output_of(L)
        stmt = (
            select(
                *RESULT_KEY, output, literal(figures.THROUGHPUT, String()), figures.value_of(L), P.id, L.id
            )
            .select_from(L)
            .join(P, P.id == L.result_id)
            .join(R, R.id == P.run_id)
            .where(figures.counted(L))
            .order_by(R.started_at.desc(), R.id.desc(), P.id, L.id)
        )
        stmt = where_bound(stmt, shape)
        if f.outputs:
            stmt = stmt.where(bound_in(output, "output", len(f.outputs)))
        return _limit(stmt, limited)

    streams = []
    if not f.metrics or stored_names:
        key = ("metric_rows", shape, len(f.metrics), len(f.outputs))
        streams.append(_ordered(_listing(conn, key, build, f, dict(values)), 1))
    if not f.metrics or figures.THROUGHPUT in f.metrics:
        key = ("throughput_rows", shape, len(f.outputs))
        streams.append(_ordered(_listing(conn, key, build_served, f, dict(values)), 0))
    # Both come newest run first, then by result; within a result the set's rows come first.
    rows = (r[:-2] for _, r in heapq.merge(*streams, reverse=True))
    return islice(rows, f.limit) if f.limit is not None else rows


def _ordered(rows: Iterable[tuple], kind: int) -> Iterator[tuple[tuple, tuple]]:
    """(key, row) for merging metric listings (rows: ``RESULT_KEY`` first, result id and row id
    last) in descending key order: run start, run, then result and row ascending."""
    for r in rows:
        started = r[1]
        yield (started is not None, started or datetime.min, r[0], -r[-2], kind, -r[-1]), r


def known_values(conn: Connection, column: str) -> list[str]:
    """Distinct values of pair, probe, variant, status (probe results), metric, output
    (metrics) or stack (stack names): what a filter can match, for error messages."""
    col = {
        "pair": P.pair,
        "probe": P.probe,
        "variant": P.variant,
        "status": P.status,
        "metric": M.name,
        "output": M.output,
        "stack": m.Stack.name,
        "host": m.Stack.host,
        "auditor": R.auditor_id,
    }[column]
    stmt = select(col).distinct()
    if column in ("metric", "output"):  # and the derived throughput's (auditor.history.figures)
        served = literal(figures.THROUGHPUT, String()) if column == "metric" else figures.output_of(L)
        stmt = union(stmt, select(served).where(figures.counted(L)))
    return sorted(conn.scalars(stmt))


FREE_TEXT = ("message", "artifact", "config")
"""--where fields whose values are not a small vocabulary: a miss names no alternatives."""


def unknown_where(conn: Connection, name: str, op: str, value: str, valid: Iterable[str] = ()) -> str | None:
    """Why ``--where NAME=VALUE`` (or ``!=``) is a typo: no stored result or run has that value
    anywhere in the history, and it is not one of ``valid`` (a status no result happens to have
    yet). None when it is there, or for ``~`` (a search that may rightly find nothing)."""
    if op == "~" or value in valid:
        return None
    col = m.Stack.name if name in ("train", "infer") else FIELDS[name]
    # compared as text, as the filter itself compares (auditor.history.filters)
    if conn.scalar(select(col).where(cast(col, String()) == value).limit(1)) is not None:
        return None
    if name in FREE_TEXT or name == "run":
        return f"--where {name}{op}{value}: no stored result has {name} {value!r}"
    known = sorted({str(v) for v in conn.scalars(select(col).distinct().limit(21)) if v is not None})
    shown = ", ".join(known[:20]) + (", …" if len(known) > 20 else "")
    return f"--where {name}{op}{value}: no {name} {value!r} in the history (known: {shown or 'none yet'})"


# -- one run in full ----------------------------------------------------------------------------


@dataclass
class RunDetail:
    """Everything stored about one run, as plain data (``to_json`` for programs)."""

    run: dict[str, Any]
    stacks: list[dict[str, Any]]
    results: list[dict[str, Any]]
    findings: list[dict[str, Any]]
    artifacts: list[dict[str, Any]]
    problems: list[str] = field(default_factory=list)
    """Parts that could not be read (a damaged database): the rest is still shown."""

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "stacks": self.stacks,
            "results": self.results,
            "findings": self.findings,
            "artifacts": self.artifacts,
        } | ({"problems": self.problems} if self.problems else {})


def resolve_run(conn: Connection, ref: str, auditors: Sequence[str] = ()) -> int:
    """A run id from ``N``, ``latest``, or ``latest~K`` (K runs before the latest), the latest
    of ``auditors`` when given (an id is taken as it is)."""
    ref = ref.strip()
    latest = re.fullmatch(r"latest(?:~([0-9]{1,9}))?", ref)
    if latest:
        back = int(latest.group(1) or 0)
        q = select(R.id).order_by(R.started_at.desc(), R.id.desc())
        if auditors:
            q = q.where(R.auditor_id.in_(list(auditors)))
        run_id = conn.scalar(q.offset(back).limit(1))
        if run_id is None:
            whose = f" of auditor {', '.join(auditors)}" if auditors else ""
            raise HistoryError(
                f"the history database has no runs{whose} yet" if back == 0 else f"no run {ref}{whose}"
            )
        return int(run_id)
    # ASCII digits only ("١٢" and "²" are str.isdigit() too), and small enough for SQL.
    if not re.fullmatch(r"[0-9]{1,18}", ref):
        raise HistoryError(f"not a run: {ref!r} (give a run id, 'latest' or 'latest~N')")
    return int(ref)


def run_auditors(conn: Connection, run_ids: Iterable[int]) -> dict[int, str]:
    """run id -> the auditor that ran it (one statement per 500 runs)."""
    out: dict[int, str] = {}
    ids = sorted(set(run_ids))
    for i in range(0, len(ids), 500):
        q = select(R.id, R.auditor_id).where(R.id.in_(ids[i : i + 500]))
        out.update({int(a): b for a, b in conn.execute(q)})
    return out


def run_detail(conn: Connection, run_id: int) -> RunDetail:
    """One run: its row, stacks with fingerprints (and whether each changed since that stack's
    previous run), probe results with metrics and latencies, findings and artifacts."""
    run = conn.execute(select(R).where(R.id == run_id)).mappings().first()
    if run is None:
        last = conn.scalar(select(func.max(R.id)))
        raise HistoryError(
            f"no run {run_id} in the history database"
            + (f" (runs go up to {last})" if last else " (it has no runs yet)")
        )
    run_json = {k: (iso(v) if isinstance(v, datetime) else v) for k, v in run.items()}
    if orphaned(run["status"], run["host"], run["pid"]):
        run_json["status"], run_json["note"] = "aborted", orphan_note(run["pid"])

    problems: list[str] = []
    stacks: list[dict[str, Any]] = []
    results: dict[int, dict[str, Any]] = {}
    findings: list[dict[str, Any]] = []
    artifacts: list[dict[str, Any]] = []
    # Each part is read on its own: a damaged page or a missing table costs that part only.
    try:
        S = m.Stack
        stack_rows = conn.execute(
            select(S, m.RunStack.fingerprint_digest, m.RunStack.error)
            .join(m.RunStack, m.RunStack.stack_id == S.id)
            .where(m.RunStack.run_id == run_id)
            .order_by(S.name)
        ).mappings()
        stack_rows = list(stack_rows)
        documents = fingerprints.read(conn, [row["fingerprint_digest"] for row in stack_rows])
        previous = _previous_digests(conn, run_id, run["started_at"])
        changed = {
            row["id"]: previous[row["id"]][1]
            for row in stack_rows
            if row["fingerprint_digest"]
            and row["id"] in previous
            and previous[row["id"]][1] != row["fingerprint_digest"]
        }
        old_docs = fingerprints.read(conn, changed.values())
        for row in stack_rows:
            prev = previous.get(row["id"])
            stacks.append(
                {
                    "id": row["id"],
                    "name": row["name"],
                    "host": row["host"],
                    "role": row["role"],
                    "runtime": row["runtime"],
                    "python": row["python"],
                    "device": row["device"],
                    "fingerprint_digest": row["fingerprint_digest"],
                    "error": row["error"],
                    "fingerprint": documents.get(row["fingerprint_digest"]),
                    "previous_run": prev[0] if prev else None,
                    "previous_digest": prev[1] if prev else None,
                    "fingerprint_changed": row["id"] in changed,
                    "changes": (
                        describe_change(
                            old_docs.get(changed[row["id"]]), documents.get(row["fingerprint_digest"])
                        )
                        if row["id"] in changed
                        else []
                    ),
                }
            )
    except SQLAlchemyError as exc:
        problems.append(f"stacks: {db_error(exc)}")
    try:
        used = (
            select(P.train_stack_id)
            .where(P.run_id == run_id)
            .union(select(P.infer_stack_id).where(P.run_id == run_id))
        )
        names = dict(conn.execute(select(S.id, S.name).where(S.id.in_(used))).all())

        stored = select(P, m.ThresholdSet.document.label("thresholds")).outerjoin(
            m.ThresholdSet, m.ThresholdSet.id == P.thresholds_id
        )
        sets: dict[int, list[int]] = {}
        for row in conn.execute(stored.where(P.run_id == run_id).order_by(P.id)).mappings():
            if row["metric_set_id"] is not None:
                sets.setdefault(row["metric_set_id"], []).append(row["id"])
            results[row["id"]] = {
                "id": row["id"],
                "pair": row["pair"],
                "train": names.get(row["train_stack_id"]),
                "infer": names.get(row["infer_stack_id"]),
                "probe": row["probe"],
                "probe_version": row["probe_version"],
                "variant": row["variant"],
                "status": row["status"],
                "message": row["message"],
                "artifact_sha256": row["artifact_sha256"],
                "converted_sha256": row.get("converted_sha256"),
                "localization": row.get("localization"),
                "thresholds": row["thresholds"] or {},
                "latency": {},
                "latencies": [],
                "metrics": {},
            }
        ids = select(P.id).where(P.run_id == run_id)
        in_run = select(P.metric_set_id).where(P.run_id == run_id)
        for row in conn.execute(
            select(M.set_id, M.output, M.name, M.value).where(M.set_id.in_(in_run)).order_by(M.id)
        ):
            for result_id in sets.get(row.set_id, ()):
                results[result_id]["metrics"].setdefault(row.output, {})[row.name] = row.value
        for row in conn.execute(select(L).where(L.result_id.in_(ids)).order_by(L.id)).mappings():
            values = {
                k: row[k] for k in ("side", "batch", "samples", "p50_us", "p90_us", "p99_us", "mean_us")
            }
            res = results[row["result_id"]]
            res["latencies"].append(values)
            res["latency"].setdefault(row["side"], values)  # the first row of a side: the probe's own batch
            output = f"b{row['batch']}"  # the derived throughput (auditor.history.figures)
            if row["side"] == figures.SIDE and (row["p50_us"] or 0) > 0:
                served = res["metrics"].setdefault(output, {})
                served.setdefault(figures.THROUGHPUT, row["batch"] / (row["p50_us"] / 1e6))
    except SQLAlchemyError as exc:
        problems.append(f"probe results: {db_error(exc)}")
    try:
        findings = [
            {k: f[k] for k in ("kind", "severity", "subject", "key", "message", "details")}
            for f in conn.execute(
                select(m.FindingRow).where(m.FindingRow.run_id == run_id).order_by(m.FindingRow.id)
            ).mappings()
        ]
    except SQLAlchemyError as exc:
        problems.append(f"findings: {db_error(exc)}")
    try:
        A = m.Artifact
        artifacts = [
            {"sha256": a.sha256, "kind": a.kind, "size": a.size, "info": a.info, "stored": a.stored}
            for a in conn.execute(
                select(A.sha256, A.kind, A.size, A.info, A.blob_digest.is_not(None).label("stored"))
                .where(
                    A.sha256.in_(select(P.artifact_sha256).where(P.run_id == run_id))
                    | A.sha256.in_(select(P.converted_sha256).where(P.run_id == run_id))
                )
                .order_by(A.sha256)
            )
        ]
    except SQLAlchemyError as exc:
        problems.append(f"artifacts: {db_error(exc)}")
    return RunDetail(run_json, stacks, list(results.values()), findings, artifacts, problems)


def _previous_digests(
    conn: Connection, run_id: int, started_at: datetime | None
) -> dict[int, tuple[int, str]]:
    """stack id -> (run id, digest) of the latest earlier run that fingerprinted that stack."""
    rs, r = m.RunStack, R
    ranked = (
        select(
            rs.stack_id,
            rs.run_id,
            rs.fingerprint_digest,
            func.row_number()
            .over(partition_by=rs.stack_id, order_by=(r.started_at.desc(), r.id.desc()))
            .label("n"),
        )
        .join(r, r.id == rs.run_id)
        .where(
            rs.stack_id.in_(select(rs.stack_id).where(rs.run_id == run_id)),
            rs.fingerprint_digest.is_not(None),
            # An unreadable start time (auditor.db.columns): the run ids still say the order.
            r.id < run_id
            if started_at is None
            else or_(r.started_at < started_at, and_(r.started_at == started_at, r.id < run_id)),
        )
        .subquery()
    )
    return {
        row.stack_id: (row.run_id, row.fingerprint_digest)
        for row in conn.execute(select(ranked).where(ranked.c.n == 1))
    }


# -- fingerprint changes --------------------------------------------------------------------------


@dataclass(frozen=True)
class FingerprintChange:
    """A run in which a stack's fingerprint differed from that stack's previous fingerprint."""

    run_id: int
    at: datetime
    stack: str
    host: str
    old_digest: str
    new_digest: str
    changes: tuple[str, ...]

    def summary(self, limit: int = 3) -> str:
        shown = "; ".join(self.changes[:limit])
        more = f"; +{len(self.changes) - limit} more" if len(self.changes) > limit else ""
        digests = f"fingerprint {self.old_digest[:8]} → {self.new_digest[:8]}"
        return f"{self.stack}: {shown or digests}{more}"

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run_id,
            "at": iso(self.at),
            "stack": self.stack,
            "host": self.host,
            "old_digest": self.old_digest,
            "new_digest": self.new_digest,
            "changes": list(self.changes),
        }


def fingerprint_changes(
    conn: Connection,
    stacks: Iterable[str] | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> list[FingerprintChange]:
    """The fingerprint changes of the named stacks (None: all) between since and until, oldest
    first. A stack that could not be fingerprinted in a run (no digest) is compared with its
    last fingerprint, so an outage is not reported as two changes."""
    rs, S = m.RunStack, m.Stack
    lagged = (
        select(
            rs.run_id,
            R.started_at,
            rs.stack_id,
            rs.fingerprint_digest.label("digest"),
            func.lag(rs.fingerprint_digest)
            .over(partition_by=rs.stack_id, order_by=(R.started_at, R.id))
            .label("previous"),
        )
        .join(R, R.id == rs.run_id)
        .where(rs.fingerprint_digest.is_not(None))
    )
    names = tuple(stacks) if stacks is not None else None
    if names is not None:
        if not names:
            return []
        lagged = lagged.where(rs.stack_id.in_(select(S.id).where(S.name.in_(names))))
    sub = lagged.subquery()
    stmt = (
        select(sub.c.run_id, sub.c.started_at, S.name, S.host, sub.c.previous, sub.c.digest)
        .join(S, S.id == sub.c.stack_id)
        .where(sub.c.previous.is_not(None), sub.c.previous != sub.c.digest)
        .order_by(sub.c.started_at, sub.c.run_id, S.name)
    )
    if since is not None:
        stmt = stmt.where(sub.c.started_at >= since)
    if until is not None:
        stmt = stmt.where(sub.c.started_at < until)
    rows = conn.execute(stmt).all()
    docs = fingerprints.read(conn, {d for row in rows for d in (row.previous, row.digest)})
    return [
        FingerprintChange(
            row.run_id,
            row.started_at,
            row.name,
            row.host,
            row.previous,
            row.digest,
            tuple(describe_change(docs.get(row.previous), docs.get(row.digest))),
        )
        for row in rows
    ]


def describe_change(old: dict | None, new: dict | None, limit: int = 20) -> list[str]:
    """What differs between two fingerprint documents, one line per changed value
    (``runtime.runtime_version: 2.0.0 → 2.0.1``), most telling first. Uses the drift
    module's diff when it is installed, so the history and the drift findings agree."""
    if old is None or new is None:
        return []
    lines = _drift_module_diff(old, new)
    if lines is None:
        lines = [
            f"{path}: {_short(a)} → {_short(b)}"
            for path, a, b in sorted(_leaf_diff(old, new, ""), key=lambda d: (d[0].count("."), d[0]))
        ]
    return lines[:limit] + ([f"… and {len(lines) - limit} more"] if len(lines) > limit else [])


def _drift_module_diff(old: dict, new: dict) -> list[str] | None:
    try:
        return [c.words for c in diff(old, new)]
    except Exception:  # noqa: BLE001 - a diff failure must not take the history down
        return None


_MISSING = object()


def _leaf_diff(a: Any, b: Any, path: str) -> Iterator[tuple[str, Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            sub = f"{path}.{key}" if path else str(key)
            yield from _leaf_diff(a.get(key, _MISSING), b.get(key, _MISSING), sub)
    elif a != b:
        yield path, a, b


def _short(value: Any, width: int = 40) -> str:
    if value is _MISSING:
        return "(absent)"
    s = value if isinstance(value, str) else repr(value)
    return s if len(s) <= width else s[: width - 1] + "…"


# -- trends ------------------------------------------------------------------------------------------


@dataclass
class Series:
    """One metric of one (pair, probe, variant, output) over time, oldest point first.
    For latency series ``output`` is the side (train / infer)."""

    pair: str
    probe: str
    variant: str
    output: str
    metric: str
    train: str | None = None
    infer: str | None = None
    points: list[tuple[int, datetime, float, str]] = field(default_factory=list)  # run, time, value, status

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.pair, self.probe, self.variant, self.output)


def trend(conn: Connection, metric: str, f: Filters) -> list[Series]:
    """The values of one metric over time, one series per (pair, probe, variant, output), each
    limited to its newest ``f.limit`` points. ``metric`` is a stored metric name or a latency
    series (``latency.infer.p50_us``; ``latency.p50_us`` gives both sides)."""
    S1, S2 = S_TRAIN, S_INFER
    side = stat = None
    served = metric == figures.THROUGHPUT  # derived from latencies (auditor.history.figures)
    if is_latency_metric(metric):
        side, stat = latency_metric(metric)
        value_col, output_col, source = getattr(L, stat), L.side, L
    elif served:
        value_col, output_col, source = figures.value_of(L), figures.output_of(L), L
    else:
        value_col, output_col, source = M.value, M.output, M
    if f.limit is not None:  # each series' newest runs, walked through indexes (auditor.history.series)
        return _series(metric, series_index.newest_points(conn, metric, f, f.limit))
    # the whole history of each series, oldest first
    shape, values = filter_shape(f)
    values["metric"] = metric
    values.update({f"output{i}": v for i, v in enumerate(f.outputs)})
    kind = ("latency", side, stat) if is_latency_metric(metric) else (metric,) if served else ("metric",)

    def build() -> Select:
        stmt = (
            select(
                P.pair,
                P.probe,
                P.variant,
                output_col,
                R.id,
                R.started_at,
                value_col,
                P.status,
                S1.name,
                S2.name,
            )
            .select_from(source)
            .join(P, P.metric_set_id == M.set_id if source is M else P.id == L.result_id)
            .join(R, R.id == P.run_id)
            .join(S1, S1.id == P.train_stack_id)
            .join(S2, S2.id == P.infer_stack_id)
        )
        if is_latency_metric(metric):
            stmt = stmt.where(primary_latency(L))
            if side is not None:
                stmt = stmt.where(L.side == side)
        elif served:
            stmt = stmt.where(figures.counted(L))
        else:
            stmt = stmt.where(M.name == bindparam("metric", type_=String()))
        if f.outputs:
            stmt = stmt.where(bound_in(output_col, "output", len(f.outputs)))
        return where_bound(stmt, shape).order_by(R.started_at, R.id)

    statement = prepared(conn, ("trend", kind, shape, len(f.outputs)), build)
    return _series(metric, statement.rows(conn, values, stream=True))


def _series(metric: str, rows: Iterable[Sequence[Any]]) -> list[Series]:
    """Rows (pair, probe, variant, output, run, time, value, status, train, infer), oldest first
    within each series, as Series sorted by key. (Rows come grouped by series from the walk,
    one group per series; the all-time listing interleaves them.)"""
    series: dict[tuple[str, str, str, str], Series] = {}
    for key, group in groupby(rows, key=_SERIES_KEY):
        first, *rest = group
        s = series.get(key)
        if s is None:
            s = series[key] = Series(*key, metric, first[8], first[9])
        s.points.append(_POINT(first))
        s.points.extend(map(_POINT, rest))
    return [series[k] for k in sorted(series)]


_SERIES_KEY, _POINT = itemgetter(0, 1, 2, 3), itemgetter(4, 5, 6, 7)


StatusPoints = dict[tuple[str, str, str], list[tuple[int, datetime, str]]]


def result_statuses(conn: Connection, f: Filters) -> StatusPoints:
    """(pair, probe, variant) -> [(run, time, status)], oldest first, within the filters' window:
    to mark on a time axis the runs where a probe could not be compared at all."""
    stmt = where_results(
        select(P.pair, P.probe, P.variant, R.id, R.started_at, P.status)
        .select_from(P)
        .join(R, R.id == P.run_id)
        .order_by(R.started_at, R.id),
        Filters(**{**f.__dict__, "limit": None}),
    )
    out: dict[tuple[str, str, str], list[tuple[int, datetime, str]]] = {}
    for pair, probe, variant, run_id, at, status in conn.execute(stmt):
        out.setdefault((pair, probe, variant), []).append((run_id, at, status))
    return out


def latest_localizations(conn: Connection, f: Filters) -> dict[tuple[str, str, str], str]:
    """(pair, probe, variant) -> where its latest localized drift in the filters' window first
    diverged, as the live report said it (the HTML report's column)."""
    stmt = where_results(
        select(P.pair, P.probe, P.variant, P.localization)
        .select_from(P)
        .join(R, R.id == P.run_id)
        .where(P.localization.is_not(None))
        .order_by(R.started_at, R.id),
        Filters(**{**f.__dict__, "limit": None}),
    )
    return {(pair, probe, variant): said for pair, probe, variant, said in conn.execute(stmt)}


def latest_fingerprints(conn: Connection) -> list[dict[str, Any]]:
    """Each stack's most recent fingerprint: stack, host, role, runtime, run, time, digest, document."""
    rs, S = m.RunStack, m.Stack
    ranked = (
        select(
            rs.stack_id,
            rs.run_id,
            R.started_at,
            rs.fingerprint_digest,
            func.row_number()
            .over(partition_by=rs.stack_id, order_by=(R.started_at.desc(), R.id.desc()))
            .label("n"),
        )
        .join(R, R.id == rs.run_id)
        .where(rs.fingerprint_digest.is_not(None))
        .subquery()
    )
    rows = [
        dict(r)
        for r in conn.execute(
            select(
                S.name,
                S.host,
                S.role,
                S.runtime,
                ranked.c.run_id,
                ranked.c.started_at,
                ranked.c.fingerprint_digest.label("digest"),
            )
            .join(ranked, ranked.c.stack_id == S.id)
            .where(ranked.c.n == 1)
            .order_by(S.role.desc(), S.name, S.host)
        ).mappings()
    ]
    documents = fingerprints.read(conn, [r["digest"] for r in rows])
    return [{**r, "document": documents[r["digest"]]} for r in rows if r["digest"] in documents]


@dataclass(frozen=True)
class ServedResult:
    """One stored result of a file (by digest) on a serving stack: what an earlier audit saw
    that stack's runtime do with exactly this file."""

    run_id: int
    started_at: datetime
    stack: str
    host: str
    device: str
    runtime: str
    runtime_package: str | None
    runtime_version: str | None
    pair: str
    status: str
    message: str
    converted: bool = False
    """The stack served the file as its deployment's conversion made it ([stacks.X.convert])."""
    fix: int | None = None
    """The `auditor fix` run (auditor.history.fixes) whose audit this is, not a cycle's run."""


def served_results(conn: Connection, sha256: str, limit: int = 50) -> list[ServedResult]:
    """The newest stored results of the file ``sha256`` on the stacks that loaded it (the infer
    side of its pairs), with each stack's runtime as fingerprinted in that run; complete runs
    only, newest first. One statement."""
    rs = aliased(m.RunStack, name="rs_infer")
    rows = conn.execute(
        select(
            P.run_id,
            R.started_at,
            S_INFER.name,
            S_INFER.host,
            S_INFER.device,
            S_INFER.runtime,
            P.pair,
            P.status,
            P.message,
            rs.fingerprint_digest,
            P.converted_sha256,
        )
        .join(R, R.id == P.run_id)
        .join(S_INFER, S_INFER.id == P.infer_stack_id)
        .outerjoin(rs, and_(rs.run_id == P.run_id, rs.stack_id == P.infer_stack_id))
        .where(P.artifact_sha256 == sha256, R.status == "complete")
        .order_by(R.started_at.desc(), P.id.desc())
        .limit(limit)
    ).all()
    documents = fingerprints.read(conn, [row.fingerprint_digest for row in rows])
    out = []
    for run_id, at, stack, host, device, runtime, pair, status, message, digest, converted in rows:
        document = documents.get(digest)
        rt = (document or {}).get("runtime") if isinstance(document, dict) else None
        rt = rt if isinstance(rt, dict) else {}
        out.append(
            ServedResult(
                run_id,
                at,
                stack,
                host,
                device,
                runtime,
                rt.get("runtime_package"),
                rt.get("runtime_version"),
                pair,
                status,
                message or "",
                converted is not None,
            )
        )
    return out


def time_span(conn: Connection) -> tuple[datetime | None, datetime | None, int]:
    """(first run start, last run start, number of runs)."""
    stmt = select(func.min(R.started_at), func.max(R.started_at), func.count(R.id))
    first, last, n = conn.execute(stmt).one()
    return first, last, n


# -- planner statistics --------------------------------------------------------------------------------

_STAT_TABLES = ("metrics", "probe_results", "latencies", "runs")


def refresh_statistics(conn: Connection, force: bool = False) -> bool:
    """On SQLite, (re)collect the planner's statistics when they are missing or the history has
    grown or shrunk by more than half since they were taken; True if it did. Cheap when
    nothing changed (two indexed look-ups); a full ANALYZE otherwise
    (about half a second per million metric rows; a sampled one misleads the planner).
    Other databases keep their own statistics (PostgreSQL's autovacuum), so this does nothing."""
    if conn.dialect.name != "sqlite":
        return False
    try:
        if not force and not _statistics_stale(conn):
            return False
        conn.exec_driver_sql("ANALYZE")
        conn.commit()
        return True
    except OperationalError:  # read-only file or locked: queries still work, only slower
        conn.rollback()
        return False


def _statistics_stale(conn: Connection) -> bool:
    has_stat = conn.scalar(text("SELECT count(*) FROM sqlite_master WHERE name = 'sqlite_stat1'"))
    if not has_stat:
        return True
    for table in _STAT_TABLES:
        rows = conn.scalar(text(f"SELECT max(rowid) - min(rowid) + 1 FROM {table}")) or 0  # O(log n)
        stat = conn.scalar(text("SELECT stat FROM sqlite_stat1 WHERE tbl = :t LIMIT 1"), {"t": table})
        counted = int(stat.split()[0]) if stat else 0
        if rows >= 1000 and not counted * 0.5 <= rows <= counted * 2:
            return True
    return False


__all__ = [
    "METRIC_COLUMNS",
    "RESULT_COLUMNS",
    "FingerprintChange",
    "RunDetail",
    "Series",
    "describe_change",
    "fingerprint_changes",
    "known_values",
    "latest_fingerprints",
    "metric_rows",
    "refresh_statistics",
    "resolve_run",
    "result_rows",
    "result_statuses",
    "run_auditors",
    "run_detail",
    "time_span",
    "trend",
]
