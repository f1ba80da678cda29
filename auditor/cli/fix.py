"""``auditor fix NAME --stack S``: the smallest precision change that makes a float16 policy
pass on a serving stack, proved by real audits (auditor.fix)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from auditor.cli.context import Context, fail
from auditor.cli.exits import EXIT_FINDINGS, EXIT_OK
from auditor.fix.fixer import Fix, cell_name, describe, run
from auditor.fix.target import Candidate, FixError, ModelTarget, ProbeTarget, Target
from auditor.history import fixes
from auditor.report.summary import ppo_words, result_line
from auditor.report.text import jsonable_result
from auditor.results import CONSISTENT


@click.command("fix")
@click.argument("name")
@click.option("--stack", "stack", required=True, metavar="S", help="The serving stack the fix must pass on.")
@click.option(
    "--variant",
    metavar="V",
    help="The probe's float16 variant to fix (default: its only float16 variant).",
)
@click.option(
    "--dtype",
    type=click.Choice(["float16"]),
    help="Search a float16 fix even where NAME passes as configured (a model served in float32 "
    "today); for a probe, its float16 variant.",
)
@click.option(
    "--train",
    metavar="T",
    help="The train stack exporting it (default: the pair's, when only one pairs NAME with S).",
)
@click.option(
    "--out", "out", type=click.Path(dir_okay=False), metavar="FILE", help="Write the fixed export here."
)
@click.option(
    "--no-store",
    "keep",
    flag_value=False,
    default=True,
    help="Do not keep the outcome in the history (default: kept, for the gate and the next cycle).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@click.pass_obj
def fix_command(
    obj: Context,
    name: str,
    stack: str,
    variant: str | None,
    dtype: str | None,
    train: str | None,
    out: str | None,
    keep: bool,
    as_json: bool,
) -> None:
    """Search the fewest cells of NAME's network to keep in float32 while the rest computes in
    float16, so that its export passes on stack S.

    NAME is a probe of a pair serving on S (its float16 variant), or a [models.NAME] served on
    S with a training network (train = { factory, checkpoint }). Every candidate is built on
    the train stack with MindSpore's per-cell precision (Cell.to_float: float32 weights,
    float16 compute, the kept cells in float32), exported, loaded and run on S and audited as
    a cycle audits the policy: its tolerances, comparators, PPO checks and invariants from
    your config (a model's against its float32 training network). A candidate that passes
    must also compute the same once S built it again after freeing it (a server's reload).
    The search starts where the drift was localized and bisects over the cells in graph
    order: at most 2·⌈log₂ cells⌉ + 2 candidates. Where S converts what it serves
    ([stacks.S.convert]), candidates are audited as converted, and when none passes the search
    runs again with the converter's weight_fp16 set the other way (the fix then says the
    config change too).

    Prints the cells kept, the code that does it, the fixed export's audit, what it costs
    against all-float16 and all-float32 (file size, p50 latency on S) and every candidate
    tried. Exit status: 0 when the policy passes (as configured or fixed), 1 when no candidate
    does, 2 when the command cannot run.

    \b
    Example:
      auditor fix ppo_policy --stack lite20 --train ms20 --variant fp16 --out fixed.mindir
      auditor fix policy --stack ms210-graph --dtype float16 --out policy-fp16.mindir
    """
    if dtype is not None and variant is not None:
        fail("--dtype and --variant both choose the variant: give one")
    config = obj.config()
    plugins = obj.plugins()
    try:
        if name in config.models:
            if variant is not None or train is not None:
                fail(
                    f"[models.{name}] has no variants and trains on its train.stack: "
                    "drop --variant and --train"
                )
            target: Target = ModelTarget.of(config, plugins, name, stack)
        else:
            target = ProbeTarget.of(config, plugins, name, stack, variant, train)
    except FixError as exc:
        fail(str(exc))
    say = (
        (lambda m: click.echo(f"auditor fix: {m}", err=True)) if sys.stderr.isatty() or not as_json else None
    )
    store = obj.store() if keep else None  # before the search: a database that cannot open ends it now
    found = run(target, say or (lambda _: None), asked=dtype is not None)
    written = None
    if out is not None and found.fixed is not None and found.fixed.data is not None:
        Path(out).write_bytes(found.fixed.data)
        written = out
    stored = None
    if store is not None:
        try:
            stored = fixes.record(store.engine, stored_fix(found))
        finally:
            store.close()
    if as_json:
        click.echo(json.dumps({**to_json(found, written), "stored": stored}, indent=2, allow_nan=False))
    else:
        click.echo(render(found, written, out))
        if stored is not None:
            click.echo(f"stored as fix {stored} in the history (auditor history --fixes)")
    sys.exit(EXIT_OK if found.found else EXIT_FINDINGS)


def stored_fix(found: Fix) -> fixes.StoredFix:
    """What the history keeps of an outcome: the row, and --json's summary without the audit."""
    t = found.target
    fixed = found.fixed
    runtime, version = "", ""
    cycle = (fixed or found.as_configured).cycle
    report = cycle.stacks.get(t.stack)
    doc = (report.fingerprint or {}).get("runtime") if report is not None else None
    if isinstance(doc, dict):
        runtime, version = str(doc.get("runtime_package") or ""), str(doc.get("runtime_version") or "")
    sha = (
        fixed.result.artifact.sha256 if fixed is not None and fixed.result and fixed.result.artifact else None
    )
    summary = {k: v for k, v in to_json(found, None).items() if k not in ("result", "out")}
    stack = t.config.stacks[t.stack]
    converted = fixed is not None and fixed.result is not None and fixed.result.conversion is not None
    summary["served"] = {
        "host": stack.host,
        "device": stack.device,
        "runtime": stack.runtime,
        "converted": converted,
    }
    return fixes.StoredFix(
        0,
        None,
        t.kind,
        getattr(t, "probe", "") or getattr(t, "name", ""),
        getattr(t, "variant", "") or "",
        t.train,
        t.stack,
        runtime,
        version,
        found.found,
        sha if found.found else None,
        fixed.result.status if fixed is not None and fixed.result is not None else None,
        found.exports,
        summary,
    )


def _kb(n: int | None) -> str:
    return f"{n / 1024:.1f} KB" if n is not None else "-"


def _cost(c: Candidate | None) -> tuple[int | None, float | None]:
    r = c.result if c is not None else None
    if r is None:
        return None, None
    served = r.conversion if r.conversion is not None else r.artifact  # a converting stack serves its output
    size = served.size if served is not None else None
    return size, (r.infer_latency.p50_us if r.infer_latency is not None else None)


def _verdict(c: Candidate) -> str:
    r = c.result
    if r is None:
        return "not audited: the cycle produced no result for it"
    words = r.status if r.status == CONSISTENT else r.status.upper()
    text = result_line(r).text
    if r.status == CONSISTENT and c.reload is not None:
        return f"RELOAD: {c.reload}; its first load consistent ({text})"
    return f"{words}{': ' + text if text else ''}"


def _errors(c: Candidate) -> str:
    r = c.result
    if r is None or not r.outputs:
        return ""
    return ", ".join(f"{o.output} {o.metrics.get('max_abs', float('nan')):.3g}" for o in r.outputs)


def render(found: Fix, written: str | None, out: str | None) -> str:
    t = found.target
    lines = [f"auditor fix · {t.label} · {found.exports} exports audited in {found.seconds:.1f} s", ""]
    lines.append(f"as configured      {_verdict(found.as_configured)}")
    if found.already_passes:
        lines.append(f"nothing to fix: it passes on {t.stack} as configured")
        return "\n".join(lines)
    cells = ", ".join(f"{cell_name(c['path'])} ({c['type']})" for c in found.cells)
    s = found.search
    assert s is not None
    lines.append(
        f"cells, graph order  {cells}; search from {cell_name(s.cells[s.start]) if s.cells else '-'}"
    )
    if found.kept is None:
        closest = s.closest
        lines.append("")
        lines.append(f"NOT FOUND: no candidate passes on {t.stack}, not even every cell kept in float32")
        if closest is not None and closest.detail is not None:
            lines.append(f"  closest: {describe(closest.keep)}: {_verdict(closest.detail)}")
            lines.append("  so the drift is not float16 rounding in a cell: compare the float32 export")
            lines.append(f"  (auditor audit --stack {t.stack}) and read the findings")
    else:
        fixed = found.fixed
        assert fixed is not None
        lines.append("")
        if not found.kept:
            lines.append(
                "FOUND: no cell needs float32: computing in float16 through Cell.to_float (float32 "
                "weights, cast on entry) passes, where the variant's float16 weights and constants did not"
            )
        else:
            lines.append(f"FOUND: {describe(found.kept)}")
        after = "loading its checkpoint" if t.kind == "model" else "building it with float32 weights"
        lines.append(f"  the change to the network, after {after}, before exporting it:")
        lines += [f"    {x}" for x in found.change()]
        if found.config_change():
            lines.append("  and the change to the config (the serving stack's conversion):")
            lines += [f"    {x}" for x in found.config_change()]
        lines.append(f"  the fixed export on {t.stack}: {_verdict(fixed)}")
        if fixed.result is not None:
            lines.append(f"    max abs error: {_errors(fixed)}")
            words = ppo_words(fixed.result)
            if words:
                lines.append(f"    {words}")
        lines.append("")
        lines.append(f"  cost on {t.stack}      size       p50 latency")
        for label, c in (
            ("as configured", found.as_configured),
            ("all float16  ", found.all_float16),
            ("the fix      ", fixed),
            ("all float32  ", found.float32),
        ):
            size, p50 = _cost(c)
            lines.append(
                f"    {label}      {_kb(size):>9}  {f'{p50:.0f} µs' if p50 is not None else '-':>10}"
            )
    lines.append("")
    lines += _converter_lines(found)
    lines.append(f"candidates ({len(s.trials)} of at most {s.bound})")
    lines += _trial_lines(s.trials)
    if out is not None:
        lines.append("")
        lines.append(
            f"wrote the fixed export to {written}" if written else f"--out {out}: nothing written (no fix)"
        )
    return "\n".join(lines)


def _converter_lines(found: Fix) -> list[str]:
    """What the serving stack's converter could change, and what it did (none: no conversion)."""
    table = found.target.conversion()
    if table is None or found.converter is None:
        return []
    settings = found.converter_settings()
    offered = (
        f"its precision settings are {', '.join(settings)}: none is per layer"
        if settings is not None
        else "it does not say which precision settings it has"
    )
    tried = "false" if table.weight_fp16 else "true"
    keep = found.converter.plan["keep"] if found.converter.plan else []
    out = [f"converter on {found.target.stack} ({table.describe()}): {offered}"]
    again = found.converter_search
    if again is None:
        out.append(f"  weight_fp16 = {tried}, {describe(keep)}: {_verdict(found.converter)}")
    else:
        out.append(
            f"  the search again with weight_fp16 = {tried} ({len(again.trials)} of at most {again.bound}):"
        )
        out += _trial_lines(again.trials)
    return [*out, ""]


def _trial_lines(trials: list[Any]) -> list[str]:
    width = max((len(describe(t.keep)) for t in trials), default=0)
    return [f"  {i}. {describe(t.keep):<{width}}  {_verdict(t.detail)}" for i, t in enumerate(trials, 1)]


def _candidate_json(c: Candidate | None) -> dict[str, Any] | None:
    if c is None:
        return None
    size, p50 = _cost(c)
    return {
        "plan": c.plan,
        "status": c.result.status if c.result is not None else None,
        "failed": None if c.score == float("inf") else int(c.score),
        "reload": c.reload,
        "size": size,
        "p50_us": p50,
    }


def _converter_json(found: Fix) -> dict[str, Any] | None:
    table = found.target.conversion()
    if table is None:
        return None
    tried = _candidate_json(found.converter)
    again = found.converter_search
    return {
        "options": table.options(),
        "precision_settings": found.converter_settings(),
        "tried": None if tried is None else {"weight_fp16": not table.weight_fp16, **tried},
        "candidates": None
        if again is None
        else [
            {"keep": list(t.keep), "passed": t.passed, **(_candidate_json(t.detail) or {})}
            for t in again.trials
        ],
        "needed": found.weight_fp16 is not None,
    }


def to_json(found: Fix, written: str | None) -> dict[str, Any]:
    """``--json``: found, the cells kept, exports, every candidate and the fixed export's audit."""
    s = found.search
    fixed = found.fixed
    return {
        "target": found.target.describe(),
        "found": found.found,
        "already_passes": found.already_passes,
        "cells": list(found.kept) if found.kept is not None else None,
        "network_cells": found.cells,
        "change": found.change(),
        "config_change": found.config_change(),
        "converter": _converter_json(found),
        "exports": found.exports,
        "max_candidates": s.bound if s is not None else None,
        "as_configured": _candidate_json(found.as_configured),
        "candidates": [
            {"keep": list(t.keep), "passed": t.passed, **(_candidate_json(t.detail) or {})}
            for t in (s.trials if s else [])
        ],
        "cost": {
            "as_configured": _candidate_json(found.as_configured),
            "all_float16": _candidate_json(found.all_float16),
            "fix": _candidate_json(fixed),
            "all_float32": _candidate_json(found.float32),
        },
        "result": jsonable_result(fixed.result) if fixed is not None and fixed.result is not None else None,
        "closest": (
            {"keep": list(s.closest.keep), **(_candidate_json(s.closest.detail) or {})}
            if s is not None and s.closest is not None and not found.found
            else None
        ),
        "out": written,
        "seconds": round(found.seconds, 3),
    }
