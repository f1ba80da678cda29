"""Tests for auditor.compare.outputs with hand-computed expectations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from auditor.compare.outputs import (
    METRIC_NAMES,
    OutputComparison,
    Tolerance,
    compare_output,
    worst,
)

# NaN handling must never rely on numpy warnings being emitted and ignored.
pytestmark = pytest.mark.filterwarnings("error")

EPS = 2.220446049250313e-16
INF = math.inf
DEFAULT = Tolerance()


def cmp(a, b, tol: Tolerance = DEFAULT) -> OutputComparison:
    return compare_output("out", np.asarray(a), np.asarray(b), tol)


def assert_well_formed(r: OutputComparison) -> None:
    assert tuple(r.metrics) == METRIC_NAMES
    for key, value in r.metrics.items():
        assert type(value) is float, key  # plain float, not np.float64
        assert not math.isnan(value), key
    assert isinstance(r.failing, int) and isinstance(r.total, int)
    assert r.passed == (r.shape_mismatch is None and r.failing == 0)


def test_metric_names_order() -> None:
    assert METRIC_NAMES == (
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


def test_hand_computed_metrics() -> None:
    # absdiff [0, 0.5, 1]; reldiff vs train [0, 0.25, 0.25]
    r = cmp(np.array([1.0, 2.0, 4.0]), np.array([1.0, 2.5, 3.0]))
    assert_well_formed(r)
    m = r.metrics
    assert m["max_abs"] == 1.0
    assert m["max_rel"] == 0.25
    assert m["mean_abs"] == 0.5
    # (1 + 5 + 12) / (sqrt(1 + 4 + 16) * sqrt(1 + 6.25 + 9))
    assert m["cosine"] == pytest.approx(18.0 / math.sqrt(21.0 * 16.25), rel=1e-14)
    assert m["rel_lt_1e-3"] == pytest.approx(1.0 / 3.0)
    assert m["bitwise_equal"] == 0.0
    assert m["nan_inf_mismatch"] == 0.0
    assert m["min_atol"] == 1.0
    assert (r.passed, r.failing, r.total, r.shape_mismatch) == (False, 2, 3, None)
    assert r.output == "out"


def test_max_rel_uses_train_side_as_denominator() -> None:
    # |2 - 4| / |2| = 1.0 (train is the reference), not |2 - 4| / |4| = 0.5
    r = cmp([2.0], [4.0])
    assert r.metrics["max_rel"] == 1.0
    r = cmp([4.0], [2.0])
    assert r.metrics["max_rel"] == 0.5


def test_identical_arrays() -> None:
    a = np.array([[0.5, -3.0], [7.25, 0.0]], dtype=np.float32)
    r = cmp(a, a.copy())
    assert_well_formed(r)
    assert r.passed and r.failing == 0 and r.total == 4
    m = r.metrics
    assert m["bitwise_equal"] == 1.0
    assert m["max_abs"] == m["max_rel"] == m["mean_abs"] == m["min_atol"] == 0.0
    assert m["cosine"] == 1.0
    assert m["rel_lt_1e-3"] == 1.0
    assert m["nan_inf_mismatch"] == 0.0


def test_bitwise_equal_is_strict_about_bytes_and_dtype() -> None:
    a32 = np.array([1.0, 2.0], dtype=np.float32)
    same_values = cmp(a32, a32.astype(np.float64))
    assert same_values.passed and same_values.metrics["max_abs"] == 0.0
    assert same_values.metrics["bitwise_equal"] == 0.0
    signed_zero = cmp(np.array([0.0]), np.array([-0.0]))
    assert signed_zero.passed and signed_zero.metrics["bitwise_equal"] == 0.0


def test_bitwise_equal_handles_non_contiguous_views() -> None:
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    view = base[:, ::2]
    assert not view.flags.c_contiguous
    assert cmp(view, view.copy()).metrics["bitwise_equal"] == 1.0
    other = view.copy()
    other[2, 1] += 1
    assert cmp(view, other).metrics["bitwise_equal"] == 0.0


def test_zero_reference_small_absdiff_passes_through_atol() -> None:
    r = cmp([0.0, 1.0], [1e-7, 1.0])
    assert_well_formed(r)
    assert r.metrics["max_rel"] == pytest.approx(1e-7 / EPS, rel=1e-12)
    assert r.metrics["max_rel"] > 1e8
    assert r.metrics["max_abs"] == pytest.approx(1e-7)
    assert r.passed and r.failing == 0
    # The element still needs atol because its reldiff is far above rtol.
    assert r.metrics["min_atol"] == pytest.approx(1e-7)


def test_zero_reference_large_absdiff_fails() -> None:
    r = cmp([0.0, 1.0], [1e-3, 1.0])
    assert not r.passed and r.failing == 1
    assert r.metrics["min_atol"] == 1e-3
    assert r.metrics["rel_lt_1e-3"] == 0.5


def test_both_zero_is_not_a_relative_error() -> None:
    r = cmp([0.0, 0.0], [0.0, 0.0])
    assert r.passed and r.metrics["max_rel"] == 0.0 and r.metrics["cosine"] == 1.0


def test_rtol_dominates_for_large_values() -> None:
    # absdiff 1 and 2 >> atol, reldiff 1e-6 < rtol 1e-5: passes
    r = cmp([1e6, -2e6], [1e6 + 1, -2e6 - 2])
    assert_well_formed(r)
    assert r.metrics["max_abs"] == 2.0
    assert r.metrics["max_rel"] == pytest.approx(1e-6)
    assert r.passed and r.failing == 0
    assert r.metrics["min_atol"] == 0.0
    # reldiff 1e-4 > rtol and absdiff 100 > atol: fails
    r = cmp([1e6], [1e6 + 100])
    assert not r.passed and r.failing == 1 and r.metrics["min_atol"] == 100.0


def test_element_fails_only_when_both_tolerances_exceeded() -> None:
    # absdiff 0.5, reldiff 0.5; boundaries are inclusive (fail needs ">")
    tol_abs_ok = Tolerance(atol=0.5, rtol=0.0)
    assert cmp([1.0], [1.5], tol_abs_ok).passed
    tol_rel_ok = Tolerance(atol=0.0, rtol=0.5)
    assert cmp([1.0], [1.5], tol_rel_ok).passed
    just_below = Tolerance(atol=float(np.nextafter(0.5, 0.0)), rtol=0.0)
    assert not cmp([1.0], [1.5], just_below).passed


def test_nan_at_same_position_agrees() -> None:
    a = np.array([1.0, np.nan, 3.0], dtype=np.float32)
    b = a.copy()
    b[2] = 3.5
    r = cmp(a, b, Tolerance(atol=1.0))
    assert_well_formed(r)
    assert r.passed and r.failing == 0 and r.total == 3
    m = r.metrics
    assert m["nan_inf_mismatch"] == 0.0
    assert m["max_abs"] == 0.5
    assert m["max_rel"] == pytest.approx(0.5 / 3.0)
    # mean over the two finite pairs only: (0 + 0.5) / 2
    assert m["mean_abs"] == 0.25
    assert m["cosine"] == pytest.approx((1 + 10.5) / math.sqrt(10 * 13.25), rel=1e-14)
    # the agreeing NaN counts as reldiff 0, i.e. below 1e-3
    assert m["rel_lt_1e-3"] == pytest.approx(2.0 / 3.0)
    # inputs are not modified
    assert np.isnan(a[1]) and a[2] == 3.0


def test_all_nan_on_both_sides_passes_with_neutral_metrics() -> None:
    r = cmp(np.full(4, np.nan), np.full(4, np.nan))
    assert_well_formed(r)
    assert r.passed
    assert r.metrics["max_abs"] == r.metrics["mean_abs"] == 0.0
    assert r.metrics["cosine"] == 1.0


def test_nan_on_one_side_fails_and_is_counted() -> None:
    r = cmp([1.0, 2.0, 3.0], [1.0, np.nan, 3.5])
    assert_well_formed(r)
    assert not r.passed
    assert r.failing == 2  # the NaN and the 0.5 difference
    m = r.metrics
    assert m["nan_inf_mismatch"] == 1.0
    assert m["max_abs"] == INF and m["max_rel"] == INF and m["min_atol"] == INF
    assert m["mean_abs"] == 0.25  # finite pairs (1, 1) and (3, 3.5)
    assert m["cosine"] == pytest.approx((1 + 10.5) / math.sqrt(10 * 13.25), rel=1e-14)
    assert m["rel_lt_1e-3"] == pytest.approx(1.0 / 3.0)


def test_nan_in_reference_only_also_fails() -> None:
    r = cmp([np.nan, 1.0], [0.0, 1.0])
    assert not r.passed and r.failing == 1 and r.metrics["nan_inf_mismatch"] == 1.0


def test_non_finite_mismatch_fails_even_with_infinite_tolerance() -> None:
    r = cmp([1.0, 2.0], [1.0, np.nan], Tolerance(atol=INF, rtol=INF))
    assert not r.passed and r.failing == 1


def test_pos_inf_vs_neg_inf_fails() -> None:
    r = cmp([np.inf, 1.0], [-np.inf, 1.0])
    assert_well_formed(r)
    assert not r.passed and r.failing == 1
    assert r.metrics["nan_inf_mismatch"] == 1.0
    assert r.metrics["max_abs"] == INF and r.metrics["min_atol"] == INF
    assert r.metrics["mean_abs"] == 0.0
    assert r.metrics["cosine"] == 1.0  # over the finite pair (1, 1)


def test_pos_inf_vs_pos_inf_agrees() -> None:
    r = cmp([np.inf, -np.inf, 2.0], [np.inf, -np.inf, 2.0])
    assert_well_formed(r)
    assert r.passed and r.failing == 0
    assert r.metrics["nan_inf_mismatch"] == 0.0
    assert r.metrics["max_abs"] == 0.0 and r.metrics["min_atol"] == 0.0


def test_inf_vs_finite_and_nan_vs_inf_each_count_once() -> None:
    r = cmp([np.inf, np.nan, 5.0, 1.0], [1e308, np.inf, -np.inf, 1.0])
    assert_well_formed(r)
    assert r.metrics["nan_inf_mismatch"] == 3.0
    assert r.failing == 3 and r.total == 4


def test_fp16_vs_fp32_is_compared_in_float64() -> None:
    train = np.array([0.1], dtype=np.float32)
    infer = np.array([0.1], dtype=np.float16)
    # fp32(0.1) = 0.100000001490116119384765625, fp16(0.1) = 0.0999755859375
    expected = 0.100000001490116119384765625 - 0.0999755859375
    r = cmp(train, infer)
    assert_well_formed(r)
    assert r.metrics["max_abs"] == pytest.approx(expected, rel=1e-12)
    assert r.metrics["max_rel"] == pytest.approx(expected / float(train[0]), rel=1e-12)
    assert r.metrics["bitwise_equal"] == 0.0
    assert not r.passed  # 2.44e-5 > atol and 2.44e-4 > rtol
    assert cmp(train, infer, Tolerance(atol=1e-4)).passed


def test_fp16_difference_does_not_overflow() -> None:
    # In fp16, 65504 - (-65504) overflows to inf; in float64 it is 131008.
    a = np.array([65504.0], dtype=np.float16)
    b = np.array([-65504.0], dtype=np.float16)
    r = cmp(a, b)
    assert_well_formed(r)
    assert r.metrics["max_abs"] == 131008.0
    assert r.metrics["max_rel"] == 2.0
    assert r.metrics["nan_inf_mismatch"] == 0.0
    assert r.metrics["cosine"] == -1.0


def test_cosine_survives_values_near_float64_max() -> None:
    r = cmp([1e300, 1e300], [1e300, 1e300])
    assert r.metrics["cosine"] == 1.0
    r = cmp([1e300, 0.0], [0.0, 1e300])
    assert r.metrics["cosine"] == 0.0


def test_cosine_zero_vectors() -> None:
    assert cmp([0.0, 0.0], [0.0, 0.0]).metrics["cosine"] == 1.0
    assert cmp([0.0, 0.0], [0.0, 1e-9]).metrics["cosine"] == 0.0
    assert cmp([1.0, 0.0], [0.0, 0.0]).metrics["cosine"] == 0.0


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("rtol", [0.0, 1e-5, 1e-2])
def test_min_atol_is_the_smallest_passing_atol(seed: int, rtol: float) -> None:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(200)
    a[:5] = 0.0  # exercise the eps denominator
    b = a + rng.standard_normal(200) * 1e-3
    r = cmp(a, b, Tolerance(atol=0.0, rtol=rtol))
    min_atol = r.metrics["min_atol"]
    assert 0.0 < min_atol < INF
    assert min_atol <= r.metrics["max_abs"]
    assert cmp(a, b, Tolerance(atol=min_atol, rtol=rtol)).passed
    smaller = float(np.nextafter(min_atol, 0.0))
    below = cmp(a, b, Tolerance(atol=smaller, rtol=rtol))
    assert not below.passed and below.failing >= 1


def test_min_atol_ignores_elements_within_rtol() -> None:
    # element 0: absdiff 10, reldiff 1e-6 (within rtol); element 1: absdiff 0.1, reldiff 0.1
    r = cmp([1e7, 1.0], [1e7 + 10, 1.1], Tolerance(atol=0.0, rtol=1e-5))
    assert r.metrics["min_atol"] == pytest.approx(0.1)
    assert r.metrics["max_abs"] == 10.0


def test_shape_mismatch_is_reported_not_raised() -> None:
    r = cmp(np.zeros((256, 1)), np.zeros((256, 2)))
    assert_well_formed(r)
    assert r.shape_mismatch == "train (256, 1) vs infer (256, 2)"
    assert not r.passed
    assert r.failing == r.total == 512
    m = r.metrics
    assert m["max_abs"] == m["max_rel"] == m["min_atol"] == m["mean_abs"] == INF
    assert m["cosine"] == 0.0 and m["rel_lt_1e-3"] == 0.0 and m["bitwise_equal"] == 0.0


@pytest.mark.parametrize(("sa", "sb"), [((2, 3), (3, 2)), ((3,), (3, 1)), ((1,), (4,)), ((0,), (3,))])
def test_shape_mismatch_no_reshape_or_broadcast(sa: tuple, sb: tuple) -> None:
    r = cmp(np.ones(sa), np.ones(sb))
    assert not r.passed and r.shape_mismatch is not None
    assert r.total == max(math.prod(sa), math.prod(sb))


def test_empty_arrays_pass_with_zeros() -> None:
    r = cmp(np.zeros((0, 4), dtype=np.float32), np.zeros((0, 4), dtype=np.float32))
    assert_well_formed(r)
    assert r.passed and r.failing == 0 and r.total == 0 and r.shape_mismatch is None
    m = r.metrics
    assert m["max_abs"] == m["max_rel"] == m["mean_abs"] == m["min_atol"] == 0.0
    assert m["nan_inf_mismatch"] == 0.0
    assert m["cosine"] == 1.0 and m["rel_lt_1e-3"] == 1.0


def test_zero_dim_arrays() -> None:
    r = cmp(np.float32(2.0), np.float32(3.0))
    assert r.total == 1 and r.failing == 1 and r.metrics["max_rel"] == 0.5


def test_integer_and_bool_outputs_are_compared() -> None:
    assert cmp(np.array([1, 2, 3]), np.array([1, 2, 3], dtype=np.int32)).passed
    r = cmp(np.array([True, False]), np.array([True, True]))
    assert not r.passed and r.failing == 1 and r.metrics["max_abs"] == 1.0


def test_complex_outputs_are_rejected() -> None:
    with pytest.raises(TypeError):
        cmp(np.array([1 + 1j]), np.array([1 + 1j]))


@pytest.mark.parametrize("kwargs", [{"atol": -1e-5}, {"rtol": -1.0}, {"atol": math.nan}])
def test_tolerance_rejects_invalid_values(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        Tolerance(**kwargs)


def test_dataclasses_are_frozen() -> None:
    tol = Tolerance()
    with pytest.raises(AttributeError):
        tol.atol = 1.0  # type: ignore[misc]
    r = cmp([1.0], [1.0])
    with pytest.raises(AttributeError):
        r.passed = False  # type: ignore[misc]


def test_worst_takes_max_of_errors_and_min_of_similarities() -> None:
    good = cmp([1.0, 2.0, 4.0], [1.0, 2.0, 4.0])
    bad = cmp([1.0, 2.0, 4.0], [1.0, 2.5, 3.0])
    nan = cmp([1.0, 2.0], [1.0, np.nan])
    w = worst([good, bad, nan])
    assert tuple(w) == METRIC_NAMES
    assert w["max_abs"] == INF and w["max_rel"] == INF and w["min_atol"] == INF
    assert w["mean_abs"] == 0.5  # from `bad`
    assert w["nan_inf_mismatch"] == 1.0
    assert w["cosine"] == bad.metrics["cosine"] < 1.0
    assert w["rel_lt_1e-3"] == pytest.approx(1.0 / 3.0)
    assert w["bitwise_equal"] == 0.0
    # a single comparison is its own worst
    assert worst([bad]) == bad.metrics
    # order does not matter
    assert worst([nan, bad, good]) == w


def test_worst_of_nothing_is_neutral() -> None:
    w = worst([])
    assert w == {
        "max_abs": 0.0,
        "max_rel": 0.0,
        "mean_abs": 0.0,
        "cosine": 1.0,
        "rel_lt_1e-3": 1.0,
        "bitwise_equal": 1.0,
        "nan_inf_mismatch": 0.0,
        "min_atol": 0.0,
        "min_rtol": 0.0,
    }
