"""Importance ratios under the behaviour policy (auditor.compare.ratios, the importance_ratios
comparator) against independent oracles: Gaussian pairs whose KL and E_q[w^2] have closed
forms, float64 Monte Carlo with 10^6 samples (scipy's densities, not ours) for the shares,
a categorical pair by hand, and the tanh head against metrics.tanh_gaussian_logp."""

from __future__ import annotations

import math

import numpy as np
import pytest
from auditor.plugins import default_comparators as dc
from scipy import stats

from auditor.compare import metrics, ratios

GAUSS = {"kind": "gaussian", "mean": "mean", "std": "std"}


def _gauss_outputs(mean: float, std: float, states: int) -> dict[str, np.ndarray]:
    return {"mean": np.full((states, 1), mean), "std": np.full((states, 1), std)}


def _by(checks: list) -> dict:
    return {c.metric: c for c in checks}


def _second_moment(mt: float, st: float, mi: float, si: float) -> float:
    """E_q[(p/q)^2] = integral p^2 / q for p = N(mt, st), q = N(mi, si) (needs 2/st^2 > 1/si^2)."""
    a = 2 / st**2 - 1 / si**2
    b = 2 * mt / st**2 - mi / si**2
    c = 2 * mt**2 / st**2 - mi**2 / si**2
    return si / (st**2 * math.sqrt(a)) * math.exp((b * b / a - c) / 2)


@pytest.mark.parametrize(
    ("mt", "st", "mi", "si"), [(0.1, 1.0, 0.0, 1.0), (0.0, 0.9, 0.05, 1.0), (0.3, 0.5, 0.2, 0.55)]
)
def test_gaussian_pair_matches_closed_forms_and_monte_carlo(mt, st, mi, si):
    states, k = 1000, 1000  # 10^6 samples
    train, infer = _gauss_outputs(mt, st, states), _gauss_outputs(mi, si, states)
    checks = _by(dc.importance_ratios(train, infer, {**GAUSS, "samples_per_state": k, "seed": 3}))
    # KL(q || p) in closed form, textbook form
    kl = math.log(st / si) + (si**2 + (mi - mt) ** 2) / (2 * st**2) - 0.5
    assert checks["kl_behaviour"].value == pytest.approx(kl, rel=1e-9)
    # the ESS estimates 1 / E_q[w^2]; E_q[w] = 1
    expected_ess = 1 / _second_moment(mt, st, mi, si)
    assert checks["ess"].value == pytest.approx(expected_ess, abs=5e-3)
    assert checks["ratio_mean"].value == pytest.approx(1.0, abs=5e-3)
    # shares against an independent float64 Monte Carlo with scipy's densities
    rng = np.random.default_rng(11)
    x = rng.normal(mi, si, 10**6)
    w = np.exp(stats.norm.logpdf(x, mt, st) - stats.norm.logpdf(x, mi, si))
    assert checks["ppo_clip_share"].value == pytest.approx(np.mean(np.abs(w - 1) > 0.2), abs=3e-3)
    assert checks["tis_share"].value == pytest.approx(np.mean(w > 2), abs=3e-3)
    assert checks["ratio_p99"].value == pytest.approx(np.quantile(w, 0.99), rel=2e-2)


def test_identical_sides_have_unit_weights():
    out = _gauss_outputs(0.2, 0.6, 64)
    c = _by(dc.importance_ratios(out, out, dict(GAUSS)))
    assert c["ratio_max"].value == 1.0 and c["ratio_mean"].value == 1.0
    assert c["ppo_clip_share"].value == 0.0 and c["ppo_clip_share"].passed
    assert c["ess"].value == 1.0 and c["kl_behaviour"].value == 0.0
    assert "256 samples, from the distributions' parameters" in c["ratio_mean"].message


def test_a_real_drift_is_judged_in_ppo_terms():
    c = _by(dc.importance_ratios(_gauss_outputs(0.5, 0.6, 64), _gauss_outputs(0.0, 0.6, 64), dict(GAUSS)))
    assert not c["ppo_clip_share"].passed and not c["ess"].passed
    assert "would clip" in c["ppo_clip_share"].message and "epsilon 0.2" in c["ppo_clip_share"].message


def test_categorical_pair_by_hand():
    """q = (1/2, 1/2), p = (1/4, 3/4): w = 1/2 or 3/2, both clipped at 0.2, none truncated at 2;
    ESS = 1 / E_q[w^2] = 1 / (0.5 * 0.25 + 0.5 * 2.25) = 0.8; KL(q||p) = 1/2 log 2 + 1/2 log(2/3)."""
    states = 2000
    train = {"logits": np.tile(np.log([0.25, 0.75]), (states, 1))}
    infer = {"logits": np.tile([0.0, 0.0], (states, 1))}
    c = _by(dc.importance_ratios(train, infer, {"kind": "categorical", "samples_per_state": 50}))
    assert c["ppo_clip_share"].value == 1.0 and c["tis_share"].value == 0.0
    assert c["ratio_max"].value == pytest.approx(1.5)
    assert c["ess"].value == pytest.approx(0.8, abs=5e-3)
    assert c["kl_behaviour"].value == pytest.approx(0.5 * math.log(2) + 0.5 * math.log(2 / 3), rel=1e-12)


