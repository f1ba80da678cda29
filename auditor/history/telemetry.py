"""NPU telemetry in the history database: series per (auditor, host, NPU, chip, metric) and
their points in time (``telemetry_series``, ``telemetry_points``).

Points are not tied to runs: a cycle writes its samples in its run's transaction
(auditor.history.store), the daemon's telemetry schedule writes its own between cycles
(``record``), and retention deletes points by age, each auditor its own (``prune``).

Reading: ``newest`` gives each selected series' newest N points, one indexed walk per series
on (series_id, at) that stops after N rows, so its cost grows with N and the number of
series, never with the length of the history; ``between`` gives every point of the selected
series in a time range (the report), one statement; ``worst_since`` the highest value of each
series since a time (what a cycle judges thresholds on), through the index on ``at``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Connection,
    Integer,
    Select,
    String,
    and_,
    bindparam,
    delete,
    exists,
    func,
    insert,
    select,
)
from sqlalchemy.orm import Session

from auditor.db import schema as m
from auditor.db.prepared import prepared
from auditor.results import HostTelemetry

S, P = m.TelemetrySeriesRow, m.TelemetryPoint
Key = tuple[str, int, str, str]
"""(host, npu, chip, metric) of one series of one auditor."""


def utc(at: float) -> datetime:
    """A sample's Unix time as the history stores times: naive UTC."""
    return datetime.fromtimestamp(at, UTC).replace(tzinfo=None)


@dataclass(frozen=True)
class TelemetryFilters:
    """What telemetry reads are narrowed to; each tuple holds alternatives (empty: all)."""

    hosts: tuple[str, ...] = ()
    npus: tuple[int, ...] = ()
    metrics: tuple[str, ...] = ()
    auditor_id: str | None = None
    """Only this auditor's series (None: every auditor's)."""
    since: datetime | None = None
    until: datetime | None = None


@dataclass
class TelemetrySeries:
    auditor_id: str
    host: str
    npu: int
    chip: str
    metric: str
    points: list[tuple[datetime, float]] = field(default_factory=list)
    """(time, value), oldest first."""
    id: int = 0
    """The series' row id."""

    @property
    def key(self) -> Key:
        return (self.host, self.npu, self.chip, self.metric)

    @property
    def label(self) -> str:
        """``npu3`` for a card's only chip, ``npu3.1`` for chip 1, ``npu3.mcu`` for its MCU."""
        return f"npu{self.npu}" if self.chip == "0" else f"npu{self.npu}.{self.chip}"


# -- writing ---------------------------------------------------------------------------------------
def record(session: Session | Connection, auditor_id: str, samples: Iterable[HostTelemetry]) -> int:
    """Add every value of ``samples`` as a point of its series (listing new series first), in
    the caller's transaction; returns how many points."""
    rows: list[tuple[Key, datetime, float]] = []
    for sample in samples:
        at = utc(sample.at)
        rows += [((sample.host, n, c, k), at, v) for n, c, k, v in sample.points()]
    if not rows:
        return 0
    ids = _series_ids(session, auditor_id, {key for key, _, _ in rows})
    session.execute(
        insert(P), [{"series_id": ids[key], "at": at, "value": float(value)} for key, at, value in rows]
    )
    return len(rows)


def _series_ids(session: Session | Connection, auditor_id: str, keys: set[Key]) -> dict[Key, int]:
    hosts = sorted({k[0] for k in keys})

    def known() -> dict[Key, int]:
        stmt = select(S.id, S.host, S.npu, S.chip, S.metric)
        stmt = stmt.where(S.auditor_id == auditor_id, S.host.in_(hosts))
        return {(h, n, c, k): i for i, h, n, c, k in session.execute(stmt)}

    ids = known()
    missing = [k for k in keys if k not in ids]
    if missing:
        values = [
            {"auditor_id": auditor_id, "host": h, "npu": n, "chip": c, "metric": k} for h, n, c, k in missing
        ]
        dialect = (session.get_bind() if isinstance(session, Session) else session).dialect.name
        if dialect in ("sqlite", "postgresql"):
            if dialect == "sqlite":
                from sqlalchemy.dialects.sqlite import insert as dialect_insert
            else:
                from sqlalchemy.dialects.postgresql import insert as dialect_insert
            # another auditor's run may list the same series at the same moment: skipped, not an error
            session.execute(dialect_insert(S).on_conflict_do_nothing(), values)
        else:
            session.execute(insert(S), values)
        ids = known()
    return ids


def store_samples(engine: Any, auditor_id: str, samples: Iterable[HostTelemetry]) -> int:
    """The daemon's telemetry schedule: ``samples`` written in a transaction of their own."""
    with Session(engine) as s, s.begin():
        return record(s, auditor_id, samples)


def prune(conn: Connection, cutoff: datetime, auditor_id: str | None) -> dict[str, int]:
    """Delete the points older than ``cutoff`` (of ``auditor_id``'s series; None: everyone's)
    and the series left without points; rows deleted per table."""
    mine = select(S.id)
    if auditor_id is not None:
        mine = mine.where(S.auditor_id == auditor_id)
    points = conn.execute(delete(P).where(P.at < cutoff, P.series_id.in_(mine))).rowcount or 0
    empty = ~exists().where(P.series_id == S.id)
    gone = delete(S).where(empty)
    if auditor_id is not None:
        gone = gone.where(S.auditor_id == auditor_id)
    series = conn.execute(gone).rowcount or 0
    return {"telemetry_points": points, "telemetry_series": series}


