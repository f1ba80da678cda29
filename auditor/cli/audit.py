"""`auditor audit` (one cycle, stored, reported) and `auditor runs` (the recent runs)."""

from __future__ import annotations

import json
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from auditor.cli.context import MAX_LIMIT, Context, fail
from auditor.cli.exits import EXIT_FINDINGS, EXIT_USAGE
from auditor.cli.formats import auditor_filter, chosen, format_options, write_rows
from auditor.cli.selection import narrowed, selection_of, selector_options


def _raise_terminated(signum: int, _frame: Any) -> None:
    from auditor.cycle.audit_run import Interrupted

    raise Interrupted(signal.Signals(signum).name)


@click.command()
@click.option(
    "--json", "as_json", is_flag=True, help="Print the result as JSON (non-finite numbers as strings)."
)
@click.option("--no-store", is_flag=True, help="Do not write this cycle to the history database.")
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Show every output and check of every result, not only of failing ones.",
)
@selector_options()
@click.option(
    "--save-outputs",
    metavar="DIR",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write each side's outputs of every probe variant and model to DIR/<pair>/ "
    "(.npz files that `auditor compare` reads).",
)
@click.option(
    "--cycle",
    "cycle_label",
    metavar="LABEL",
    help="With [queue]: join the cycle of this name, whose serving hosts every auditor given the "
    "same LABEL shares (a deployment pipeline's run id, say); default: a cycle of this run's own.",
)
@click.option(
    "--json-file",
    metavar="PATH",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the result as JSON (what --json prints) to PATH, while the report prints: "
    "a person reads the text, a pipeline the file.",
)
@click.option(
    "--textfile",
    metavar="PATH",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the cycle's Prometheus metrics (what the daemon serves) to PATH, in node_exporter's "
    "textfile-collector format, atomically (PATH ending .prom, in the collector's directory): "
    "metrics for an audit run from cron.",
)
@click.option(
    "--alerts",
    "with_alerts",
    is_flag=True,
    help="Open, update and resolve alerts on this run and deliver them to the [alerts] sinks, as "
    "the daemon does after each cycle (without it, audit records no alert).",
)
@click.pass_obj
def audit(
    obj: Context,
    as_json: bool,
    no_store: bool,
    verbose: bool,
    save_outputs: Path | None,
    json_file: Path | None,
    cycle_label: str | None,
    textfile: Path | None,
    with_alerts: bool,
    **kw: Any,
) -> None:
    """Run one audit cycle over every configured pair and model, or the part the selectors name.

    Prints a line per probe variant and model, the failing outputs of a failing one and each
    finding once (every table with --verbose, JSON with --json), and stores the run. With
    selectors (--stack, --pair, --probe, --model, --host, each repeatable) only the matching
    pairs and models run; the run is stored as narrowed and resolves no alert about what it
    did not run.

    \b
    Exit status:
      0  every probe on every pair is consistent
      1  drift, an incompatibility, or an error on some pair, or a finding of
         severity error or critical (see the report)
      2  usage or config error
    """
    from auditor.cycle.audit_run import AuditRun, Interrupted
    from auditor.history.store import Store, StoreError
    from auditor.queue import cycles
    from auditor.queue.jobs import QueueError
    from auditor.report.text import render_json, render_text

    narrowing = narrowed(obj.config(), selection_of(kw))
    config = narrowing.config
    if narrowing.scope is not None:
        click.echo(f"auditor: narrowed to {', '.join(narrowing.scope.pairs) or 'no pair'}", err=True)
    if save_outputs is not None:
        try:
            save_outputs.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            fail(f"cannot write outputs to {save_outputs}: {exc}")
    for option, path in (("--json-file", json_file), ("--textfile", textfile)):
        if path is not None and not path.resolve().parent.is_dir():
            fail(f"{option} {path}: no such directory {path.resolve().parent}")
    if with_alerts and no_store:
        fail("--alerts needs the history (alerts are kept there): not with --no-store")
    if config.queue.enabled and no_store:
        click.echo(
            "auditor: --no-store: no [queue] without the history; every serving host is audited", err=True
        )
    elif cycle_label is not None and not config.queue.enabled:
        fail("--cycle: [queue] is not enabled in the config (a cycle is where auditors sharing hosts meet)")
    store = None
    if not no_store:
        try:
            store = Store.open(obj.db_url(config), config.auditor_id)
        except StoreError as exc:
            fail(str(exc))
    shared = None
    if config.queue.enabled and store is not None:
        pool = config.queue.pool
        if cycle_label is not None:
            shared = cycles.named(pool, cycle_label)
        else:
            shared = cycles.manual(pool, store.auditor_id, datetime.now(UTC))
    run = AuditRun(config, obj.plugins(), store, narrowing.scope, save_outputs, shared)
    try:
        run.begin()
    except (StoreError, QueueError) as exc:
        fail(str(exc))
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        results = [_complete(run)]
        # [queue]: once stored, wait for the hosts other auditors hold; those that come back
        # to the queue (their auditor stalled or died) are this one's in a follow-up run
        while True:
            try:
                nxt = run.follow_up()
            except (KeyboardInterrupt, Interrupted) as exc:
                click.echo(
                    f"auditor: stopped waiting for the other auditors' hosts ({exc or 'SIGINT'}); "
                    f"run {run.run_id} is stored",
                    err=True,
                )
                break
            except (StoreError, QueueError) as exc:
                click.echo(f"auditor: cannot wait for the other auditors' hosts: {exc}", err=True)
                break
            if nxt is None:
                break
            run = nxt
            try:
                run.begin()
            except (StoreError, QueueError) as exc:
                fail(str(exc))
            results.append(_complete(run))
    finally:
        signal.signal(signal.SIGTERM, previous)
    result = results[0]
    text = "".join(
        (f"\nFollow-up run {r.run_id} of cycle {r.shared['cycle']}:\n" if i else "") + render_text(r, verbose)
        for i, r in enumerate(results)
    )
    document = ""
    if as_json or json_file is not None:  # built only where it is printed or written
        document = render_json(result)
        if len(results) > 1:
            doc = json.loads(document)
            doc["follow_ups"] = [json.loads(render_json(r)) for r in results[1:]]
            document = json.dumps(doc, indent=2) + "\n"
    click.echo(document if as_json else text, nl=False)
    open_alerts = None
    if with_alerts and store is not None:
        open_alerts = _alerts(obj, config, store, [r.run_id for r in results])
    if textfile is not None:
        _write_textfile(textfile, config, result, open_alerts)
    if json_file is not None:
        try:
            json_file.write_text(document, encoding="utf-8")
        except OSError as exc:  # the run is stored: say so, and fail the command
            stored = f"run {result.run_id} is stored" if result.run_id is not None else "nothing stored"
            fail(f"cannot write --json-file {json_file}: {exc.strerror or exc}; {stored}", EXIT_USAGE)
    sys.exit(max(r.exit_code for r in results))


