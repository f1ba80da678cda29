"""The math of the comparators: pure numpy/scipy functions of both sides' outputs.

Everything is computed in float64, whatever the probe's dtype, so a metric describes the
runtimes' numbers and not the rounding of the comparison. Formulas follow the field's
definitions (shared FACTS.md §4); each function's docstring names its source.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

LOG_2PI = math.log(2.0 * math.pi)
LOG_2 = math.log(2.0)


def _f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _per_sample(x: np.ndarray) -> np.ndarray:
    """Sum over the action dimensions: (batch, act_dim) -> (batch,); a vector is one dim each."""
    return x.sum(axis=-1) if x.ndim > 1 else x


def gaussian_kl(m1: np.ndarray, s1: np.ndarray, m2: np.ndarray, s2: np.ndarray) -> np.ndarray:
    """Per-sample KL(N(m1, s1) || N(m2, s2)) of diagonal Gaussians, summed over action dims.

    Per dimension (FACTS.md §4): log(s2/s1) + (s1² + (m1 − m2)²) / (2 s2²) − 1/2. Written with
    d = (s1 − s2) / s2 as (d + d²/2 − log1p(d)) + (m1 − m2)² / (2 s2²), which is the same
    quantity without the cancellation of log(s2/s1) against s1²/(2 s2²) − 1/2: for runtimes
    that agree to 1e-7 the KL is ~1e-14, below what the textbook form can resolve in float64.
    Identical sides give exactly 0, a zero infer-side std inf; other non-finite inputs give
    inf or NaN, which the comparator treats as a failure.
    """
    m1, s1, m2, s2 = _f64(m1), _f64(s1), _f64(m2), _f64(s2)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        d = (s1 - s2) / s2
        scale = d + 0.5 * d * d - np.log1p(d)
        scale = np.where(s1 == s2, 0.0, scale)  # exact 0, also for s == inf
        shift = (m1 - m2) ** 2 / (2.0 * s2 * s2)
        shift = np.where(m1 == m2, 0.0, shift)
        kl = np.where((s2 == 0) & (s1 != 0), np.inf, scale + shift)
    return _per_sample(kl)


def gaussian_logp(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """Per-sample log-density of x under a diagonal Gaussian, summed over action dims:
    −((x − m)/s)²/2 − log s − log(2π)/2 per dimension."""
    x, mean, std = _f64(x), _f64(mean), _f64(std)
    z = (x - mean) / std
    return _per_sample(-0.5 * z * z - np.log(std) - 0.5 * LOG_2PI)


def tanh_log_det_jacobian(u: np.ndarray) -> np.ndarray:
    """log(1 − tanh(u)²) = 2 (log 2 − u − softplus(−2u)), the numerically stable form used by
    SAC implementations: it neither rounds 1 − tanh² to 0 for large |u| nor needs an eps."""
    u = _f64(u)
    return 2.0 * (LOG_2 - u - np.logaddexp(0.0, -2.0 * u))


def clip_action(action: np.ndarray, eps: float) -> np.ndarray:
    """Actions in [−1, 1] moved inside (−1, 1): ±1 becomes ±(1 − eps), where atanh is finite."""
    return np.clip(_f64(action), -1.0 + eps, 1.0 - eps)


def tanh_gaussian_logp(action: np.ndarray, mean: np.ndarray, std: np.ndarray, eps: float) -> np.ndarray:
    """Per-sample log-probability of a tanh-squashed Gaussian action a = tanh(u), u ~ N(m, s):
    log N(u; m, s) − Σ log(1 − tanh(u)²), with u = atanh(a) after clipping a to ±(1 − eps).

    This is the reference for what the ppo_policy probe computes inside its exported cell.
    """
    a = clip_action(action, eps)
    u = np.arctanh(a)
    return gaussian_logp(u, mean, std) - _per_sample(tanh_log_det_jacobian(u))


# -- per-sample divergence terms without cancellation -----------------------------------------
# Two fp32 stacks differ by |d| ~ 1e-7 (d = log w = lp_train - lp_infer): evaluated as written,
# w - 1 - d loses every digit to cancellation (exp(d) - 1 - d at d = 1e-7 is 5e-15 computed from
# numbers near 1). Near 0 each term is its Taylor polynomial, its coefficients made once,
# exactly, from the series of exp and log1p; away from 0 the formula as written is exact enough.

SERIES_DEGREE = 14
SERIES_RADIUS = 0.05
"""|d| below which a term is its polynomial: the first term left out is below 1e-17 of the
term there."""


def _series_mul(a: list[Fraction], b: list[Fraction]) -> list[Fraction]:
    out = [Fraction(0)] * (SERIES_DEGREE + 1)
    for i, x in enumerate(a):
        for j, y in enumerate(b[: SERIES_DEGREE + 1 - i]):
            out[i + j] += x * y
    return out


@functools.cache
def _series() -> dict[str, np.ndarray]:
    """The polynomials' coefficients, highest first, made when first needed (14 ms of fractions:
    not at import, which every command pays)."""
    g = [Fraction(0), Fraction(1)] + [Fraction(0)] * (SERIES_DEGREE - 1)
    e = [Fraction(0)] + [Fraction(1, math.factorial(n)) for n in range(1, SERIES_DEGREE + 1)]  # expm1
    half = [c / 2 for c in e]
    log1p_half = [Fraction(0)] * (SERIES_DEGREE + 1)  # log1p(e / 2) = sum (-1)^(k+1) (e/2)^k / k
    power = [Fraction(1)] + [Fraction(0)] * SERIES_DEGREE
    for k in range(1, SERIES_DEGREE + 1):
        power = _series_mul(power, half)
        log1p_half = [a + Fraction((-1) ** (k + 1), k) * b for a, b in zip(log1p_half, power, strict=True)]
    one_e = [Fraction(1) + e[0]] + e[1:]
    two_e = [Fraction(2) + e[0]] + e[1:]
    terms = {
        "k3": [a - b for a, b in zip(e, g, strict=True)],  # w - 1 - log w
        "reverse": [a - b for a, b in zip(_series_mul(one_e, g), e, strict=True)],  # w log w - w + 1
        # JS per sample: (w log w - (1 + w) log((1 + w) / 2)) / 2
        "js": [
            (a - b) / 2 for a, b in zip(_series_mul(one_e, g), _series_mul(two_e, log1p_half), strict=True)
        ],
    }
    return {k: np.array([float(c) for c in reversed(v)]) for k, v in terms.items()}


def _near_zero(name: str, d: np.ndarray, direct: np.ndarray) -> np.ndarray:
    near = np.abs(d) < SERIES_RADIUS
    return np.where(near, np.polyval(_series()[name], np.where(near, d, 0.0)), direct)


def k3_terms(d: np.ndarray) -> np.ndarray:
    """w - 1 - log w per sample, w = exp(d): the k3 estimator's terms of KL(q || p), q the side
    that drew the samples (inf at d = -inf)."""
    d = _f64(d)
    with np.errstate(over="ignore", invalid="ignore"):
        return _near_zero("k3", d, np.where(d > -np.inf, np.expm1(d) - d, np.inf))


def reverse_kl_terms(d: np.ndarray) -> np.ndarray:
    """w log w - w + 1 per sample: KL(p || q)'s terms under q, each >= 0 (1 at w = 0)."""
    d = _f64(d)
    with np.errstate(over="ignore", invalid="ignore"):
        w = np.exp(d)
        return _near_zero("reverse", d, np.where(w > 0, w * d, 0.0) - w + 1.0)