def test_categorical_draws_follow_the_infer_distribution():
    d = ratios.distribution(
        ratios.Policy("categorical"), {"logits": np.tile(np.log([0.1, 0.2, 0.7]), (1000, 1))}
    )
    drawn = ratios.draw(d, 100, 0).actions
    share = np.bincount(drawn.ravel(), minlength=3) / drawn.size
    assert share == pytest.approx([0.1, 0.2, 0.7], abs=5e-3)


def test_tanh_weights_from_params_equal_the_squashed_log_densities():
    """For a = tanh(u) the Jacobian cancels: the params path equals the ratio of the two
    tanh-squashed densities (metrics.tanh_gaussian_logp, the probe's float64 reference)."""
    policy = ratios.Policy("tanh")
    train = ratios.distribution(policy, {"mean": np.full((50, 2), 0.31), "std": np.full((50, 2), 0.6)})
    infer = ratios.distribution(policy, {"mean": np.full((50, 2), 0.3), "std": np.full((50, 2), 0.61)})
    draws = ratios.draw(infer, 3, 5)
    from_params = ratios.log_weights_from_params(train, infer, draws)
    squashed = np.stack(
        [
            metrics.tanh_gaussian_logp(a, train.mean, train.std, 1e-12)
            - metrics.tanh_gaussian_logp(a, infer.mean, infer.std, 1e-12)
            for a in draws.actions
        ]
    )
    assert from_params == pytest.approx(squashed, abs=1e-8)
    # the in-graph path on the same log-probabilities gives the same weights
    lt = np.stack([metrics.tanh_gaussian_logp(a, train.mean, train.std, 1e-12) for a in draws.actions])
    li = np.stack([metrics.tanh_gaussian_logp(a, infer.mean, infer.std, 1e-12) for a in draws.actions])
    assert ratios.log_weights_in_graph(lt, li, draws) == pytest.approx(squashed, abs=1e-12)


def test_in_graph_log_probabilities_are_used_when_both_sides_have_them():
    out = _gauss_outputs(0.0, 1.0, 8)
    options = {**GAUSS, "logp": "logp", "actions": "actions", "samples_per_state": 2}
    train = {**out, "logp@behaviour": np.zeros((2, 8))}
    infer = {**out, "logp@behaviour": np.zeros((2, 8))}
    infer["logp@behaviour"][1, 3] = -math.log(1.5)  # w = 1.5 on one sample: clipped
    c = _by(dc.importance_ratios(train, infer, options))
    assert c["ppo_clip_share"].value == 1 / 16 and c["ratio_max"].value == pytest.approx(1.5)
    assert "models' own log-probabilities" in c["ratio_mean"].message


def test_invalid_distributions_are_clipped_truncated_and_named():
    train, infer = _gauss_outputs(0.0, 0.6, 10), _gauss_outputs(0.0, 0.6, 10)
    infer["std"][2] = 0.0
    train["mean"][7] = np.nan
    c = _by(dc.importance_ratios(train, infer, {**GAUSS, "samples_per_state": 4}))
    assert c["ppo_clip_share"].value == pytest.approx(8 / 40) and not c["ppo_clip_share"].passed
    assert c["tis_share"].value == pytest.approx(8 / 40)
    assert c["ratio_max"].value == math.inf and c["kl_behaviour"].value == math.inf
    assert c["ess"].value == pytest.approx(32 / 40)
    assert c["ppo_clip_share"].message.endswith("(0 expected), 8 of 40 without a valid weight")
    words = c["ess"].message
    assert "8 of 40 samples have no valid weight" in words
    assert "row 2: infer side: the std is not positive and finite (0)" in words
    assert "row 7: train side: the mean is not finite" in words
    # the reasons are said once, on the ESS; the other checks count the samples
    assert c["tis_share"].message.endswith("(8 of 40 samples have no valid weight)")
    assert not any(math.isnan(x.value) for x in c.values())


