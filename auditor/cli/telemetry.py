"""``auditor telemetry``: NPU telemetry now (``sample``) and over time (``show``)."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

import click

from auditor.cli.context import MAX_LIMIT, Context, fail
from auditor.cli.exits import EXIT_FINDINGS, EXIT_OK
from auditor.cli.formats import auditor_filter, chosen, format_options, write_rows
from auditor.history.filters import HistoryError, parse_when
from auditor.history.telemetry import TelemetryFilters, newest, store_samples
from auditor.report.tables import sparkline
from auditor.report.text import format_number as num
from auditor.report.text import telemetry_lines
from auditor.worker.npu_metrics import METRICS


@click.group("telemetry")
def telemetry_group() -> None:
    """NPU power, temperature, memory/HBM use, utilisation, ECC errors and health per NPU."""


@telemetry_group.command("sample")
@click.argument("hosts", nargs=-1, metavar="[HOST]...")
@click.option("--no-store", is_flag=True, help="Do not store the values in the history.")
@click.option("--json", "as_json", is_flag=True, help="Print the samples and findings as JSON.")
@click.pass_obj
def sample_command(obj: Context, hosts: tuple[str, ...], no_store: bool, as_json: bool) -> None:
    """Read every host's NPUs now (default: every host of the config's stacks), through the
    first of its stacks by name, judge the values against [telemetry] thresholds, and store
    them as series (what the daemon's [telemetry] interval does between cycles).

    \b
    Exit status:
      0  every host was read (a host without NPUs has nothing to read) and no value reaches a limit
      1  a value reaches a limit, or a host or NPU could not be read (shown)
      2  usage or config error
    """
    from auditor.cycle.telemetry import findings, sample_hosts

    config = obj.config()
    known = {s.host for s in config.stacks.values()}
    unknown = [h for h in hosts if h not in known]
    if unknown:
        fail(f"no stack lives on host {', '.join(map(repr, unknown))} (hosts: {', '.join(sorted(known))})")
    names = [n for n, s in config.stacks.items() if not hosts or s.host in hosts]
    store = None if no_store else obj.store()
    with obj.plugins().reach(config) as stacks:
        samples = sample_hosts(stacks, names)
    if store is not None:
        store_samples(store.engine, store.auditor_id, samples)
    found = findings(samples, config.telemetry)
    if as_json:
        click.echo(
            json.dumps({"telemetry": [asdict(s) for s in samples], "findings": [asdict(f) for f in found]})
        )
    else:
        lines = telemetry_lines(samples, found, verbose=True)[1:]
        lines[0] += " (stored)" if store is not None else " (not stored)"
        click.echo("\n".join(lines))
    sys.exit(EXIT_FINDINGS if found else EXIT_OK)


@telemetry_group.command("show")
@click.option("--host", "hosts", multiple=True, metavar="HOST", help="Only this host (repeatable).")
@click.option("--npu", "npus", multiple=True, type=int, metavar="N", help="Only this NPU (repeatable).")
@click.option(
    "--metric",
    "metrics",
    multiple=True,
    metavar="NAME",
    help=f"Only this metric (repeatable): {', '.join(METRICS)}.",
)
@click.option(
    "--last", default=20, show_default=True, type=click.IntRange(1, MAX_LIMIT), help="Points per series."
)
@click.option("--since", metavar="WHEN", help="From this time on (2026-03-01, 7d, 12h, ...).")
@auditor_filter
@format_options
@click.pass_obj
def show_command(
    obj: Context,
    hosts: tuple[str, ...],
    npus: tuple[int, ...],
    metrics: tuple[str, ...],
    last: int,
    since: str | None,
    auditors: tuple[str, ...],
    fmt: str,
    as_json: bool,
) -> None:
    """The newest values of each NPU telemetry series: one line per NPU, chip and metric with
    its latest value, range and a sparkline. CSV has a row per point (auditor, host, NPU,
    chip, metric, time, value); JSON a list of series with their points."""
    bad = [m for m in metrics if m not in METRICS]
    if bad:
        fail(f"unknown metric {', '.join(map(repr, bad))} (known: {', '.join(METRICS)})")
    try:
        when = parse_when(since) if since else None
    except HistoryError as exc:
        fail(str(exc))
    store = obj.store(read=True)
    with store.engine.connect() as conn:
        chosen_series = TelemetryFilters(
            hosts=hosts, npus=npus, metrics=metrics, auditors=auditors, since=when
        )
        series = newest(conn, chosen_series, last)
    fmt = chosen(fmt, as_json)
    if fmt == "csv":
        columns = ("auditor_id", "host", "npu", "chip", "metric", "at", "value")
        rows = (
            (s.auditor_id, s.host, s.npu, s.chip, s.metric, f"{at.isoformat()}Z", v)
            for s in series
            for at, v in s.points
        )
        write_rows("csv", columns, rows)
        return
    if fmt == "json":
        out = [
            {**{k: getattr(s, k) for k in ("auditor_id", "host", "npu", "chip", "metric")}}
            | {"points": [[at.isoformat() + "Z", v] for at, v in s.points]}
            for s in series
        ]
        click.echo(json.dumps(out))
        return
    if not series:
        click.echo(
            "no NPU telemetry in the history"
            + (" for these filters" if hosts or npus or metrics or auditors else "")
        )
        return
    host = None
    for s in series:
        if s.host != host:
            host = s.host
            click.echo(f"host {host}")
        values = [v for _, v in s.points]
        lo, hi = min(values), max(values)
        spark, _ = sparkline(values, lambda v, lo=lo, hi=hi: (v - lo) / (hi - lo) if hi > lo else 0.5, 30)
        unit = METRICS[s.metric][0]
        click.echo(
            f"  {s.label:<9} {s.metric:<20} {num(values[-1]):>8} {unit:<6} "
            f"min {num(min(values))} max {num(max(values))}  {spark}  "
            f"{s.points[-1][0]:%Y-%m-%d %H:%M:%S} UTC"
        )
