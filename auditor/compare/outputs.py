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

import numpy as np

from auditor.compare.verdicts import (
    METRIC_NAMES,
    Comparator,
    MetricCheck,
    OutputComparison,
    Tolerance,
    check_text,
    failure_text,
    worst,
)

__all__ = [
    "EPS",
    "METRIC_NAMES",
    "Comparator",
    "MetricCheck",
    "OutputComparison",
    "Tolerance",
    "check_text",
    "compare_output",
    "failure_text",
    "worst",
]

EPS: float = float(np.finfo(np.float64).eps)
"""Stand-in for a zero reference value in the reldiff denominator (Polygraphy)."""

REL_THRESHOLD: float = 1e-3
"""Threshold for the ``rel_lt_1e-3`` share (msProbe's "one thousandth" ratio)."""

# Kinds astype(float64) would accept but mangle: complex drops the imaginary
# part, strings are parsed, objects and times are not tensor values at all.
_REJECTED_KINDS = frozenset("cOSUMm")


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


def compare_output(
    name: str, train: np.ndarray, infer: np.ndarray, tol: Tolerance, rounding: np.ndarray | None = None
) -> OutputComparison:
    """Compare ``infer`` against the reference ``train`` and give a verdict.

    Relative difference follows Polygraphy, ``|a - b| / |b|`` with zeros in the
    denominator replaced by float64 epsilon, except that the denominator is the
    *train* side ``a``: Polygraphy divides by its reference output, and here
    the training stack is the reference. An element fails, as in Polygraphy,
    where ``absdiff > atol`` AND ``reldiff > rtol`` (a NaN in either test
    counts as exceeding it); non-finite mismatches always fail. Shapes must
    match exactly (no broadcasting, no implicit reshape); a mismatch is
    reported, never raised. Dtypes may differ. ``rounding``: per element, how far
    two correct evaluations in the probe's dtype can be apart (the probe's
    ``rounding``, shaped like the output): an element within it passes too.
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
        fails = ~(absdiff <= tol.atol) & ~(reldiff <= tol.rtol)
        if rounding is not None and np.shape(rounding) == a.shape:
            fails &= ~(absdiff <= np.asarray(rounding, dtype=np.float64))
        fails |= mismatch
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
