"""The comparators' math (auditor.compare.metrics) and the built-in comparators against hand-computed
cases: KL of known Gaussians, KS of known samples, log-probabilities of tanh-squashed actions
at the boundary, agreement, NaN masking, sign flips and clip disagreements."""

from __future__ import annotations

import math

import numpy as np
import pytest
from auditor.plugins import default_comparators as dc

from auditor.compare import metrics
from auditor.extend.manager import Plugins

INF, NAN = float("inf"), float("nan")


# -- Gaussian KL -------------------------------------------------------------------------------


def test_kl_of_identical_gaussians_is_exactly_zero():
    m = np.array([[0.3, -1.0], [2.0, 0.0]])
    s = np.array([[0.5, 1.0], [0.1, 3.0]])
    assert metrics.gaussian_kl(m, s, m, s).tolist() == [0.0, 0.0]


@pytest.mark.parametrize(
    ("m1", "s1", "m2", "s2", "expected"),
    [
        # shift only: (m1 - m2)^2 / (2 s2^2) = 1 / 2
        (0.0, 1.0, 1.0, 1.0, 0.5),
        # scale only: log 2 + 1/8 - 1/2
        (0.0, 1.0, 0.0, 2.0, math.log(2.0) + 1.0 / 8.0 - 0.5),
        # both: log(2/1) + (1 + 9) / 8 - 1/2
        (0.0, 1.0, 3.0, 2.0, math.log(2.0) + 10.0 / 8.0 - 0.5),
        # the other direction is not symmetric: log(1/2) + (4 + 9) / 2 - 1/2
        (3.0, 2.0, 0.0, 1.0, math.log(0.5) + 13.0 / 2.0 - 0.5),
    ],
)
def test_kl_of_known_gaussians(m1, s1, m2, s2, expected):
    got = metrics.gaussian_kl(np.array([m1]), np.array([s1]), np.array([m2]), np.array([s2]))
    assert got[0] == pytest.approx(expected, rel=1e-14)


def test_kl_sums_over_action_dims_per_sample():
    m1 = np.array([[0.0, 0.0]])
    s1 = np.array([[1.0, 1.0]])
    m2 = np.array([[1.0, 0.0]])
    s2 = np.array([[1.0, 2.0]])
    expected = 0.5 + (math.log(2.0) + 1.0 / 8.0 - 0.5)
    assert metrics.gaussian_kl(m1, s1, m2, s2).shape == (1,)
    assert metrics.gaussian_kl(m1, s1, m2, s2)[0] == pytest.approx(expected, rel=1e-14)


def test_kl_resolves_fp32_sized_differences():
    """The textbook form loses these to cancellation; KL ~ d^2 for a relative std change d."""
    s1 = np.array([0.6065306597126334])
    s2 = s1 * (1 + 1e-7)
    d = (s1 - s2) / s2
    expected = float((d - np.log1p(d) + d * d / 2)[0])  # ≈ d^2 = 1e-14
    got = metrics.gaussian_kl(np.zeros(1), s1, np.zeros(1), s2)[0]
    assert got == pytest.approx(1e-14, rel=1e-3) and got == pytest.approx(expected, rel=1e-6)
    textbook = math.log(s2[0] / s1[0]) + s1[0] ** 2 / (2 * s2[0] ** 2) - 0.5
    assert abs(textbook - 1e-14) > abs(got - 1e-14)


def test_kl_with_zero_std_on_the_infer_side_is_infinite():
    assert metrics.gaussian_kl(np.zeros(1), np.ones(1), np.zeros(1), np.zeros(1))[0] == INF


# -- log-probabilities -------------------------------------------------------------------------


def test_gaussian_logp_of_the_mean_and_one_std_away():
    s = 0.5
    at_mean = -math.log(s) - 0.5 * math.log(2 * math.pi)
    assert metrics.gaussian_logp(np.array([1.0]), np.array([1.0]), np.array([s]))[0] == pytest.approx(at_mean)
    assert metrics.gaussian_logp(np.array([1.5]), np.array([1.0]), np.array([s]))[0] == pytest.approx(
        at_mean - 0.5
    )


@pytest.mark.parametrize("u", [-30.0, -7.0, -1.0, 0.0, 0.5, 3.0, 7.0, 30.0])
def test_tanh_log_det_jacobian_is_log_one_minus_tanh_squared(u):
    exact = math.log(1.0 / math.cosh(u) ** 2)
    assert metrics.tanh_log_det_jacobian(np.array([u]))[0] == pytest.approx(exact, rel=1e-12)


