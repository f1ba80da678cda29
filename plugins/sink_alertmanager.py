"""Alert sink ``alertmanager``: each alert event posted to Prometheus Alertmanager's v2 API
(``POST {url}/api/v2/alerts``), so the auditor's alerts are routed, grouped, silenced and
inhibited with the rest of an operator's alerts.

    [alerts.sinks.am]
    type = "alertmanager"
    url = "http://alertmanager.internal:9093"   # the Alertmanager; /api/v2/alerts is added
    labels = { team = "ml-platform" }         # added to every alert (routing)
    valid_for = 43200                          # seconds an open alert stays active unless resent
    runbook_url = "https://docs.internal/auditor/alerts/#{kind}"   # {kind}: the finding's kind
    timeout = 10                               # as the webhook sink: deadline per attempt,
    retries = 3                                # retries with backoff, an optional secret header
    # secret_header = "Authorization"
    # secret_env = "AUDITOR_AM_TOKEN"

An alert's labels: ``alertname`` (``Auditor`` and its kind in CamelCase: ``AuditorDrift``,
``AuditorOutOfLine``), ``kind``, ``severity``, ``subject`` (the pair, stack or host it is
about), ``key`` (the finding's key: one Alertmanager alert per auditor alert), ``auditor``
(the host the auditor runs on), the ``pair``, ``probe``, ``variant``, ``host`` and ``group``
of its details where it has them, and the configured ``labels``. Annotations: ``summary``
(one line), ``description`` (the report's line for it) and ``runbook_url``.

Alertmanager resolves an alert nobody resends by its ``endsAt``: an open alert is sent with
``endsAt`` ``valid_for`` seconds ahead, and the auditor resends it at each reminder (``[alerts]
cooldown``, 6 hours by default: keep ``valid_for`` above it); a resolved one is sent with
``endsAt`` its resolution time, which ends it at once. Delivery is the webhook sink's: one
deadline per attempt, retries on connection errors, 408, 429 and 5xx.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from auditor.plugins import sink_webhook

from auditor.alerts.sinks import RESOLVED, SinkType, option_problems

OWN = {"labels": dict, "valid_for": (int, float), "runbook_url": str}
"""The options beside the webhook sink's (url, timeout, retries, backoff, headers, secrets)."""
DETAIL_LABELS = ("pair", "probe", "variant", "host", "group")
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def alertname(kind: str) -> str:
    """``drift`` -> ``AuditorDrift``, ``out-of-line`` -> ``AuditorOutOfLine``."""
    return "Auditor" + "".join(
        part[:1].upper() + part[1:] for part in re.split(r"[^a-zA-Z0-9]+", kind) if part
    )


def _time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _rfc3339(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def alert_of(
    event: dict[str, Any],
    labels: dict[str, str],
    valid_for: float,
    runbook_url: str | None,
    now: datetime,
) -> dict[str, Any]:
    """The Alertmanager alert (v2 API, ``postableAlert``) of one auditor alert event."""
    alert = event["alert"]
    details = alert.get("details") or {}
    own = {
        "alertname": alertname(str(alert["kind"])),
        "kind": str(alert["kind"]),
        "severity": str(alert["severity"]),
        "subject": str(alert.get("subject") or ""),
        "key": str(alert["key"]),
        "auditor": str(event.get("host") or ""),
    }
    for name in DETAIL_LABELS:
        value = details.get(name)
        if isinstance(value, str | int | float) and not isinstance(value, bool) and str(value):
            own[name] = str(value)
    message = str(alert.get("message") or "")
    first = message.splitlines()[0] if message else ""
    annotations = {
        "summary": f"{own['subject'] or own['kind']}: {first}"[:300],
        "description": message,
    }
    if runbook_url:
        annotations["runbook_url"] = runbook_url.replace("{kind}", own["kind"])
    started = _time(alert.get("opened_at")) or now
    if event.get("event") == RESOLVED or alert.get("state") == "resolved":
        ends = _time(alert.get("resolved_at")) or now
    else:
        ends = now + timedelta(seconds=valid_for)
    return {
        "labels": {**labels, **own},
        "annotations": annotations,
        "startsAt": _rfc3339(started),
        "endsAt": _rfc3339(max(ends, started)),
    }


class AlertmanagerSink:
    def __init__(
        self,
        name: str,
        poster: sink_webhook.WebhookSink,
        labels: dict[str, str] | None = None,
        valid_for: float = 43200.0,
        runbook_url: str | None = None,
    ):
        self.name = name
        self.poster = poster
        self.labels = dict(labels or {})
        self.valid_for = valid_for
        self.runbook_url = runbook_url

    def __repr__(self) -> str:
        return f"AlertmanagerSink({self.name!r}, {self.poster!r})"

    def send(self, event: dict[str, Any]) -> None:
        body = [alert_of(event, self.labels, self.valid_for, self.runbook_url, datetime.now(UTC))]
        self.poster.post(json.dumps(body).encode(), str(event.get("event", "")))


def api_url(url: str) -> str:
    return url.rstrip("/") + "/api/v2/alerts"


def validate(options: dict[str, Any]) -> list[str]:
    webhook = {k: v for k, v in options.items() if k not in OWN}
    problems = [
        p
        for p in sink_webhook.validate(webhook)
        if not p.startswith(tuple(f"{k}: unknown option" for k in OWN))
    ]
    problems = [
        p.replace("expected one of: ", f"expected one of: {', '.join(sorted(OWN))}, ", 1) for p in problems
    ]
    problems += option_problems({k: v for k, v in options.items() if k in OWN}, OWN)
    labels = options.get("labels")
    for key, value in labels.items() if isinstance(labels, dict) else ():
        if not LABEL_NAME.match(str(key)):
            problems.append(f"labels.{key}: not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)")
        elif not isinstance(value, str):
            problems.append(f"labels.{key}: must be a string, not {type(value).__name__}")
    valid_for = options.get("valid_for")
    if isinstance(valid_for, int | float) and not isinstance(valid_for, bool) and not valid_for > 0:
        problems.append(f"valid_for: must be greater than 0 seconds, not {valid_for!r}")
    return problems


def create(name: str, options: dict[str, Any]) -> AlertmanagerSink:
    webhook = {k: v for k, v in options.items() if k not in OWN}
    webhook["url"] = api_url(str(options["url"]))
    return AlertmanagerSink(
        name,
        sink_webhook.create(name, webhook),
        labels={str(k): str(v) for k, v in (options.get("labels") or {}).items()},
        valid_for=float(options.get("valid_for", 43200.0)),
        runbook_url=options.get("runbook_url"),
    )


SINK_TYPE = SinkType(
    "alertmanager",
    "Prometheus Alertmanager's v2 API: labels, annotations, endsAt on resolution",
    validate,
    create,
)
