"""``auditor golden record``: run a model on a named stack and keep its inputs and outputs as
the golden ``.npz`` that later cycles compare with (docs/golden.md)."""

from __future__ import annotations

from pathlib import Path

import click

from auditor.cli.context import Context, fail
from auditor.compare.golden import GoldenError, read_golden, write_golden
from auditor.config.user_models import ModelConfig
from auditor.cycle.preflight import ModelInputError, read_model
from auditor.cycle.user_models import model_inputs
from auditor.stacks.worker import WorkerError


@click.group("golden")
def golden_group() -> None:
    """Golden files of model probes: a model's inputs and the outputs it must give."""


@golden_group.command("record")
@click.argument("model")
@click.option(
    "--stack", required=True, metavar="STACK", help="The stack that runs the model (e.g. ms210-graph)."
)
@click.option("--out", metavar="FILE", help="Where to write the .npz. Default: the model's golden path.")
@click.option("--seed", default=0, show_default=True, help="Seed of the inputs when MODEL is a file.")
@click.pass_obj
def golden_record(obj: Context, model: str, stack: str, out: str | None, seed: int) -> None:
    """Run MODEL on STACK and write its golden .npz.

    MODEL is a [models.NAME] of the config (its inputs specs are used, and its golden path
    unless --out is given), or the path of a .mindir (inputs from the file's own signature,
    standard normal from --seed; --out is required).
    """
    config = obj.config()
    if stack not in config.stacks:
        fail(f"no stack named {stack!r} in {config.source} (configured: {', '.join(config.stacks)})")
    if model in config.models:
        spec = config.models[model]
    elif Path(model).suffix == ".mindir" or Path(model).exists():
        spec = ModelConfig(Path(model).stem, str(model), (stack,), golden=out, seed=seed)
    else:
        fail(f"{model!r} is neither a [models.NAME] of {config.source} nor a .mindir file")
    target = out or spec.golden
    if not target:
        fail(f"models.{spec.name} has no golden path: pass --out FILE.npz")
    try:
        data, info = read_model(spec.path, config.files.limits)
        inputs, names = model_inputs(spec, info, config.files.limits)
    except ModelInputError as exc:
        fail(str(exc))
    worker = obj.plugins().reach(config).worker(stack)
    try:
        hello = worker.start()
        worker.request("load", model="golden", path=str(Path(spec.path).resolve()))
        outputs = worker.request("run", model="golden", inputs=inputs).result["outputs"]
    except WorkerError as exc:
        fail(f"could not run {spec.path} on {stack}: {exc.describe()}", 1)
    finally:
        worker.close()
    output_names = list(spec.output_names) or [f"output{i}" for i in range(len(outputs))]
    if len(output_names) != len(outputs):
        fail(
            f"models.{spec.name}.output_names lists {len(output_names)} names; "
            f"{stack} gave {len(outputs)} outputs"
        )
    try:
        path = write_golden(
            target,
            inputs,
            outputs,
            names,
            output_names,
            model_sha256=info.sha256,
            model_file=str(Path(spec.path).resolve()),
            model=spec.name,
            stack=stack,
            runtime=hello.get("runtime_package"),
            runtime_version=hello.get("runtime_version"),
            seed=spec.seed,
        )
        read_golden(path)  # what was written must read back
    except (OSError, GoldenError) as exc:
        fail(f"could not write the golden {target}: {exc}")
    shapes = ", ".join(f"{n}{list(o.shape)}" for n, o in zip(output_names, outputs, strict=True))
    click.echo(
        f"{path}: {len(inputs)} input(s), outputs {shapes}; recorded on {stack} for {info.sha256[:12]}"
    )
