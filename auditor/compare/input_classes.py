"""Seeded inputs that reach the regions where runtimes misbehave, beyond a probe's own inputs.

Random observations rarely push a nonlinearity into saturation or a value to the edge of
fp16, so a runtime that is wrong only there passes. Every probe variant is therefore also
run, on both stacks, on one batch per *input class*:

- ``sweep``: the varied input swept densely, in fine steps, from well below to well above the
  saturation points (a probe can aim the sweep at its own pre-activations, see below);
- ``layer-sweep``: one batch per hidden layer the probe declares (``hidden_layers(params,
  weights)``: the Dense layers from the varied input on, each ``(name, weight, bias,
  activation)``), named ``sweep-<layer>``: row r drives unit r mod width of that layer to a
  pre-activation swept from -12 to 12, with the input solved from the weights through the
  layers before it (Gauss-Newton on the chain, as far as the layers before it can reach), so
  that a bounded activation deep in the network is driven through its saturation too;
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

from auditor.compare.outputs import MetricCheck, compare_output
from auditor.compare.verdicts import Tolerance

RANDOM = "random"
CLASSES = ("sweep", "layer-sweep", "magnitude", "fp16-edge", "nan-inf")
LAYER_SWEEP = "layer-sweep"
SOLVER_STEPS = 40
POOL = 4096
"""Seeded candidate inputs a layer sweep starts from (directions at scales 0.1 to SOLVER_LIMIT)."""
SOLVED = 1024
"""Rows of a layer sweep solved at most; a larger batch repeats them (solve_layer): each unit of
a 64-unit layer is still swept through [-12, 12] in 16 steps."""
DIRECT = 1 << 22
"""Pool x rows distances made at once at most (32 MB); beyond, a sorted search per unit."""
SOLVER_LIMIT = 1e3
"""The largest magnitude a solved input may take (well inside fp16)."""
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


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


ACTIVATIONS: dict[str, tuple[Any, Any]] = {
    "identity": (lambda z: z, lambda z: np.ones_like(z)),
    "tanh": (np.tanh, lambda z: 1.0 - np.tanh(z) ** 2),
    "sigmoid": (_sigmoid, lambda z: _sigmoid(z) * (1.0 - _sigmoid(z))),
    "relu": (lambda z: np.maximum(z, 0.0), lambda z: (z > 0).astype(np.float64)),
    "softplus": (lambda z: np.logaddexp(z, 0.0), _sigmoid),
}
"""The activations a hidden layer may declare, with their derivatives."""


@dataclass(frozen=True)
class Layer:
    """A Dense layer of a probe: ``activation(x @ weight.T + bias)``."""

    name: str
    weight: np.ndarray
    bias: np.ndarray
    activation: str


def hidden_layers(spec: Any, params: dict[str, Any]) -> list[Layer]:
    """The probe's declared chain of Dense layers from the varied input (``hidden_layers``;
    [] without it), checked to fit together."""
    fn = getattr(_module(spec), "hidden_layers", None)
    if fn is None:
        return []
    layers = []
    width = None
    for name, weight, bias, activation in fn(params, spec.make_weights(params)):
        w = np.asarray(weight, dtype=np.float64)
        b = np.asarray(bias, dtype=np.float64).reshape(-1)
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"probe {spec.name}: hidden layer {name} has activation {activation!r} "
                f"(known: {', '.join(ACTIVATIONS)})"
            )
        if w.ndim != 2 or b.shape != (w.shape[0],) or (width is not None and w.shape[1] != width):
            raise ValueError(f"probe {spec.name}: hidden layer {name} does not fit the layer before it")
        width = w.shape[0]
        layers.append(Layer(str(name), w, b, str(activation)))
    return layers


def _forward(layers: list[Layer], x: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Every layer's pre-activation and activation derivative for inputs ``x``."""
    pre, slopes = [], []
    h = x
    with np.errstate(all="ignore"):
        for layer in layers:
            z = np.einsum("bi,oi->bo", h, layer.weight) + layer.bias
            act, slope = ACTIVATIONS[layer.activation]
            pre.append(z)
            slopes.append(slope(z))
            h = act(z)
    return pre, slopes


