"""What an alert sink plugin implements (``SinkType`` and its ``Sink``) and what it receives.

The event payload (the JSON a sink receives; ``schema`` changes if a field changes meaning)::

    {
      "schema": "auditor.alert/1",
      "event": "opened" | "reminder" | "resolved",
      "alert": {
        "id": 12, "key": "ms20->lite20/ppo_policy/fp32/drift", "state": "open" | "resolved",
        "kind": "drift", "severity": "info" | "warning" | "error" | "critical",
        "subject": "ms20->lite20", "message": "mean: 3/512 elements out of tolerance ...",
        "details": {...},                      # the finding's details, as the rule wrote them
        "opened_at": "2026-12-02T10:00:00Z", "last_seen_at": "...Z", "resolved_at": null | "...Z",
        "opened_run_id": 3, "last_seen_run_id": 5, "resolved_run_id": null | 6,
        "notifications": 2                     # events sent for this alert, this one included
      },
      "run": {"id": 5, "status": "complete", "outcome": "drift",
              "started_at": "...Z", "finished_at": "...Z"},
      "host": "trainer-01",                    # where the auditor runs
      "auditor_version": "0.1.0",
      "created_at": "...Z"                     # when the event happened (not when it was sent)
    }
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

SCHEMA = "auditor.alert/1"
OPENED, REMINDER, RESOLVED = "opened", "reminder", "resolved"
"""The events a sink receives."""
OPEN, CLOSED = "open", "resolved"
"""An alert's states."""


class Sink(Protocol):
    """What ``SinkType.create`` returns."""

    def send(self, event: dict[str, Any]) -> None:
        """Deliver one event (the payload above), or raise: the event is retried later."""


@dataclass(frozen=True)
class SinkType:
    """A kind of alert sink, registered with the ``auditor_alert_sinks`` hook.

    ``validate(options)`` gets the ``[alerts.sinks.NAME]`` table without ``type`` and
    ``min_severity`` and returns its problems, each ``"KEY: message"`` (reported as
    ``alerts.sinks.NAME.KEY``) or a plain message; ``create(name, options)`` is only called
    with options that passed and returns a ``Sink``.
    """

    type: str
    description: str
    validate: Callable[[dict[str, Any]], list[str]]
    create: Callable[[str, dict[str, Any]], Sink]


def option_problems(
    options: Mapping[str, Any],
    kinds: Mapping[str, type | tuple[type, ...]],
    required: tuple[str, ...] = (),
) -> list[str]:
    """The common checks of a sink's options, as ``"KEY: message"`` problems: unknown keys,
    missing required keys, wrong types (a bool is not a number)."""
    problems = []
    for key in sorted(set(options) - set(kinds)):
        problems.append(f"{key}: unknown option (expected one of: {', '.join(sorted(kinds))}, min_severity)")
    for key in required:
        if key not in options:
            problems.append(f"{key}: is required")
    for key, kind in kinds.items():
        if key not in options:
            continue
        value = options[key]
        allowed = kind if isinstance(kind, tuple) else (kind,)
        if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
            numeric = float in allowed
            names = " or ".join(
                "number" if k is float else k.__name__ for k in allowed if not (numeric and k is int)
            )
            problems.append(f"{key}: must be {names}, not {type(value).__name__} {value!r}")
    return problems
