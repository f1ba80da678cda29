"""``auditor compare A.npz B.npz``: two saved output files compared with the same metrics and
thresholds as a probe (Polygraphy's ``--load-outputs``), without any stack.

The files are golden-format ``.npz`` (auditor.compare.golden): what ``audit --save-outputs``
writes for each side, or what ``golden record`` writes; or any ``.npz`` of numeric arrays (a
user's own dumps), whose arrays are outputs matched by name. A is the reference (the train
side, or the golden). The probe, variant and dtype come from the files' ``meta`` (or ``--probe``,
``--variant``, ``--model``); the thresholds are the config's for that probe variant and each
output (``[probes.P]``, ``[models.NAME]``), and a probe's comparators run with their options,
exactly as in a cycle.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, replace
from typing import Any

import click
import numpy as np

from auditor.cli.context import Context, fail
from auditor.cli.exits import EXIT_USAGE
from auditor.compare.golden import Golden, GoldenError, read_outputs
from auditor.compare.outputs import Tolerance, compare_output
from auditor.config.tables import Config
from auditor.config.thresholds import ProbeConfig
from auditor.policy.subject import RATIOS, ProbeJob, from_probe
from auditor.policy.verdict import CheckError, Settings, comparator_checks, envelopes_of, judged
from auditor.report.text import jsonable_result, render_result
from auditor.results import CONSISTENT, ERROR, ProbeResult


@click.command("compare")
@click.argument("reference", metavar="A.npz")
@click.argument("other", metavar="B.npz")
@click.option(
    "--probe",
    metavar="NAME",
    help="The probe whose thresholds and comparators apply (default: from the files).",
)
@click.option("--variant", metavar="NAME", help="Its variant (default: from the files).")
@click.option("--model", metavar="NAME", help="A [models.NAME] whose thresholds apply instead of a probe's.")
@click.option("--atol", type=float, help="Absolute tolerance for every output (instead of the config's).")
@click.option("--rtol", type=float, help="Relative tolerance for every output (instead of the config's).")
@click.option("-v", "--verbose", is_flag=True, help="Every output and check, not only the failing ones.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.pass_obj
def compare_command(
    obj: Context,
    reference: str,
    other: str,
    probe: str | None,
    variant: str | None,
    model: str | None,
    atol: float | None,
    rtol: float | None,
    verbose: bool,
    as_json: bool,
) -> None:
    """Compare two saved output files, A (the reference) and B, as a probe would.

    A and B are what `audit --save-outputs` or `golden record` wrote, or any .npz files of
    numeric arrays (your own dumps): their arrays are matched by name. Without --probe or
    --model the config's default thresholds apply; --atol/--rtol set them for every output.

    \b
    Exit status:
      0  every output and check within its limit
      1  drift (some are not) or a comparator that failed
      2  usage error, unreadable files, or files of different inputs or outputs
    """
    try:
        a, b = read_outputs(reference), read_outputs(other)
    except GoldenError as exc:
        fail(str(exc))
    _same_inputs(a, b, reference, other)
    b = _by_name(a, b, reference, other)
    if len(a.outputs) != len(b.outputs):
        fail(
            f"{reference} holds {len(a.outputs)} outputs, {other} {len(b.outputs)}: "
            "they are not the same model's"
        )
    names = a.output_names or b.output_names or [f"output{i}" for i in range(len(a.outputs))]
    probe = probe or model or a.meta.get("probe") or b.meta.get("probe")
    variant = variant or a.meta.get("variant") or b.meta.get("variant")
    config = obj.config() if obj.find_config(required=False) else None
    judge = _Judge(obj, config, probe, variant, model is not None or variant == "model")
    result = judge.result(a, b, names, reference, other, atol, rtol)
    if as_json:
        click.echo(json.dumps(jsonable_result(result), indent=2, allow_nan=False))
    else:
        title = f"{reference} → {other}" + (f" · {judge.source}" if judge.source else "")
        click.echo(render_result(result, title, verbose), nl=False)
    sys.exit(0 if result.status == CONSISTENT else 1)


def _by_name(a: Golden, b: Golden, ra: str, rb: str) -> Golden:
    """B's outputs in A's order, matched by name when both files name them (a user's own
    dumps may hold their arrays in any order); names only one file has are a usage error."""
    if not a.output_names or not b.output_names:
        return b
    only_a = [n for n in a.output_names if n not in b.output_names]
    only_b = [n for n in b.output_names if n not in a.output_names]
    if only_a or only_b:
        fail(
            f"the outputs are matched by name: only in {ra}: {', '.join(only_a) or 'none'}; "
            f"only in {rb}: {', '.join(only_b) or 'none'}"
        )
    order = [b.output_names.index(n) for n in a.output_names]
    return replace(b, outputs=[b.outputs[i] for i in order], output_names=list(a.output_names))


def _same_inputs(a: Golden, b: Golden, ra: str, rb: str) -> None:
    """Outputs of different inputs cannot be compared: say which input differs."""
    if not a.inputs or not b.inputs:
        return
    if len(a.inputs) != len(b.inputs):
        fail(f"{ra} was computed from {len(a.inputs)} inputs, {rb} from {len(b.inputs)}", EXIT_USAGE)
    for i, (x, y) in enumerate(zip(a.inputs, b.inputs, strict=True)):
        if x.shape != y.shape or not np.array_equal(x, y, equal_nan=x.dtype.kind == "f"):
            fail(
                f"{ra} and {rb} were computed from different inputs (input_{i} differs): "
                "compare outputs of the same inputs"
            )


class _Judge:
    """Thresholds and comparators of the probe (or model) the files are outputs of."""

    def __init__(
        self, obj: Context, config: Config | None, probe: str | None, variant: str | None, model: bool
    ):
        self.probe, self.variant = probe or "outputs", variant or "-"
        self.spec: Any = None
        self.comparators: dict[str, Any] = {}
        self.model = config.models.get(self.probe) if config is not None and model else None
        self.cfg = config.probe(self.probe) if config is not None else ProbeConfig(self.probe)
        # the trainer the ratios are judged by: the config's [ppo], as in a cycle
        self.settings = Settings({RATIOS: config.ppo.options()}) if config is not None else Settings()
        self.source = ""
        if model and self.model is None and config is not None:
            fail(
                f"no [models.{self.probe}] in {config.source} (models: {', '.join(config.models) or 'none'})"
            )
        if self.model is not None:
            self.source = f"thresholds of models.{self.probe}"
            return
        plugins = obj.plugins()
        self.spec = plugins.probes().get(self.probe) if probe else None
        if probe and self.spec is None:
            fail(
                f"no probe {probe!r} is loaded (probes: {', '.join(plugins.probes())}); "
                "pass --probe or --model"
            )
        if self.spec is not None:
            if self.variant not in self.spec.variants:
                fail(
                    f"probe {self.probe} has no variant {self.variant!r} "
                    f"(variants: {', '.join(self.spec.variants)})"
                )
            self.comparators = plugins.comparators()
            self.source = f"thresholds and comparators of probe {self.probe} [{self.variant}]"
            if config is not None:
                self.source += f" from {config.source}"

    def tolerance(self, output: str, dtype: str, atol: float | None, rtol: float | None) -> Tolerance:
        if self.model is not None:
            tol = self.model.tolerance_for(output, dtype)
        else:
            job_dtype = self.job().dtype if self.spec is not None else dtype
            tol = self.cfg.tolerance_for(output, self.variant if self.spec is not None else None, job_dtype)
        return Tolerance(tol.atol if atol is None else atol, tol.rtol if rtol is None else rtol)

    def job(self) -> ProbeJob:
        return ProbeJob(self.spec, self.spec.variant_params(self.variant, self.cfg.params), self.variant)

    def result(
        self, a: Golden, b: Golden, names: list[str], ra: str, rb: str, atol: float | None, rtol: float | None
    ) -> ProbeResult:
        tolerances = {
            n: self.tolerance(n, str(np.asarray(x).dtype), atol, rtol)
            for n, x in zip(names, a.outputs, strict=True)
        }
        base: dict[str, Any] = {
            "pair": f"{a.meta.get('stack') or ra}->{b.meta.get('stack') or rb}",
            "train": str(a.meta.get("stack") or ra),
            "infer": str(b.meta.get("stack") or rb),
            "probe": self.probe,
            "probe_version": str(a.meta.get("probe_version") or ""),
            "variant": self.variant,
            "thresholds": {n: asdict(t) for n, t in tolerances.items()},
            "samples": int(a.inputs[0].shape[0]) if a.inputs and a.inputs[0].ndim else 0,
        }
        try:
            # the probe's rounding envelopes hold for its own inputs only (none for other dumps)
            subject = from_probe(self.job(), self.cfg) if self.spec is not None else None
            envelopes = envelopes_of(subject, list(a.inputs)) if subject is not None else {}
            comparisons = tuple(
                compare_output(n, np.asarray(x), np.asarray(y), tolerances[n], envelopes.get(n))
                for n, x, y in zip(names, a.outputs, b.outputs, strict=True)
            )
            checks = []
            if subject is not None:
                checks = comparator_checks(
                    subject, self.comparators, dict(zip(names, a.outputs, strict=True)),
                    dict(zip(names, b.outputs, strict=True)), envelopes, settings=self.settings,
                )  # fmt: skip
        except CheckError as exc:
            return ProbeResult(status=ERROR, message=str(exc), **base)
        return judged(base, comparisons, checks)
