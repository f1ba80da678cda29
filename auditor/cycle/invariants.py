"""Checks of one stack's outputs on their own: what pair comparison cannot see.

When both stacks compute the same impossible value, or one side cannot run at all, comparing
train against infer says nothing. So a probe declares properties its outputs must have, and
each stack's outputs (of the probe's own inputs and of every input class, auditor.compare.input_classes)
are checked alone:

- **invariants** (``invariants(params)`` in the probe module, a list of
  ``{"output": O, "check": C, ...}``): ``finite``; ``positive`` (> 0, e.g. a standard
  deviation); ``within`` with ``low``/``high`` (a tanh/sigmoid head, a clipped or squashed
  action). Checked on the rows whose inputs are all finite; a violation is a finding naming
  the stack, the output, the input class, the offending row, its input and the value.
- **NaN/Inf hazards** (``NAN_PROPAGATES``: the outputs that depend on the varied input): a
  NaN or ±Inf in the varied input must not come out finite (element-wise for an output
  shaped like that input, else per row). When it does, a bad
  observation silently becomes a valid-looking action in production, even if both stacks
  agree, so it is a finding of its own. Its threshold, the share of such rows allowed to come
  out finite (default 0), is set per probe like a comparator's options:
  ``[probes.P.comparators.nan_hazard] max_share = 0.5`` (or ``enabled = false``), also per
  ``dtype.D`` and ``variant.V``; ``[probes.P.comparators.invariants] enabled = false`` turns
  the invariants off.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from auditor.results import Finding

CHECKS = ("finite", "positive", "within")
HAZARD = "nan_hazard"
INVARIANTS = "invariants"


@dataclass(frozen=True)
class Invariant:
    output: str
    check: str
    low: float | None = None
    high: float | None = None
    classes: tuple[str, ...] = ()
    """The input classes it holds for (empty: all); e.g. a log-probability is finite for
    ordinary inputs, not necessarily at fp16's edges, where the probe itself overflows."""

    def __post_init__(self) -> None:
        if self.check not in CHECKS:
            raise ValueError(
                f"invariant on {self.output}: unknown check {self.check!r} (known: {', '.join(CHECKS)})"
            )
        if self.check == "within" and (self.low is None or self.high is None or not self.low <= self.high):
            raise ValueError(
                f"invariant on {self.output}: 'within' needs low <= high, got {self.low}, {self.high}"
            )

    def describe(self) -> str:
        if self.check == "finite":
            return f"{self.output} must be finite"
        if self.check == "positive":
            return f"{self.output} must be > 0"
        return f"{self.output} must be within [{_num(self.low)}, {_num(self.high)}]"

    def broken(self, values: np.ndarray) -> np.ndarray:
        """Element-wise: where the invariant does not hold (NaN never holds)."""
        v = np.asarray(values, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            if self.check == "finite":
                return ~np.isfinite(v)
            if self.check == "positive":
                return ~(v > 0)
            return ~((v >= self.low) & (v <= self.high))


@dataclass(frozen=True)
class SideRun:
    """One stack's outputs for one input class's batch."""

    input_class: str
    inputs: list[np.ndarray]
    outputs: list[np.ndarray]


def _num(x: Any) -> str:
    return f"{float(x):.7g}" if isinstance(x, (int, float, np.floating, np.integer)) else str(x)


def declared(spec: Any, params: dict[str, Any]) -> tuple[list[Invariant], tuple[str, ...]]:
    """(the probe variant's invariants, the outputs a non-finite varied input must reach)."""
    module = importlib.import_module(spec.module)
    fn = getattr(module, "invariants", None)
    items = list(fn(params)) if fn is not None else []
    out = []
    for item in items:
        unknown = set(item) - {"output", "check", "low", "high", "classes"}
        if unknown or item.get("output") not in spec.outputs:
            raise ValueError(
                f"probe {spec.name}: invariant {item!r} must name one of its outputs "
                f"({', '.join(spec.outputs)}) and only output/check/low/high/classes"
            )
        out.append(
            Invariant(
                str(item["output"]),
                str(item["check"]),
                item.get("low"),
                item.get("high"),
                tuple(item.get("classes") or ()),
            )
        )
    propagates = tuple(getattr(module, "NAN_PROPAGATES", ()))
    bad = [o for o in propagates if o not in spec.outputs]
    if bad:
        raise ValueError(f"probe {spec.name}: NAN_PROPAGATES names unknown output(s) {', '.join(bad)}")
    return out, propagates


def _rows(values: np.ndarray, batch: int) -> np.ndarray | None:
    """``values`` as (batch, -1) when its first dimension is the batch, else None."""
    v = np.asarray(values)
    if v.ndim == 0 or v.shape[0] != batch:
        return None
    return v.reshape(batch, -1)


def _finite_rows(inputs: Sequence[np.ndarray], batch: int) -> np.ndarray:
    ok = np.ones(batch, dtype=bool)
    for x in inputs:
        r = _rows(x, batch)
        if r is not None and r.dtype.kind == "f":
            ok &= np.isfinite(r.astype(np.float64)).all(axis=1)
    return ok


def _input_row(inputs: Sequence[np.ndarray], names: Sequence[str], row: int, batch: int) -> dict[str, list]:
    shown = {}
    for name, x in zip(names, inputs, strict=False):
        r = _rows(x, batch)
        if r is not None:
            shown[name] = [_json_float(v) for v in r[row][:8].astype(np.float64)]
    return shown


def _json_float(v: float) -> float | str:
    v = float(v)
    return v if math.isfinite(v) else ("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf"))