def test_tanh_log_det_jacobian_is_finite_where_the_naive_form_is_not():
    # 1 - tanh(20)^2 rounds to 0 in float64; the stable form gives 2 (log 2 - 20 - softplus(-40)).
    assert 1.0 - math.tanh(20.0) ** 2 == 0.0
    assert metrics.tanh_log_det_jacobian(np.array([20.0]))[0] == pytest.approx(2 * (math.log(2) - 20.0))


def test_tanh_gaussian_logp_by_hand():
    a, m, s = 0.5, 0.2, 0.7
    u = 0.5 * math.log((1 + a) / (1 - a))
    expected = -0.5 * ((u - m) / s) ** 2 - math.log(s) - 0.5 * math.log(2 * math.pi) - math.log(1 - a * a)
    got = metrics.tanh_gaussian_logp(np.array([[a]]), np.array([[m]]), np.array([[s]]), eps=1e-6)
    assert got.shape == (1,) and got[0] == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("a", [1.0, -1.0, 1.5, -7.0])
def test_tanh_gaussian_logp_at_and_beyond_the_boundary_is_that_of_the_clipped_action(a):
    eps, m, s = 1e-6, 0.1, 0.6
    c = math.copysign(1.0 - eps, a)
    u = math.atanh(c)
    # 1 - c^2 = eps (2 - eps) exactly, written so the reference does not round 1 - c^2 itself.
    expected = (
        -0.5 * ((u - m) / s) ** 2 - math.log(s) - 0.5 * math.log(2 * math.pi) - math.log(eps * (2 - eps))
    )
    got = metrics.tanh_gaussian_logp(np.array([a]), np.array([m]), np.array([s]), eps=eps)[0]
    assert math.isfinite(got) and got == pytest.approx(expected, rel=1e-9)
    assert metrics.clip_action(np.array([a]), eps)[0] == c


def test_logp_diff_figures_by_hand():
    train = np.array([-1.0, -2.0, -3.0, -4.0])
    infer = np.array([-1.0, -2.1, -2.8, -4.0])
    d = train - infer  # 0, 0.1, -0.2, 0
    r = metrics.logp_diff(train, infer)
    assert r.max_abs == pytest.approx(0.2)
    assert r.mean_abs == pytest.approx(0.3 / 4)
    assert r.mean_exp_abs == pytest.approx((1 + math.exp(0.1) + math.exp(0.2) + 1) / 4)
    assert r.k3_kl == pytest.approx(float(np.mean(np.exp(d) - d - 1)))
    # |e^-2 - e^-2.1| = 0.0129 beats |e^-3 - e^-2.8| = 0.0110
    assert r.prob_diff_max == pytest.approx(math.exp(-2.0) - math.exp(-2.1))


def test_logp_diff_equal_sides_and_impossible_actions():
    lp = np.array([-1.5, -np.inf])
    r = metrics.logp_diff(lp, lp.copy())
    assert (r.max_abs, r.mean_abs, r.mean_exp_abs, r.k3_kl) == (0.0, 0.0, 1.0, 0.0)


@pytest.mark.parametrize("bad", [NAN, INF, -INF])
def test_logp_diff_with_a_nonfinite_side_is_infinite(bad):
    r = metrics.logp_diff(np.array([-1.0, -2.0]), np.array([-1.0, bad]))
    assert r.max_abs == r.mean_exp_abs == INF


# -- agreement, finiteness ---------------------------------------------------------------------


def test_agreement_rate_counts_whole_samples():
    train = np.array([[0.0, 1.0], [0.0, 1.0], [0.0, 1.0], [NAN, 0.0]])
    infer = np.array([[0.0, 1.0005], [0.002, 1.0], [0.0, 1.0], [NAN, 0.0]])
    # row 0 within 1e-3; row 1 off by 2e-3; row 2 equal; row 3 NaN never agrees
    assert metrics.agreement_rate(train, infer, 1e-3) == 0.5
    assert metrics.agreement_rate(train, infer, 1e-2) == 0.75


def test_agreement_rate_of_equal_infinities():
    assert metrics.agreement_rate(np.array([INF, -INF]), np.array([INF, -INF]), 0.0) == 1.0


