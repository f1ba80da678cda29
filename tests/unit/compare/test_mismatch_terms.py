"""The mismatch under trainers' names (auditor.compare.ratios.mismatch_terms), recomputed from
each source's published per-sample formula, one sample at a time with the math module, and
checked against closed-form divergences of two Gaussians where the samples are many."""

from __future__ import annotations

import math
from decimal import Decimal, getcontext

import numpy as np
import pytest

from auditor.compare.metrics import logp_diff
from auditor.compare.ratio_names import BANDS, band_name
from auditor.compare.ratios import mismatch_terms


def oracle(log_w: list[float], cap: float) -> dict[str, float]:
    """Each term as its source writes it, per sample (w = exp(log w) = p/q, q the sampler), in
    60-digit decimals: the formulas as written, with no cancellation left at that precision."""
    getcontext().prec = 60
    gs = [Decimal(g) for g in log_w]
    w = [g.exp() for g in gs]
    n = len(w)
    one, two = Decimal(1), Decimal(2)
    m = [(one + x) / two for x in w]  # the mixture (p + q) / 2 over q

    def mean(values) -> float:
        return float(sum(values) / n)

    out = {
        # Schulman's "Approximating KL divergence" k1, k2, k3 (verl's rollout rejection names)
        "kl_k1": mean(-g for g in gs),
        "kl_k2": mean(g * g / two for g in gs),
        "kl_k3": mean(x - one - g for x, g in zip(w, gs, strict=True)),
        # KL(p || q) = E_q[w log w], with E_q[1 - w] = 0 added
        "kl_train_infer": mean(x * g - x + one for x, g in zip(w, gs, strict=True)),
        # JS = KL(q || m) / 2 + KL(p || m) / 2, both under q
        "js": mean((one / mi).ln() / two + x * (x / mi).ln() / two for x, mi in zip(w, m, strict=True)),
        "chi2": mean((x - one) ** 2 for x in w),
        # NeMo RL: token_mult_prob_error = mean(exp(|logp_generation - logp_train|))
        "mult_prob_error": mean(abs(g).exp() for g in gs),
        # NeMo RL loss_functions.py: policy_kl_error = calculate_kl(prev, gen, "k3") with
        # logr = gen - prev: exp(logr) - 1 - logr
        "policy_kl_error": mean((-g).exp() - one + g for g in gs),
        # NeMo RL: log_mixture = log(0.5 exp(prev) + 0.5 exp(gen)); JS = mean(0.5 k3(prev - m)
        # + 0.5 k3(gen - m)); in units of q (gen): prev = log w, gen = 0
        "js_divergence_error": mean(
            ((x / mi) - (x / mi).ln() - one) / two + ((one / mi) - (one / mi).ln() - one) / two
            for x, mi in zip(w, m, strict=True)
        ),
        # verl rollout_corr_helper.py: chi2_token = mean(exp(clamp(log r, -20, 20))^2) - 1
        "chi2_token": mean(max(min(g, Decimal(20)), Decimal(-20)).exp() ** 2 - one for g in gs),
        # TRL grpo_trainer.py: sampling_logp_difference mean and max of |old - sampling|
        "abs_log_ratio_mean": mean(abs(g) for g in gs),
        "abs_log_ratio_max": float(max(abs(g) for g in gs)),
    }
    ws = sorted(float(x) for x in w)
    out["ratio_min"] = ws[0]
    out["ratio_p01"] = ws[math.floor(0.01 * (n - 1))]  # numpy's "lower": the sample at or below
    out["low_share"] = sum(x < 1 / cap for x in ws) / n
    out["tiny_share"] = sum(x < 1e-4 for x in ws) / n
    for d in BANDS:
        out[band_name(d)] = sum(abs(x - 1) <= d for x in ws) / n
    return out


@pytest.mark.parametrize("spread", [1e-8, 1e-6, 1e-3, 0.03, 0.05, 0.7, 4.0])
def test_every_term_agrees_with_its_published_formula(spread):
    log_w = np.random.RandomState(7).normal(0.0, spread, 1024)
    found = mismatch_terms(log_w, 2.0).figures()
    expected = oracle(log_w.tolist(), 2.0)
    assert set(found) == set(expected)
    for name, value in expected.items():
        assert found[name] == pytest.approx(value, rel=1e-12, abs=1e-300), name


def test_the_lower_quantile_is_the_sample_at_its_rank():
    log_w = np.log(np.arange(1, 201, dtype=np.float64) / 100)  # w = 0.01 .. 2.00
    terms = mismatch_terms(log_w)
    assert terms.ratio_min == pytest.approx(0.01) and terms.ratio_p01 == pytest.approx(0.02)
    assert terms.low_share == 49 / 200  # w < 0.5: 0.01 .. 0.49
    bands = mismatch_terms(np.log([1.0, 1.0005, 0.995, 1.03, 1.2, 0.3]))
    assert bands.band_kept == (2 / 6, 3 / 6, 4 / 6)  # ±0.1%, ±1%, ±5%


