"""``auditor publications``: the split-mode publications in the history database, newest first:
which train stack, which auditor, which run, when, how old, and each export's MindIR digest."""

from __future__ import annotations

import json

import click

from auditor.cli.context import MAX_LIMIT, Context
from auditor.cli.formats import auditor_filter, chosen, format_options, write_rows

COLUMNS = (
    "id",
    "stack",
    "host",
    "auditor_id",
    "run_id",
    "completed_at",
    "age_seconds",
    "probe",
    "variant",
    "mindir_sha256",
)
"""``--format csv``: a row per export of each publication (one with empty export columns when it has none)."""


@click.command("publications")
@click.option(
    "--stack", "stacks", multiple=True, metavar="NAME", help="Only this train stack's (repeatable)."
)
@click.option(
    "--limit",
    default=20,
    show_default=True,
    type=click.IntRange(0, MAX_LIMIT),
    help="How many publications, newest first (0: all).",
)
@click.option("--complete", is_flag=True, help="Only complete ones (those an inference side reads).")
@auditor_filter
@format_options
@click.pass_obj
def publications_command(
    obj: Context,
    stacks: tuple[str, ...],
    limit: int,
    complete: bool,
    auditors: tuple[str, ...],
    fmt: str,
    as_json: bool,
) -> None:
    """List what training-side auditors published for inference-side ones (split mode):
    each publication's stack, auditor, run, completion time and age, and the probe variants
    it holds with their MindIR digests. An incomplete one (its publisher died half-way) is
    marked: no inference side reads it."""
    from auditor.history.publication import listing

    store = obj.store(read=True)
    try:
        found = listing(store.engine, stacks, limit, complete, auditors)
    finally:
        store.close()
    fmt = chosen(fmt, as_json)
    if fmt == "csv":
        rows = []
        for p in found:
            head = p.to_json()
            rows += [[head[c] for c in COLUMNS[:7]] + list(item) for item in p.items or [("", "", "")]]
        write_rows("csv", COLUMNS, rows)
        return
    if fmt == "json":
        click.echo(json.dumps([p.to_json() for p in found], indent=2))
        return
    click.echo(f"history: {store.display_url}")
    if not found:
        click.echo(
            "no publications"
            + (f" of {', '.join(stacks)}" if stacks else "")
            + (f" by {', '.join(auditors)}" if auditors else "")
            + " (split mode: docs/hosts.md, 'A fleet')"
        )
    for p in found:
        state = "" if p.completed_at is not None else "  INCOMPLETE (never read)"
        click.echo(f"  {p.describe()}{state}")
        for probe, variant, sha in p.items:
            click.echo(f"      {probe} [{variant}]  MindIR sha256 {sha[:16]}")
