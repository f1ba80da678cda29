"""What the history is narrowed to (``Filters``: pairs, probes, stacks, hosts, statuses, a
time range) and how that becomes SQL: statements are built once per filter *shape* (how many
alternatives each filter has) with every value a bound parameter, so listings and series
walks share one definition of the filters and one compiled statement per shape. Also the
names of the latency series (``latency.[train.|infer.]STAT``) and the time words the CLI
accepts (``7d``, ISO dates)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Select, String, bindparam, cast, or_, select

from auditor.db import schema as m

R, P = m.Run, m.ProbeResultRow


LATENCY_PREFIX = "latency."


LATENCY_SIDES = ("train", "infer")


LATENCY_STATS = ("p50_us", "p90_us", "p99_us", "mean_us")


class HistoryError(Exception):
    """A query that cannot be answered as asked (unknown run, bad time, unknown metric)."""


def utcnow() -> datetime:
    """Now as the history stores times: naive UTC."""
    return datetime.now(UTC).replace(tzinfo=None)


_RELATIVE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d|w)\s*$", re.ASCII)


EARLIEST = datetime(1970, 1, 1)


LATEST = datetime(9999, 12, 31)
"""--since/--until outside these are typos (and beyond them datetime arithmetic overflows)."""


_RANGE = "between 1970-01-01 and 9999-12-31"


_UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_when(value: str, now: datetime | None = None) -> datetime:
    """A point in time for --since/--until: ``now``, a span back from now (``90m``, ``12h``,
    ``7d``, ``2w``), or an ISO 8601 date or time (UTC unless it carries an offset)."""
    now = now or utcnow()
    if value.strip().lower() == "now":
        return now
    rel = _RELATIVE.match(value.lower())
    try:
        if rel:
            when = now - timedelta(seconds=float(rel.group(1)) * _UNITS[rel.group(2)])
        else:
            when = datetime.fromisoformat(value.strip())
            if when.tzinfo is not None:
                when = when.astimezone(UTC).replace(tzinfo=None)
    except (OverflowError, ValueError) as exc:
        if rel or isinstance(exc, OverflowError):
            raise HistoryError(f"{value!r} is out of range: a time must be {_RANGE}") from None
        raise HistoryError(
            f"cannot read {value!r} as a time: use an ISO date or time (2026-03-01, "
            "2026-03-01T12:00, 2026-03-01T12:00+02:00), 'now', or a span back from now (90m, 12h, 7d, 2w)"
        ) from None
    if not EARLIEST <= when <= LATEST:
        raise HistoryError(f"{value!r} is {iso(when)}: a time must be {_RANGE}")
    return when


def iso(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat() + "Z"


@dataclass(frozen=True)
class Filters:
    """What ``auditor history``/``trend``/``report`` narrow the history to. Each tuple holds
    alternatives (any of them matches); ``since`` is inclusive, ``until`` exclusive, both on
    the run's start time. ``limit``: the newest N rows (None: all)."""

    pairs: tuple[str, ...] = ()
    probes: tuple[str, ...] = ()
    variants: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    stacks: tuple[str, ...] = ()
    statuses: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()
    """Pairs with a stack on one of these hosts (``[hosts]`` names, ``local``) on a side."""
    auditors: tuple[str, ...] = ()
    """Runs of these auditors (``[storage] auditor_id``) of a shared database."""
    where: tuple[tuple[str, str, str], ...] = ()
    """(field, operator, value) on any recorded field of a result (``FIELDS``): ``=``, ``!=``,
    or ``~`` (the value occurs in it)."""
    since: datetime | None = None
    until: datetime | None = None
    limit: int | None = 50


def where_results(stmt: Select, f: Filters) -> Select:
    """The filters on runs and probe results shared by every listing, with their values."""
    shape, values = filter_shape(f)
    return where_bound(stmt, shape).params(values)


_FILTER_COLUMNS = (("pair", "pairs"), ("probe", "probes"), ("variant", "variants"), ("status", "statuses"))


FIELDS: dict[str, Any] = {
    "run": R.id,
    "auditor": R.auditor_id,
    "run_host": R.host,
    "run_status": R.status,
    "outcome": R.outcome,
    "config": R.config_path,
    "pair": P.pair,
    "probe": P.probe,
    "probe_version": P.probe_version,
    "variant": P.variant,
    "status": P.status,
    "message": P.message,
    "artifact": P.artifact_sha256,
}
"""What ``history --where FIELD=VALUE`` can filter on: every field a result is stored with
(and its run's); ``train`` and ``infer`` (stack names) are handled apart."""

STACK_FIELDS = ("train", "infer")

OPERATORS = ("!=", "~", "=")