def test_a_policys_own_invalid_output_alike_on_both_sides_is_not_the_stacks():
    """#54: a declared std negative on 7 of 8 rows, bitwise equal on both sides, was judged a
    drift with "the stacks alone would clip 87.50%". Those states are the policy's own, left out
    and said; a state invalid on both sides with different bits is still the stacks'."""
    train, infer = _gauss_outputs(0.0, 0.6, 8), _gauss_outputs(0.0, 0.6, 8)
    train["std"][1:] = infer["std"][1:] = -0.5
    c = _by(dc.importance_ratios(train, infer, {**GAUSS, "samples_per_state": 4}))
    assert c["ppo_clip_share"].value == 0.0 and c["ppo_clip_share"].passed and c["ess"].passed
    assert c["samples"].value == 4 and c["invalid_samples"].value == 0
    assert c["ppo_clip_share"].message.endswith(
        "7 of 8 states have no valid distribution on either side, bit for bit alike: "
        "the policy's own output, left out"
    )
    infer["std"][3] = -0.25  # invalid on both sides, but not alike: the stacks differ there
    c = _by(dc.importance_ratios(train, infer, {**GAUSS, "samples_per_state": 4}))
    assert c["ppo_clip_share"].value == pytest.approx(4 / 8) and not c["ppo_clip_share"].passed
    assert "6 of 8 states have no valid distribution on either side" in c["ppo_clip_share"].message
    # every state the policy's own: nothing is left to judge the stacks by, and nothing blamed on them
    train["std"][:] = infer["std"][:] = np.nan
    c = _by(dc.importance_ratios(train, infer, {**GAUSS, "samples_per_state": 4}))
    assert c["ppo_clip_share"].value == 0.0 and c["samples"].value == 0


def test_rows_with_one_reason_are_said_together():
    train, infer = _gauss_outputs(0.0, 0.6, 300), _gauss_outputs(0.0, 0.6, 300)
    infer["std"][:256] = -6.3e-05
    words = _by(dc.importance_ratios(train, infer, dict(GAUSS)))["ess"].message
    assert "rows 0-255: infer side: the std is not positive and finite (-6.3e-05)" in words
    assert words.count("infer side") == 1


def test_non_finite_in_graph_log_probability_counts_as_clipped():
    out = _gauss_outputs(0.0, 1.0, 4)
    options = {**GAUSS, "logp": "logp", "actions": "actions", "samples_per_state": 1}
    lt = np.zeros((1, 4))
    li = np.array([[0.0, -np.inf, np.nan, 0.0]])
    c = _by(dc.importance_ratios({**out, "logp@behaviour": lt}, {**out, "logp@behaviour": li}, options))
    assert c["ppo_clip_share"].value == 0.5 and c["tis_share"].value == 0.5
    assert c["ratio_max"].value == math.inf and c["ess"].value == 0.5


def test_ratio_stats_do_not_overflow():
    s = ratios.ratio_stats(np.array([800.0, 0.0, -800.0]))
    assert s.ratio_max == math.inf or s.ratio_max > 1e300
    assert 0 < s.ess <= 1 / 3 + 1e-12 and not math.isnan(s.ess)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"kind": "beta"}, "option 'kind' must be one of gaussian, tanh, categorical"),
        ({**GAUSS, "std": "sigma"}, "the policy's output 'sigma' is not an output of the model"),
        ({**GAUSS, "samples_per_state": 0}, "samples_per_state"),
        ({**GAUSS, "clip_epsilon": 1.5}, "clip_epsilon"),
        ({**GAUSS, "tis_cap": 0.5}, "tis_cap"),
    ],
)
def test_bad_options_name_the_key(options, words):
    out = _gauss_outputs(0.0, 1.0, 4)
    with pytest.raises(ValueError, match=words.replace("(", r"\(")):
        dc.importance_ratios(out, out, options)


def test_log_std_output_is_exponentiated():
    policy = ratios.Policy.from_options({"kind": "gaussian", "log_std": "log_std"})
    d = ratios.distribution(policy, {"mean": np.zeros((2, 1)), "log_std": np.log(np.full((2, 1), 0.5))})
    assert d.std == pytest.approx(np.full((2, 1), 0.5))