def check_invariants(
    stack: str,
    probe: str,
    variant: str,
    invariants: Iterable[Invariant],
    output_names: Sequence[str],
    input_names: Sequence[str],
    runs: Sequence[SideRun],
) -> list[Finding]:
    """One finding per broken invariant of this stack's outputs, naming the first offender
    and how many elements broke it in each input class."""
    found = []
    for inv in invariants:
        if inv.output not in output_names:
            continue
        at = list(output_names).index(inv.output)
        first: dict[str, Any] | None = None
        counts: dict[str, int] = {}
        total = 0
        for run in runs:
            if at >= len(run.outputs) or (inv.classes and run.input_class not in inv.classes):
                continue
            values = np.asarray(run.outputs[at])
            batch = int(np.asarray(run.inputs[0]).shape[0]) if run.inputs and np.ndim(run.inputs[0]) else 0
            rows = _rows(values, batch) if batch else None
            if rows is not None:
                mask = inv.broken(rows) & _finite_rows(run.inputs, batch)[:, None]
            else:
                mask = inv.broken(values.reshape(-1))
            n = int(np.count_nonzero(mask))
            total += int(mask.size)
            if not n:
                continue
            counts[run.input_class] = n
            if first is None:
                where = np.argwhere(mask)[0]
                row = int(where[0])
                value = float((rows if rows is not None else values.reshape(-1))[tuple(where)])
                first = {
                    "input_class": run.input_class,
                    "index": row,
                    "element": int(where[1]) if rows is not None else None,
                    "value": _json_float(value),
                    "input": _input_row(run.inputs, input_names, row, batch) if rows is not None else {},
                }
        if first is None:
            continue
        broken = sum(counts.values())
        classes = ", ".join(f"{c}: {n}" for c, n in counts.items())
        found.append(
            Finding(
                "invariant",
                "error",
                stack,
                f"{stack}/{probe}/{variant}/invariant/{inv.output}/{inv.check}",
                f"{stack} computed {inv.output} = {_num(first['value'])} for input {first['index']} of the "
                f"{first['input_class']} inputs of {probe} [{variant}]: {inv.describe()} "
                f"({broken} element{'s' if broken > 1 else ''} broke it; by input class: {classes})",
                {
                    "stack": stack,
                    "probe": probe,
                    "variant": variant,
                    "output": inv.output,
                    "check": inv.check,
                    "low": inv.low,
                    "high": inv.high,
                    **first,
                    "count": broken,
                    "total": total,
                    "by_class": counts,
                    "action": f"a property of {stack}'s runtime, whatever the other side computes: "
                    "report it to the runtime's maintainers, or avoid the operator/dtype in production",
                },
            )
        )
    return found


