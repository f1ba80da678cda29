"""Divergence localization: which layer goes wrong first?

When a probe variant drifts, the outputs say *that* the stacks disagree, not *where*. The
probe is built again on the train stack with every layer's output exposed as an extra
output (a probe opts in with ``layer_names(params)`` and ``build_cell(params, weights,
expose_layers=True)``), exported, loaded on the infer stack, and run on the same inputs;
the layers are compared in order with the probe's own tolerance, then the regular outputs
(what follows the last exposed layer). The first one out of tolerance is named.

Errors earlier in a network propagate, so the first divergent layer is where to look: a
changed weight, a kernel that computes differently, a fused op the exporter rewrote.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from auditor.compare.outputs import Tolerance, compare_output


@dataclass(frozen=True)
class LayerDivergence:
    layer: str
    passed: bool
    max_abs: float
    max_rel: float
    failing: int
    total: int
    output: bool = False
    """True for a regular output of the probe (it follows the last exposed layer)."""


@dataclass(frozen=True)
class Localization:
    """Where a drifting probe variant first diverges. ``layer`` is None when no layer or output
    is out of tolerance on the rerun (the drift did not reproduce) or the rerun failed (``error``)."""

    layer: str | None
    message: str
    layers: tuple[LayerDivergence, ...] = ()
    error: str | None = None


def layer_names(module: str, params: dict[str, Any]) -> list[str] | None:
    """The probe's exposed layers, or None when it does not support localization."""
    mod = importlib.import_module(module)
    fn = getattr(mod, "layer_names", None)
    return [str(n) for n in fn(params)] if callable(fn) else None


def locate(
    layers: Sequence[str],
    outputs: Sequence[str],
    train: Sequence[np.ndarray],
    infer: Sequence[np.ndarray],
    tolerance_for: Callable[[str], Tolerance],
) -> Localization:
    """Compare the rerun's outputs (regular outputs first, then one per layer, as the worker
    returns them) layer by layer; name the first out of tolerance."""
    expected = len(outputs) + len(layers)
    if len(train) != expected or len(infer) != expected:
        return Localization(
            None,
            f"localization rerun gave {len(train)} train / {len(infer)} infer outputs, "
            f"expected {expected} ({len(outputs)} outputs + {len(layers)} layers)",
            error="output count mismatch",
        )
    order = [(name, len(outputs) + i, False) for i, name in enumerate(layers)]
    order += [(name, i, True) for i, name in enumerate(outputs)]
    rows = []
    for name, index, is_output in order:
        c = compare_output(name, train[index], infer[index], tolerance_for(name))
        rows.append(
            LayerDivergence(
                name,
                c.passed,
                c.metrics["max_abs"],
                c.metrics["max_rel"],
                c.failing,
                c.total,
                is_output,
            )
        )
    first = next((r for r in rows if not r.passed), None)
    if first is None:
        return Localization(
            None, "on the rerun with layers exposed, every layer and output is within tolerance", tuple(rows)
        )
    where = (
        f"output {first.layer} (after the last exposed layer {layers[-1]})"
        if first.output and layers
        else f"layer {first.layer}"
    )
    before = [r.layer for r in rows[: rows.index(first)]]
    agreed = f"; {', '.join(before)} within tolerance" if before else ""
    return Localization(
        first.layer,
        f"first divergent: {where}, {first.failing}/{first.total} elements out of tolerance "
        f"(max abs {first.max_abs:.3g}, max rel {first.max_rel:.3g}){agreed}",
        tuple(rows),
    )


def localize(
    *,
    train_worker: Any,
    infer_worker: Any,
    module: str,
    params: dict[str, Any],
    weights: dict[str, np.ndarray],
    inputs: list[np.ndarray],
    outputs: Sequence[str],
    model: str,
    stage: Callable[[bytes], Path],
    suffix: str = ".mindir",
    tolerance_for: Callable[[str], Tolerance],
    error_types: tuple[type[BaseException], ...] = (),
) -> Localization | None:
    """Build with layers exposed on the train worker, export (in the format ``suffix`` names:
    the infer runtime's), ``stage`` the file for the infer side (the same staging the cycle's
    exports go through), load it on the infer worker, run both and locate. None when the
    probe does not support localization."""
    layers = layer_names(module, params)
    if not layers:
        return None
    try:
        train_worker.request(
            "build",
            model=model,
            probe={"module": module, "params": params, "expose_layers": True},
            weights=weights,
        )
        train_out = train_worker.request("run", model=model, inputs=inputs).result["outputs"]
        path = Path(train_worker.workdir) / f"layers{suffix}"
        data = train_worker.request("export", model=model, inputs=inputs, path=str(path)).result["artifact"]
        infer_worker.request("load", model=model, path=str(stage(data)))
        infer_out = infer_worker.request("run", model=model, inputs=inputs).result["outputs"]
    except error_types as exc:
        describe = getattr(exc, "describe", None)
        text = describe() if callable(describe) else str(exc)
        return Localization(None, f"localization rerun failed: {text}", error=text)
    return locate(layers, outputs, train_out, infer_out, tolerance_for)


def report_lines(loc: Localization | None) -> list[str]:
    return [f"    localization: {loc.message}"] if loc is not None else []
