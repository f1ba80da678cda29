"""Checks of one stack's outputs on their own: what pair comparison cannot see.

When both stacks compute the same impossible value, or one side cannot run at all, comparing
train against infer says nothing. So a probe declares properties its outputs (and its exposed
hidden layers) must have, and each stack's outputs, of the probe's own inputs and of every
input class (auditor.compare.input_classes), are checked alone:

- **invariants** (``invariants(params)`` in the probe module, a list of
  ``{"output": O, "check": C, ...}``; O is an output or a layer of ``layer_names(params)``):
  ``finite``; ``positive`` (> 0: a standard deviation, an exp, a softplus); ``within`` with
  ``low``/``high`` (tanh in [-1, 1], sigmoid in [0, 1], a clip); ``softmax`` (non-negative,
  summing to 1 over the last axis, within a few ULPs of the dtype per element). An element
  that breaks several checks of one output counts for the first declared. Where the probe
  has a float64 reference (below) of the output, the mathematics decides: an element breaks
  the invariant where the reference, rounded to the output's dtype, does not (an exp that
  underflows to 0 is no finding; a std that must be > 0 whatever the observation is held to
  it on every row). Without one, the rows whose inputs are all finite are checked.
- **NaN/Inf hazards**: on the rows whose varied input holds NaN or ±Inf, each output of
  ``NAN_PROPAGATES`` (and each exposed layer the reference computes) is held to the
  mathematics: the reference's pattern of finite and non-finite values, element-wise for an
  output shaped like that input, else per row. A NaN that comes out finite is always a
  finding (the information is lost, whatever the reference says), and so is a NaN the
  mathematics makes of ±Inf (Inf - Inf); ±Inf that comes out finite is one only where the
  reference keeps it infinite (tanh(±Inf) = ±1 is arithmetic, not masking); NaN/Inf where
  the reference is finite is one too. Without a reference, any finite
  value out of a non-finite input is a hazard. The share of such values allowed (default 0)
  is set per probe like a comparator's options: ``[probes.P.comparators.nan_hazard]
  max_share = 0.5`` (or ``enabled = false``), also per ``dtype.D`` and ``variant.V``;
  ``[probes.P.comparators.invariants] enabled = false`` turns the invariants off.

The **reference** is ``reference(params, weights, inputs)`` in the probe module: the probe's
forward pass in float64 numpy from the same seeded weights, as a dict of output and layer
name to array (names it leaves out are judged without it).

A **model probe** (``[models.NAME]``, a user's MindIR) declares nothing, but its graph does:
each output the network returns straight from a bounded operator (``from_graph``: a tanh head
in [-1, 1], a sigmoid in [0, 1], a softmax, an exp or softplus >= 0, a ReLU/ReLU6), through
nodes that only recast or reshape it, gets that operator's range checked on every side that
ran it. Without a float64 reference, the checked rows are those whose inputs are finite, and
exp and softplus are held to >= 0 rather than > 0 (they underflow to 0 in any float format).

**One finding per cause.** ``computed_from(params)`` (output or layer -> the outputs and
layers it is computed from) lets a breakage be traced to where it starts: in a row where
something it is computed from is already broken, it is that one's consequence, not a finding
of its own (a zero std makes the log-probability -inf; a NaN masked in the first layer makes
every later output finite). Each finding carries its cause (probe, output, check) and its
place (stack, variant), so the cycle reports it once for every stack and variant it holds
on (auditor.cycle.causes).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from auditor.results import Finding

CHECKS = ("finite", "positive", "within", "softmax")
HAZARD = "nan_hazard"
INVARIANTS = "invariants"
NAN_MASKED, INF_MASKED, NON_FINITE = "nan-masked", "inf-masked", "non-finite"
INF_FINITE = "inf-finite"
"""±Inf in, finite out, with no reference to say whether the mathematics agrees."""
HAZARD_KINDS = (NAN_MASKED, INF_MASKED, NON_FINITE, INF_FINITE)
SOFTMAX_ULPS = 4
"""A softmax row may miss 1 by this many ULPs of its dtype per element."""


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
        if self.check == "softmax":
            return f"{self.output} must be non-negative and sum to 1"
        return f"{self.output} must be within [{_num(self.low)}, {_num(self.high)}]"

    def breach(self) -> str:
        """What breaking it means, in words ("leaves [-1, 1]")."""
        if self.check == "finite":
            return "is not finite"
        if self.check == "positive":
            return "is not > 0"
        if self.check == "softmax":
            return "is not a distribution (negative, or not summing to 1)"
        return f"leaves [{_num(self.low)}, {_num(self.high)}]"

    def broken(self, values: np.ndarray) -> np.ndarray:
        """Element-wise: where the invariant does not hold (NaN never holds). A softmax row
        that does not sum to 1 breaks in every element."""
        raw = np.asarray(values)
        v = raw if raw.dtype == np.float64 else raw.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            if self.check == "finite":
                return ~np.isfinite(v)
            if self.check == "positive":
                return ~(v > 0)
            if self.check == "softmax":
                if v.ndim == 0:
                    return ~(v == 1)
                eps = float(np.finfo(raw.dtype).eps) if raw.dtype.kind == "f" else 0.0
                off = np.abs(v.sum(axis=-1, keepdims=True) - 1.0) > SOFTMAX_ULPS * v.shape[-1] * eps
                return ~(v >= 0) | np.broadcast_to(off, v.shape)
            return ~((v >= self.low) & (v <= self.high))


@dataclass(frozen=True)
class Declared:
    """What a probe variant declares about each side's outputs on their own."""

    invariants: tuple[Invariant, ...] = ()
    propagates: tuple[str, ...] = ()
    """The outputs a non-finite varied input must reach (``NAN_PROPAGATES``)."""
    layers: tuple[str, ...] = ()
    """The probe's exposed layers (``layer_names``), appended after its outputs when run."""
    computed_from: dict[str, tuple[str, ...]] = field(default_factory=dict)
    reference: Callable[[dict[str, Any], dict[str, np.ndarray], list[np.ndarray]], Any] | None = None

    @property
    def checks_layers(self) -> bool:
        """Whether each side must run the probe with its layers exposed: an invariant names a
        layer, or the reference judges the layers' NaN/Inf."""
        names = set(self.layers)
        return bool(names) and (any(i.output in names for i in self.invariants) or self.reference is not None)


