"""``auditor drift STACK``: how a stack's fingerprint changed over time, run by run."""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict
from typing import Any

import click

from auditor.cli.context import MAX_LIMIT, Context, fail
from auditor.cli.exits import EXIT_USAGE
from auditor.cli.formats import auditor_filter, chosen, format_options, write_rows
from auditor.fingerprint.drift import diff
from auditor.history.queries import run_auditors


def drift_history(store: Any, stack: str, host: str | None = None) -> list[dict[str, Any]]:
    """One entry per run where the stack's fingerprint differed from its previous one (the
    first fingerprint included), oldest first. A document whose collection failed (older
    auditors stored them) is no change of the stack: it is skipped."""
    history = store.fingerprint_history(stack, host)
    documents = store.fingerprints([d for *_, d in history])
    failed = {d for d, doc in documents.items() if "fingerprint_error" in doc}
    history = [h for h in history if h[3] not in failed]
    entries: list[dict[str, Any]] = []
    previous: dict[str, str] = {}  # host -> digest
    changed: list[tuple[int, Any, str, str | None, str]] = []
    last: str | None = None  # a stack that moved to another host is compared with where it was
    for run_id, started_at, where, digest in history:
        before = previous.get(where, last)
        if before != digest:
            changed.append((run_id, started_at, where, before, digest))
        previous[where] = last = digest
    documents = store.fingerprints([d for *_, b, d in changed] + [b for *_, b, _ in changed if b is not None])
    for run_id, started_at, where, before, digest in changed:
        changes = [] if before is None else diff(documents[before], documents[digest])
        entries.append(
            {
                "run_id": run_id,
                "started_at": started_at.isoformat() + "Z",
                "host": where,
                "previous_digest": before,
                "digest": digest,
                "changes": [asdict(c) for c in changes],
            }
        )
    return entries


def _reject_unknown(obj: Context, store: Any, stack: str) -> None:
    """A stack that neither the history nor the config knows is a typo: a usage error naming
    the stacks there are (a configured stack not fingerprinted yet is not an error)."""
    from auditor.config.tables import ConfigError
    from auditor.history.queries import known_values

    with store.engine.connect() as conn:
        known = set(known_values(conn, "stack"))
    if stack in known:
        return
    path = obj.find_config(required=False)
    if path is not None:
        with contextlib.suppress(ConfigError):  # the config is not needed to read the history
            known |= set(obj.load_config().stacks)
    if stack not in known:
        fail(
            f"no stack {stack!r} in the history or the config "
            f"(known: {', '.join(sorted(known)) or 'none yet'})",
            EXIT_USAGE,
        )


DRIFT_COLUMNS = ("run", "started_at", "auditor", "host", "digest", "change")


@click.command("drift")
@click.argument("stack")
@click.option("--host", default=None, help="Only the stack of this host (default: every host).")
@click.option(
    "--limit",
    default=20,
    show_default=True,
    type=click.IntRange(1, MAX_LIMIT),
    help="How many changes to show, newest first.",
)
@auditor_filter
@format_options
@click.pass_obj
def drift_command(
    obj: Context, stack: str, host: str | None, limit: int, auditors: tuple[str, ...], fmt: str, as_json: bool
) -> None:
    """Show how STACK's fingerprint changed over time: each run where it changed, field by field.

    The first entry is the stack's first fingerprint in the history database. A table or CSV
    has one row per changed field; JSON one entry per run with its changes.
    """
    fmt = chosen(fmt, as_json)
    store = obj.store(read=True)
    _reject_unknown(obj, store, stack)
    entries = drift_history(store, stack, host)
    with store.engine.connect() as conn:
        whose = run_auditors(conn, [e["run_id"] for e in entries])
    for e in entries:
        e["auditor"] = whose.get(e["run_id"])
    if auditors:
        entries = [e for e in entries if e["auditor"] in auditors]
    entries = entries[-limit:][::-1] if limit > 0 else []
    if fmt == "json":
        click.echo(json.dumps({"stack": stack, "changes": entries}, indent=2))
        return
    if fmt == "table" and not store.fingerprint_history(stack, host):
        click.echo(f"no fingerprint of stack {stack!r} in {store.display_url}: run `auditor audit` first")
        return

    def rows():  # noqa: ANN202 - one row per change, the first fingerprint as one
        for e in entries:
            head = (
                e["run_id"],
                e["started_at"][:19].replace("T", " "),
                e["auditor"],
                e["host"],
                e["digest"][:12],
            )
            if e["previous_digest"] is None:
                yield (*head, "first fingerprint")
            for c in e["changes"]:
                yield (*head, c["words"])

    write_rows(fmt, DRIFT_COLUMNS, rows())
