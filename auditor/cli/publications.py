"""``auditor publications``: the split-mode publications in the history database, newest first:
which train stack, which auditor, which run, when, how old, and each export's MindIR digest."""

from __future__ import annotations

import json

import click

from auditor.cli.context import MAX_LIMIT, Context


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
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
@click.pass_obj
def publications_command(
    obj: Context, stacks: tuple[str, ...], limit: int, complete: bool, as_json: bool
) -> None:
    """List what training-side auditors published for inference-side ones (split mode):
    each publication's stack, auditor, run, completion time and age, and the probe variants
    it holds with their MindIR digests. An incomplete one (its publisher died half-way) is
    marked: no inference side reads it."""
    from auditor.history.publication import listing

    store = obj.store(read=True)
    try:
        found = listing(store.engine, stacks, limit, complete)
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps([p.to_json() for p in found], indent=2))
        return
    click.echo(f"history: {store.display_url}")
    if not found:
        click.echo(
            "no publications"
            + (f" of {', '.join(stacks)}" if stacks else "")
            + " (split mode: README, A fleet)"
        )
    for p in found:
        state = "" if p.completed_at is not None else "  INCOMPLETE (never read)"
        click.echo(f"  {p.describe()}{state}")
        for probe, variant, sha in p.items:
            click.echo(f"      {probe} [{variant}]  MindIR sha256 {sha[:16]}")