# -- reading ---------------------------------------------------------------------------------------
# Statements are built once per filter shape with every value bound (auditor.db.prepared), as
# the other history queries are.


def _shape(f: TelemetryFilters) -> tuple[tuple[int, int, int, bool, bool, bool], dict[str, Any]]:
    """How many alternatives each filter has (and which are set), and the values to bind."""
    values: dict[str, Any] = {}
    for name, alternatives in (("host", f.hosts), ("npu", f.npus), ("metric", f.metrics)):
        values.update({f"{name}{i}": v for i, v in enumerate(alternatives)})
    for name in ("auditor_id", "since", "until"):
        if getattr(f, name) is not None:
            values[name] = getattr(f, name)
    shape = (
        len(f.hosts),
        len(f.npus),
        len(f.metrics),
        f.auditor_id is not None,
        f.since is not None,
        f.until is not None,
    )
    return shape, values


def _of_series(stmt: Select, shape: tuple[int, int, int, bool, bool, bool]) -> Select:
    """The series filters of ``shape`` on a statement that selects from telemetry_series."""
    for column, name, n in (
        (S.host, "host", shape[0]),
        (S.npu, "npu", shape[1]),
        (S.metric, "metric", shape[2]),
    ):
        if n:
            kind = Integer() if name == "npu" else String()
            binds = [bindparam(f"{name}{i}", type_=kind) for i in range(n)]
            stmt = stmt.where(column == binds[0] if n == 1 else column.in_(binds))
    if shape[3]:
        stmt = stmt.where(S.auditor_id == bindparam("auditor_id", type_=String()))
    return stmt


def _in_time(stmt: Select, shape: tuple[int, int, int, bool, bool, bool]) -> Select:
    if shape[4]:
        stmt = stmt.where(P.at >= bindparam("since", type_=P.at.type))
    if shape[5]:
        stmt = stmt.where(P.at < bindparam("until", type_=P.at.type))
    return stmt


def series_list(conn: Connection, f: TelemetryFilters) -> list[TelemetrySeries]:
    """The series the filters select (no points), ordered by host, NPU, chip, metric."""
    shape, values = _shape(f)

    def build() -> Select:
        stmt = select(S.id, S.auditor_id, S.host, S.npu, S.chip, S.metric)
        return _of_series(stmt, shape).order_by(S.host, S.npu, S.chip, S.metric, S.auditor_id)

    listing = prepared(conn, ("telemetry series", shape[:4]), build)
    return [TelemetrySeries(a, h, n, c, k, id=i) for i, a, h, n, c, k in listing.rows(conn, values)]


def newest(conn: Connection, f: TelemetryFilters, limit: int) -> list[TelemetrySeries]:
    """Each selected series with its newest ``limit`` points (within since/until), oldest first:
    one walk of the (series_id, at) index per series, stopping after ``limit`` rows."""
    shape, values = _shape(f)

    def build() -> Select:
        stmt = select(P.at, P.value).where(P.series_id == bindparam("series", type_=Integer()))
        stmt = _in_time(stmt, shape).order_by(P.at.desc(), P.id.desc())
        return stmt.limit(bindparam("limit", type_=Integer()))

    walk = prepared(conn, ("telemetry newest", shape[4:]), build)
    values["limit"] = limit
    out = []
    for s in series_list(conn, f):
        values["series"] = s.id
        s.points = list(walk.rows(conn, values))[::-1]
        if s.points:
            out.append(s)
    return out


def between(conn: Connection, f: TelemetryFilters) -> list[TelemetrySeries]:
    """Every point of the selected series within since/until, oldest first."""
    listed = {s.id: s for s in series_list(conn, f)}
    if not listed:
        return []
    shape, values = _shape(f)

    def build() -> Select:
        chosen = _of_series(select(S.id), shape)
        stmt = select(P.series_id, P.at, P.value).where(P.series_id.in_(chosen.scalar_subquery()))
        return _in_time(stmt, shape).order_by(P.series_id, P.at, P.id)

    statement = prepared(conn, ("telemetry between", shape), build)
    for series_id, at, value in statement.rows(conn, values, stream=True):
        listed[series_id].points.append((at, value))
    return [s for s in listed.values() if s.points]


def worst_since(conn: Connection, auditor_id: str, since: datetime) -> dict[Key, tuple[float, datetime]]:
    """The highest value of each of the auditor's series since ``since``, with when it was first
    seen: the maxima found through the index on ``at`` (the window's rows only), then the time."""

    def build() -> Select:
        recent = bindparam("since", type_=P.at.type)
        mine = select(S.id).where(S.auditor_id == bindparam("auditor_id", type_=String()))
        peak = (
            select(P.series_id, func.max(P.value).label("peak"))
            .where(P.at >= recent, P.series_id.in_(mine.scalar_subquery()))
            .group_by(P.series_id)
            .subquery("peak")
        )
        return (
            select(S.host, S.npu, S.chip, S.metric, peak.c.peak, func.min(P.at))
            .select_from(peak)
            .join(P, and_(P.series_id == peak.c.series_id, P.value == peak.c.peak, P.at >= recent))
            .join(S, S.id == peak.c.series_id)
            .group_by(S.id, S.host, S.npu, S.chip, S.metric, peak.c.peak)
        )

    statement = prepared(conn, ("telemetry worst since",), build)
    return {
        (host, npu, chip, metric): (float(value), at)
        for host, npu, chip, metric, value, at in statement.rows(
            conn, {"auditor_id": auditor_id, "since": since}
        )
    }
