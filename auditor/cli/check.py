"""``auditor check``: preflight a MindIR against the stacks, in seconds, without a cycle."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from auditor.cli.context import Context, fail
from auditor.cli.exits import EXIT_USAGE
from auditor.cli.selection import check_names, narrowed, selection_of, selector_options
from auditor.config.selection import Selection, Universe
from auditor.config.tables import Config
from auditor.cycle.preflight import OK, CheckReport, ModelInputError, StackVerdict, loads_mindir, preflight
from auditor.runtime import RuntimeSpec


@click.command("check")
@selector_options(
    texts={
        "model": "The exported .mindir to check, or a [models.NAME] (its file; by default its serving "
        "stacks). Repeatable: each is checked.",
        "stack": "A stack to check against (repeatable). Default: every infer stack of the config that "
        "loads MindIR.",
        "pair": "Check against this pair's infer stack (as if its train stack had exported the file).",
        "probe": "Check against the infer stacks of the pairs that run this probe.",
        "host": "Check against the infer stacks of the pairs and models with a stack on this host.",
    }
)
@click.option("--load", is_flag=True, help="Also load the model on each stack and run one seeded batch.")
@click.option("--seed", default=0, show_default=True, help="Seed of the --load batch.")
@click.option("--json", "as_json", is_flag=True, help="Print the verdicts as JSON.")
@click.pass_obj
def check_command(obj: Context, load: bool, seed: int, as_json: bool, **kw: Any) -> None:
    """Will these stacks load this MindIR? Rules only, no probes: a deployment pipeline's gate.

    Reads the file without any framework, fingerprints the stacks and runs every
    compatibility rule (MindIR version and operators against the runtime, exporting
    MindSpore against the served runtime, MindSpore/CANN, driver/firmware/CANN) as if a
    train stack had exported the file; prints a verdict per stack with the reason and the
    remedy. Runtime limits learned by earlier audits (history database) are used.

    \b
    Exit status:
      0  every stack can serve the model (notes may be printed)
      1  a finding on some stack: incompatible, unsupported operator, warning, stack error
      2  usage or input error (unknown stack, unreadable, truncated or non-MindIR file)
    """
    config = obj.config()
    selection = selection_of(kw)
    if not selection.models:
        fail("name the model to check: --model FILE.mindir, or --model NAME of a [models.NAME]")
    where = dataclasses.replace(selection, models=())
    check_names(where, Universe.of(config))
    plugins = obj.plugins()
    maxima, operators = _learned(obj, config)
    reports, code = [], 0
    for model in dict.fromkeys(selection.models):
        path, names = _target(config, model, where, plugins.runtimes())
        try:
            report = preflight(
                config,
                path,
                names,
                plugins.fingerprint_collectors(),
                list(plugins.rules().values()),
                plugins.runtimes(),
                maxima,
                operators,
                load=load,
                seed=seed,
            )
        except ModelInputError as exc:
            if as_json:
                click.echo(json.dumps({"file": path, "error": str(exc), "exit_code": EXIT_USAGE}, indent=2))
                sys.exit(EXIT_USAGE)
            fail(str(exc))
        reports.append(report)
        code = max(code, report.exit_code)
        if not as_json:
            click.echo(render(report))
    if as_json:
        docs = [r.to_json() for r in reports]
        click.echo(json.dumps(docs[0] if len(docs) == 1 else docs, indent=2, default=str))
    sys.exit(code)


def _target(
    config: Config, model: str, where: Selection, runtimes: Mapping[str, RuntimeSpec]
) -> tuple[str, list[str]]:
    """The file to check and the stacks to check it against: the named stacks as they are;
    the infer stacks the other selectors reach; else the model's serving stacks or every
    infer stack (those whose runtime loads MindIR, unless named)."""
    spec = config.models.get(model)
    path = spec.path if spec is not None else model
    if where.stacks and not (where.pairs or where.probes or where.hosts):
        return path, list(dict.fromkeys(where.stacks))
    if not where.empty:
        reached = narrowed(config, where).config.stacks
        names = [n for n, s in reached.items() if s.role == "infer" and loads_mindir(config, runtimes, n)]
        if not names:
            fail(f"{where.describe()} reach no infer stack that loads MindIR in {config.source}")
        return path, names
    if spec is not None:
        return path, list(spec.stacks)
    names = [n for n, s in config.stacks.items() if s.role == "infer" and loads_mindir(config, runtimes, n)]
    if not names:
        fail(f"{config.source} has no infer stack that loads MindIR: name one with --stack")
    return path, names


def _learned(obj: Context, config):  # noqa: ANN001, ANN202 - the history's learned limits
    """The runtime limits earlier audits learned, if the history database exists (a check
    never creates one)."""
    from auditor.history.store import Store, StoreError

    url = obj.db_url(config)
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///") :]).exists():
        return {}, []
    try:
        store = Store(url)
    except StoreError as exc:
        click.echo(f"auditor: warning: history not read ({exc}); learned runtime limits unused", err=True)
        return {}, []
    try:
        maxima = store.mindir_limits()
        operators = store.operator_limits()
        return maxima, operators
    except Exception as exc:  # an old or foreign database: the check goes on without it
        click.echo(f"auditor: warning: history not read ({type(exc).__name__}: {exc})", err=True)
        return {}, []
    finally:
        store.close()


def render(report: CheckReport) -> str:
    info = report.info
    ins = ", ".join(f"{t.name}{list(t.shape)} {t.dtype}" for t in info.inputs or ())
    lines = [f"{report.path}: {info.describe()}", f"  inputs: {ins or 'none declared'}", ""]
    width = max(len(v.stack) for v in report.verdicts) if report.verdicts else 0
    for v in report.verdicts:
        lines += _verdict_lines(v, width)
    bad = [v for v in report.verdicts if v.status != OK]
    lines.append("")
    lines.append(
        f"{len(report.verdicts) - len(bad)} of {len(report.verdicts)} stack(s) ok"
        + (f"; not ok: {', '.join(v.stack for v in bad)}" if bad else "")
        + f" ({report.seconds:.1f} s)"
    )
    return "\n".join(lines) + "\n"


def _verdict_lines(v: StackVerdict, width: int) -> list[str]:
    runtime = f"{v.runtime} {v.runtime_version or '?'}"
    lines = [f"  {v.stack:<{width}}  {v.status.upper():<12} {runtime}"]
    lines.append(f"      reason: {v.reason}")
    if v.remedy:
        lines.append(f"      remedy: {v.remedy}")
    for f in v.findings:
        if f.message != v.reason:
            lines.append(f"      {f.severity}: {f.message}")
    if v.load is not None and not v.load.attempted:
        lines.append("      load: not attempted (the finding above says it would fail)")
    elif v.load is not None:
        state = "ok" if v.load.ok else "FAILED"
        lines.append(f"      load: {state}, {v.load.seconds:.2f} s: {v.load.message.splitlines()[0]}")
        for o in v.load.outputs:
            lines.append(
                f"        output {o['index']}: shape {o['shape']} {o['dtype']}"
                + ("" if o["finite"] else " (NOT all finite)")
            )
    return lines
