"""``auditor baseline show|reset``: the golden results later runs are compared with
(auditor.policy.baseline)."""

from __future__ import annotations

import json
from typing import Any

import click

from auditor.cli.context import Context
from auditor.cli.formats import auditor_filter, chosen, format_options, write_rows


def _filters(f: Any) -> Any:
    f = click.option("--stack", metavar="NAME", help="Only this stack's goldens.")(f)
    f = click.option("--variant", metavar="V", help="Only this probe variant.")(f)
    return click.option("--probe", metavar="P", help="Only this probe.")(f)


@click.group("baseline")
def baseline_group() -> None:
    """Golden baselines: the first accepted result of each probe variant on each stack.

    Every later run compares each side's outputs with its golden (bitwise, then within the
    probe's tolerance) and raises a baseline-drift finding when they moved, even when both
    sides of a pair moved together. An infer stack keeps one golden per train stack whose
    export it runs (the "source" column).
    """


BASELINE_COLUMNS = (
    "stack",
    "host",
    "side",
    "source",
    "probe",
    "variant",
    "run",
    "auditor_id",
    "created_at",
    "outputs",
)


@baseline_group.command("show")
@_filters
@auditor_filter
@format_options
@click.pass_obj
def show_command(
    obj: Context,
    probe: str | None,
    variant: str | None,
    stack: str | None,
    auditors: tuple[str, ...],
    fmt: str,
    as_json: bool,
) -> None:
    """List the goldens (the run and auditor that kept each)."""
    from auditor.history import baselines

    fmt = chosen(fmt, as_json)
    store = obj.store(create=False)
    try:
        rows = baselines.show(store.engine, probe, variant, stack, auditors)
    finally:
        store.close()
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows and fmt == "table":
        click.echo("no goldens yet: the first consistent result of each probe variant becomes one")
        return
    write_rows(
        fmt,
        BASELINE_COLUMNS,
        (
            (
                r["stack"],
                r["host"],
                r["side"],
                r["source"] or "-",
                r["probe"],
                r["variant"],
                r["run_id"],
                r["auditor_id"],
                r["created_at"][:19].replace("T", " ") if fmt == "table" else r["created_at"],
                r["outputs_sha256"][:12] if fmt == "table" else r["outputs_sha256"],
            )
            for r in rows
        ),
    )


@baseline_group.command("reset")
@_filters
@click.option("--yes", is_flag=True, help="Reset every golden without asking (when no filter is given).")
@click.pass_obj
def reset_command(obj: Context, probe: str | None, variant: str | None, stack: str | None, yes: bool) -> None:
    """Forget goldens (those matching the filters; all without filters). The next accepted
    result of each becomes the new golden."""
    from auditor.history import baselines

    if not (probe or variant or stack or yes):
        click.confirm("Reset every golden baseline?", abort=True, err=True)
    store = obj.store(create=False)
    try:
        count = baselines.reset(store.engine, probe, variant, stack)
    finally:
        store.close()
    click.echo(f"reset {count} golden baseline{'s' if count != 1 else ''}")
