"""The ``auditor`` command line."""

from __future__ import annotations

import importlib
import sqlite3
import sys

import click

from auditor import __version__
from auditor.cli.context import Context
from auditor.cli.exits import EXIT_FINDINGS, EXIT_USAGE, interrupted

COMMANDS = {
    "audit": "auditor.cli.audit:audit",
    "runs": "auditor.cli.audit:runs",
    "config": "auditor.cli.config:config_group",
    "fingerprint": "auditor.cli.fingerprint:fingerprint_command",
    "plugins": "auditor.cli.plugins:plugins_command",
    "history": "auditor.cli.history:history_command",
    "show": "auditor.cli.history:show_command",
    "trend": "auditor.cli.history:trend_command",
    "report": "auditor.cli.history:report_command",
    "db": "auditor.cli.history:db_group",
    "daemon": "auditor.cli.daemon:daemon_command",
    "alerts": "auditor.cli.alerts:alerts_command",
    "service": "auditor.cli.service:service_group",
    "drift": "auditor.cli.drift:drift_command",
    "baseline": "auditor.cli.baseline:baseline_group",
    "hosts": "auditor.cli.hosts:hosts_group",
    "check": "auditor.cli.check:check_command",
    "golden": "auditor.cli.golden:golden_group",
    "publications": "auditor.cli.publications:publications_command",
    "telemetry": "auditor.cli.telemetry:telemetry_group",
    "compare": "auditor.cli.compare:compare_command",
    "fix": "auditor.cli.fix:fix_command",
}
"""The built-in commands, each imported when it runs (or when --help lists them all): a command
loads only what it needs, so `auditor daemon` waits with little memory (auditor.daemon.main)."""


class LazyGroup(click.Group):
    """The command group: built-in commands imported on use (``COMMANDS``); commands added by
    plugins (the ``auditor_cli_commands`` hook) loaded when a name is not a built-in one, or
    when every command is listed."""

    _plugins_added = False

    def _add_plugin_commands(self) -> None:
        if not self._plugins_added:
            self._plugins_added = True
            from auditor.extend.manager import Plugins

            # Built-ins and entry points: directory plugins are loaded with the config, after
            # the command line is parsed, so they cannot add commands.
            Plugins().add_commands(self)

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._add_plugin_commands()
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS and cmd_name not in self.commands:
            module, _, name = COMMANDS[cmd_name].partition(":")
            self.add_command(getattr(importlib.import_module(module), name), cmd_name)
        if cmd_name not in self.commands:
            self._add_plugin_commands()
        return self.commands.get(cmd_name)


@click.group(
    cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
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


def main() -> None:
    """Run the command line. Ctrl-C anywhere ends it with status 130 and no traceback (click
    alone would say "Aborted!" with status 1); a history database that fails under a command
    is one line naming the problem; values read as missing are listed at the end."""
    if "auditor.db.columns" in sys.modules:  # only this command's reads are listed at its end
        sys.modules["auditor.db.columns"].unreadable(reset=True)
    try:
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
    except Exception as exc:
        code = _database_failure(exc)
        if code is None:
            raise
    finally:
        if "auditor.db.columns" in sys.modules:  # else nothing was read from a database
            from auditor.db.columns import unreadable

            problems, count = unreadable(reset=True)
            for line in problems:
                click.echo(f"auditor: warning: {line}", err=True)
            if count > len(problems):
                click.echo(
                    f"auditor: warning: {count} unreadable values in all (`auditor db check`)", err=True
                )
    sys.exit(code if isinstance(code, int) else 0)


def _database_failure(exc: Exception) -> int | None:
    """The exit status of a command ended by its history database, said in one line; None for
    any other exception. The database's modules are imported here, when a command failed: a
    command that never opened one (the daemon) does not load SQLAlchemy for this."""
    if "sqlalchemy" not in sys.modules and not isinstance(exc, sqlite3.Error | UnicodeDecodeError):
        return None  # nothing has opened a database in this process
    from sqlalchemy.exc import SQLAlchemyError

    from auditor.db.health import db_error, from_database
    from auditor.history.store import StoreError

    if isinstance(exc, StoreError):
        # Commands catch what they expect; this is the net for any other way a database
        # that cannot be reached or opened surfaces: one line, never a traceback.
        click.echo(f"auditor: {exc}", err=True)
        return EXIT_USAGE if not exc.reached else EXIT_FINDINGS
    if isinstance(exc, SQLAlchemyError | sqlite3.Error | UnicodeDecodeError):
        if isinstance(exc, UnicodeDecodeError) and not from_database(exc):
            return None
        click.echo(
            f"auditor: the history database cannot be read: {db_error(exc)} "
            "(`auditor db check` lists its problems)",
            err=True,
        )
        return EXIT_FINDINGS
    return None


if __name__ == "__main__":
    main()