def test_on_many_samples_they_estimate_the_gaussians_closed_forms():
    """q = N(0, 1) samples actions, p = N(0.1, 1.05): the estimates meet the closed forms."""
    rng = np.random.RandomState(3)
    a = rng.standard_normal(400_000)
    mq, sq, mp, sp = 0.0, 1.0, 0.1, 1.05

    def logpdf(x, m, s):
        return -0.5 * ((x - m) / s) ** 2 - math.log(s) - 0.5 * math.log(2 * math.pi)

    terms = mismatch_terms(logpdf(a, mp, sp) - logpdf(a, mq, sq))
    kl_qp = math.log(sp / sq) + (sq**2 + (mq - mp) ** 2) / (2 * sp**2) - 0.5
    kl_pq = math.log(sq / sp) + (sp**2 + (mp - mq) ** 2) / (2 * sq**2) - 0.5
    assert terms.kl_k3 == pytest.approx(kl_qp, rel=0.03)
    assert terms.kl_k1 == pytest.approx(kl_qp, rel=0.2)
    assert terms.kl_train_infer == pytest.approx(kl_pq, rel=0.03)
    # JS lies between 0 and ln 2, and for close distributions near (KL_qp + KL_pq) / 8
    assert terms.js == pytest.approx((kl_qp + kl_pq) / 8, rel=0.1)


def test_a_zero_weight_is_valid_and_an_invalid_one_makes_every_divergence_inf():
    zero = mismatch_terms(np.array([0.0, -np.inf, 0.0, 0.0]))
    assert zero.ratio_min == 0.0 and zero.low_share == zero.tiny_share == 0.25
    assert math.isinf(zero.kl_k1) and math.isinf(zero.kl_k3) and math.isinf(zero.mult_prob_error)
    assert zero.kl_train_infer == pytest.approx(0.25)  # w log w - w + 1 is 1 at w = 0
    assert zero.js == pytest.approx(0.25 * 0.5 * math.log(2))
    bad = mismatch_terms(np.array([0.0, np.nan, 0.0, np.inf]))
    assert all(math.isinf(getattr(bad, k)) for k in ("kl_k1", "kl_k3", "js", "chi2", "kl_train_infer"))
    assert bad.low_share == bad.tiny_share == 0.5  # no valid weight: rejected
    assert bad.band_kept == (0.5, 0.5, 0.5)


def test_equal_stacks_give_the_neutral_values():
    terms = mismatch_terms(np.zeros(64))
    assert (terms.kl_k1, terms.kl_k3, terms.js, terms.chi2, terms.kl_train_infer) == (0, 0, 0, 0, 0)
    assert terms.mult_prob_error == 1.0 and terms.band_kept == (1.0, 1.0, 1.0)


def test_the_logp_comparators_k3_is_the_same_accurate_term():
    """logp_diff's k3 (the served log-probabilities' own comparison) uses the same per-sample
    term: at fp32 stacks' differences, mean(expm1(d) - d) as written is off in its 11th digit."""
    d = np.random.RandomState(5).normal(0.0, 1e-7, 256)
    train = np.full(256, -1.0) + d
    got = logp_diff(train, np.full(256, -1.0)).k3_kl
    expected = oracle((train + 1.0).tolist(), 2.0)["kl_k3"]  # the same d, as the subtraction gives it
    assert got == pytest.approx(expected, rel=1e-12)
    assert mismatch_terms(train + 1.0).kl_k3 == got


def test_each_trainers_logged_names_read_the_figures_that_are_their_values():
    """verl's rollout_corr/*, NeMo RL's and TRL's logged names map to the figures computed by
    their formulas above, in --json (``in_trainer_terms``) and ``auditor show``."""
    from auditor.compare.ratio_names import TERMS, TRAINER_NAMES, by_trainer

    log_w = np.random.RandomState(2).normal(0.0, 0.02, 512)
    figures = mismatch_terms(log_w).figures()
    named = by_trainer(figures)
    assert set(named) == {"verl", "NeMo RL", "TRL"}
    assert {ours for names in TRAINER_NAMES.values() for ours in names.values()} <= set(TERMS)
    expected = oracle(log_w.tolist(), 2.0)
    assert named["verl"]["rollout_corr/kl"] == pytest.approx(expected["kl_k1"], rel=1e-12)
    assert named["verl"]["rollout_corr/k3_kl"] == pytest.approx(expected["kl_k3"], rel=1e-12)
    assert named["NeMo RL"]["gen_kl_error"] == pytest.approx(expected["kl_k3"], rel=1e-12)
    assert named["NeMo RL"]["token_mult_prob_error"] == pytest.approx(expected["mult_prob_error"], rel=1e-12)
    assert named["TRL"]["sampling/sampling_logp_difference/max"] == float(np.max(np.abs(log_w)))
    assert by_trainer({"ratio_mean": 1.0}) == {}
