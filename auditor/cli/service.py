"""``auditor service``: the systemd unit of the daemon, printed, installed and checked."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from auditor.cli.context import Context, fail
from auditor.cli.exits import EXIT_FINDINGS


@click.group("service")
def service_group() -> None:
    """The systemd unit for `auditor daemon`: print it, or install it."""


def _unit_options(exec_path: str | None, config: str, user: str):  # type: ignore[no-untyped-def]
    from auditor.daemon.unit import UnitOptions, default_exec

    path = Path(exec_path).expanduser() if exec_path else Path(default_exec())
    return UnitOptions(
        exec_path=str(path.absolute()), config=str(Path(config).expanduser().absolute()), user=user
    )


_exec_option = click.option(
    "--exec",
    "exec_path",
    metavar="PATH",
    help="The auditor executable the unit starts. Default: this installation's.",
)
_config_option = click.option(
    "--config",
    "unit_config",
    default="/etc/auditor/auditor.toml",
    show_default=True,
    metavar="PATH",
    help="The config file the service reads.",
)
_user_option = click.option(
    "--user", default="auditor", show_default=True, help="The dedicated user the service runs as."
)


@service_group.command("print")
@click.option("--hardening", is_flag=True, help="Print the hardening drop-in instead of the unit.")
@_exec_option
@_config_option
@_user_option
def service_print(hardening: bool, exec_path: str | None, unit_config: str, user: str) -> None:
    """Print the unit file (Type=notify, reload on HUP, watchdog, state directory, a dedicated
    user), or with --hardening the sandboxing drop-in, each option commented with what it
    would break."""
    from auditor.daemon.unit import hardening_text, unit_text

    click.echo(
        hardening_text() if hardening else unit_text(_unit_options(exec_path, unit_config, user)), nl=False
    )


@service_group.command("install")
@click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("/"),
    show_default=True,
    help="Install under this directory instead of / (for packaging; nothing is checked then).",
)
@click.option(
    "--unit-dir",
    default="/etc/systemd/system",
    show_default=True,
    help="Where the unit goes below --root (packages use /usr/lib/systemd/system).",
)
@click.option("--no-hardening", is_flag=True, help="Do not install the hardening drop-in.")
@_exec_option
@_config_option
@_user_option
def service_install(
    root: Path, unit_dir: str, no_hardening: bool, exec_path: str | None, unit_config: str, user: str
) -> None:
    """Check that the service can start as installed, then write the unit and the hardening
    drop-in where systemd looks and say what to run next.

    The checks run as the unit's user, in the unit's environment: it must be able to run
    the auditor (--exec), read the config (--config) and everything it names (stack
    interpreters, model files, plugin folders, ssh keys) and write the history database;
    paths the hardening drop-in hides (/tmp, /var/tmp) or makes read-only are refused too.
    The service user is created (a system user) when it does not exist. Anything missing is
    listed and nothing is written (exit 1). With --root nothing is checked: run
    `auditor service check` on the target host.
    """
    from auditor.daemon.install import create_user, user_exists
    from auditor.daemon.unit import install, next_steps

    options = _unit_options(exec_path, unit_config, user)
    if root == Path("/"):
        if os.geteuid() != 0:
            fail(
                "service install checks as the service user and writes /etc/systemd/system: run it as root", 1
            )
        if not user_exists(user):
            why = create_user(user)
            if why is not None:
                fail(f"the service user {user} does not exist and could not be created: {why}", 1)
            click.echo(f"created the system user {user} (home {STATE_HOME}, no login shell)")
        _refuse_unless_ready(options, not no_hardening)
    try:
        written = install(options, root, unit_dir, hardening=not no_hardening)
    except OSError as exc:
        fail(f"cannot write the unit: {exc} (run as root, or use --root for a staging directory)", 1)
    if root != Path("/"):
        click.echo("not checked (staged under --root): run `auditor service check` on the target host")
    systemd = root != Path("/") or os.path.isdir("/run/systemd/system")
    click.echo(next_steps(options, root, written, systemd), nl=False)


@service_group.command("check")
@click.option("--no-hardening", is_flag=True, help="The unit is installed without the hardening drop-in.")
@click.option(
    "--json", "as_json", is_flag=True, help="Print user, exec, config, hardening, ok and problems as JSON."
)
@_exec_option
@_config_option
@_user_option
def service_check(
    no_hardening: bool, as_json: bool, exec_path: str | None, unit_config: str, user: str
) -> None:
    """Check, as the unit's user and in its environment, everything the service needs to start
    (what `service install` checks); exit 1 with the list of what is missing."""
    from auditor.daemon.install import user_exists

    options = _unit_options(exec_path, unit_config, user)
    refusal = None
    if os.geteuid() != 0:
        refusal = "service check runs its checks as the service user: run it as root"
    elif not user_exists(user):
        refusal = f"the service user {user} does not exist (`auditor service install` creates it)"
    elif not os.access(options.config, os.R_OK):
        refusal = _unreadable(options)
    problems = [refusal] if refusal else _problems(options, not no_hardening)
    if as_json:
        doc = {
            "user": user,
            "exec": options.exec_path,
            "config": options.config,
            "hardening": not no_hardening,
            "ok": not problems,
            "problems": problems,
        }
        click.echo(json.dumps(doc, indent=2))
        if problems:
            sys.exit(EXIT_FINDINGS)
        return
    if refusal:
        fail(refusal, EXIT_FINDINGS)
    if problems:
        _say_problems(options, problems)
    click.echo(
        f"ok: user {user} can start the service ({options.exec_path} --config {options.config} daemon)"
    )


STATE_HOME = "/var/lib/auditor"


def _unreadable(options) -> str:  # type: ignore[no-untyped-def]
    return f"the config {options.config} cannot be read (write it first; --config names another)"


def _problems(options, hardening: bool) -> list[str]:  # type: ignore[no-untyped-def]
    """What the unit's user cannot do, each with what to do; [] when it can do everything
    (the config readable by this process)."""
    from auditor.common.paths import default_db_url
    from auditor.daemon.install import check, needs, unit_environment

    with unit_environment(options.user):  # the config as the unit will read it
        config = Context(options.config, None).config()
        need = needs(options, config, default_db=config.db_url == default_db_url())
    return check(need, options.user, hardening)


def _say_problems(options, problems: list[str]) -> None:  # type: ignore[no-untyped-def]
    click.echo(f"auditor: the service would not start: user {options.user} cannot", err=True)
    for problem in problems:
        click.echo(f"  - {problem}", err=True)
    click.echo("nothing was written; fix these and run the command again", err=True)
    sys.exit(EXIT_FINDINGS)


def _refuse_unless_ready(options, hardening: bool) -> None:  # type: ignore[no-untyped-def]
    """Exit 1 listing what the unit's user cannot do; return when it can do everything."""
    if not os.access(options.config, os.R_OK):
        fail(_unreadable(options), EXIT_FINDINGS)
    problems = _problems(options, hardening)
    if problems:
        _say_problems(options, problems)
