"""A user's model file and what it is audited with: the file read without a framework (a
MindIR, or named as another format the runtimes load), the inputs of one run (the model's
specs, recorded arrays, else seeded from the file's own signature), a golden's inputs checked
against the file, the training network built by its factory, and whether the file computes in
float16 inside. The cycle, the gate (``auditor check``), ``golden record`` and ``config check``
read a model with these, so they agree on what is wrong with it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from auditor.compare import input_classes
from auditor.compare.golden import Golden, GoldenError, read_golden
from auditor.config.user_models import ModelConfig
from auditor.policy import classes as file_classes
from auditor.runtime import MINDIR, ArtifactFormat, RuntimeSpec
from auditor.worker import files
from auditor.worker.mindir import MindIRInfo, TensorInfo, output_dependencies, read_info


class ModelInputError(Exception):
    """The model file cannot be audited: unreadable path, not a MindIR, truncated, encrypted."""


def read_model(
    path: str | os.PathLike[str],
    limits: files.Limits = files.DEFAULT_LIMITS,
    others: Sequence[ArtifactFormat] = (),
) -> tuple[bytes, MindIRInfo]:
    """The file's bytes and what it says about itself, read through auditor.worker.files (a
    regular file within ``limits``, read with a deadline); ModelInputError names the file and
    the problem. ``others``: the other formats the runtimes load; a file that is not a MindIR
    but reads whole as one of them is named as that format, not as a damaged MindIR."""
    try:
        data = files.read_bytes(path, limits)
    except files.FileProblem as exc:
        raise ModelInputError(str(exc)) from None
    info = read_info(data)
    if not info.readable:
        for fmt in others:
            summary = fmt.read(data) if fmt.name != MINDIR.name else {}
            if summary.get("readable"):
                version = fmt.version(summary)
                said = f", version {version}" if version is not None else ""
                ops = len(set(summary.get("op_types") or ()))
                raise ModelInputError(
                    f"{Path(path)}: a whole {fmt.title} file ({ops} operator type(s){said}), not a MindIR; "
                    f"this command reads MindIR files (the auditor audits {fmt.title} as a train stack "
                    "exports it, in a cycle)"
                )
        raise ModelInputError(f"{Path(path)}: {info.reason}")
    return data, info


def other_formats(runtimes: Mapping[str, RuntimeSpec]) -> list[ArtifactFormat]:
    """The formats other than MindIR that the runtimes load, each once."""
    out: dict[str, ArtifactFormat] = {}
    for spec in runtimes.values():
        if spec.loads.name != MINDIR.name:
            out.setdefault(spec.loads.name, spec.loads)
    return list(out.values())


def seeded_inputs(inputs: Sequence[TensorInfo], seed: int = 0, dynamic: int = 1) -> list[np.ndarray]:
    """One batch for a model's declared inputs: standard normal floats, small integers,
    False booleans, from ``seed``; a dynamic dimension (-1) becomes ``dynamic``."""
    rng = np.random.RandomState(seed)
    out = []
    for t in inputs:
        shape = tuple(dynamic if d < 0 else d for d in t.shape)
        try:
            dtype = np.dtype(t.dtype)
        except TypeError:
            raise ModelInputError(f"input {t.name!r} has dtype {t.dtype}, which numpy cannot make") from None
        if dtype.kind == "f":
            out.append(rng.standard_normal(shape).astype(dtype))
        elif dtype.kind in "iu":
            out.append(rng.randint(0, 10, size=shape).astype(dtype))
        elif dtype.kind == "b":
            out.append(np.zeros(shape, dtype))
        else:
            raise ModelInputError(f"input {t.name!r} has dtype {t.dtype}, which the auditor cannot generate")
    return out


def model_inputs(
    model: ModelConfig, info: MindIRInfo, limits: files.Limits = files.DEFAULT_LIMITS
) -> tuple[list[np.ndarray], list[str]]:
    """The inputs of one run and their names, from the model's specs (else from the file's own
    signature; recorded ones read within ``limits``); ModelInputError says which input and
    what is wrong."""
    declared = list(info.inputs or ())
    where = f"models.{model.name}"
    if not model.inputs:
        if not declared:
            raise ModelInputError(f"{model.path}: declares no inputs; list them in [[{where}.inputs]]")
        return seeded_inputs(declared, model.seed), [t.name for t in declared]
    if declared and len(model.inputs) != len(declared):
        raise ModelInputError(
            f"{where}.inputs lists {len(model.inputs)} input(s), but {model.path} takes {len(declared)}: "
            + ", ".join(f"{t.name}{list(t.shape)} {t.dtype}" for t in declared)
        )
    rng = np.random.RandomState(model.seed)
    npz: dict[str, dict[str, np.ndarray]] = {}
    out = []
    for i, spec in enumerate(model.inputs):
        label = f"{where}.inputs[{i}] ({spec.name})"
        if declared:
            d = declared[i]
            fits = len(d.shape) == len(spec.shape) and all(
                a < 0 or a == b for a, b in zip(d.shape, spec.shape, strict=False)
            )
            if not fits:
                raise ModelInputError(
                    f"{label}: shape {list(spec.shape)} does not fit {model.path}'s input "
                    f"{d.name} {list(d.shape)}"
                )
            if d.dtype != spec.dtype:
                raise ModelInputError(
                    f"{label}: dtype {spec.dtype}, but {model.path}'s input {d.name} is {d.dtype}"
                )
        dtype = np.dtype(spec.dtype)
        if spec.generator == "normal":
            x = rng.normal(spec.mean, spec.std, size=spec.shape)
        elif spec.generator == "uniform":
            x = rng.uniform(spec.low, spec.high, size=spec.shape)
        else:
            x = _recorded(spec.npz, spec.key or spec.name, spec.shape, label, npz, limits)
        out.append(np.ascontiguousarray(np.asarray(x).astype(dtype)))
    return out, [s.name for s in model.inputs]


def _recorded(
    path: str,
    key: str,
    shape: tuple[int, ...],
    label: str,
    cache: dict[str, dict[str, np.ndarray]],
    limits: files.Limits,
) -> np.ndarray:
    if path not in cache:
        try:
            cache[path] = files.read_npz(path, limits, numeric=False)
        except files.FileProblem as exc:
            raise ModelInputError(f"{label}: {exc}") from None
    arrays = cache[path]
    if key not in arrays:
        raise ModelInputError(
            f"{label}: {path} has no array {key!r} (it has: {', '.join(sorted(arrays)) or 'none'})"
        )
    x = arrays[key]
    try:
        files.check_array(path, key, x)
    except files.FileProblem as exc:
        raise ModelInputError(f"{label}: {exc}") from None
    if tuple(x.shape) != tuple(shape):
        raise ModelInputError(
            f"{label}: {path}[{key!r}] has shape {list(x.shape)}, the spec says {list(shape)}"
        )
    return x


def computes_in(info: MindIRInfo | None) -> str | None:
    """ "float16" when the file computes in fp16 inside (its layers' outputs are fp16, whatever
    its inputs' and outputs' dtype), else None."""
    return "float16" if info is not None and "float16" in (info.compute_dtypes or ()) else None


def check_golden_inputs(model: ModelConfig, info: MindIRInfo, golden: Golden) -> None:
    """ModelInputError unless the golden's inputs are what the file takes (count, shape with
    dynamic dimensions free, dtype): a golden of another model cannot be its reference."""
    declared = list(info.inputs or ())
    if declared and len(declared) != len(golden.inputs):
        raise ModelInputError(
            f"{model.golden}: holds {len(golden.inputs)} input(s), {model.path} takes {len(declared)}"
        )
    for i, (d, x) in enumerate(zip(declared, golden.inputs, strict=False)):
        fits = len(d.shape) == x.ndim and all(a < 0 or a == b for a, b in zip(d.shape, x.shape, strict=False))
        if not fits or str(x.dtype) != d.dtype:
            raise ModelInputError(
                f"{model.golden}: input_{i} is {list(x.shape)} {x.dtype}, {model.path}'s input {d.name} "
                f"is {list(d.shape)} {d.dtype}"
            )


@dataclass(frozen=True)
class ModelPlan:
    """What a ``[models.NAME]`` is audited with, read once per cycle: the file, its inputs, its
    golden, its input classes, which of its outputs a NaN in the varied input must reach, and
    its hidden nodes (auditor.policy.model_file reads them); ``error`` when it cannot be."""

    model: ModelConfig
    data: bytes = b""
    info: MindIRInfo | None = None
    inputs: list[np.ndarray] = field(default_factory=list)
    input_names: tuple[str, ...] = ()
    golden: Golden | None = None
    classes: list[input_classes.ClassBatch] = field(default_factory=list)
    dependencies: tuple[tuple[str, ...], ...] | None = None
    error: str | None = None

    @property
    def label(self) -> str:
        return f"models.{self.model.name}"


def plan_model(model: ModelConfig, limits: files.Limits, others: Sequence[ArtifactFormat] = ()) -> ModelPlan:
    """Everything ``model`` is audited with, read once (through auditor.worker.files); a plan
    with ``error`` when the file, its inputs, its checkpoint or its golden cannot serve."""
    try:
        data, info = read_model(model.path, limits, others)
        missing = model.train.missing() if model.train is not None else None
        if missing is not None:
            raise ModelInputError(f"models.{model.name}.{missing}")
        if model.train is not None and model.train.checkpoint and not Path(model.train.checkpoint).is_file():
            raise ModelInputError(
                f"models.{model.name}.train.checkpoint: {model.train.checkpoint}: no such file"
            )
        golden = None
        if model.golden:
            golden = read_golden(model.golden, limits)
            inputs = golden.inputs
            check_golden_inputs(model, info, golden)
        else:
            inputs, _ = model_inputs(model, info, limits)
        names = tuple(spec.name for spec in model.inputs) or tuple(t.name for t in (info.inputs or ()))
        classes = file_classes.batches(model, info, inputs, names)
        return ModelPlan(model, data, info, inputs, names, golden, classes, output_dependencies(data))
    except (ModelInputError, GoldenError) as exc:
        return ModelPlan(model, error=str(exc))