GRAPH_RANGES: dict[str, tuple[str, float | None, float | None]] = {
    "Tanh": ("within", -1.0, 1.0),
    "Sigmoid": ("within", 0.0, 1.0),
    "Softmax": ("softmax", None, None),
    "Exp": ("within", 0.0, math.inf),
    "Softplus": ("within", 0.0, math.inf),
    "ReLU": ("within", 0.0, math.inf),
    "ReLU6": ("within", 0.0, 6.0),
}
"""The operators whose outputs have a range whatever their inputs (MindIR operator names)."""
_KEEP_ROWS = frozenset({"Cast", "Identity"})
"""Nodes after a softmax that keep its rows (a reshape or transpose may not)."""


def from_graph(sources: Sequence[Sequence[str]], names: Sequence[str]) -> Declared:
    """The invariants a model's graph implies: per output (``names``, in the order of
    ``sources``, auditor.worker.mindir.MindIRInfo.output_sources), the range of the bounded
    operator that produces it, seen through nodes that only recast or reshape it."""
    found = []
    for name, chain in zip(names, sources, strict=False):
        if not chain or chain[-1] not in GRAPH_RANGES:
            continue
        check, low, high = GRAPH_RANGES[chain[-1]]
        if check == "softmax" and any(op not in _KEEP_ROWS for op in chain[:-1]):
            continue
        found.append(Invariant(str(name), check, low, high))
    return Declared(tuple(found))


@dataclass(frozen=True)
class SideRun:
    """One stack's outputs (then its exposed layers, if run) for one input class's batch, and
    the float64 reference of the same inputs (None: the probe has none)."""

    input_class: str
    inputs: list[np.ndarray]
    outputs: list[np.ndarray]
    reference: dict[str, np.ndarray] | None = None
    first_row: int = 0
    """The batch's rows from this one on (a class judged in two runs: the rows whose hidden
    nodes came back, and the rest): a finding names the row in the whole batch."""


def _num(x: Any) -> str:
    return f"{float(x):.7g}" if isinstance(x, (int, float, np.floating, np.integer)) else str(x)