def parse_where(text: str) -> tuple[str, str, str]:
    """``FIELD=VALUE``, ``FIELD!=VALUE`` or ``FIELD~TEXT`` (TEXT occurs in it)."""
    for op in OPERATORS:
        field_name, sep, value = text.partition(op)
        if sep and field_name.strip():
            name = field_name.strip()
            if name not in FIELDS and name not in STACK_FIELDS:
                known = ", ".join([*FIELDS, *STACK_FIELDS])
                raise HistoryError(f"--where {text!r}: no field {name!r} (fields: {known})")
            return name, op, value.strip()
    raise HistoryError(f"--where {text!r}: write FIELD=VALUE, FIELD!=VALUE or FIELD~TEXT")


_STACK_FILTERS = (("stack", "stacks", "name"), ("host", "hosts", "host"))


def filter_shape(f: Filters) -> tuple[tuple[int, ...], dict[str, Any]]:
    """What ``where_bound`` needs to know to build the filters of ``f`` (how many alternatives
    each has, whether since/until are set), and the values to bind: statements are built and
    compiled once per shape (auditor.db.prepared) instead of once per call."""
    values: dict[str, Any] = {}
    counts = []
    for name, attr in (*_FILTER_COLUMNS, *((n, a) for n, a, _ in _STACK_FILTERS)):
        alternatives = getattr(f, attr)
        counts.append(len(alternatives))
        values.update({f"{name}{i}": v for i, v in enumerate(alternatives)})
    counts.append(len(f.auditors))
    values.update({f"auditor{i}": v for i, v in enumerate(f.auditors)})
    counts.append(tuple((name, op) for name, op, _ in f.where))  # type: ignore[arg-type]
    for i, (_, op, value) in enumerate(f.where):
        values[f"where{i}"] = f"%{_escaped(value)}%" if op == "~" else value
    for name in ("since", "until"):
        when = getattr(f, name)
        counts.append(when is not None)
        if when is not None:
            values[name] = when
    return tuple(counts), values


def bound_in(column: Any, name: str, n: int) -> Any:
    binds = [bindparam(f"{name}{i}", type_=String()) for i in range(n)]
    return column == binds[0] if n == 1 else column.in_(binds)


def where_bound(stmt: Select, shape: tuple[int, ...]) -> Select:
    """``where_results`` with every value a named parameter (names from ``filter_shape``)."""
    counts = dict(
        zip([n for n, _ in _FILTER_COLUMNS] + [n for n, _, _ in _STACK_FILTERS], shape, strict=False)
    )
    for name, _ in _FILTER_COLUMNS:
        if counts[name]:
            stmt = stmt.where(bound_in(getattr(P, name), name, counts[name]))
    for name, _, column in _STACK_FILTERS:
        if counts[name]:
            ids = select(m.Stack.id).where(bound_in(getattr(m.Stack, column), name, counts[name]))
            stmt = stmt.where(or_(P.train_stack_id.in_(ids), P.infer_stack_id.in_(ids)))
    auditors, where = shape[-4], shape[-3]
    if auditors:  # through the result's run: the series walk selects results without runs
        runs = select(R.id).where(bound_in(R.auditor_id, "auditor", auditors))  # type: ignore[arg-type]
        stmt = stmt.where(P.run_id.in_(runs))
    for i, (name, op) in enumerate(where):  # type: ignore[arg-type]
        stmt = stmt.where(_condition(name, op, bindparam(f"where{i}", type_=String())))
    since, until = shape[-2:]
    if since:
        stmt = stmt.where(R.started_at >= bindparam("since", type_=R.started_at.type))
    if until:
        stmt = stmt.where(R.started_at < bindparam("until", type_=R.started_at.type))
    return stmt


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _condition(name: str, op: str, value: Any) -> Any:
    if name in STACK_FIELDS:
        column = P.train_stack_id if name == "train" else P.infer_stack_id
        ids = select(m.Stack.id).where(_compare(m.Stack.name, op, value))
        return (
            column.in_(ids) if op != "!=" else column.not_in(select(m.Stack.id).where(m.Stack.name == value))
        )
    column = FIELDS[name]
    if column.table is R.__table__:
        return P.run_id.in_(select(R.id).where(_compare(column, op, value)))
    return _compare(column, op, value)


def _compare(column: Any, op: str, value: Any) -> Any:
    text = cast(column, String())
    if op == "~":
        return text.like(value, escape="\\")
    return text != value if op == "!=" else text == value


def is_latency_metric(metric: str) -> bool:
    return metric.startswith(LATENCY_PREFIX)


def latency_metric(metric: str) -> tuple[str | None, str]:
    """``latency.infer.p50_us`` -> ("infer", "p50_us"); ``latency.p50_us`` -> (None, "p50_us")."""
    parts = metric[len(LATENCY_PREFIX) :].split(".")
    if len(parts) == 1 and parts[0] in LATENCY_STATS:
        return None, parts[0]
    if len(parts) == 2 and parts[0] in LATENCY_SIDES and parts[1] in LATENCY_STATS:
        return parts[0], parts[1]
    raise HistoryError(
        f"unknown latency series {metric!r}: use latency.[train.|infer.]STAT with STAT one of "
        + ", ".join(LATENCY_STATS)
    )