def test_nonfinite_where_train_finite_is_one_directional():
    train = np.array([1.0, NAN, 2.0, INF, 3.0])
    infer = np.array([NAN, 1.0, -INF, INF, 3.0])
    assert metrics.nonfinite_where_train_finite(train, infer) == 2


# -- KS ----------------------------------------------------------------------------------------


def test_ks_of_disjoint_samples():
    # D = 1; exact two-sided p = 2 / C(6, 3) = 0.1
    r = metrics.ks_two_sample(np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0]))
    assert r.statistic == 1.0 and r.pvalue == pytest.approx(0.1)


def test_ks_of_identical_samples():
    x = np.random.default_rng(0).standard_normal(100)
    r = metrics.ks_two_sample(x, x.copy())
    assert r.statistic == 0.0 and r.pvalue == 1.0


def test_ks_statistic_by_hand():
    # ECDFs: x = {1, 2, 3, 4}, y = {3, 4, 5, 6}: largest gap after 2 (0.5 vs 0) and after 4 (1 vs 0.5)
    r = metrics.ks_two_sample(np.array([1.0, 2.0, 3.0, 4.0]), np.array([3.0, 4.0, 5.0, 6.0]))
    assert r.statistic == 0.5


def test_ks_leaves_out_nonfinite_values_and_fails_an_empty_side():
    r = metrics.ks_two_sample(np.array([1.0, 2.0, NAN]), np.array([1.0, 2.0, INF]))
    assert r.statistic == 0.0
    assert metrics.ks_two_sample(np.array([NAN]), np.array([1.0])) == metrics.KS(1.0, 0.0)


# -- normalizer figures ------------------------------------------------------------------------


def test_sign_flips_clip_disagreements_and_nan_masking():
    train = np.array([1.0, -2.0, 0.0, 10.0, -10.0, 3.0])
    infer = np.array([-1.0, -2.0, 5.0, 9.9, -10.0, NAN])
    assert metrics.sign_flips(train, infer) == 1  # only the first (zero and NaN do not count)
    assert metrics.clip_disagreements(train, infer, 10.0) == 1  # 10 vs 9.9
    assert metrics.nan_masked(np.array([True, True, False]), np.array([0.0, NAN, 1.0])) == 1


# -- the built-in comparators ------------------------------------------------------------------


def test_builtin_comparators_are_registered_through_the_hook():
    comparators = Plugins(entry_points=False).comparators()
    for name, fn in dc.COMPARATORS:
        assert comparators[name].compare is fn and comparators[name].description


def _by_metric(checks):
    return {(c.metric, c.output): c for c in checks}


def test_gaussian_kl_comparator_limits_follow_the_numbers():
    train = {"mean": np.array([[0.0], [0.0]]), "std": np.array([[1.0], [1.0]])}
    infer = {"mean": np.array([[0.0], [0.01]]), "std": np.array([[1.0], [1.0]])}
    # KL per sample: 0 and 0.01^2 / 2 = 5e-5
    checks = _by_metric(dc.gaussian_kl(train, infer, {"max_kl": 1e-4, "max_mean_kl": 1e-5}))
    kl_max, kl_mean = checks[("kl_max", None)], checks[("kl_mean", None)]
    assert kl_max.value == pytest.approx(5e-5) and kl_max.passed and kl_max.limit == 1e-4
    assert kl_mean.value == pytest.approx(2.5e-5) and not kl_mean.passed and kl_mean.message


def test_gaussian_kl_comparator_nan_fails():
    train = {"mean": np.array([0.0]), "std": np.array([1.0])}
    infer = {"mean": np.array([NAN]), "std": np.array([1.0])}
    checks = _by_metric(dc.gaussian_kl(train, infer, {}))
    assert checks[("kl_max", None)].value == INF and not checks[("kl_max", None)].passed


def test_logp_and_action_comparators():
    train = {"logp": np.array([-1.0, -2.0]), "action": np.array([[0.5], [0.25]])}
    infer = {"logp": np.array([-1.0, -2.02]), "action": np.array([[0.5], [0.2505]])}
    checks = _by_metric(
        dc.logp_diff(train, infer, {"max_abs": 0.01}) + dc.action_agreement(train, infer, {"atol": 1e-4})
    )
    assert checks[("logp_diff_max", "logp")].value == pytest.approx(0.02)
    assert not checks[("logp_diff_max", "logp")].passed
    assert checks[("exp_abs_logp_diff_mean", "logp")].value == pytest.approx((1 + math.exp(0.02)) / 2)
    assert checks[("logp_k3_kl", "logp")].limit is None and checks[("logp_k3_kl", "logp")].passed
    agreement = checks[("action_agreement", "action")]
    assert agreement.value == 0.5 and not agreement.passed and agreement.limit == 1.0


