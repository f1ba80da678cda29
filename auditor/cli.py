"""The ``auditor`` command line."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
from typing import Any

import click

from auditor import __version__
from auditor.baseline_cli import baseline_group
from auditor.check_cli import check_command
from auditor.cli_context import EXIT_FINDINGS, MAX_LIMIT, Context, fail
from auditor.daemon_cli import alerts_command, daemon_command, service_group
from auditor.drift_cli import drift_command
from auditor.fingerprint_cli import fingerprint_command
from auditor.golden_cli import golden_group
from auditor.history_cli import db_group, history_command, report_command, show_command, trend_command
from auditor.hosts_cli import hosts_group
from auditor.plugin_manager import Plugins
from auditor.plugins_cli import plugins_command
from auditor.redact import redact_url


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="auditor")
@click.option(
    "-c",
    "--config",
    "config_path",
    metavar="PATH",
    help="Config file. Default: $AUDITOR_CONFIG, else ./auditor.toml, "
    "~/.config/auditor/auditor.toml, /etc/auditor/auditor.toml.",
)
@click.option(
    "--db",
    metavar="URL|PATH",
    help="History database (SQLAlchemy URL or SQLite file). Overrides [storage] url.",
)
@click.pass_context
def cli(ctx: click.Context, config_path: str | None, db: str | None) -> None:
    """Training/inference consistency auditor for RL policies on MindSpore.

    Exports probe models (a PPO policy, ...) on each training stack, loads the MindIR on
    the paired inference stacks the way production does, and reports where the two
    disagree: version incompatibilities, numerical drift, latency. Results go to a
    history database.
    """
    ctx.obj = Context(config_path, db)


def _raise_terminated(signum: int, _frame: Any) -> None:
    from auditor.audit_run import Interrupted

    raise Interrupted(signal.Signals(signum).name)


@cli.command()
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
@click.pass_obj
def audit(obj: Context, as_json: bool, no_store: bool, verbose: bool) -> None:
    """Run one audit cycle over every configured pair.

    Prints a report per pair and probe (or JSON with --json) and stores the run.

    \b
    Exit status:
      0  every probe on every pair is consistent
      1  drift, an incompatibility, or an error on some pair (see the report)
      2  usage or config error
    """
    from auditor.audit_run import AuditRun, RunAborted, RunNotStored
    from auditor.report import render_json, render_text
    from auditor.store import Store, StoreError

    config = obj.config()
    store = None
    if not no_store:
        try:
            store = Store.open(obj.db_url(config), config.auditor_id)
        except StoreError as exc:
            fail(str(exc))
    run = AuditRun(config, obj.plugins(), store)
    try:
        run.begin()
    except StoreError as exc:
        fail(str(exc))
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        result = run.run()
    except RunAborted as exc:
        code = 128 + (signal.SIGTERM if exc.reason == "SIGTERM" else signal.SIGINT)
        fail(
            f"cycle interrupted ({exc.reason}); "
            + (f"run {exc.run_id} marked aborted" if exc.run_id else "nothing stored"),
            code,
        )
    except RunNotStored as exc:
        fail(str(exc), EXIT_FINDINGS)
    finally:
        signal.signal(signal.SIGTERM, previous)
    click.echo(render_json(result) if as_json else render_text(result, verbose), nl=False)
    sys.exit(result.exit_code)


@cli.command()
@click.option(
    "--limit",
    default=20,
    show_default=True,
    type=click.IntRange(1, MAX_LIMIT),
    help="How many runs to show, newest first.",
)
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
@click.pass_obj
def runs(obj: Context, limit: int, as_json: bool) -> None:
    """List recent audit runs in the history database."""
    store = obj.store(read=True)
    rows = store.runs(limit)
    if as_json:
        click.echo(
            json.dumps(
                [
                    {
                        "id": r.id,
                        "started_at": r.started_at.isoformat() + "Z" if r.started_at else None,
                        "finished_at": r.finished_at.isoformat() + "Z" if r.finished_at else None,
                        "status": r.status,
                        "outcome": r.outcome,
                        "host": r.host,
                        "auditor_id": r.auditor_id,
                        "note": r.note,
                    }
                    for r in rows
                ],
                indent=2,
            )
        )
        return
    click.echo(f"history: {store.display_url}")
    if not rows:
        click.echo("no runs yet: run `auditor audit`")
    several = len({r.auditor_id for r in rows}) > 1  # a shared database: say whose
    for r in rows:
        took = (
            f"{(r.finished_at - r.started_at).total_seconds():.1f} s"
            if r.finished_at and r.started_at
            else "-"
        )
        started = f"{r.started_at:%Y-%m-%d %H:%M:%S}" if r.started_at else "-".ljust(19)
        click.echo(
            f"  {r.id:>5}  {started}  {r.status or '-':<9} {r.outcome or '-':<13} {took:>8}"
            + (f"  {r.auditor_id}" if several else "")
            + (f"  {r.note}" if r.note else "")
        )


@cli.group("config")
def config_group() -> None:
    """Inspect the configuration."""


@config_group.command("check")
@click.pass_obj
def config_check(obj: Context) -> None:
    """Validate the config file; list every problem with its key path (exit 2 if any)."""
    config = obj.config()
    click.echo(f"{config.source}: ok ({len(config.stacks)} stacks, {len(config.pairs)} pairs)")
    for name, s in config.stacks.items():
        if config.fleet.is_remote(name):
            click.echo(f"  stack {name}: {s.role} {s.runtime} from the history database (its publications)")
            continue
        missing = "" if os.access(s.python, os.X_OK) else "   (interpreter not found)"
        publishes = config.fleet.publish.get(name)
        also = f"   (publishes {', '.join(publishes)})" if publishes else ""
        click.echo(f"  stack {name}: {s.role} {s.runtime} {s.python}{missing}{also}")
    click.echo(f"  history database: {redact_url(obj.db_url(config))}")


@config_group.command("generate")
@click.pass_obj
def config_generate(obj: Context) -> None:
    """Print a commented auditor.toml: every key with its description, range and default."""
    from auditor.config_doc import generate

    click.echo(generate(obj.plugins().probes()), nl=False)


@config_group.command("schema")
@click.pass_obj
def config_schema(obj: Context) -> None:
    """Print the JSON Schema of auditor.toml (for editors: completion and checks)."""
    from auditor.config_doc import json_schema

    probes = obj.plugins().probes()
    click.echo(json.dumps(json_schema({n: p.param_schema for n, p in probes.items()}), indent=2))


cli.add_command(fingerprint_command)
cli.add_command(plugins_command)
cli.add_command(history_command)
cli.add_command(show_command)
cli.add_command(trend_command)
cli.add_command(report_command)
cli.add_command(db_group)
cli.add_command(daemon_command)
cli.add_command(alerts_command)
cli.add_command(service_group)
cli.add_command(drift_command)
cli.add_command(baseline_group)
cli.add_command(hosts_group)
cli.add_command(check_command)
cli.add_command(golden_group)


def main() -> None:
    """Run the command line. Ctrl-C anywhere ends it with status 130 and no traceback (click
    alone would say "Aborted!" with status 1); a history database that fails under a command
    is one line naming the problem; values read as missing are listed at the end."""
    from sqlalchemy.exc import SQLAlchemyError

    from auditor.db_health import db_error, from_database
    from auditor.entry import interrupted
    from auditor.tolerant_types import unreadable

    try:
        # Commands added by plugins (built-ins and entry points; directory plugins are loaded
        # with the config, after the command line is parsed, so they cannot add commands).
        Plugins().add_commands(cli)
        code = cli.main(prog_name="auditor", standalone_mode=False)
    except KeyboardInterrupt:
        interrupted()
    except click.exceptions.Abort as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):
            interrupted()
        click.echo("Aborted!", err=True)
        code = 1
    except click.ClickException as exc:
        exc.show()
        code = exc.exit_code
    except (SQLAlchemyError, sqlite3.Error, UnicodeDecodeError) as exc:
        if isinstance(exc, UnicodeDecodeError) and not from_database(exc):
            raise
        click.echo(
            f"auditor: the history database cannot be read: {db_error(exc)} "
            "(`auditor db check` lists its problems)",
            err=True,
        )
        code = EXIT_FINDINGS
    finally:
        problems, count = unreadable(reset=True)
        for line in problems:
            click.echo(f"auditor: warning: {line}", err=True)
        if count > len(problems):
            click.echo(f"auditor: warning: {count} unreadable values in all (`auditor db check`)", err=True)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
