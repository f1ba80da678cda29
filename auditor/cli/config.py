"""`auditor config check|generate|schema`: the config as the schema sees it."""

from __future__ import annotations

import json
import os

import click

from auditor.cli.context import Context
from auditor.common.redact import redact_url


@click.group("config")
def config_group() -> None:
    """Inspect the configuration."""


@config_group.command("check")
@click.pass_obj
def config_check(obj: Context) -> None:
    """Validate the config file; list every problem with its key path (exit 2 if any)."""
    config = obj.config()
    click.echo(f"{config.source}: ok ({len(config.stacks)} stacks, {len(config.pairs)} pairs)")
    for name, s in config.stacks.items():
        if config.fleet.is_remote(name):
            click.echo(f"  stack {name}: {s.role} {s.runtime} from the history database (its publications)")
            continue
        missing = "" if os.access(s.python, os.X_OK) else "   (interpreter not found)"
        publishes = config.fleet.publish.get(name)
        also = f"   (publishes {', '.join(publishes)})" if publishes else ""
        click.echo(f"  stack {name}: {s.role} {s.runtime} {s.python}{missing}{also}")
    click.echo(f"  history database: {redact_url(obj.db_url(config))}")


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