def solve_layer(layers: list[Layer], depth: int, rows: int, seed: int) -> np.ndarray:
    """Inputs (rows, width of the first layer's input) that drive unit ``r mod width`` of
    layer ``depth`` to the pre-activation ``linspace(-SWEEP, SWEEP, rows)[r]``. Each row
    starts from the best of the chain's minimum-norm solution linearised at 0 and a seeded
    pool of inputs at every scale (saturated layers before it have no gradient to follow), then
    takes bounded Gauss-Newton steps through the activations, keeping its best, with the input
    within SOLVER_LIMIT. A target the layers before it cannot reach gets the nearest found.

    Beyond ``SOLVED`` rows (a vectorized environment's batch of 32,768, say) the first SOLVED
    rows' sweep is solved and repeated: every unit still goes through the whole range, in
    ``SOLVED / width`` steps, and the cost stops growing with the batch."""
    if rows > SOLVED:
        solved = solve_layer(layers, depth, SOLVED, seed)
        return solved[np.arange(rows) % SOLVED]
    chain = layers[: depth + 1]
    width = chain[0].weight.shape[1]
    units = np.arange(rows) % chain[-1].weight.shape[0]
    targets = np.linspace(-SWEEP, SWEEP, rows)
    pick = np.arange(rows)
    # The chain with every activation taken as the identity: an affine map of the input.
    lin_w, lin_b = np.eye(width), np.zeros(width)
    for layer in chain:
        lin_w, lin_b = layer.weight @ lin_w, layer.weight @ lin_b + layer.bias
    a = lin_w[units]
    x = a * ((targets - lin_b[units]) / np.maximum((a * a).sum(axis=1), 1e-12))[:, None]
    x = np.clip(x, -SOLVER_LIMIT, SOLVER_LIMIT)
    rng = np.random.RandomState(seed)
    directions = rng.standard_normal((POOL, width))
    directions /= np.sqrt((directions * directions).sum(axis=1, keepdims=True))
    pool = directions * np.exp(rng.uniform(np.log(0.1), np.log(SOLVER_LIMIT), POOL))[:, None]
    best_pool, pool_miss = _nearest(_forward(chain, pool)[0][-1], units, targets)
    miss = np.abs(_forward(chain, x)[0][-1][pick, units] - targets)
    better = pool_miss < miss
    x[better] = pool[best_pool[better]]
    best, best_miss = x.copy(), np.minimum(miss, pool_miss)
    for _ in range(SOLVER_STEPS):
        pre, slopes = _forward(chain, x)
        off = targets - pre[-1][pick, units]
        improved = np.abs(off) < best_miss
        best[improved], best_miss[improved] = x[improved], np.abs(off[improved])
        if np.all(best_miss < 1e-6):
            break
        grad = chain[-1].weight[units]
        for layer, slope in zip(reversed(chain[:-1]), reversed(slopes[:-1]), strict=True):
            grad = (grad * slope) @ layer.weight
        step = grad * (off / np.maximum((grad * grad).sum(axis=1), 1e-12))[:, None]
        size = np.sqrt((step * step).sum(axis=1))
        bound = 1.0 + 0.5 * np.sqrt((x * x).sum(axis=1))
        step *= np.minimum(1.0, bound / np.maximum(size, 1e-300))[:, None]
        x = np.clip(x + np.where(np.isfinite(step), step, 0.0), -SOLVER_LIMIT, SOLVER_LIMIT)
    return best


