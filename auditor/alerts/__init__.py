"""Alerts: sinks (auditor.alerts.sinks, what a sink plugin implements) and the lifecycle of
findings over runs (auditor.alerts.engine).

This face is the plugin API for alert sinks: ``from auditor.alerts import SinkType``
(docs/plugins.md)."""

from auditor.alerts.sinks import OPENED, REMINDER, RESOLVED, SCHEMA, Sink, SinkType, option_problems

__all__ = ["OPENED", "REMINDER", "RESOLVED", "SCHEMA", "Sink", "SinkType", "option_problems"]
