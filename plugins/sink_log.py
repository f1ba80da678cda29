"""Alert sink ``log``: one line per alert event in the auditor's log (the journal, under
systemd), at a level that follows the alert's severity; a resolution is logged at INFO.

    [alerts.sinks.journal]
    type = "log"
    logger = "auditor.alerts"   # optional: the logger name, to filter or route it
"""

from __future__ import annotations

import logging
from typing import Any

from auditor.alerts.sinks import RESOLVED, SinkType, option_problems

LEVELS = {
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}


class LogSink:
    def __init__(self, name: str, logger: str = "auditor.alerts"):
        self.name = name
        self.logger = logging.getLogger(logger)

    def send(self, event: dict[str, Any]) -> None:
        alert = event["alert"]
        level = logging.INFO if event["event"] == RESOLVED else LEVELS.get(alert["severity"], logging.ERROR)
        self.logger.log(
            level,
            "alert %s [%s] %s: %s (alert %s, run %s)",
            event["event"],
            alert["severity"],
            alert["key"],
            alert["message"],
            alert["id"],
            event["run"]["id"],
        )


def validate(options: dict[str, Any]) -> list[str]:
    return option_problems(options, {"logger": str})


def create(name: str, options: dict[str, Any]) -> LogSink:
    return LogSink(name, options.get("logger", "auditor.alerts"))


SINK_TYPE = SinkType("log", "one line per alert event in the auditor's log", validate, create)