def _nearest(pre: np.ndarray, units: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each row, the pool candidate whose pre-activation of the row's unit is nearest the
    row's target (the first such candidate, as an argmin over the pool would choose), and how
    far it is: per unit a sorted search, so memory grows with the pool and the width, not with
    pool x rows. NaN pre-activations are never chosen."""
    if pre.shape[0] * len(units) <= DIRECT:  # small: the pool x rows matrix is cheaper to make
        distance = np.abs(pre[:, units] - targets[None, :])
        index = distance.argmin(axis=0)
        return index, distance[index, np.arange(len(units))]
    index = np.zeros(len(units), dtype=np.int64)
    miss = np.full(len(units), np.inf)
    for unit in np.unique(units):
        rows = np.flatnonzero(units == unit)
        values = pre[:, unit]
        order = np.argsort(values, kind="stable")  # equal values keep the pool's order
        ranked = values[order]
        finite = int(np.count_nonzero(~np.isnan(ranked)))  # NaN sorts last
        ranked, order = ranked[:finite], order[:finite]
        if not finite:
            continue
        at = np.searchsorted(ranked, targets[rows])
        lo, hi = np.clip(at - 1, 0, finite - 1), np.clip(at, 0, finite - 1)
        d_lo, d_hi = np.abs(ranked[lo] - targets[rows]), np.abs(ranked[hi] - targets[rows])
        # the nearer; at a tie of distance, the candidate first in the pool (argmin's choice)
        low = (d_lo < d_hi) | ((d_lo == d_hi) & (_first(order, ranked, lo) <= _first(order, ranked, hi)))
        pos = np.where(low, lo, hi)
        index[rows] = _first(order, ranked, pos)
        miss[rows] = np.where(low, d_lo, d_hi)
    return index, miss


def _first(order: np.ndarray, ranked: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """The pool index of the first candidate (in pool order) whose value equals ranked[pos]:
    with a stable sort, the leftmost position holding that value."""
    left = np.searchsorted(ranked, ranked[pos], side="left")
    return order[left]


def layer_batches(
    spec: Any, params: dict[str, Any], template: list[np.ndarray], index: int, seed: int
) -> list[ClassBatch]:
    """One ``sweep-<layer>`` batch per declared hidden layer (auditor.compare.input_classes)."""
    layers = hidden_layers(spec, params)
    x = np.asarray(template[index])
    if not layers or x.dtype.kind != "f" or x.ndim != 2 or x.shape[1] != layers[0].weight.shape[1]:
        return []
    out = []
    for depth, layer in enumerate(layers):
        solved = solve_layer(layers, depth, x.shape[0], seed + depth)
        inputs = [np.array(t) for t in template]
        with np.errstate(over="ignore"):
            inputs[index] = np.ascontiguousarray(solved.astype(x.dtype))
        out.append(ClassBatch(f"sweep-{layer.name}", inputs, hazard_rows(inputs, index)))
    return out


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


def swept(name: str) -> bool:
    """Whether a class is a sweep at ordinary magnitudes (compared with the pair's tolerance)."""
    return name == "sweep" or name.startswith("sweep-")


def class_batches(spec: Any, params: dict[str, Any]) -> list[ClassBatch]:
    """The probe variant's batch of every input class it runs, in CLASSES order."""
    template = spec.make_inputs(params)
    index = varied_index(spec)
    hook = getattr(_module(spec), "class_inputs", None)
    seed = int(params.get("seed", 0)) + 17
    out = []
    # Seeds count the generic classes only, so that each keeps its batch whatever else runs.
    generic_names = [n for n in class_names(spec) if n != LAYER_SWEEP]
    for name in class_names(spec):
        if name == LAYER_SWEEP:
            out += layer_batches(spec, params, [np.array(x) for x in template], index, seed + 100)
            continue
        i = generic_names.index(name)
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


def pair_checks(
    names: list[str],
    train: dict[str, Any],
    infer: dict[str, Any],
    tolerance_for: Any,
    swept_limit: bool = True,
) -> list[MetricCheck]:
    """Two sides' outputs compared on each input class (class -> outputs, the classes both
    ran), one check per output and class named ``output@class``. On a sweep (ordinary
    magnitudes) every element must be within the output's tolerance (``tolerance_for(name)``,
    a Tolerance). On the extreme classes (magnitude, fp16-edge, nan-inf), where a reordered sum
    legitimately differs by far more than the ordinary tolerance, the count of values NaN/Inf
    on one side only and the largest finite difference are recorded (no limit). The metrics
    are named ``class_*`` so that they never mix with the outputs' own. What is wrong there is
    judged on each side alone (auditor.policy.invariants). ``swept_limit`` False: a sweep's
    elements beyond tolerance are counted, not judged (a model computing in float16, whose
    rounding grows with the sweep's magnitudes and which has no float64 reference to decide)."""
    checks = []
    for cls, a in train.items():
        if cls not in infer:
            continue
        for name, x, y in zip(names, a, infer[cls], strict=False):
            tolerance: Tolerance = tolerance_for(name)
            c = compare_output(name, x, y, tolerance)
            where = f"{name}@{cls}"
            if c.shape_mismatch:
                checks.append(
                    MetricCheck("class_failing", float(c.failing), False, 0.0, where, c.shape_mismatch)
                )
                continue
            m = c.metrics
            diff = f"max abs {m['max_abs']:.3g}, max rel {m['max_rel']:.3g}"
            if swept(cls):
                words = "" if c.passed else f"{c.failing}/{c.total} elements out of tolerance ({diff})"
                if not swept_limit:
                    words = words and f"{words}; float16 rounding, counted, not judged"
                    checks.append(MetricCheck("class_failing", float(c.failing), True, None, where, words))
                    continue
                checks.append(MetricCheck("class_failing", float(c.failing), c.passed, 0.0, where, words))
                continue
            mismatch = int(m["nan_inf_mismatch"])
            words = f"{mismatch}/{c.total} elements NaN/Inf on one side only" if mismatch else ""
            checks.append(MetricCheck("class_nan_inf_mismatch", float(mismatch), True, None, where, words))
            if not mismatch:
                checks.append(MetricCheck("class_max_abs", m["max_abs"], True, None, where, ""))
    return checks
