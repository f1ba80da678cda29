"""``auditor daemon``. It imports only what the waiting daemon keeps (auditor.daemon.main): the
config is read by a child (auditor.daemon.setup), so this module stays light on purpose."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

import click

from auditor.cli.context import Context
from auditor.common.redact import redact_text

if TYPE_CHECKING:
    from auditor.daemon.setup import DaemonSetup


@click.command("daemon")
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
    help="Least severe log messages written to stderr.",
)
@click.pass_obj
def daemon_command(obj: Context, log_level: str) -> None:
    """Run audit cycles on the config's [schedule] until stopped.

    \b
    One daemon per state directory ([daemon] state_dir); a second one exits with status 1.
    Signals:
      SIGHUP           re-read the config (a bad one is logged and the old one kept)
      SIGTERM, SIGINT  stop: the running cycle gets [daemon] stop_timeout seconds to
                       finish, then it is aborted and recorded as aborted
    Under systemd (Type=notify) it reports READY, STATUS and WATCHDOG; see
    `auditor service print`. Logs go to stderr (journald-friendly under systemd).
    """
    from auditor.common.logs import setup_logging
    from auditor.daemon.main import run_daemon
    from auditor.daemon.setup import SetupError, load_setup

    def load() -> DaemonSetup:
        # In a child: the plugins, numpy and SQLAlchemy never load in the waiting daemon.
        return load_setup(obj.config_path, obj.db)

    try:
        setup = load()
    except SetupError as exc:
        for line in exc.failure.warnings:
            click.echo(f"auditor: warning: {line}", err=True)
        for line in exc.failure.lines:
            click.echo(redact_text(line), err=True)
        sys.exit(exc.failure.code)
    setup_logging(getattr(logging, log_level.upper()))
    sys.exit(run_daemon(setup, load))