def js_terms(d: np.ndarray) -> np.ndarray:
    """(w log w - (1 + w) log((1 + w) / 2)) / 2 per sample: Jensen-Shannon's terms under q, in
    nats (ln(2) / 2 at w = 0)."""
    d = _f64(d)
    with np.errstate(over="ignore", invalid="ignore"):
        w = np.exp(d)
        half = np.where(w > 0, w * (LOG_2 + d - np.logaddexp(0.0, d)), 0.0)
        return _near_zero("js", d, 0.5 * (LOG_2 - np.logaddexp(0.0, d)) + 0.5 * half)


@dataclass(frozen=True)
class LogpDiff:
    """How far two sides' log-probabilities of the same actions are apart (FACTS.md §4)."""

    max_abs: float
    """max |lp_train − lp_infer|"""
    mean_abs: float
    """mean |lp_train − lp_infer|"""
    mean_exp_abs: float
    """mean(exp(|Δlogp|)): NeMo RL's mismatch figure, 1.0 when equal, investigate above 1.05."""
    k3_kl: float
    """mean(exp(d) − d − 1), d = lp_train − lp_infer: verl's k3 estimator of the KL."""
    prob_diff_max: float
    """max |exp(lp_train) − exp(lp_infer)| (verl)."""


def rounding_unit(train: np.ndarray, infer: np.ndarray) -> np.ndarray:
    """Per element (flattened), one unit in the last place (ULP) of the coarser floating dtype
    of the two outputs at the larger of the two magnitudes: the finest difference that dtype
    can show there (fp16 at |x| in [16, 32): 2**-6 = 0.0156). 0 where a value is not finite,
    and everywhere for float64 or non-float outputs (the comparison's own precision)."""
    a, b = _f64(train).ravel(), _f64(infer).ravel()
    dtypes = [np.asarray(x).dtype for x in (train, infer)]
    floats = [t for t in dtypes if np.issubdtype(t, np.floating) and np.finfo(t).bits < 64]
    if not floats:
        return np.zeros(a.shape)
    coarse = max(floats, key=lambda t: np.finfo(t).eps)
    with np.errstate(invalid="ignore", over="ignore"):
        big = np.maximum(np.abs(a), np.abs(b))
        finite = np.isfinite(big)
        unit = np.abs(np.spacing(np.where(finite, big, 0.0).astype(coarse))).astype(np.float64)
    return np.where(finite & np.isfinite(unit), unit, 0.0)


