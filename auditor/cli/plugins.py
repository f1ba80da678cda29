"""``auditor plugins``: what is loaded, what each plugin contributes, and (``--check``) whether
the stack side of each plugin imports in every configured stack's interpreter."""

from __future__ import annotations

import json

import click

from auditor.cli.context import Context
from auditor.cli.exits import EXIT_FINDINGS


@click.command("plugins")
@click.option("--all", "show_all", is_flag=True, help="Include the built-in plugins.")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
@click.option(
    "--check",
    is_flag=True,
    help="Import the stack side of every plugin (probes' build_cell, collectors, runtime classes) "
    "in each configured stack's interpreter, and report errors with file and line.",
)
@click.pass_obj
def plugins_command(obj: Context, show_all: bool, as_json: bool, check: bool) -> None:
    """List the loaded plugins: name, version, where they came from, the hooks they implement
    and what they contribute (probes with their variants, runtimes, collectors, rules,
    comparators, alert sinks, commands).

    Plugins come from the `auditor` entry-point group of installed packages and from the
    `[plugins] dirs` of the config. A plugin that failed to load is listed with the reason.
    With --check, exit status 1 when a module fails to import in some stack.
    """
    from auditor.extend.check import contributions

    plugins = obj.plugins()
    infos = [i for i in plugins.infos if show_all or not i.builtin]
    gives = contributions(plugins)
    report = None
    if check:
        from auditor.extend.check import check as check_stacks

        report = check_stacks(plugins, obj.config(), builtins=show_all)
    if as_json:
        listed = [{**i.to_json(), "provides": gives.get(i.name, {})} for i in infos]
        doc: object = listed if report is None else {"plugins": listed, "check": report.to_json()}
        click.echo(json.dumps(doc, indent=2))
    else:
        if not infos:
            click.echo("no plugins installed (built-ins are shown with --all)")
        for i in infos:
            click.echo(f"{i.name} {i.version}  ({i.source})")
            if i.error:
                click.echo(f"    error: {i.error}")
                continue
            click.echo(f"    hooks: {', '.join(i.hooks) or '-'}")
            for kind, items in gives.get(i.name, {}).items():
                click.echo(f"    {kind}: {'; '.join(items)}")
        if report is not None:
            _print_check(report)
    if report is not None and (report.failed or report.stack_errors):
        raise SystemExit(EXIT_FINDINGS)


def _print_check(report) -> None:  # type: ignore[no-untyped-def]
    from auditor.extend.check import relative

    click.echo("")
    if not report.checks and not report.stack_errors:
        click.echo("check: no plugin has a stack side to import (built-ins are checked with --all)")
        return
    stacks = sorted({c.stack for c in report.checks if c.stack != "*"})
    ok = [c for c in report.checks if not c.error]
    click.echo(
        f"check: {len({c.module for c in report.checks})} stack-side module(s) imported in "
        f"{len(stacks)} stack(s): {len(ok)} ok, {len(report.failed)} failed"
    )
    for c in report.failed:
        python = f", Python {c.python}" if c.python else ""
        where = relative(c.file) or c.module
        location = f"{where}:{c.line}" if c.line else where
        stack = "every stack" if c.stack == "*" else f"stack {c.stack}{python}"
        click.echo(f"  error: {c.module} (plugin {c.plugin}) in {stack}: {location}: {c.error}")
    for name, why in report.stack_errors.items():
        click.echo(f"  error: stack {name}: {why}")
