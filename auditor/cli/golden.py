"""``auditor golden record``: run a model on a named stack, or its training network on its train
stack, and keep its inputs and outputs as the golden ``.npz`` that later cycles compare with
(docs/golden.md)."""

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
@click.option("--stack", metavar="STACK", help="The stack that runs the model (e.g. ms210-graph).")
@click.option(
    "--train",
    "from_train",
    is_flag=True,
    help="Record the outputs of the model's training network ([models.NAME] train: its factory and "
    "checkpoint, PyNative on its train stack) instead of a stack running the file.",
)
@click.option("--out", metavar="FILE", help="Where to write the .npz. Default: the model's golden path.")
@click.option("--seed", default=0, show_default=True, help="Seed of the inputs when MODEL is a file.")
@click.pass_obj
def golden_record(
    obj: Context, model: str, stack: str | None, from_train: bool, out: str | None, seed: int
) -> None:
    """Run MODEL on STACK (or its training network, --train) and write its golden .npz.

    MODEL is a [models.NAME] of the config (its inputs specs are used, and its golden path
    unless --out is given), or the path of a .mindir (inputs from the file's own signature,
    standard normal from --seed; --out is required).
    """
    config = obj.config()
    if from_train:
        network = config.models[model].train if model in config.models else None
        if network is None:
            fail(f"--train records a [models.NAME] whose train table names its factory; {model!r} has none")
        if stack is not None and stack != network.stack:
            fail(f"models.{model}.train builds the network on {network.stack}, not on {stack}")
        stack = network.stack
    if stack is None:
        fail("name the stack that runs the model: --stack STACK (or --train for the training network)")
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
        data, info = read_model(spec.path)
        inputs, names = model_inputs(spec, info)
    except ModelInputError as exc:
        fail(str(exc))
    worker = obj.plugins().reach(config).worker(stack)
    what = spec.train.describe() if from_train and spec.train is not None else f"{spec.path} on {stack}"
    try:
        hello = worker.start()
        if from_train and spec.train is not None:
            checkpoint = str(Path(spec.train.checkpoint).resolve()) if spec.train.checkpoint else ""
            worker.request(
                "network",
                model="golden",
                factory=spec.train.factory,
                kwargs=dict(spec.train.kwargs),
                checkpoint=checkpoint,
                checkpoint_data=Path(checkpoint).read_bytes() if checkpoint and worker.is_remote else None,
            )
        else:
            worker.request("load", model="golden", path=str(Path(spec.path).resolve()))
        outputs = worker.request("run", model="golden", inputs=inputs).result["outputs"]
    except WorkerError as exc:
        fail(f"could not run {what}: {exc.describe()}", 1)
    except OSError as exc:
        fail(f"could not read the checkpoint of models.{spec.name}.train: {exc}")
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
            reference=spec.train.factory if from_train and spec.train is not None else "file",
            runtime=hello.get("runtime_package"),
            runtime_version=hello.get("runtime_version"),
            seed=spec.seed,
        )
        read_golden(path)  # what was written must read back
    except (OSError, GoldenError) as exc:
        fail(f"could not write the golden {target}: {exc}")
    shapes = ", ".join(f"{n}{list(o.shape)}" for n, o in zip(output_names, outputs, strict=True))
    by = f" by {spec.train.factory} (PyNative)" if from_train and spec.train is not None else ""
    click.echo(
        f"{path}: {len(inputs)} input(s), outputs {shapes}; recorded on {stack}{by} for {info.sha256[:12]}"
    )
