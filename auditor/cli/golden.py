"""``auditor golden record``: run a model on a named stack, or its training network on its train
stack, and keep its inputs and outputs as the golden ``.npz`` that later cycles compare with
(docs/golden.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from auditor.cli.context import Context, fail
from auditor.cli.selection import check_names, narrowed, selection_of, selector_options
from auditor.compare.golden import GoldenError, read_golden, write_golden
from auditor.config.selection import Selection, Universe
from auditor.config.tables import Config
from auditor.config.user_models import ModelConfig
from auditor.policy.model_file import ModelInputError, model_inputs, other_formats, read_model
from auditor.policy.subject import training_network
from auditor.stacks.worker import WorkerError


@click.group("golden")
def golden_group() -> None:
    """Golden files of model probes: a model's inputs and the outputs it must give."""


@golden_group.command("record")
@click.argument("model", required=False)
@selector_options(
    texts={
        "stack": "The stack that runs the model (one that loads MindIR, e.g. ms210-graph). Default: the "
        "model's reference stack.",
        "model": "A [models.NAME] to record (repeatable; the same as MODEL).",
        "pair": "Record the models of this model pair (NAME:REFERENCE->STACK).",
        "host": "Record the models served on this host.",
        "probe": "Probes have no golden file (their goldens are kept in the history: `auditor baseline`).",
    }
)
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
    obj: Context, model: str | None, from_train: bool, out: str | None, seed: int, **kw: Any
) -> None:
    """Run MODEL on a stack (or its training network, --train) and write its golden .npz.

    MODEL is a [models.NAME] of the config (its inputs specs are used, and its golden path
    unless --out is given), or the path of a .mindir (inputs from the file's own signature,
    standard normal from --seed; --out is required). --model (repeatable) and the other
    selectors name several models of the config at once. A stack that cannot load a MindIR
    (a train runtime) is refused before anything runs.
    """
    config = obj.config()
    selection = selection_of(kw)
    if selection.probes:
        fail("golden record writes [models.NAME] goldens; a probe's goldens are kept in the history "
             "(`auditor baseline show`)")  # fmt: skip
    if len(selection.stacks) > 1:
        fail(f"golden record runs on one stack; --stack names {len(selection.stacks)}")
    stack = selection.stacks[0] if selection.stacks else None
    check_names(Selection(stacks=selection.stacks), Universe.of(config))
    specs = _models(config, model, selection, stack, out, seed)
    stacks = {}
    for spec in specs:
        if from_train:
            if spec.train is None:
                fail(
                    f"--train records a [models.NAME] whose train table names its factory; "
                    f"{spec.name} has none"
                )
            if stack is not None and stack != spec.train.stack:
                fail(f"models.{spec.name}.train builds the network on {spec.train.stack}, not on {stack}")
            missing = spec.train.missing()
            if missing is not None:
                fail(f"models.{spec.name}.{missing}")
            stacks[spec.name] = spec.train.stack
        else:
            target_stack = stack or spec.reference
            if target_stack is None:
                also = " (or --train for its training network)" if spec.train is not None else ""
                fail(
                    f"models.{spec.name} has no reference stack: name the stack that runs it with "
                    f"--stack{also} "
                    f"({_loaders(obj, config) or 'no stack of this config loads a MindIR'})"
                )
            _refuse_early(obj, config, target_stack)
            stacks[spec.name] = target_stack
        target = out or spec.golden
        if not target:
            fail(f"models.{spec.name} has no golden path: pass --out FILE.npz")
    for spec in specs:
        _record(obj, config, spec, stacks[spec.name], out or spec.golden or "", from_train)


def _models(
    config: Config, model: str | None, selection: Selection, stack: str | None, out: str | None, seed: int
) -> list[ModelConfig]:
    """The models to record: MODEL (a [models.NAME] or a .mindir) and those the selectors name."""
    specs: list[ModelConfig] = []
    if model is not None:
        if model in config.models:
            specs.append(config.models[model])
        elif Path(model).suffix == ".mindir" or Path(model).exists():
            if stack is None:
                fail(f"name the stack that runs {model} with --stack")
            specs.append(ModelConfig(Path(model).stem, str(model), (stack,), golden=out, seed=seed))
        else:
            fail(f"{model!r} is neither a [models.NAME] of {config.source} nor a .mindir file")
    where = Selection(
        pairs=selection.pairs, models=selection.models, hosts=selection.hosts, groups=selection.groups
    )
    if not where.empty:
        specs += [
            m for m in narrowed(config, where).config.models.values() if m.name not in {s.name for s in specs}
        ]
    if not specs:
        fail("name the model to record: MODEL, or --model NAME of a [models.NAME]")
    if out and len(specs) > 1:
        fail(f"--out names one file, {len(specs)} models are selected")
    return specs


def _loaders(obj: Context, config: Config) -> str:
    runtimes = obj.plugins().runtimes()
    return ", ".join(
        n
        for n, s in config.stacks.items()
        if runtimes.get(s.runtime) is not None and runtimes[s.runtime].can == "load"
    )


def _refuse_early(obj: Context, config: Config, stack: str) -> None:
    """A stack whose runtime cannot load a MindIR (a train runtime builds and exports) is
    refused before any worker starts, naming the stacks that can."""
    s = config.stacks[stack]
    runtime = obj.plugins().runtimes().get(s.runtime)
    if runtime is not None and runtime.can != "load":
        others = _loaders(obj, config)
        fail(
            f"golden record --stack {stack}: {stack} runs {s.runtime}, a train runtime that builds and "
            f"exports models but does not load a MindIR; record on a stack that does"
            + (f": {others}" if others else " (this config has none: add an infer stack)")
        )


def _record(
    obj: Context, config: Config, spec: ModelConfig, stack: str, target: str, from_train: bool = False
) -> None:
    try:
        data, info = read_model(spec.path, config.files.limits, other_formats(obj.plugins().runtimes()))
        inputs, names = model_inputs(spec, info, config.files.limits)
    except ModelInputError as exc:
        fail(str(exc))
    network = spec.train if from_train else None
    stacks = obj.plugins().reach(config)
    worker = stacks.worker(stack)
    what = network.describe() if network is not None else f"{spec.path} on {stack}"
    try:
        hello = worker.start()
        if network is not None:
            training_network(network).build(worker, "golden")
        else:
            worker.request("load", model="golden", path=str(Path(spec.path).resolve()))
        outputs = worker.request("run", model="golden", inputs=inputs).result["outputs"]
    except WorkerError as exc:
        fail(f"could not run {what}: {exc.describe()}", 1)
    except OSError as exc:
        fail(f"could not read the checkpoint of models.{spec.name}.train: {exc}")
    finally:
        worker.close()
        stacks.close()
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
            reference=network.factory if network is not None else "file",
            runtime=hello.get("runtime_package"),
            runtime_version=hello.get("runtime_version"),
            seed=spec.seed,
        )
        read_golden(path)  # what was written must read back
    except (OSError, GoldenError) as exc:
        fail(f"could not write the golden {target}: {exc}")
    shapes = ", ".join(f"{n}{list(o.shape)}" for n, o in zip(output_names, outputs, strict=True))
    by = f" by {network.factory} (PyNative)" if network is not None else ""
    click.echo(
        f"{path}: {len(inputs)} input(s), outputs {shapes}; recorded on {stack}{by} for {info.sha256[:12]}"
    )
