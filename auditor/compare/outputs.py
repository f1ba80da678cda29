"""Compare one output tensor of the training stack with the inference stack.

The training side (``train``, called ``a``) is the *reference*; the inference
side (``infer``, ``b``) is the candidate. All arithmetic is done in float64 so
that low-precision outputs (fp16, bf16) are judged on their values, not on the
rounding of the comparison itself.

Non-finite values get explicit treatment so that a NaN can neither silently
turn a metric into NaN nor silently pass:

* Both sides NaN, or both the same infinity, at one position: the elements
  *agree* (absdiff 0, reldiff 0). They count as passing and as "< 1e-3", but
  are left out of ``mean_abs`` and ``cosine``, which are only defined on
  finite values.
* Any other non-finite pattern (NaN vs number, +Inf vs -Inf, Inf vs number,
  NaN vs Inf) is a *mismatch*: the element always fails, whatever the
  tolerance, is counted in ``nan_inf_mismatch``, and its absdiff and reldiff
  are +inf, so ``max_abs``, ``max_rel`` and ``min_atol`` become inf.
* ``mean_abs`` and ``cosine`` are computed over the pairs where both sides
  are finite, so they still describe the rest of the tensor when a few
  elements are non-finite.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "EPS",
    "METRIC_NAMES",
    "OutputComparison",
    "Tolerance",
    "compare_output",
    "worst",
]

EPS: float = float(np.finfo(np.float64).eps)
"""Stand-in for a zero reference value in the reldiff denominator (Polygraphy)."""

REL_THRESHOLD: float = 1e-3
"""Threshold for the ``rel_lt_1e-3`` share (msProbe's "one thousandth" ratio)."""

METRIC_NAMES: tuple[str, ...] = (
    "max_abs",
    "max_rel",
    "mean_abs",
    "cosine",
    "rel_lt_1e-3",
    "bitwise_equal",
    "nan_inf_mismatch",
    "min_atol",
    "min_rtol",
)

# How worst() reduces each metric: larger is worse for differences and counts,
# smaller is worse for similarities and shares.
_WORST: dict[str, Callable[..., float]] = {
    "max_abs": max,
    "max_rel": max,
    "mean_abs": max,
    "cosine": min,
    "rel_lt_1e-3": min,
    "bitwise_equal": min,
    "nan_inf_mismatch": max,
    "min_atol": max,
    "min_rtol": max,
}

# Kinds astype(float64) would accept but mangle: complex drops the imaginary
# part, strings are parsed, objects and times are not tensor values at all.
_REJECTED_KINDS = frozenset("cOSUMm")


@dataclass(frozen=True)
class Tolerance:
    """Element-wise tolerance; an element fails only if it exceeds *both*."""

    atol: float = 1e-5
    rtol: float = 1e-5

    def __post_init__(self) -> None:
        # A NaN or negative tolerance would make every check meaningless.
        for name in ("atol", "rtol"):
            value = getattr(self, name)
            if not value >= 0:
                raise ValueError(f"{name} must be >= 0, got {value!r}")


@dataclass(frozen=True)
class OutputComparison:
    """Verdict and metrics for one named output (see ``METRIC_NAMES``)."""

    output: str
    passed: bool
    metrics: dict[str, float]
    failing: int
    total: int
    shape_mismatch: str | None


def _as_float64(x: np.ndarray, side: str) -> np.ndarray:
    """Upcast to float64 (exact for fp16/bf16/fp32) after rejecting non-reals."""
    if x.dtype.kind in _REJECTED_KINDS:
        raise TypeError(f"{side} output has unsupported dtype {x.dtype}")
    return x.astype(np.float64).ravel()


def _bitwise_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Strict byte identity: same dtype, same shape, same bytes (-0.0 != 0.0)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    av = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    bv = np.ascontiguousarray(b).reshape(-1).view(np.uint8)
    return bool(np.array_equal(av, bv))


def _cosine(x: np.ndarray, y: np.ndarray) -> float:
    """Cosine similarity of finite float64 vectors, safe against overflow.

    Each vector is scaled by its largest magnitude first (cosine is scale
    invariant), so values near the float64 limits cannot overflow the dot
    product into inf/inf = NaN.
    """
    nx = float(np.max(np.abs(x))) if x.size else 0.0
    ny = float(np.max(np.abs(y))) if y.size else 0.0
    if nx == 0.0 and ny == 0.0:
        return 1.0
    if nx == 0.0 or ny == 0.0:
        return 0.0
    xs, ys = x / nx, y / ny
    # sqrt(xx * yy) rather than norm * norm: for x == y it is exactly xx
    # (sqrt of a rounded square is exact), so identical tensors give 1.0.
    xx, yy = float(np.dot(xs, xs)), float(np.dot(ys, ys))
    cos = float(np.dot(xs, ys)) / math.sqrt(xx * yy)
    return min(1.0, max(-1.0, cos))


def _shape_mismatch(name: str, a: np.ndarray, b: np.ndarray) -> OutputComparison:
    """Worst-case result: nothing can be compared element-wise.

    ``nan_inf_mismatch`` stays 0.0 because it is a count that was not
    measured; the failure is carried by ``shape_mismatch`` and the inf metrics.
    """
    inf = float("inf")
    size = max(int(a.size), int(b.size))
    metrics = {
        "max_abs": inf,
        "max_rel": inf,
        "mean_abs": inf,
        "cosine": 0.0,
        "rel_lt_1e-3": 0.0,
        "bitwise_equal": 0.0,
        "nan_inf_mismatch": 0.0,
        "min_atol": inf,
        "min_rtol": inf,
    }
    return OutputComparison(
        output=name,
        passed=False,
        metrics=metrics,
        failing=size,
        total=size,
        shape_mismatch=f"train {a.shape} vs infer {b.shape}",
    )


def compare_output(name: str, train: np.ndarray, infer: np.ndarray, tol: Tolerance) -> OutputComparison:
    """Compare ``infer`` against the reference ``train`` and give a verdict.

    Relative difference follows Polygraphy, ``|a - b| / |b|`` with zeros in the
    denominator replaced by float64 epsilon, except that the denominator is the
    *train* side ``a``: Polygraphy divides by its reference output, and here
    the training stack is the reference. An element fails, as in Polygraphy,
    where ``absdiff > atol`` AND ``reldiff > rtol`` (a NaN in either test
    counts as exceeding it); non-finite mismatches always fail. Shapes must
    match exactly (no broadcasting, no implicit reshape); a mismatch is
    reported, never raised. Dtypes may differ.
    """
    a_raw, b_raw = np.asarray(train), np.asarray(infer)
    if a_raw.shape != b_raw.shape:
        return _shape_mismatch(name, a_raw, b_raw)

    a = _as_float64(a_raw, "train")
    b = _as_float64(b_raw, "infer")
    total = int(a.size)

    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        fin_a, fin_b = np.isfinite(a), np.isfinite(b)
        finite = fin_a & fin_b
        # Non-finite class differs: NaN vs not-NaN, or one infinity vs anything else.
        mismatch = (
            (np.isnan(a) != np.isnan(b))
            | (np.isposinf(a) != np.isposinf(b))
            | (np.isneginf(a) != np.isneginf(b))
        )
        n_mismatch = int(np.count_nonzero(mismatch))

        # Agreeing non-finite pairs keep 0; mismatches get +inf.
        absdiff = np.zeros_like(a)
        reldiff = np.zeros_like(a)
        absdiff[mismatch] = np.inf
        reldiff[mismatch] = np.inf
        af, bf = a[finite], b[finite]
        d = np.abs(af - bf)  # may overflow to inf for huge opposite values
        absdiff[finite] = d
        reldiff[finite] = d / np.where(af == 0.0, EPS, np.abs(af))

        # "> tol or NaN" written as "not <= tol" so a NaN can never pass.
        fails = (~(absdiff <= tol.atol) & ~(reldiff <= tol.rtol)) | mismatch
        failing = int(np.count_nonzero(fails))

        # The smallest atol that passes at the configured rtol, and the smallest rtol that
        # passes at the configured atol (Polygraphy reports the former).
        if n_mismatch:
            min_atol = min_rtol = float("inf")
        else:
            needs_atol = ~(reldiff <= tol.rtol)
            min_atol = float(np.max(absdiff[needs_atol])) if needs_atol.any() else 0.0
            needs_rtol = ~(absdiff <= tol.atol)
            min_rtol = float(np.max(reldiff[needs_rtol])) if needs_rtol.any() else 0.0

        metrics = {
            "max_abs": float(np.max(absdiff)) if total else 0.0,
            "max_rel": float(np.max(reldiff)) if total else 0.0,
            "mean_abs": float(np.mean(d)) if d.size else 0.0,
            "cosine": _cosine(af, bf),
            "rel_lt_1e-3": (float(np.count_nonzero(reldiff < REL_THRESHOLD)) / total if total else 1.0),
            "bitwise_equal": 1.0 if _bitwise_equal(a_raw, b_raw) else 0.0,
            "nan_inf_mismatch": float(n_mismatch),
            "min_atol": min_atol,
            "min_rtol": min_rtol,
        }

    return OutputComparison(
        output=name,
        passed=failing == 0,
        metrics=metrics,
        failing=failing,
        total=total,
        shape_mismatch=None,
    )


def worst(comparisons: Sequence[OutputComparison]) -> dict[str, float]:
    """Worst value of each metric over several outputs, for a one-line summary.

    Max for differences and counts, min for ``cosine``, ``rel_lt_1e-3`` and
    ``bitwise_equal``. An empty list yields each reduction's neutral value
    (0.0 for max keys, 1.0 for min keys), matching an empty comparison.
    """
    out: dict[str, float] = {}
    for key in METRIC_NAMES:
        reduce = _WORST[key]
        neutral = 0.0 if reduce is max else 1.0
        out[key] = float(reduce((c.metrics[key] for c in comparisons), default=neutral))
    return out


@dataclass(frozen=True)
class MetricCheck:
    """One figure a comparator computed, and whether it is within the limit it is held to.

    ``output`` names the output it is about (None: the probe as a whole); ``limit`` is the
    threshold used (None: the metric is informational and always passes); ``direction`` how the
    value is held to it: "<=" (at most) or ">=" (at least); empty: inferred for display from
    the value, the limit and the verdict (``bound``).
    """

    metric: str
    value: float
    passed: bool
    limit: float | None = None
    output: str | None = None
    message: str = ""
    direction: str = ""

    def bound(self) -> str:
        """ "<=" or ">=" for a limited check: the declared direction, else the one the verdict
        implies (a value under its limit that passed, or over it that failed, had an upper
        bound); "" when it cannot be told (informational, or value equal to the limit)."""
        if self.limit is None:
            return ""
        if self.direction:
            return self.direction
        if self.value == self.limit or self.value != self.value:
            return ""
        below = self.value < self.limit
        return "<=" if below == self.passed else ">="


@dataclass(frozen=True)
class Comparator:
    """A named comparison run in the auditor on a probe's outputs, beyond the element-wise
    check every output gets. ``compare(train, infer, options)`` takes both sides' outputs by
    name and the probe's options for this comparator, and returns its MetricChecks."""

    name: str
    compare: Callable[[dict[str, np.ndarray], dict[str, np.ndarray], dict], list[MetricCheck]]
    description: str = ""


def check_text(c: MetricCheck) -> str:
    where = f"{c.output}: " if c.output else ""
    limit = f" (limit {c.limit:.3g})" if c.limit is not None else ""
    return f"{where}{c.metric} {c.value:.3g}{limit}" + (f": {c.message}" if c.message else "")


def failure_text(c: OutputComparison) -> str:
    if c.shape_mismatch:
        return f"{c.output}: shape differs ({c.shape_mismatch})"
    m = c.metrics
    return (
        f"{c.output}: {c.failing}/{c.total} elements out of tolerance "
        f"(max abs {m['max_abs']:.3g}, max rel {m['max_rel']:.3g}, "
        f"would pass at atol {m['min_atol']:.3g} or rtol {m['min_rtol']:.3g})"
    )