def check_hazards(
    stack: str,
    probe: str,
    variant: str,
    propagates: Sequence[str],
    output_names: Sequence[str],
    input_names: Sequence[str],
    varied: int,
    runs: Sequence[SideRun],
    max_share: float = 0.0,
) -> Finding | None:
    """A finding when more than ``max_share`` of the NaN/Inf values of the varied input come
    out finite in an output that depends on them. An output shaped like the varied input is
    element-wise (a normalizer, a sampler's mean); any other output depends on the whole row
    (a policy's mean depends on every feature of its observation)."""
    hazard = masked = 0
    first: dict[str, Any] | None = None
    by_output: dict[str, int] = {}
    kinds: dict[str, tuple[int, int]] = {}
    for run in runs:
        if varied >= len(run.inputs):
            continue
        x = np.asarray(run.inputs[varied])
        if x.dtype.kind != "f" or x.ndim == 0:
            continue
        x64 = x.astype(np.float64)
        bad = ~np.isfinite(x64)
        if not bad.any():
            continue
        batch = x.shape[0]
        bad_rows = bad.reshape(batch, -1).any(axis=1)
        nan, nan_rows = np.isnan(x64), np.isnan(x64).reshape(batch, -1).any(axis=1)
        for name in propagates:
            at = list(output_names).index(name) if name in output_names else len(run.outputs)
            if at >= len(run.outputs):
                continue
            y = np.asarray(run.outputs[at]).astype(np.float64)
            if y.shape == x.shape:
                where, finite, is_nan = bad, bad & np.isfinite(y), nan
            else:
                rows = _rows(y, batch)
                if rows is None:
                    continue
                where, finite, is_nan = bad_rows, bad_rows & np.isfinite(rows).any(axis=1), nan_rows
            hazard += int(np.count_nonzero(where))
            n = int(np.count_nonzero(finite))
            for kind, mask in (("NaN", is_nan), ("Inf", ~is_nan)):
                seen, fin = kinds.get(kind, (0, 0))
                kinds[kind] = (
                    seen + int(np.count_nonzero(where & mask)),
                    fin + int(np.count_nonzero(finite & mask)),
                )
            masked += n
            if not n:
                continue
            by_output[name] = by_output.get(name, 0) + n
            if first is None:
                pos = tuple(np.argwhere(finite)[0])
                row = int(pos[0])
                shown = y[pos] if y.shape == x.shape else _rows(y, batch)[row][:8]
                first = {
                    "input_class": run.input_class,
                    "index": row,
                    "output": name,
                    "value": _json_float(shown) if np.ndim(shown) == 0 else [_json_float(v) for v in shown],
                    "input": _input_row(run.inputs, [input_names[0]] if input_names else [], row, batch)
                    if varied == 0
                    else {},
                }
    if not hazard or first is None:
        return None
    share = masked / hazard
    if share <= max_share:
        return None
    outs = ", ".join(f"{o}: {n}" for o, n in by_output.items())
    name = input_names[0] if input_names else "input"
    return Finding(
        "nan-hazard",
        "warning",
        stack,
        f"{stack}/{probe}/{variant}/nan-hazard",
        f"{stack} maps NaN/Inf inputs of {probe} [{variant}] to finite outputs: {masked} of {hazard} "
        f"values that depend on a non-finite {name} came out finite ("
        + ", ".join(f"{k}: {f} of {n}" for k, (n, f) in kinds.items() if n)
        + f"; by output: {outs}; share {share:.3g}, allowed {max_share:g}); e.g. input {first['index']} "
        f"of the {first['input_class']} inputs gave {first['output']} = {first['value']}",
        {
            "stack": stack,
            "probe": probe,
            "variant": variant,
            **first,
            "hazards": hazard,
            "finite": masked,
            "share": share,
            "max_share": max_share,
            "by_output": by_output,
            "by_kind": {k: {"values": n, "finite": f} for k, (n, f) in kinds.items()},
            "action": "a bad observation would become a valid-looking action in production: check inputs "
            "for NaN/Inf before the model, or relax [probes.P.comparators.nan_hazard] max_share if this "
            "masking is intended",
        },
    )