def _breaking(x: Any, inv: Invariant) -> str:
    """A value that broke ``inv``, told apart from its bounds: 1.0000001192092896 is not "1"
    where the bound is 1 (seven digits unless they read as a bound, then every digit)."""
    text = _num(x)
    bounds = {_num(b) for b in (inv.low, inv.high) if b is not None}
    if text in bounds and isinstance(x, (int, float, np.floating, np.integer)):
        return repr(float(x))
    return text


def declared(spec: Any, params: dict[str, Any]) -> Declared:
    """The probe variant's declarations (a probe that contradicts itself raises ValueError)."""
    module = importlib.import_module(spec.module)
    layers_fn = getattr(module, "layer_names", None)
    layers = tuple(str(n) for n in layers_fn(params)) if callable(layers_fn) else ()
    known = tuple(spec.outputs) + layers
    fn = getattr(module, "invariants", None)
    out = []
    for item in list(fn(params)) if fn is not None else []:
        unknown = set(item) - {"output", "check", "low", "high", "classes"}
        if unknown or item.get("output") not in known:
            raise ValueError(
                f"probe {spec.name}: invariant {item!r} must name one of its outputs or layers "
                f"({', '.join(known)}) and only output/check/low/high/classes"
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
    graph_fn = getattr(module, "computed_from", None)
    graph = {str(k): tuple(str(d) for d in v) for k, v in dict(graph_fn(params) if graph_fn else {}).items()}
    strange = sorted({n for k, v in graph.items() for n in (k, *v)} - set(known))
    if strange:
        raise ValueError(f"probe {spec.name}: computed_from names unknown output(s) {', '.join(strange)}")
    reference = getattr(module, "reference", None)
    return Declared(tuple(out), propagates, layers, graph, reference if callable(reference) else None)


def reference_outputs(
    declared: Declared, params: dict[str, Any], weights: dict[str, np.ndarray], inputs: list[np.ndarray]
) -> dict[str, np.ndarray] | None:
    """The probe's float64 reference of ``inputs`` (None without one)."""
    if declared.reference is None:
        return None
    with np.errstate(all="ignore"):
        found = declared.reference(params, weights, [np.asarray(x) for x in inputs])
    return {str(k): np.asarray(v, dtype=np.float64) for k, v in dict(found or {}).items()}


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


@dataclass
class _Tally:
    """One kind of breakage of one output on one side, over every input class."""

    by_class: dict[str, int] = field(default_factory=dict)
    first: dict[str, Any] | None = None
    values: set[float] = field(default_factory=set)
    low: float = math.inf
    high: float = -math.inf

    @property
    def count(self) -> int:
        return sum(self.by_class.values())


@dataclass
class _Side:
    """What one side's runs showed, before it is put in findings."""

    tallies: dict[tuple[str, str], _Tally] = field(default_factory=dict)
    hazards: int = 0
    """Values that depend on a non-finite input (the denominator of the hazard share)."""
    totals: dict[str, int] = field(default_factory=dict)


class SideJudge:
    """One stack's outputs of one policy judged run by run (``add``, a class at a time: its
    float64 reference need not outlive it), then said as findings."""

    def __init__(
        self,
        declared: Declared,
        names: Sequence[str],
        input_names: Sequence[str],
        varied: int,
        max_share: float = 0.0,
        invariants: bool = True,
        hazards: bool = True,
        infinities: bool = True,
    ):
        self.declared, self.names, self.input_names, self.varied = declared, names, input_names, varied
        self.max_share, self.invariants, self.hazards, self.infinities = (
            max_share,
            invariants,
            hazards,
            infinities,
        )
        self.side = _Side()

    def add(self, run: SideRun) -> None:
        _check_run(
            self.side,
            self.declared,
            self.names,
            self.input_names,
            self.varied,
            run,
            self.invariants,
            self.hazards,
            self.infinities,
        )

    def findings(self, stack: str, probe: str, variant: str) -> list[Finding]:
        """A broken invariant per output and check, a NaN/Inf hazard per output and kind, each
        its cause's first place."""
        side, declared = self.side, self.declared
        found: list[Finding] = []
        by_check: dict[tuple[str, str], Invariant] = {}
        for i in declared.invariants:
            by_check.setdefault((i.output, i.check), i)
        reported = sum(t.count for (_, kind), t in side.tallies.items() if kind in HAZARD_KINDS)
        share = reported / side.hazards if side.hazards else 0.0
        for (name, kind), tally in side.tallies.items():
            if tally.first is None:
                continue
            if kind in HAZARD_KINDS:
                if share > self.max_share:
                    found.append(
                        _hazard_finding(
                            stack, probe, variant, declared, name, kind, tally, side, share, self.max_share
                        )
                    )
                continue
            found.append(
                _invariant_finding(stack, probe, variant, declared, by_check[(name, kind)], tally, side)
            )
        return found


def check_side(
    stack: str,
    probe: str,
    variant: str,
    declared: Declared,
    names: Sequence[str],
    input_names: Sequence[str],
    varied: int,
    runs: Sequence[SideRun],
    max_share: float = 0.0,
    invariants: bool = True,
    hazards: bool = True,
    infinities: bool = True,
) -> list[Finding]:
    """The findings of one stack's outputs of one probe variant: a broken invariant per
    output and check, a NaN/Inf hazard per output and kind, each its cause's first place.
    ``infinities`` False: without a float64 reference, ±Inf turned finite is not judged (a model
    probe: tanh(Inf) = 1 is arithmetic, and nothing evaluates the user's graph in float64);
    a NaN turned finite always is."""
    judge = SideJudge(declared, names, input_names, varied, max_share, invariants, hazards, infinities)
    for run in runs:
        judge.add(run)
    return judge.findings(stack, probe, variant)


def _check_run(
    side: _Side,
    declared: Declared,
    names: Sequence[str],
    input_names: Sequence[str],
    varied: int,
    run: SideRun,
    check_invariants: bool,
    check_hazards: bool,
    infinities: bool = True,
) -> None:
    x = np.asarray(run.inputs[varied]) if varied < len(run.inputs) else np.zeros(0)
    batch = int(np.asarray(run.inputs[0]).shape[0]) if run.inputs and np.ndim(run.inputs[0]) else 0
    if x.ndim and x.shape[0] == batch:
        batch = int(x.shape[0])
    finite_rows = _finite_rows(run.inputs, batch) if batch else np.ones(0, bool)
    floats = x.dtype.kind == "f" and x.ndim > 0 and batch > 0
    x64 = x.astype(np.float64) if floats else None
    reference = run.reference or {}
    masks: dict[str, dict[str, np.ndarray]] = {}
    rows_of: dict[str, np.ndarray] = {}
    values_of: dict[str, np.ndarray] = {}
    for at, name in enumerate(names):
        if at >= len(run.outputs):
            break
        y = np.asarray(run.outputs[at])
        rows = _rows(y, batch) if batch else None
        grid = rows if rows is not None else y.reshape(1, -1)
        values_of[name] = grid
        ref = _reference_grid(reference.get(name), y, grid.shape, name)
        side.totals[name] = side.totals.get(name, 0) + int(grid.size)
        kinds: dict[str, np.ndarray] = {}
        if check_invariants:
            taken = np.zeros(grid.shape, dtype=bool)
            for inv in declared.invariants:
                if inv.output != name or (inv.classes and run.input_class not in inv.classes):
                    continue
                mask = inv.broken(grid) & ~taken
                if ref is not None:  # the mathematics decides, on every row
                    mask &= ~inv.broken(ref)
                elif rows is not None:  # without it: the rows of finite inputs only
                    mask &= finite_rows[:, None]
                taken |= mask
                kinds[inv.check] = kinds[inv.check] | mask if inv.check in kinds else mask
        judged = name in declared.propagates or (name in declared.layers and ref is not None)
        if check_hazards and floats and judged and rows is not None:
            kinds.update(_hazards(side, x64, rows, ref, infinities))
        masks[name] = kinds
        rows_of[name] = (
            np.any([m.any(axis=1) for m in kinds.values()], axis=0)
            if kinds and rows is not None
            else np.full(max(batch, 1), any(m.any() for m in kinds.values()))
        )
    inherited = _inherited(declared.computed_from, rows_of, max(batch, 1))
    for name, kinds in masks.items():
        for kind, mask in kinds.items():
            own = mask & ~inherited[name][:, None] if mask.shape[0] == max(batch, 1) else mask
            if own.any():
                _tally(side, name, kind, own, values_of[name], run, input_names, batch, varied)


def _reference_grid(
    ref: np.ndarray | None, y: np.ndarray, shape: tuple[int, ...], name: str
) -> np.ndarray | None:
    """The reference of one output rounded to the runtime's dtype (what a correctly rounded
    runtime returns), shaped like its grid; a reference of another shape is the probe's bug."""
    if ref is None:
        return None
    if ref.shape != y.shape:
        raise ValueError(f"reference gives {name} the shape {ref.shape}, the runtime {y.shape}")
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = ref.astype(y.dtype) if y.dtype.kind == "f" else ref
    return rounded.astype(np.float64).reshape(shape)


def _hazards(
    side: _Side, x: np.ndarray, rows: np.ndarray, ref: np.ndarray | None, infinities: bool = True
) -> dict[str, np.ndarray]:
    """Where one output's finite/non-finite pattern on the non-finite inputs differs from the
    mathematics: element-wise for an output shaped like the varied input, else per row."""
    batch = x.shape[0]
    bad, nan = ~np.isfinite(x).reshape(batch, -1), np.isnan(x).reshape(batch, -1)
    if rows.shape != bad.shape:
        bad = np.broadcast_to(bad.any(axis=1)[:, None], rows.shape)
        nan = np.broadcast_to(nan.any(axis=1)[:, None], rows.shape)
    if not bad.any():
        return {}
    side.hazards += int(np.count_nonzero(bad))
    finite = np.isfinite(rows.astype(np.float64))
    if ref is None:
        if not infinities:
            return {NAN_MASKED: bad & nan & finite}
        return {NAN_MASKED: bad & nan & finite, INF_FINITE: bad & ~nan & finite}
    # A NaN is masked whether it came in or the mathematics made it (Inf - Inf).
    return {
        NAN_MASKED: bad & finite & (nan | np.isnan(ref)),
        INF_MASKED: bad & finite & ~nan & np.isinf(ref),
        NON_FINITE: bad & ~finite & np.isfinite(ref),
    }


def _inherited(
    graph: dict[str, tuple[str, ...]], rows_of: dict[str, np.ndarray], batch: int
) -> dict[str, np.ndarray]:
    """Per output: the rows where something it is computed from (directly or further up) is
    already broken."""
    memo: dict[str, np.ndarray] = {}

    def broken_at(name: str, seen: frozenset[str]) -> np.ndarray:
        """Rows where ``name`` or anything above it broke."""
        return rows_of.get(name, np.zeros(batch, bool)) | above(name, seen)

    def above(name: str, seen: frozenset[str]) -> np.ndarray:
        if name in memo:
            return memo[name]
        found = np.zeros(batch, dtype=bool)
        for source in graph.get(name, ()):
            if source not in seen:
                found |= broken_at(source, seen | {name})
        memo[name] = found
        return found

    return {name: above(name, frozenset()) for name in rows_of}


def _tally(
    side: _Side,
    name: str,
    kind: str,
    mask: np.ndarray,
    grid: np.ndarray,
    run: SideRun,
    input_names: Sequence[str],
    batch: int,
    varied: int,
) -> None:
    tally = side.tallies.setdefault((name, kind), _Tally())
    tally.by_class[run.input_class] = tally.by_class.get(run.input_class, 0) + int(np.count_nonzero(mask))
    hit = grid.astype(np.float64)[mask]
    if kind == NAN_MASKED:
        tally.values.update(float(v) for v in np.unique(hit)[:4])
        tally.low, tally.high = min(tally.low, float(hit.min())), max(tally.high, float(hit.max()))
    if tally.first is not None:
        return
    row, element = (int(i) for i in np.argwhere(mask)[0])
    per_row = grid.shape[0] == batch and batch > 0
    value = grid[row, element]
    names = list(input_names)
    if kind in HAZARD_KINDS:  # the varied input is the one that matters
        names = [input_names[varied] if varied < len(input_names) else "input"]
        inputs = [run.inputs[varied]] if varied < len(run.inputs) else []
    else:
        inputs = run.inputs
    tally.first = {
        "input_class": run.input_class,
        "index": row + run.first_row,
        "element": element if per_row else None,
        "value": _json_float(value),
        "input": _input_row(inputs, names, row, batch) if per_row else {},
    }


def _what(probe: str, name: str, declared: Declared) -> str:
    return f"{probe} (layer {name})" if name in declared.layers else f"{probe} ({name})"


def _by_class(tally: _Tally) -> str:
    return ", ".join(f"{c}: {n}" for c, n in tally.by_class.items())


def _invariant_finding(
    stack: str, probe: str, variant: str, declared: Declared, inv: Invariant, tally: _Tally, side: _Side
) -> Finding:
    first = tally.first or {}
    n = tally.count
    layer = "layer " if inv.output in declared.layers else ""
    value = _breaking(first["value"], inv)
    happened = (
        f"{stack} computed {layer}{inv.output} = {value} for input {first['index']} of the "
        f"{first['input_class']} inputs"
    )
    counts = f"{n} element{'s' if n > 1 else ''} broke it; by input class: {_by_class(tally)}"
    return Finding(
        "invariant",
        "error",
        stack,
        f"{stack}/{probe}/{variant}/invariant/{inv.output}/{inv.check}",
        f"{happened} of {probe} [{variant}]: {inv.describe()} ({counts})",
        {
            "stack": stack,
            "probe": probe,
            "variant": variant,
            "output": inv.output,
            "layer": bool(layer),
            "check": inv.check,
            "low": inv.low,
            "high": inv.high,
            **first,
            "count": n,
            "total": side.totals.get(inv.output, 0),
            "by_class": dict(tally.by_class),
            "action": "a property of the runtime, whatever the other side computes: report it to the "
            "runtime's maintainers, or avoid the operator/dtype in production",
        },
        cause=f"{probe}/invariant/{inv.output}/{inv.check}",
        summary=f"{probe}'s {layer}{inv.output} {inv.breach()}",
        place=(stack, variant),
        example=f"{happened} [{variant}] ({counts})",
    )


def _masked_to(tally: _Tally) -> str:
    if len(tally.values) <= 3 and tally.low in tally.values and tally.high in tally.values:
        return " or ".join(_num(v) for v in sorted(tally.values))
    return f"finite values in [{_num(tally.low)}, {_num(tally.high)}]"


def _hazard_finding(
    stack: str,
    probe: str,
    variant: str,
    declared: Declared,
    name: str,
    kind: str,
    tally: _Tally,
    side: _Side,
    share: float,
    max_share: float,
) -> Finding:
    first = tally.first or {}
    what = _what(probe, name, declared)
    if kind == NAN_MASKED:
        summary = f"NaN masked to {_masked_to(tally)} by {what}"
    elif kind == NON_FINITE:
        summary = f"NaN/Inf out of {what} where the float64 reference is finite"
    elif kind == INF_MASKED:
        summary = f"±Inf made finite by {what} where the float64 reference is not"
    else:
        summary = f"±Inf turned finite by {what} (no float64 reference to judge it)"
    n = tally.count
    happened = (
        f"{stack} gave {name} = {_num(first['value'])} for input {first['index']} "
        f"of the {first['input_class']} inputs"
    )
    counts = f"{n} value{'s' if n > 1 else ''}; by input class: {_by_class(tally)}"
    return Finding(
        "nan-hazard",
        "warning",
        stack,
        f"{stack}/{probe}/{variant}/nan-hazard/{kind}/{name}",
        f"{summary} on {stack} [{variant}]: {happened} ({counts}; share of the values that depend on a "
        f"non-finite input {share:.3g}, allowed {max_share:g})",
        {
            "stack": stack,
            "probe": probe,
            "variant": variant,
            "output": name,
            "layer": name in declared.layers,
            "hazard": kind,
            **first,
            "count": n,
            "hazards": side.hazards,
            "share": share,
            "max_share": max_share,
            "by_class": dict(tally.by_class),
            "action": "a bad observation would become a valid-looking action in production: check inputs "
            "for NaN/Inf before the model, or relax [probes.P.comparators.nan_hazard] max_share if this "
            "is intended",
        },
        cause=f"{probe}/nan-hazard/{kind}/{name}",
        summary=summary,
        place=(stack, variant),
        example=f"{happened} [{variant}] ({counts})",
    )