def _alerts(obj: Context, config: Any, store: Any, run_ids: list[int | None]) -> dict[str, int] | None:
    """The alerts after these stored runs (auditor.alerts.engine.alert_runs, as the daemon), said
    on stderr; None when they could not be processed (the runs stay stored)."""
    from auditor.alerts.engine import alert_runs

    plugins = obj.plugins()
    try:
        sinks, builtin = plugins.alert_sinks(), plugins.builtin_probes()
        counts = alert_runs(store.engine, config.alerts, sinks, run_ids, store.auditor_id, builtin)
    except Exception as exc:  # the runs are stored: the alerts wait for the next audit --alerts
        why = f"{type(exc).__name__}: {exc}"
        click.echo(f"auditor: alerts not processed ({why}); the run is stored", err=True)
        return None
    said = ", ".join(f"{n} {sev}" for sev, n in counts.items() if n) or "none"
    click.echo(f"auditor: open alerts: {said}", err=True)
    return counts


def _write_textfile(path: Path, config: Any, result: Any, open_alerts: dict[str, int] | None) -> None:
    """The cycle's metrics in node_exporter's textfile format (auditor.exposition); the run is
    stored already, so a failure to write says so."""
    from auditor.config.schedule import schedule_period, schedule_timezone
    from auditor.exposition.families import summarize
    from auditor.exposition.prometheus import MetricsExporter

    exporter = MetricsExporter(daemon=False)
    exporter.record_cycle(summarize(result))
    schedule = config.schedule
    exporter.record_schedule(schedule_period(schedule, datetime.now(schedule_timezone(schedule))))
    if open_alerts is not None:
        exporter.record_alerts(open_alerts)
    try:
        exporter.write_textfile(path)
    except OSError as exc:
        stored = f"run {result.run_id} is stored" if result.run_id is not None else "nothing stored"
        fail(f"cannot write --textfile {path}: {exc.strerror or exc}; {stored}", EXIT_USAGE)


def _complete(run: Any) -> Any:
    """``run.run()`` (an AuditRun), or the command fails saying why and what was stored."""
    from auditor.cycle.audit_run import HistoryFailed, RunAborted, RunNotStored

    try:
        return run.run()
    except RunAborted as exc:
        if not exc.run_id:
            stored = "nothing stored"
        elif run.unrecorded is None:
            stored = f"run {exc.run_id} marked aborted"
        else:
            stored = f"run {exc.run_id} is marked aborted by the next run once the database is back"
        if isinstance(exc, HistoryFailed):
            fail(f"{exc}; {stored}", EXIT_FINDINGS)
        code = 128 + (signal.SIGTERM if exc.reason == "SIGTERM" else signal.SIGINT)
        fail(f"cycle interrupted ({exc.reason}); {stored}", code)
    except RunNotStored as exc:
        fail(str(exc), EXIT_FINDINGS)


RUN_COLUMNS = (
    "id",
    "started_at",
    "finished_at",
    "seconds",
    "status",
    "outcome",
    "auditor_id",
    "host",
    "narrowed",
    "note",
)


@click.command()
@click.option(
    "--limit",
    default=20,
    show_default=True,
    type=click.IntRange(1, MAX_LIMIT),
    help="How many runs to show, newest first.",
)
@auditor_filter
@format_options
@click.pass_obj
def runs(obj: Context, limit: int, auditors: tuple[str, ...], fmt: str, as_json: bool) -> None:
    """List recent audit runs in the history database, newest first.

    One row per run: its times, status, outcome, the auditor and host that ran it, and the
    selectors of a narrowed run (`audit --pair ...`).
    """
    fmt = chosen(fmt, as_json)
    store = obj.store(read=True)
    rows = store.runs(limit, auditors)
    if fmt == "table":
        click.echo(f"history: {store.display_url}")
        if not rows:
            click.echo("no runs yet: run `auditor audit`" if not auditors else "no runs of that auditor")
            return

    def narrowed(r: Any) -> str | None:
        selectors = (r.selection or {}).get("selectors") if isinstance(r.selection, dict) else None
        return " ".join(f"--{k} {v}" for k, vs in selectors.items() for v in vs) if selectors else None

    write_rows(
        fmt,
        RUN_COLUMNS,
        (
            (
                r.id,
                r.started_at,
                r.finished_at,
                round((r.finished_at - r.started_at).total_seconds(), 1)
                if r.finished_at and r.started_at
                else None,
                r.status,
                r.outcome,
                r.auditor_id,
                r.host,
                narrowed(r),
                r.note,
            )
            for r in rows
        ),
    )
