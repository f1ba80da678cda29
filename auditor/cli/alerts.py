"""``auditor alerts``: the alerts of the history, and the delivery state of each sink."""

from __future__ import annotations

import json

import click

from auditor.cli.context import MAX_LIMIT, Context, fail
from auditor.cli.formats import auditor_filter, chosen, format_options, write_rows

ALERT_COLUMNS = (
    "id",
    "state",
    "severity",
    "auditor_id",
    "key",
    "opened_at",
    "last_seen_at",
    "resolved_at",
    "notifications",
    "message",
)


@click.command("alerts")
@click.option("--open", "open_only", is_flag=True, help="Only alerts that are still open.")
@click.option(
    "--limit",
    default=50,
    show_default=True,
    type=click.IntRange(1, MAX_LIMIT),
    help="How many alerts to show.",
)
@auditor_filter
@format_options
@click.pass_obj
def alerts_command(
    obj: Context, open_only: bool, limit: int, auditors: tuple[str, ...], fmt: str, as_json: bool
) -> None:
    """List alerts (open first, then pending, then newest) and the delivery state of each sink.

    A finding opens an alert once seen in [alerts] open_after complete runs in a row (pending
    until then; a changed fingerprint and a critical finding open at once), is re-sent to the
    sinks after [alerts] cooldown while it stays open, and resolves once [alerts]
    resolve_after runs that checked it no longer have it. JSON holds the alerts and the sinks.
    """
    from auditor.alerts.engine import list_alerts, sink_status
    from auditor.history.store import Store, StoreError

    fmt = chosen(fmt, as_json)
    config = None if obj.db else obj.config()
    try:
        store = Store.open(obj.db_url(config), config.auditor_id if config is not None else "", create=False)
    except StoreError as exc:
        fail(str(exc))
    alerts = list_alerts(store.engine, open_only=open_only, limit=limit, auditors=auditors)
    sinks = sink_status(store.engine)
    if fmt == "json":
        click.echo(json.dumps({"alerts": alerts, "sinks": sinks}, indent=2))
        return
    if fmt == "table":
        click.echo(f"history: {store.display_url}")
        if not alerts:
            click.echo("no open alerts" if open_only else "no alerts yet")
            _sink_lines(sinks)
            return
    write_rows(fmt, ALERT_COLUMNS, ([_when(a, c) for c in ALERT_COLUMNS] for a in alerts))
    if fmt == "table":
        _sink_lines(sinks)


def _when(alert: dict, column: str) -> object:
    value = alert.get(column)
    if column.endswith("_at") and isinstance(value, str):
        return value.rstrip("Z").replace("T", " ")[:19]
    return value


def _sink_lines(sinks: dict) -> None:
    for name, s in sorted(sinks.items()):
        line = f"sink {name}: {s['delivered']} delivered, {s['pending']} pending, {s['failed']} failed"
        if s.get("last_error"):
            line += f"; last error {s.get('last_error_at')}: {s['last_error']}"
        click.echo(line)