def test_ks_comparator_reads_its_output_option():
    train = {"noise": np.array([1.0, 2.0, 3.0])}
    infer = {"noise": np.array([4.0, 5.0, 6.0])}
    checks = _by_metric(dc.ks_two_sample(train, infer, {"output": "noise", "min_pvalue": 0.05}))
    assert (
        checks[("ks_pvalue", "noise")].value == pytest.approx(0.1) and checks[("ks_pvalue", "noise")].passed
    )
    checks = _by_metric(dc.ks_two_sample(train, infer, {"output": "noise", "min_pvalue": 0.2}))
    assert not checks[("ks_pvalue", "noise")].passed


def test_comparator_option_errors_name_the_option_and_output():
    with pytest.raises(ValueError, match="no output 'sample'"):
        dc.ks_two_sample({"x": np.zeros(2)}, {"x": np.zeros(2)}, {})
    with pytest.raises(ValueError, match="'max_kl' must be a float"):
        dc.gaussian_kl(
            {"mean": np.zeros(1), "std": np.ones(1)},
            {"mean": np.zeros(1), "std": np.ones(1)},
            {"max_kl": "x"},
        )


def test_normalizer_comparator_per_class():
    classes = np.array([["ordinary", "ordinary"], ["nan", "nan"], ["huge", "huge"]], dtype=object)
    train = {"normalized": np.array([[0.5, -0.5], [NAN, 10.0], [10.0, -10.0]])}
    infer = {"normalized": np.array([[0.5, 0.5], [10.0, 10.0], [9.0, -10.0]])}
    checks = _by_metric(dc.normalizer_classes(train, infer, {"classes": classes, "clip": 10.0}))
    get = lambda metric: checks[(metric, "normalized")]  # noqa: E731
    assert get("ordinary.sign_flips").value == 1 and not get("ordinary.sign_flips").passed
    assert get("ordinary.max_abs").value == 1.0 and get("ordinary.max_abs").limit is None
    assert get("nan.nan_inf_mismatch").value == 1
    # the train side masks one NaN (10.0), the infer side both: one more than the train side
    assert get("nan.masked_train").value == 1 and get("nan.masked_infer").value == 2
    assert get("nan.masked_infer").limit == 1 and not get("nan.masked_infer").passed
    assert get("huge.clip_disagreements").value == 1 and not get("huge.clip_disagreements").passed
    assert get("huge.sign_flips").value == 0 and get("huge.sign_flips").passed


def test_normalizer_comparator_needs_classes_shaped_like_the_output():
    with pytest.raises(ValueError, match="'classes' has shape"):
        dc.normalizer_classes(
            {"normalized": np.zeros((2, 2))}, {"normalized": np.zeros((2, 2))}, {"classes": []}
        )


def test_rounding_unit_is_the_coarser_dtype_s_ulp_at_the_value():
    train = np.array([20.0, -40.0, 0.5, np.inf], dtype=np.float16)
    infer = np.array([20.0, -40.0, 0.5, 1.0], dtype=np.float32)
    unit = metrics.rounding_unit(train, infer)
    # fp16 spacing: 2**-6 in [16, 32), 2**-5 in [32, 64), 2**-11 in [0.5, 1); nothing at inf
    assert unit.tolist() == [2.0**-6, 2.0**-5, 2.0**-11, 0.0]
    both32 = metrics.rounding_unit(train.astype(np.float32), infer)
    assert both32[0] == 2.0**-19  # float32 at 20
    assert not metrics.rounding_unit(np.ones(2), np.ones(2)).any()  # float64: nothing to widen