def logp_delta(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """lp_train − lp_infer per element, 0 where both are the same value (both −inf: an
    impossible action on both sides); NaN or ±inf where the two are not comparable."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.where(a == b, 0.0, a - b)


def logp_abs_diff(train: np.ndarray, infer: np.ndarray) -> np.ndarray:
    """|lp_train − lp_infer| per element (flattened), inf where only one side is finite or
    either is NaN."""
    d = np.abs(logp_delta(_f64(train).ravel(), _f64(infer).ravel()))
    return np.where(np.isfinite(d), d, np.inf)


def logp_diff(train: np.ndarray, infer: np.ndarray) -> LogpDiff:
    """Log-probability mismatch metrics; non-finite differences make every figure inf."""
    a, b = _f64(train).ravel(), _f64(infer).ravel()
    if a.size == 0:
        return LogpDiff(0.0, 0.0, 1.0, 0.0, 0.0)
    d = logp_delta(a, b)
    if not np.all(np.isfinite(d)):
        inf = float("inf")
        return LogpDiff(inf, inf, inf, inf, inf)
    with np.errstate(over="ignore", invalid="ignore"):
        ad = np.abs(d)
        return LogpDiff(
            max_abs=float(ad.max()),
            mean_abs=float(ad.mean()),
            mean_exp_abs=float(np.mean(np.exp(ad))),
            k3_kl=float(np.mean(k3_terms(d))),
            prob_diff_max=float(np.max(np.abs(np.exp(a) - np.exp(b)))),
        )


def agreement_rate(train: np.ndarray, infer: np.ndarray, atol: float) -> float:
    """Share of samples (rows) whose every action dimension agrees within ``atol``
    (|train − infer| <= atol; NaN never agrees, the same infinity does)."""
    a, b = _f64(train), _f64(infer)
    if a.ndim == 0:
        a, b = a.reshape(1), b.reshape(1)
    with np.errstate(invalid="ignore", over="ignore"):
        close = (np.abs(a - b) <= atol) | ((a == b) & ~np.isnan(a))
    rows = close.reshape(close.shape[0], -1).all(axis=1) if close.ndim > 1 else close
    return float(rows.mean()) if rows.size else 1.0


def nonfinite_where_train_finite(train: np.ndarray, infer: np.ndarray) -> int:
    """Elements that are finite on the train side and NaN or ±Inf on the infer side."""
    a, b = _f64(train), _f64(infer)
    return int(np.count_nonzero(np.isfinite(a) & ~np.isfinite(b)))


@dataclass(frozen=True)
class KS:
    statistic: float
    pvalue: float


def ks_two_sample(x: np.ndarray, y: np.ndarray) -> KS:
    """Two-sample Kolmogorov–Smirnov test: D = sup |F_x − F_y| over the two empirical CDFs,
    and its two-sided p-value (scipy.stats.ks_2samp; exact for small samples). Non-finite
    values are left out; an empty side gives D = 1, p = 0."""
    x, y = _f64(x).ravel(), _f64(y).ravel()
    x, y = x[np.isfinite(x)], y[np.isfinite(y)]
    if x.size == 0 or y.size == 0:
        return KS(1.0, 0.0)
    from scipy import stats  # here, not at import: scipy is ~60 MB the idle daemon need not hold

    r = stats.ks_2samp(x, y)
    return KS(float(r.statistic), float(r.pvalue))


def sign_flips(train: np.ndarray, infer: np.ndarray) -> int:
    """Elements where both sides are non-zero and finite with opposite signs."""
    a, b = _f64(train), _f64(infer)
    ok = np.isfinite(a) & np.isfinite(b) & (a != 0) & (b != 0)
    return int(np.count_nonzero(ok & (np.sign(a) != np.sign(b))))


def clip_disagreements(train: np.ndarray, infer: np.ndarray, clip: float) -> int:
    """Elements where exactly one side is at the clipping bound (|y| >= clip)."""
    a, b = _f64(train), _f64(infer)
    return int(np.count_nonzero((np.abs(a) >= clip) != (np.abs(b) >= clip)))


def nan_masked(inputs_nan: np.ndarray, outputs: np.ndarray) -> int:
    """Elements whose input was NaN and whose output is finite: the NaN was silently masked."""
    return int(np.count_nonzero(np.asarray(inputs_nan, dtype=bool) & np.isfinite(_f64(outputs))))
