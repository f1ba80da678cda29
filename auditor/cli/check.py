"""``auditor check``: will these stacks load and run a MindIR? A deployment gate that says OK
only on evidence, in seconds, without a cycle."""

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
from auditor.gate.preflight import (
    OK,
    CheckReport,
    StackVerdict,
    loads_mindir,
    preflight_many,
)
from auditor.history.store import Store, StoreError
from auditor.policy.model_file import ModelInputError
from auditor.report import fleet_view
from auditor.runtime import RuntimeSpec


@click.command("check")
@selector_options(
    texts={
        "model": "The exported .mindir to check, or a [models.NAME] (its file; by default its serving "
        "stacks). Repeatable: each is checked, each stack started once for all.",
        "stack": "A stack to check against (repeatable). Default: every infer stack of the config that "
        "loads MindIR.",
        "pair": "Check against this pair's infer stack (as if its train stack had exported the file).",
        "probe": "Check against the infer stacks of the pairs that run this probe.",
        "host": "Check against the infer stacks of the pairs and models with a stack on this host.",
    }
)
@click.option(
    "--load/--no-load",
    default=True,
    show_default=True,
    help="Load the model on each reachable stack and run one seeded batch (the evidence for OK). "
    "--no-load: rules, stored results and measured tables only; never OK.",
)
@click.option(
    "--convert",
    is_flag=True,
    help="Stacks with a [stacks.X.convert] first convert the model as their deployment does, "
    "then load and run the converted model (with --no-load: convert only).",
)
@click.option("--seed", default=0, show_default=True, help="Seed of the batch that is run.")
@click.option("--json", "as_json", is_flag=True, help="Print the verdicts as JSON.")
@click.option(
    "--members",
    is_flag=True,
    help="Show every member of a host group on its own (default: members with the same verdict, "
    "host names aside, are one block naming their hosts).",
)
@click.pass_obj
def check_command(
    obj: Context, load: bool, convert: bool, seed: int, as_json: bool, members: bool, **kw: Any
) -> None:
    """Will these stacks load and run this MindIR? A deployment pipeline's gate.

    Reads the file without any framework, fingerprints the stacks, runs every compatibility
    rule (MindIR version and operators against the runtime, exporting MindSpore against the
    served runtime, MindSpore/CANN, driver/firmware/CANN) as if a train stack had exported
    the file, then loads the file on each stack and runs one seeded batch. A stack is OK only
    on evidence that its runtime runs this file: that load and run. A stack that cannot be
    reached is UNCHECKED, with what is known instead (the newest stored result of this very
    file, by digest, on the same runtime release and host; the runtime's measured operator
    table). A failure says whether the load or the first call failed, on which operator or
    version pair, with the runtime's own log lines and the remedy. The history database is
    read (never created): earlier results of the file, runtime limits learned by audits.

    With --convert, a stack that declares its deployment's conversion ([stacks.X.convert])
    converts the file with MindSpore Lite's converter and those options first, and what is
    loaded and run is the converted model; a failed conversion is that stack's error in the
    converter's words.

    With several --model, each file gets its verdicts (JSON: a list of reports) and the exit
    status is the worst.

    \b
    Exit status:
      0  every stack was shown to serve the model (notes may be printed)
      1  some stack is not OK: incompatible, unsupported operator, warning, unchecked (no
         evidence either way, always so with --no-load), stack error
      2  usage or input error (unknown stack, unreadable, truncated or non-MindIR file)
    """
    config = obj.config()
    selection = selection_of(kw)
    if not selection.models:
        fail("name the model to check: --model FILE.mindir, or --model NAME of a [models.NAME]")
    where = dataclasses.replace(selection, models=())
    check_names(where, Universe.of(config))
    plugins = obj.plugins()
    # The files by the stacks they are checked against: each group starts its stacks once.
    groups: dict[tuple[str, ...], list[str]] = {}
    order = []
    for model in dict.fromkeys(selection.models):
        path, names = _target(config, model, where, plugins.runtimes())
        if convert and not any(config.stacks[n].convert is not None for n in names):
            fail(f"--convert: none of {', '.join(names)} declares a conversion ([stacks.NAME.convert])")
        groups.setdefault(tuple(names), []).append(path)
        order.append(path)
    store = _history(obj, config)
    by_path: dict[str, CheckReport] = {}
    try:
        for names, paths in groups.items():
            reports = preflight_many(
                config,
                list(dict.fromkeys(paths)),
                list(names),
                plugins.fingerprint_collectors(),
                list(plugins.rules().values()),
                plugins.runtimes(),
                load=load,
                seed=seed,
                history=store,
                convert=convert,
            )
            by_path.update(zip(dict.fromkeys(paths), reports, strict=True))
    except ModelInputError as exc:
        if as_json:
            file = next((m for m in order if str(exc).startswith(f"{m}:")), order[0])
            click.echo(json.dumps({"file": file, "error": str(exc), "exit_code": EXIT_USAGE}, indent=2))
            sys.exit(EXIT_USAGE)
        fail(str(exc))
    finally:
        if store is not None:
            store.close()
    reports = [by_path[p] for p in dict.fromkeys(order)]
    for note in dict.fromkeys(n for r in reports for n in r.notes):
        click.echo(f"auditor: warning: {note}", err=True)
    code = max(r.exit_code for r in reports)
    if as_json:
        docs = [r.to_json() for r in reports]
        click.echo(json.dumps(docs[0] if len(docs) == 1 else docs, indent=2, default=str))
    else:
        click.echo("\n".join(render(r, members) for r in reports), nl=False)
    sys.exit(code)


