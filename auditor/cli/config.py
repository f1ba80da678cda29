"""`auditor config check|generate|schema`: the config as the schema sees it."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from auditor.cli.context import Context
from auditor.cli.exits import EXIT_FINDINGS
from auditor.cli.fingerprint import watched_file
from auditor.common.redact import redact_text, redact_url
from auditor.config.selection import cycle_stacks
from auditor.fleet import window
from auditor.queue.shared import SharedCycle
from auditor.report import fleet_view


@click.group("config")
def config_group() -> None:
    """Inspect the configuration."""


@config_group.command("check")
@click.option(
    "--hosts",
    is_flag=True,
    help="Also start every stack's worker on its host (interpreter, worker code, runtime import), "
    "read the watched models there, and check each model against its reference and serving stacks.",
)
@click.option("--connect", is_flag=True, help="Also open the history database and check it.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print what was checked as JSON (stacks, models, database, not_checked, problems with their "
    "key); a config that is not valid still exits 2 with its problems on stderr.",
)
@click.pass_obj
def config_check(obj: Context, hosts: bool, connect: bool, as_json: bool) -> None:
    """Validate the config file, then what it asks for: interpreters, model files, watched
    globs, the database URL, the plugins. Every problem is listed with its key path.

    \b
    Exit status:
      0  the config is valid and everything checked can work
      1  valid, but something it asks for cannot work (listed)
      2  not valid (every problem with its key path)
    """
    from auditor.gate.readiness import check

    config = obj.config()
    url = obj.db_url(config)
    found = check(config, obj.plugins(), url, hosts=hosts, connect=connect)
    if as_json:
        click.echo(json.dumps(_check_document(config, found, url), indent=2))
        if not found.ok:
            sys.exit(EXIT_FINDINGS)
        return
    state = "ok" if found.ok else f"{len(found.problems)} problem{'s' if len(found.problems) > 1 else ''}"
    plural = fleet_view.plural
    counts = f"{plural(len(config.stacks), 'stack')}, {plural(len(config.pairs), 'pair')}"
    click.echo(f"{config.source}: {state} ({counts})")
    lines = []
    for name, s in config.stacks.items():
        if config.fleet.is_remote(name):
            lines.append(f"stack {name}: {s.role} {s.runtime} from the history database (its publications)")
            continue
        where = "" if s.host == "local" else f" on {s.host}"
        publishes = config.fleet.publish.get(name)
        also = f"   (publishes {', '.join(publishes)})" if publishes else ""
        started = f"   ({found.stacks[name]})" if name in found.stacks else ""
        lines.append(f"stack {name}: {s.role} {s.runtime} {s.python}{where}{started}{also}")
    # a group's members said once when they say the same (auditor.report.fleet_view)
    for text, _ in fleet_view.texts_folded(lines):
        click.echo(f"  {text}")
    shared = config.queue
    plan = window.plan(config, cycle_stacks(config))
    if shared.enabled:
        click.echo(
            f"  queue: {len(plan.serving)} serving hosts shared with the auditors of pool {shared.pool!r} "
            f"through the job queue in the history database, {SharedCycle.chunk_size(shared, plan)} taken "
            f"at a time, each audited once per cycle (a stalled auditor's hosts retaken after "
            f"{shared.timeout:g} s without a heartbeat); {', '.join(plan.held_hosts) or 'no host'} by every "
            "auditor"
        )
    if plan.capped and not shared.enabled:
        click.echo(
            f"  hosts in flight: at most {plan.cap} ([worker] max_hosts): {', '.join(plan.held_hosts)} held "
            f"for the cycle, {plan.size} of the other {len(plan.serving)} hosts at a time (the next one "
            "starts as one ends)"
        )
    for name, model in config.models.items():
        click.echo(f"  model {name}: {model.path}")
    watched = [
        f"watched by stack {stack}: {watched_file(path, entry)}"
        for stack, files in found.watched.items()
        for path, entry in sorted(files.items())
    ]
    for text, _ in fleet_view.texts_folded(watched):
        click.echo(f"  {text}")
    click.echo(f"  history database: {found.database or redact_url(url)}")
    for text, _ in fleet_view.texts_folded(found.unchecked):
        click.echo(f"  not checked: {text}")
    for problem in found.problems:
        click.echo(f"  problem: {redact_text(str(problem))}", err=True)
    if not found.ok:
        sys.exit(EXIT_FINDINGS)


def _check_document(config: Any, found: Any, url: str) -> dict[str, Any]:
    """``config check --json``: the same facts as the text, for a program."""
    stacks = {}
    for name, s in config.stacks.items():
        stacks[name] = {
            "role": s.role,
            "runtime": s.runtime,
            "python": s.python,
            "host": s.host,
            "group": s.group,
            "remote": config.fleet.is_remote(name),
            "publishes": list(config.fleet.publish.get(name) or []),
            "started": found.stacks.get(name),
        }
    return {
        "config": str(config.source),
        "ok": found.ok,
        "stacks": stacks,
        "pairs": [{"train": p.train, "infer": p.infer} for p in config.pairs],
        "models": {name: str(model.path) for name, model in config.models.items()},
        "watched": found.watched,
        "database": found.database or redact_url(url),
        "not_checked": [redact_text(text) for text in found.unchecked],
        "problems": [{"key": p.path, "message": redact_text(p.message)} for p in found.problems],
    }


@config_group.command("generate")
@click.pass_obj
def config_generate(obj: Context) -> None:
    """Print a commented auditor.toml: every key with its description, range and default."""
    from auditor.config.doc import generate

    click.echo(generate(obj.plugins().probes()), nl=False)


@config_group.command("schema")
@click.pass_obj
def config_schema(obj: Context) -> None:
    """Print the JSON Schema of auditor.toml (for editors: completion and checks)."""
    from auditor.config.doc import json_schema

    probes = obj.plugins().probes()
    click.echo(json.dumps(json_schema({n: p.param_schema for n, p in probes.items()}), indent=2))