@pytest.mark.faults
def test_logp_diff_in_fp16_is_not_held_finer_than_fp16_can_show():
    """Measured on ONNX Runtime against MindSpore 2.0 (ppo_policy [fp16], the magnitude input
    class): logp near -33 differs by 0.0312, one fp16 ULP there, which max_abs = 0.01 failed.
    The limit at each element is at least max_ulps ULPs of fp16 at the value; the same
    difference at a value fp16 resolves finely (|logp| near 1) still fails, and so does
    anything in fp32."""
    at = lambda *v: np.array(v, dtype=np.float16)  # noqa: E731
    train, infer = {"logp": at(-33.0, -1.0)}, {"logp": at(-33.03125, -1.0)}
    check = _by_metric(dc.logp_diff(train, infer, {}))[("logp_diff_max", "logp")]
    assert check.passed and check.value == pytest.approx(2.0**-5)
    assert check.limit == pytest.approx(4 * 2.0**-5)
    strict = _by_metric(dc.logp_diff(train, infer, {"max_ulps": 0}))[("logp_diff_max", "logp")]
    assert not strict.passed and strict.limit == 0.01
    # the same 0.03 where fp16 shows 0.001: drift, and the check names that element
    near_one = {"logp": at(-33.0, -1.03125)}
    check = _by_metric(dc.logp_diff(train, near_one, {}))[("logp_diff_max", "logp")]
    assert not check.passed and check.value == pytest.approx(0.03125) and check.limit == 0.01
    f32 = {k: v.astype(np.float32) for k, v in train.items()}
    f32_infer = {k: v.astype(np.float32) for k, v in infer.items()}
    assert not _by_metric(dc.logp_diff(f32, f32_infer, {}))[("logp_diff_max", "logp")].passed
    with pytest.raises(ValueError, match="max_ulps"):
        dc.logp_diff(train, infer, {"max_ulps": -1})


def _gaussian_logp_in(dtype, action, mean, std):
    """A Gaussian head's logp evaluated with every operation rounded to ``dtype``."""
    a, m, s = (x.astype(dtype) for x in (action, mean, std))
    z = ((a - m) / s).astype(dtype)
    per = (dtype(-0.5) * z * z - np.log(s) - dtype(0.5 * math.log(2 * math.pi))).astype(dtype)
    return per.sum(axis=-1, dtype=dtype).astype(np.float16)


def test_two_fp16_evaluations_of_a_gaussian_logp_pass_the_default_and_not_a_finer_limit():
    """The default max_ulps rests on this: the same Gaussian logp computed with every op in
    fp16, and with fp32 intermediates rounded to fp16 at the end (a fused kernel), differ by up
    to 3 fp16 ULPs, which is above max_abs = 0.01 at |logp| of a few units."""
    rng = np.random.default_rng(0)
    shape = (4096, 2)
    action, mean = rng.normal(0, 1.5, shape), rng.normal(0, 1, shape)
    std = np.exp(rng.normal(0, 0.5, shape))
    action, mean, std = (x.astype(np.float16) for x in (action, mean, std))
    every_op, fused = (_gaussian_logp_in(t, action, mean, std) for t in (np.float16, np.float32))
    ulps = np.abs(every_op.astype(np.float64) - fused) / metrics.rounding_unit(every_op, fused)
    assert 2 <= ulps.max() <= 4
    checks = _by_metric(dc.logp_diff({"logp": every_op}, {"logp": fused}, {}))
    assert checks[("logp_diff_max", "logp")].passed and checks[("logp_diff_mean", "logp")].passed
    strict = _by_metric(dc.logp_diff({"logp": every_op}, {"logp": fused}, {"max_ulps": 0}))
    assert not strict[("logp_diff_max", "logp")].passed


def test_logp_diff_never_gets_an_infinite_or_hidden_limit():
    """Values so large that 4 ULPs overflow exp() leave max_mean_exp as it is (an infinite
    limit would let inf pass); with max_abs = 0 an exact element does not hide a differing one."""
    huge = np.array([3e38, -3e38], dtype=np.float32)
    checks = _by_metric(dc.logp_diff({"logp": huge}, {"logp": huge}, {}))
    assert checks[("exp_abs_logp_diff_mean", "logp")].limit == 1.001
    assert all(c.passed for c in checks.values())
    train, infer = np.array([-1.0, -2.0], np.float64), np.array([-1.0, -2.5], np.float64)
    check = _by_metric(dc.logp_diff({"logp": train}, {"logp": infer}, {"max_abs": 0}))[
        ("logp_diff_max", "logp")
    ]
    assert not check.passed and check.value == 0.5 and check.limit == 0