def _target(
    config: Config, model: str, where: Selection, runtimes: Mapping[str, RuntimeSpec]
) -> tuple[str, list[str]]:
    """The file to check and the stacks to check it against: the named stacks as they are;
    the infer stacks the other selectors reach; else the model's serving stacks or every
    infer stack (those whose runtime loads MindIR, unless named)."""
    spec = config.models.get(model)
    path = spec.path if spec is not None else model
    if where.stacks and not (where.pairs or where.probes or where.hosts or where.groups):
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


def _history(obj: Context, config: Config) -> Store | None:
    """The history database, opened to be read (a check never creates nor migrates one), or
    None when there is none or it cannot be opened (said on stderr)."""
    url = obj.db_url(config)
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///") :]).exists():
        return None
    try:
        return Store(url)
    except StoreError as exc:
        click.echo(
            f"auditor: warning: history not read ({exc}); earlier results and learned limits unused", err=True
        )
        return None


def render(report: CheckReport, members: bool = False) -> str:
    """The verdicts in words; a group's members alike as one block (``members``: each)."""
    info = report.info
    ins = ", ".join(f"{t.name}{list(t.shape)} {t.dtype}" for t in info.inputs or ())
    lines = [f"{report.path}: {info.describe()}", f"  inputs: {ins or 'none declared'}", ""]
    width = max(len(v.stack) for v in report.verdicts) if report.verdicts else 0
    blocks = {v.stack: "\n".join(_verdict_lines(v, width)) for v in report.verdicts}
    lines += blocks.values() if members else fleet_view.blocks_folded(blocks)
    bad = [v for v in report.verdicts if v.status != OK]
    by_status: dict[str, list[str]] = {}
    for v in bad:
        by_status.setdefault(v.status, []).append(v.stack)
    not_ok = "; ".join(
        f"{fleet_view.members_in_words(', '.join(names), {})} ({status})"
        for status, names in by_status.items()
    )
    lines.append("")
    lines.append(
        f"{len(report.verdicts) - len(bad)} of {len(report.verdicts)} stack(s) ok"
        + (f"; not ok: {not_ok}" if bad else "")
        + ("" if report.loaded else "; --no-load: nothing was loaded, so nothing is ok")
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
    if v.conversion is not None:
        state = "ok" if v.conversion.ok else "FAILED"
        lines.append(f"      conversion: {state}, {v.conversion.seconds:.2f} s: {v.conversion.message}")
    if v.load is not None and not v.load.attempted:
        lines.append(f"      load: {v.load.message}")
    elif v.load is not None:
        if v.load.ok:
            lines.append(f"      load: ok, {v.load.seconds:.2f} s")
        else:
            where = "the first call" if v.load.phase == "run" else "the load"
            lines.append(f"      load: FAILED at {where}, {v.load.seconds:.2f} s")
        for o in v.load.outputs:
            lines.append(
                f"        output {o['index']}: shape {o['shape']} {o['dtype']}"
                + ("" if o["finite"] else " (NOT all finite)")
            )
        if v.load.log_lines:
            lines.append("      the runtime's log:" if not v.load.ok else "      the runtime warned:")
            lines += [f"        {line}" for line in v.load.log_lines]
    for e in v.evidence:
        lines.append(f"      evidence: {e}")
    for u in v.unknown:
        lines.append(f"      not known: {u}")
    return lines