def test_a_trainer_preset_judges_in_its_own_terms():
    """With ``trainer`` set, the share that trainer's correction removes is the verdict (PPO's
    clip share, truncation share and ESS are still recorded), against scipy's densities."""
    train, infer = _gauss_outputs(0.3, 0.5, 500), _gauss_outputs(0.2, 0.55, 500)
    options = {**GAUSS, "samples_per_state": 400, "seed": 5, "trainer": "openrlhf_icepop"}
    c = _by(dc.importance_ratios(train, infer, options))
    rng = np.random.default_rng(2)
    x = rng.normal(0.2, 0.55, 10**6)
    w = np.exp(stats.norm.logpdf(x, 0.3, 0.5) - stats.norm.logpdf(x, 0.2, 0.55))
    icepop = c["openrlhf_icepop_share"]
    assert icepop.value == pytest.approx(np.mean((w < 0.5) | (w > 5)), abs=2e-3) and icepop.value > 0.01
    assert not icepop.passed and icepop.limit == 0.0
    assert icepop.message.startswith("OpenRLHF (is_correction_type icepop, threshold 0.5 5.0) would mask")
    assert icepop.message.endswith("of the samples: steps with w outside [0.5, 5]")
    for name in ("ppo_clip_share", "tis_share", "ess"):
        assert c[name].passed and c[name].limit is None, name
    # every other trainer's share is recorded, not judged: TRL masks w > 3 of one-step sequences
    assert c["trl_seq_mask_share"].passed and c["trl_seq_mask_share"].limit is None
    assert c["trl_seq_mask_share"].value == pytest.approx(np.mean(w > 3), abs=2e-3)
    # a limit the share stays within passes
    loose = _by(dc.importance_ratios(train, infer, {**options, "max_removed_share": 0.5}))
    assert loose["openrlhf_icepop_share"].passed
    # without a trainer, PPO's own terms judge and the presets are figures
    ppo = _by(dc.importance_ratios(train, infer, {**GAUSS, "samples_per_state": 400, "seed": 5}))
    assert not ppo["ppo_clip_share"].passed and ppo["openrlhf_icepop_share"].limit is None


def test_an_unknown_trainer_is_named():
    out = _gauss_outputs(0.2, 0.6, 8)
    with pytest.raises(
        ValueError, match="option 'trainer' must be one of ppo, verl_token_tis, .* not 'verl'"
    ):
        dc.importance_ratios(out, out, {**GAUSS, "trainer": "verl"})


def test_actions_drawn_from_the_training_side_see_support_the_serving_side_never_samples():
    """The serving side masks an action the training side gives 0.1%: on its own draws every
    weight is 0.999 (nothing clipped, ESS 1), but 0.1% of the training side's draws are actions
    it gives probability 0, and that check fails saying so."""
    states = 2000
    p = np.log(np.array([0.001, 0.4995, 0.4995]))
    q = np.array([-np.inf, math.log(0.5), math.log(0.5)])
    train, infer = {"logits": np.tile(p, (states, 1))}, {"logits": np.tile(q, (states, 1))}
    c = _by(dc.importance_ratios(train, infer, {"kind": "categorical", "samples_per_state": 4}))
    assert c["ppo_clip_share"].value == 0.0 and c["ppo_clip_share"].passed
    assert c["ess"].value == pytest.approx(1.0) and c["ess"].passed
    unsupported = c["train_drawn_unsupported_share"].value
    assert unsupported == pytest.approx(0.001, abs=6e-4) and unsupported > 0  # 8,000 draws: ~8
    clip = c["train_drawn_ppo_clip_share"]
    assert not clip.passed and clip.value == unsupported and clip.limit == 0.0
    assert clip.message.startswith(
        "on 8000 actions drawn from the training side, the stacks alone would clip"
    )
    assert (
        "the serving side gives" in clip.message
        and "probability 0 (support it never samples)" in clip.message
    )
    assert c["train_drawn_kl"].value == math.inf


def test_training_side_draws_against_scipy():
    """p = N(0.3, 0.5) trains, q = N(0.2, 0.55) serves: under a ~ p the ratio p/q's clip share,
    truncation share and KL(p || q) meet an independent float64 Monte Carlo and the closed form;
    with a trainer chosen its correction's share judges instead."""
    train, infer = _gauss_outputs(0.3, 0.5, 500), _gauss_outputs(0.2, 0.55, 500)
    c = _by(dc.importance_ratios(train, infer, {**GAUSS, "samples_per_state": 400, "seed": 9}))
    rng = np.random.default_rng(4)
    x = rng.normal(0.3, 0.5, 10**6)
    w = np.exp(stats.norm.logpdf(x, 0.3, 0.5) - stats.norm.logpdf(x, 0.2, 0.55))
    assert c["train_drawn_ppo_clip_share"].value == pytest.approx(np.mean(np.abs(w - 1) > 0.2), abs=3e-3)
    assert c["train_drawn_tis_share"].value == pytest.approx(np.mean(w > 2), abs=2e-3)
    kl_pq = math.log(0.55 / 0.5) + (0.5**2 + 0.1**2) / (2 * 0.55**2) - 0.5
    assert c["train_drawn_kl"].value == pytest.approx(kl_pq, abs=2e-3)
    assert not c["train_drawn_ppo_clip_share"].passed and "train_drawn_removed_share" not in c
    options = {
        **GAUSS,
        "samples_per_state": 400,
        "seed": 9,
        "trainer": "openrlhf_icepop",
        "max_removed_share": 0.5,
    }
    c = _by(dc.importance_ratios(train, infer, options))
    assert c["train_drawn_ppo_clip_share"].limit is None
    removed = c["train_drawn_removed_share"]
    assert removed.value == pytest.approx(np.mean((w < 0.5) | (w > 5)), abs=2e-3) and removed.passed
