"""Alerts: the lifecycle of findings over runs, and their delivery to sinks.

A finding's ``key`` is stable across runs (``pair/probe/variant/kind``, ``stack/kind``, a
cause's key, ...), so the same problem seen in run after run is one alert, not one per run.

**What alerts.** A finding opens an alert only when what it is about (``category``) is in
``[alerts] on`` and its severity reaches ``[alerts] min_severity``. By default that is the
user's own models and plugin probes, compatibility, version drift, stacks and serving-side
latency; the built-in probes' findings (drift, invariants, NaN/Inf hazards, rollouts,
baselines) are recorded with their run (``auditor show RUN``) without paging anyone.

**Hysteresis**, so that a result on the edge does not flap:

- a key seen in a complete run with no alert starts a **pending** alert; it **opens** (sinks
  are told) once seen in ``open_after`` runs in a row. An event (a changed fingerprint or
  served model file, seen in one run only) and a critical finding open at once;
- while it stays open, later runs update it (severity, message, last seen), and the sinks
  hear of it again (**reminder**) once ``cooldown`` has passed since they last did
  (``cooldown = 0``: never);
- an open alert whose key is absent from ``resolve_after`` covering runs in a row is
  **resolved** (sinks are told); seen again in between, the count starts over. A pending
  alert whose key is absent from a covering run is dropped: it never paged.

Alerts belong to an auditor (``runs.auditor_id``): where several auditors share one database,
each opens, updates and resolves only its own, keyed by (auditor, key), so an auditor that
does not check a pair never resolves another's alert about it, and each delivers only its
own alerts' events to its own sinks.

Only a run that checked a finding's subject may count towards resolving it: an aborted run,
or one whose outcome is ``error`` or ``unchecked`` (a stack could not run, a collector failed:
an absent finding may mean "not checked" rather than "fixed"; ``NOT_LOOKED``), opens and
updates alerts but counts for no resolution; a
narrowed run (``audit --pair ...``, ``runs.selection``) counts only for the alerts about
what it covered (auditor.config.selection.Scope.covers).

Each event for each sink is a row in ``alert_deliveries``. A sink that fails (raises) is
recorded with its error and tried again at the next notification round (after the next
cycle), up to ``[alerts] max_attempts`` times; events reach a sink in the order they
happened. A failing sink never stops a cycle.

The event payload sinks receive is described in auditor.alerts.sinks.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from auditor import __version__
from auditor.alerts.sinks import CLOSED, OPEN, OPENED, REMINDER, RESOLVED, SCHEMA, Sink, SinkType
from auditor.config.selection import Scope
from auditor.config.tables import SEVERITIES, AlertsConfig, SinkConfig
from auditor.db import schema as m
from auditor.results import ERROR, NPU_TELEMETRY, TELEMETRY_UNAVAILABLE, UNCHECKED

log = logging.getLogger(__name__)

PENDING, DELIVERED, FAILED, DROPPED = "pending", "delivered", "failed", "dropped"
"""States of a delivery."""

WAITING = "pending"
"""State of an alert whose finding has not yet been seen ``open_after`` runs in a row."""

EVENTS = ("version-drift", "model-drift")
"""Findings of something that happened once (a fingerprint, a served file that changed): seen
in one run only, so they open at once."""

STACK_KINDS = ("stack-unavailable", "worker-failure")

DEVICE_KINDS = (NPU_TELEMETRY, TELEMETRY_UNAVAILABLE)
NOT_LOOKED = (ERROR, UNCHECKED)
"""Outcomes of runs that may not have looked at everything they were asked to (a stack that
could not run, a collector that failed, a publication missing): they resolve no alert."""


def category(kind: str, details: Mapping[str, Any], builtin_probes: Collection[str]) -> str:
    """What a finding is about, for ``[alerts] on`` (auditor.config.tables.ALERT_CATEGORIES)."""
    if kind in STACK_KINDS:
        return "stacks"
    if kind in DEVICE_KINDS:
        return "devices"
    if kind in EVENTS:
        return "version-drift"
    if kind == "latency-regression":
        return "latency"
    if "rule" in details:
        return "compatibility"
    probe = details.get("probe")
    if probe is not None:
        return "probes" if probe in builtin_probes else "models"
    return "compatibility"


def severity_rank(severity: str) -> int:
    """Unknown severities (from plugins) rank above the known ones rather than being ignored."""
    return SEVERITIES.index(severity) if severity in SEVERITIES else len(SEVERITIES)


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() + "Z" if value is not None else None


class _BrokenSink:
    """Stands in for a sink that could not be created, so its events are recorded as failing
    (and retried after a reload fixes it) instead of vanishing."""

    def __init__(self, error: str):
        self.error = error

    def send(self, event: dict[str, Any]) -> None:
        raise RuntimeError(self.error)


@dataclass
class ConfiguredSink:
    config: SinkConfig
    sink: Sink

    @property
    def name(self) -> str:
        return self.config.name


def build_sinks(config: AlertsConfig, types: Mapping[str, SinkType]) -> dict[str, ConfiguredSink]:
    """The configured sinks, created by their types. One that cannot be created is logged and
    kept as a sink that fails, so its events wait for a config that works."""
    sinks: dict[str, ConfiguredSink] = {}
    for name, sc in config.sinks.items():
        sink_type = types.get(sc.type)
        try:
            if sink_type is None:
                raise LookupError(f"unknown sink type {sc.type!r} (known: {', '.join(sorted(types))})")
            sink: Sink = sink_type.create(name, dict(sc.options))
        except Exception as exc:  # plugin code
            message = f"cannot create alert sink {name} ({sc.type}): {type(exc).__name__}: {exc}"
            log.error("%s", message)
            sink = _BrokenSink(message)
        sinks[name] = ConfiguredSink(sc, sink)
    return sinks


def alert_runs(
    engine: Engine,
    config: AlertsConfig,
    sink_types: Mapping[str, SinkType],
    run_ids: Collection[int | None],
    auditor_id: str | None,
    builtin_probes: Collection[str],
    should_stop: Callable[[], bool] = lambda: False,
) -> dict[str, int]:
    """What stored runs do to the alerts, the same for the daemon's cycles and ``audit
    --alerts``: each run evaluated in order, the pending events delivered to the sinks (these
    runs' and any earlier ones still waiting), and the open alerts by severity after."""
    alerts = AlertEngine(
        engine,
        config,
        build_sinks(config, sink_types),
        auditor_id=auditor_id,
        builtin_probes=builtin_probes,
    )
    for run_id in run_ids:
        if run_id is not None:
            alerts.evaluate(run_id)
    alerts.deliver(should_stop=should_stop)
    return alerts.open_counts()


@dataclass(frozen=True)
class Event:
    """One notification decided by ``evaluate``: which alert, what happened."""

    alert_id: int
    key: str
    event: str
    severity: str
    payload: dict[str, Any]


@dataclass(frozen=True)
class DeliveryRound:
    delivered: int = 0
    failed: int = 0
    pending: int = 0


class AlertEngine:
    """Alert state in the history database (``alerts`` and ``alert_deliveries`` tables)."""

    def __init__(
        self,
        engine: Engine,
        config: AlertsConfig,
        sinks: Mapping[str, ConfiguredSink] | None = None,
        clock: Callable[[], datetime] = _now,
        host: str | None = None,
        auditor_id: str | None = None,
        builtin_probes: Collection[str] = (),
        timer: Callable[[], float] = time.monotonic,
    ):
        """``auditor_id``: deliver (and count) only this auditor's alerts; None: all of them
        (one auditor alone on its database). ``builtin_probes``: the probes shipped with the
        auditor, whose findings are category "probes" (the others' are "models"). ``timer``:
        seconds, for each sink's budget in a delivery round (``[alerts] sink_budget``)."""
        self.timer = timer
        self.builtin_probes = frozenset(builtin_probes)
        self.engine = engine
        self.config = config
        self.sinks = dict(sinks or {})
        self.clock = clock
        self.host = host or socket.gethostname()
        self.auditor_id = auditor_id

    # -- deciding ---------------------------------------------------------------------------
    def alerts_on(self, kind: str, severity: str, details: Mapping[str, Any]) -> bool:
        """Whether a finding opens alerts: its category is in ``on``, its severity high enough."""
        if severity_rank(severity) < severity_rank(self.config.min_severity):
            return False
        return category(kind, details or {}, self.builtin_probes) in self.config.on

    def evaluate(self, run_id: int) -> list[Event]:
        """Turn the findings of a stored run into alert state and pending deliveries, in one
        transaction. A run that is not complete changes nothing."""
        now = self.clock()
        events: list[Event] = []
        cfg = self.config
        with Session(self.engine) as s, s.begin():
            run = s.get(m.Run, run_id)
            if run is None:
                raise LookupError(f"run {run_id} is not in the database")
            if run.status != "complete":
                return []
            scope = Scope.from_json(run.selection)
            findings: dict[str, m.FindingRow] = {}
            for f in s.scalars(select(m.FindingRow).where(m.FindingRow.run_id == run_id)):
                if not self.alerts_on(f.kind, f.severity, f.details or {}):
                    continue
                # the same key twice in one run: keep the most severe
                seen = findings.get(f.key)
                if seen is None or severity_rank(f.severity) > severity_rank(seen.severity):
                    findings[f.key] = f
            live = {
                a.key: a
                for a in s.scalars(
                    select(m.Alert).where(
                        m.Alert.state.in_((OPEN, WAITING)), m.Alert.auditor_id == run.auditor_id
                    )
                )
            }
            cooldown = timedelta(seconds=cfg.cooldown)
            for key, f in findings.items():
                alert = live.get(key)
                if alert is None:
                    alert = m.Alert(
                        auditor_id=run.auditor_id,
                        key=key,
                        state=WAITING,
                        opened_at=now,
                        opened_run_id=run_id,
                        notifications=0,
                        streak=0,
                    )
                    s.add(alert)
                kind = None
                if alert.state == WAITING:
                    alert.streak = (alert.streak or 0) + 1
                    at_once = f.kind in EVENTS or f.severity == "critical"
                    if at_once or alert.streak >= cfg.open_after:
                        alert.state, alert.streak = OPEN, 0
                        alert.opened_at, alert.opened_run_id = now, run_id
                        kind = OPENED
                else:
                    alert.streak = 0  # seen again: a resolution starts over
                    if (
                        cfg.cooldown > 0
                        and alert.last_notified_at is not None
                        and now - alert.last_notified_at >= cooldown
                    ):
                        kind = REMINDER
                alert.kind, alert.severity, alert.subject = f.kind, f.severity, f.subject
                alert.message, alert.details = f.message, dict(f.details or {})
                alert.last_seen_at, alert.last_seen_run_id = now, run_id
                if kind is not None:
                    events.append(self._event(s, alert, kind, run, now))
            if run.outcome not in NOT_LOOKED:
                for key, alert in live.items():
                    if key in findings or not (
                        scope is None or scope.covers(alert.subject, alert.details or {})
                    ):
                        continue
                    if alert.state == WAITING:
                        s.delete(alert)  # not seen enough runs in a row to open: never paged
                        continue
                    alert.streak = (alert.streak or 0) + 1
                    if alert.streak >= cfg.resolve_after:
                        alert.state, alert.resolved_at, alert.resolved_run_id = CLOSED, now, run_id
                        events.append(self._event(s, alert, RESOLVED, run, now))
        if events:
            kinds = [e.event for e in events]
            log.info(
                "alerts after run %d: %s",
                run_id,
                ", ".join(f"{kinds.count(k)} {k}" for k in (OPENED, REMINDER, RESOLVED) if k in kinds),
            )
        return events

    def _event(self, s: Session, alert: m.Alert, kind: str, run: m.Run, now: datetime) -> Event:
        alert.notifications += 1
        alert.last_notified_at = now
        s.flush()  # the alert's id
        payload = {
            "schema": SCHEMA,
            "event": kind,
            "alert": alert_json(alert),
            "run": {
                "id": run.id,
                "status": run.status,
                "outcome": run.outcome,
                "started_at": _iso(run.started_at),
                "finished_at": _iso(run.finished_at),
            },
            "host": self.host,
            "auditor_version": __version__,
            "created_at": _iso(now),
        }
        for sink in self.sinks.values():
            if severity_rank(alert.severity) >= severity_rank(sink.config.min_severity):
                s.add(
                    m.AlertDelivery(
                        alert_id=alert.id,
                        sink=sink.name,
                        event=kind,
                        payload=payload,
                        state=PENDING,
                        created_at=now,
                        attempts=0,
                    )
                )
        return Event(alert.id, alert.key, kind, alert.severity, payload)

    # -- delivering -------------------------------------------------------------------------
    def deliver(self, should_stop: Callable[[], bool] = lambda: False) -> DeliveryRound:
        """Send every pending delivery, oldest first, sink by sink. A sink that fails is
        recorded and skipped for the rest of this round (its later events keep their order)."""
        with Session(self.engine) as s:
            pending = [
                (d.id, d.sink, d.payload, d.attempts)
                for d in s.scalars(
                    self._mine(select(m.AlertDelivery).join(m.Alert))
                    .where(m.AlertDelivery.state == PENDING)
                    .order_by(m.AlertDelivery.id)
                )
            ]
        delivered = failed = 0
        broken: set[str] = set()
        spent: dict[str, float] = {}
        waiting: dict[str, int] = {}
        for delivery_id, sink_name, payload, attempts in pending:
            if should_stop():
                break
            if sink_name in broken:
                continue
            sink = self.sinks.get(sink_name)
            if sink is None:
                self._update(delivery_id, state=DROPPED, last_error="the sink is no longer configured")
                continue
            if spent.get(sink_name, 0.0) >= self.config.sink_budget:
                waiting[sink_name] = waiting.get(sink_name, 0) + 1  # the next round sends it
                continue
            now = self.clock()
            started = self.timer()
            try:
                sink.sink.send(payload)
            except Exception as exc:  # sinks are plugin code; any failure is the sink's
                attempts += 1
                error = f"{type(exc).__name__}: {exc}"
                gave_up = attempts >= self.config.max_attempts
                self._update(
                    delivery_id,
                    state=FAILED if gave_up else PENDING,
                    attempts=attempts,
                    last_attempt_at=now,
                    last_error=error,
                )
                log.warning(
                    "alert sink %s could not deliver %s of %s (attempt %d of %d%s): %s",
                    sink_name,
                    payload.get("event"),
                    payload.get("alert", {}).get("key"),
                    attempts,
                    self.config.max_attempts,
                    ", giving up" if gave_up else ", retried at the next notification",
                    error,
                )
                broken.add(sink_name)
                failed += 1
                continue
            finally:
                spent[sink_name] = spent.get(sink_name, 0.0) + (self.timer() - started)
            self._update(
                delivery_id,
                state=DELIVERED,
                attempts=attempts + 1,
                last_attempt_at=now,
                delivered_at=self.clock(),
            )
            delivered += 1
        for sink_name, count in waiting.items():
            log.warning(
                "alert sink %s used its %g s of this round (sink_budget): %d delivery(ies) wait for "
                "the next round",
                sink_name,
                self.config.sink_budget,
                count,
            )
        with Session(self.engine) as s:
            left = s.scalar(
                self._mine(select(func.count()).select_from(m.AlertDelivery).join(m.Alert)).where(
                    m.AlertDelivery.state == PENDING
                )
            )
        return DeliveryRound(delivered, failed, int(left or 0))

    def _mine(self, stmt: Any) -> Any:
        """``stmt`` (which selects from alerts) limited to this auditor's alerts, if it has an id."""
        return stmt if self.auditor_id is None else stmt.where(m.Alert.auditor_id == self.auditor_id)

    def _update(self, delivery_id: int, **values: Any) -> None:
        with Session(self.engine) as s, s.begin():
            d = s.get(m.AlertDelivery, delivery_id)
            if d is not None:
                for k, v in values.items():
                    setattr(d, k, v)

    # -- reading ----------------------------------------------------------------------------
    def open_counts(self) -> dict[str, int]:
        """Open alerts by severity (every known severity present, 0 included)."""
        counts = dict.fromkeys(SEVERITIES, 0)
        with Session(self.engine) as s:
            rows = s.execute(
                self._mine(select(m.Alert.severity, func.count()))
                .where(m.Alert.state == OPEN)
                .group_by(m.Alert.severity)
            )
            for severity, n in rows:
                counts[severity] = int(n)
        return counts


def list_alerts(
    engine: Engine, open_only: bool = False, limit: int = 50, auditors: Collection[str] = ()
) -> list[dict[str, Any]]:
    """Alerts, open ones first, then pending ones, then newest first; ``auditors``: only theirs."""
    with Session(engine) as s:
        q = select(m.Alert)
        if open_only:
            q = q.where(m.Alert.state == OPEN)
        if auditors:
            q = q.where(m.Alert.auditor_id.in_(list(auditors)))
        q = q.order_by(
            (m.Alert.state == OPEN).desc(),
            (m.Alert.state == WAITING).desc(),
            m.Alert.last_seen_at.desc(),
            m.Alert.id.desc(),
        )
        return [alert_json(a) for a in s.scalars(q.limit(limit))]


def sink_status(engine: Engine) -> dict[str, dict[str, Any]]:
    """Per sink: deliveries by state, and the last error and last success."""
    out: dict[str, dict[str, Any]] = {}
    with Session(engine) as s:
        for sink, state, n in s.execute(
            select(m.AlertDelivery.sink, m.AlertDelivery.state, func.count()).group_by(
                m.AlertDelivery.sink, m.AlertDelivery.state
            )
        ):
            entry = out.setdefault(
                sink, {"pending": 0, "delivered": 0, "failed": 0, "dropped": 0, "last_error": None}
            )
            entry[state] = int(n)
        for sink, entry in out.items():
            last_bad = s.scalars(
                select(m.AlertDelivery)
                .where(m.AlertDelivery.sink == sink, m.AlertDelivery.last_error.is_not(None))
                .order_by(m.AlertDelivery.last_attempt_at.desc(), m.AlertDelivery.id.desc())
                .limit(1)
            ).first()
            last_ok = s.scalar(
                select(func.max(m.AlertDelivery.delivered_at)).where(m.AlertDelivery.sink == sink)
            )
            if last_bad is not None:
                entry["last_error"] = last_bad.last_error
                entry["last_error_at"] = _iso(last_bad.last_attempt_at)
            entry["last_delivered_at"] = _iso(last_ok)
    return out


def alert_json(a: m.Alert) -> dict[str, Any]:
    return {
        "auditor_id": a.auditor_id,
        "id": a.id,
        "key": a.key,
        "state": a.state,
        "kind": a.kind,
        "severity": a.severity,
        "subject": a.subject,
        "message": a.message,
        "details": a.details,
        "opened_at": _iso(a.opened_at),
        "last_seen_at": _iso(a.last_seen_at),
        "resolved_at": _iso(a.resolved_at),
        "opened_run_id": a.opened_run_id,
        "last_seen_run_id": a.last_seen_run_id,
        "resolved_run_id": a.resolved_run_id,
        "notifications": a.notifications,
        "streak": a.streak,
    }
