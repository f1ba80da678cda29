"""Input classes for a user's model (``[models.NAME] input_classes``), as the probes get them
(auditor.compare.input_classes): besides the model's own inputs (generated, ``random``;
recorded, ``recorded``; a golden's, ``golden``), a ``sweep`` of ordinary magnitudes through
the saturation points of tanh, sigmoid and exp-like heads, ``magnitude`` (10 to 1e6 and 1e-3 to
1e-30, both signs), ``fp16-edge`` (a file that computes in or takes float16) and ``nan-inf``
(one NaN, +Inf or -Inf per row) in one input, the observation.

A model file may take a fixed batch, often 1, so a class's batch has ``ROWS`` rows (64 for the
sweep, 16 for the others; at least the file's batch, a multiple of it) and is run in chunks of
the file's batch; the other inputs keep the model's own values, repeated. Each side (reference
and serving) runs every class right after the model's own inputs, in the same worker; the
pair is compared per class as the probes' are (``output@class`` checks), and each side's
outputs are checked alone: the graph's ranges, and a NaN input row that comes out finite in an
output the graph computes from that input (auditor.worker.mindir.output_dependencies: IEEE
arithmetic carries a NaN there).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from auditor.compare import input_classes
from auditor.config.user_models import MODEL_CLASSES, ModelConfig
from auditor.stacks.worker import WorkerError
from auditor.worker.mindir import MindIRInfo

ROWS = {"sweep": 64}
"""Rows of a class's batch: a sweep in 64 steps from -12 to 12; the other classes cycle through
a few values (9 magnitudes, 8 fp16 edges, NaN/+Inf/-Inf over the columns): SMALL rows."""
SMALL = 16


def varied_index(model: ModelConfig, inputs: Sequence[np.ndarray], input_names: Sequence[str]) -> int | None:
    """The input the classes vary: ``class_input``, else the rollout's observation, else the first
    float input (None: the model takes no float input)."""
    for name in (model.class_input, model.rollout.observation if model.rollout else None):
        if name is not None and name in input_names:
            return list(input_names).index(name)
    floats = [i for i, x in enumerate(inputs) if np.asarray(x).dtype.kind == "f" and np.ndim(x) >= 1]
    return floats[0] if floats else None


def class_names(model: ModelConfig, info: MindIRInfo | None, varied: np.ndarray) -> tuple[str, ...]:
    """``input_classes`` as set, else every class that applies: fp16-edge only to a file that
    computes in float16 inside or takes a float16 input."""
    if model.input_classes is not None:
        return tuple(model.input_classes)
    fp16 = varied.dtype == np.float16 or (info is not None and "float16" in (info.compute_dtypes or ()))
    return tuple(c for c in MODEL_CLASSES if c != "fp16-edge" or fp16)


def batches(
    model: ModelConfig, info: MindIRInfo | None, inputs: list[np.ndarray], input_names: Sequence[str]
) -> list[input_classes.ClassBatch]:
    """The batch of every class the model runs (seeded from its seed); [] when it takes no float
    input to vary."""
    varied = varied_index(model, inputs, input_names)
    if varied is None:
        return []
    batch = file_batch(inputs)
    out = []
    for name in class_names(model, info, np.asarray(inputs[varied])):
        rows = batch * math.ceil(ROWS.get(name, SMALL) / batch)
        base = [_tiled(np.asarray(x), batch, rows) for x in inputs]
        made = input_classes.generic(name, base[varied], model.seed + 17 + input_classes.CLASSES.index(name))
        if made is None:
            continue
        x = list(base)
        x[varied] = made
        x = [np.ascontiguousarray(a) for a in x]
        out.append(input_classes.ClassBatch(name, x, input_classes.hazard_rows(x, varied)))
    return out


def file_batch(inputs: Sequence[np.ndarray]) -> int:
    """The batch the model's own inputs have (the file's, or the spec's)."""
    first = np.asarray(inputs[0]) if inputs else np.zeros(1)
    return int(first.shape[0]) if first.ndim and first.shape[0] else 1


def _tiled(x: np.ndarray, batch: int, rows: int) -> np.ndarray:
    if x.ndim == 0 or x.shape[0] != batch:
        return x  # not batch-major: given whole to every chunk
    return np.concatenate([x] * (rows // batch))[:rows]


def run_chunks(worker: Any, model_id: str, inputs: list[np.ndarray], batch: int) -> list[np.ndarray]:
    """The model on ``inputs`` in chunks of the file's batch, the chunks' rows joined (an output
    that is not per row, a parameter's value, kept once when every chunk gives the same).
    Raises WorkerError, or ValueError for an output that is not per row and changes."""
    rows = int(np.asarray(inputs[0]).shape[0]) if np.ndim(inputs[0]) else batch
    parts: list[list[np.ndarray]] = []
    for start in range(0, rows, batch):
        chunk = [x[start : start + batch] if np.ndim(x) and np.shape(x)[0] == rows else x for x in inputs]
        got = worker.request("run", model=model_id, inputs=chunk).result["outputs"]
        parts.append([np.asarray(o) for o in got])
    joined = []
    for i, first in enumerate(parts[0]):
        if first.ndim and first.shape[0] == batch:
            joined.append(np.concatenate([p[i] for p in parts]))
        elif all(np.array_equal(p[i], first, equal_nan=True) for p in parts[1:]):
            joined.append(first)
        else:
            raise ValueError(f"output {i} is not batch-major ({list(first.shape)}) and changes with the rows")
    return joined


def run(
    worker: Any, model_id: str, made: list[input_classes.ClassBatch], batch: int
) -> tuple[dict[str, list[np.ndarray]], dict[str, str]]:
    """Each class's outputs (class -> outputs, run_chunks), and why a class could not be run
    (class -> the worker's error or an output that is not batch-major)."""
    outputs: dict[str, list[np.ndarray]] = {}
    failed: dict[str, str] = {}
    for cls in made:
        try:
            outputs[cls.name] = run_chunks(worker, model_id, cls.inputs, batch)
        except ValueError as exc:
            failed[cls.name] = str(exc)
        except WorkerError as exc:
            failed[cls.name] = exc.describe()
            if exc.kind != "error":  # the worker is gone or hung: no other class will run
                break
    return outputs, failed


def reached(
    names: Sequence[str], dependencies: tuple[tuple[str, ...], ...] | None, varied_name: str
) -> tuple[str, ...]:
    """The outputs a NaN in the varied input must reach: those the graph computes from it (all
    where the file does not say). Only float values are judged (auditor.policy.alone)."""
    return tuple(
        str(name)
        for i, name in enumerate(names)
        if dependencies is None or i >= len(dependencies) or varied_name in dependencies[i]
    )
