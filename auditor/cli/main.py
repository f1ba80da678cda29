"""The ``auditor`` command line."""

from __future__ import annotations

import sqlite3
import sys

import click

from auditor import __version__
from auditor.cli.audit import audit, runs
from auditor.cli.baseline import baseline_group
from auditor.cli.check import check_command
from auditor.cli.compare import compare_command
from auditor.cli.config import config_group
from auditor.cli.context import Context
from auditor.cli.daemon import alerts_command, daemon_command, service_group
from auditor.cli.drift import drift_command
from auditor.cli.exits import EXIT_FINDINGS, EXIT_USAGE, interrupted
from auditor.cli.fingerprint import fingerprint_command
from auditor.cli.golden import golden_group
from auditor.cli.history import db_group, history_command, report_command, show_command, trend_command
from auditor.cli.hosts import hosts_group
from auditor.cli.plugins import plugins_command
from auditor.cli.publications import publications_command
from auditor.cli.telemetry import telemetry_group
from auditor.db.columns import unreadable
from auditor.db.health import db_error, from_database
from auditor.extend.manager import Plugins


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


cli.add_command(audit)
cli.add_command(runs)
cli.add_command(config_group)
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
cli.add_command(publications_command)
cli.add_command(telemetry_group)
cli.add_command(compare_command)


def main() -> None:
    """Run the command line. Ctrl-C anywhere ends it with status 130 and no traceback (click
    alone would say "Aborted!" with status 1); a history database that fails under a command
    is one line naming the problem; values read as missing are listed at the end."""
    from sqlalchemy.exc import SQLAlchemyError

    from auditor.history.store import StoreError

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
    except StoreError as exc:
        # Commands catch what they expect; this is the net for any other way a database
        # that cannot be reached or opened surfaces: one line, never a traceback.
        click.echo(f"auditor: {exc}", err=True)
        code = EXIT_USAGE if not exc.reached else EXIT_FINDINGS
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
