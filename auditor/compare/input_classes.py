"""Seeded inputs that reach the regions where runtimes misbehave, beyond a probe's own inputs.

Random observations rarely push a nonlinearity into saturation or a value to the edge of
fp16, so a runtime that is wrong only there passes. Every probe variant is therefore also
run, on both stacks, on one batch per *input class*:

- ``sweep``: the varied input swept densely, in fine steps, from well below to well above the
  saturation points (a probe can aim the sweep at its own pre-activations, see below);
- ``magnitude``: large (10 to 1e6) and tiny (1e-3 to 1e-30) magnitudes of both signs, kept
  inside the dtype's range;
- ``fp16-edge``: the edges of fp16: ±65504, 65000, the smallest normal (6.1e-5) and
  subnormal (6e-8) numbers, and zero;
- ``nan-inf``: the probe's own inputs with one NaN, +Inf or -Inf per row.

The class is recorded with every result it produced (pair checks ``output@class``, findings'
``input_class``), so a failure says which class of input found it. The probe's own inputs are
the class ``random``.

A probe module may declare ``INPUT_CLASSES`` (the classes to run; ``()``: none),
``CLASS_INPUT`` (the name of the input to vary; default its first input) and
``class_inputs(name, params, inputs)``, returning the inputs of class ``name`` (or None for
the generic batch), e.g. to sweep the pre-activations of its own first layer.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import numpy as np

RANDOM = "random"
CLASSES = ("sweep", "magnitude", "fp16-edge", "nan-inf")
SWEEP = 12.0  # tanh is saturated (to fp32) beyond ~9, sigmoid/softplus transition within ±12
LARGE = (1e1, 1e2, 1e3, 1e4, 1e6)
TINY = (1e-3, 1e-6, 1e-12, 1e-30)
FP16_EDGES = (
    65504.0,
    -65504.0,
    65000.0,
    -65000.0,
    6.103515625e-05,
    -6.103515625e-05,
    5.960464477539063e-08,
    0.0,
)


@dataclass(frozen=True)
class ClassBatch:
    """One input class's batch, and which rows carry a non-finite value in the varied input."""

    name: str
    inputs: list[np.ndarray]
    hazard_rows: np.ndarray


def _module(spec: Any) -> Any:
    return importlib.import_module(spec.module)


def varied_index(spec: Any) -> int:
    name = getattr(_module(spec), "CLASS_INPUT", None)
    return list(spec.inputs).index(name) if name in spec.inputs else 0


def hazard_rows(inputs: list[np.ndarray], index: int) -> np.ndarray:
    """Rows whose varied input holds NaN or ±Inf (all False for a non-float input)."""
    x = np.asarray(inputs[index])
    if x.ndim == 0 or x.dtype.kind != "f":
        return np.zeros(max(1, x.shape[0] if x.ndim else 1), dtype=bool)
    return ~np.isfinite(x.reshape(x.shape[0], -1)).all(axis=1)


def _fit(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Values the dtype can hold (no overflow to inf, no underflow of the tiny ones to 0)."""
    info = np.finfo(dtype)
    keep = (np.abs(values) <= float(info.max)) & (
        (values == 0) | (np.abs(values) >= float(info.smallest_subnormal))
    )
    return values[keep]


def generic(name: str, template: np.ndarray, seed: int) -> np.ndarray | None:
    """The generic batch of class ``name`` shaped like ``template`` (None: not a float input)."""
    if template.dtype.kind != "f" or template.ndim == 0 or template.shape[0] == 0:
        return None
    rng = np.random.RandomState(seed)
    rows, shape = template.shape[0], template.shape
    flat = template.reshape(rows, -1).astype(np.float64)
    signs = np.where(rng.uniform(size=flat.shape) < 0.5, -1.0, 1.0)
    if name == "sweep":
        out = np.repeat(np.linspace(-SWEEP, SWEEP, rows)[:, None], flat.shape[1], axis=1)
    elif name in ("magnitude", "fp16-edge"):
        pool = np.asarray(LARGE + TINY) if name == "magnitude" else np.asarray(FP16_EDGES)
        pool = _fit(pool, template.dtype)
        out = pool[np.arange(flat.size) % pool.size].reshape(flat.shape) * (
            signs if name == "magnitude" else 1.0
        )
    elif name == "nan-inf":
        out = flat.copy()
        specials = np.asarray([np.nan, np.inf, -np.inf])
        out[np.arange(rows), np.arange(rows) % flat.shape[1]] = specials[np.arange(rows) % 3]
    else:
        raise ValueError(f"unknown input class {name!r} (known: {', '.join(CLASSES)})")
    with np.errstate(over="ignore", invalid="ignore"):
        return out.reshape(shape).astype(template.dtype)


def class_names(spec: Any) -> tuple[str, ...]:
    declared = getattr(_module(spec), "INPUT_CLASSES", None)
    names = CLASSES if declared is None else tuple(declared)
    unknown = [n for n in names if n not in CLASSES]
    if unknown:
        raise ValueError(
            f"probe {spec.name}: INPUT_CLASSES names unknown class(es) {', '.join(unknown)} "
            f"(known: {', '.join(CLASSES)})"
        )
    return names


def class_batches(spec: Any, params: dict[str, Any]) -> list[ClassBatch]:
    """The probe variant's batch of every input class it runs, in CLASSES order."""
    template = spec.make_inputs(params)
    index = varied_index(spec)
    hook = getattr(_module(spec), "class_inputs", None)
    seed = int(params.get("seed", 0)) + 17
    out = []
    for i, name in enumerate(class_names(spec)):
        inputs = hook(name, params, [np.array(x) for x in template]) if hook is not None else None
        if inputs is None:
            varied = generic(name, np.asarray(template[index]), seed + i)
            if varied is None:
                continue
            inputs = list(template)
            inputs[index] = varied
        inputs = [np.ascontiguousarray(x) for x in inputs]
        out.append(ClassBatch(name, inputs, hazard_rows(inputs, index)))
    return out
