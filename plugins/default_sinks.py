"""The built-in alert sinks: ``log``, ``jsonl``, ``webhook``, ``exec`` and ``alertmanager`` (one
module each, in ``auditor.plugins.sink_*``; a plugin adds its own the same way)."""

from auditor.plugins import sink_alertmanager, sink_exec, sink_jsonl, sink_log, sink_webhook

from auditor.alerts.sinks import SinkType
from auditor.hookspecs import hookimpl


@hookimpl
def auditor_alert_sinks() -> list[SinkType]:
    return [
        sink_log.SINK_TYPE,
        sink_jsonl.SINK_TYPE,
        sink_webhook.SINK_TYPE,
        sink_exec.SINK_TYPE,
        sink_alertmanager.SINK_TYPE,
    ]
