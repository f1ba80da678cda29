"""Policies as trainers write them, in PPO's importance ratios (auditor.compare.ratios and the
importance_ratios comparator): a Gaussian with a state-dependent std, a scalar std, a
per-action std or log_std vector; a tanh-squashed head; a categorical head with masked actions
(a -inf logit is probability 0, never an invalid distribution); and a row invalid on either side
counted the same on both weight paths. Each against an oracle written here with scipy, sharing
no code with the module."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special, stats

from auditor.compare import ratios
from auditor.extend.manager import Plugins

RATIOS = Plugins(entry_points=False).comparators()["importance_ratios"]
GAUSS = {"kind": "gaussian", "mean": "mean", "std": "std"}


def _scipy_log_w(u: np.ndarray, m_t, s_t, m_i, s_i) -> np.ndarray:
    """log N(u; train) - log N(u; infer), summed over the action's dimensions (scipy)."""
    return (stats.norm.logpdf(u, m_t, s_t) - stats.norm.logpdf(u, m_i, s_i)).sum(axis=-1)


@pytest.mark.parametrize(
    "std_train, std_infer",
    [
        (np.full((6, 2), 0.5), np.full((6, 2), 0.5)),  # per state
        (np.float64(0.5), np.array([0.5])),  # a scalar, as () and as (1,)
        (np.array([0.4, 0.7]), np.array([0.4, 0.7])),  # per action dimension: a parameter vector
        (np.array([[0.4, 0.7]]), np.array([0.4, 0.7])),  # (1, act_dim) and (act_dim,)
    ],
)
def test_a_gaussians_std_may_be_per_state_one_value_or_one_per_action(std_train, std_infer) -> None:
    rng = np.random.RandomState(3)
    mean_t = rng.normal(0, 1, (6, 2))
    mean_i = mean_t + rng.normal(0, 1e-3, (6, 2))
    policy = ratios.Policy.from_options(GAUSS)
    t = ratios.distribution(policy, {"mean": mean_t, "std": std_train})
    i = ratios.distribution(policy, {"mean": mean_i, "std": std_infer})
    assert t.valid.all() and i.valid.all() and t.std.shape == (6, 2)
    draws = ratios.draw(i, 4, 0)
    got = ratios.log_weights_from_params(t, i, draws)
    s_t, s_i = np.broadcast_to(std_train, (6, 2)), np.broadcast_to(std_infer, (6, 2))
    want = np.stack([_scipy_log_w(u, mean_t, s_t, mean_i, s_i) for u in draws.u])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_a_log_std_vector_of_act_dim_is_per_action_even_when_act_dim_equals_the_batch() -> None:
    mean = np.zeros((3, 3))
    log_std = np.log([0.1, 1.0, 10.0])
    d = ratios.distribution(
        ratios.Policy.from_options({**GAUSS, "std": None, "log_std": "ls"}), {"mean": mean, "ls": log_std}
    )
    np.testing.assert_allclose(d.std, np.tile([0.1, 1.0, 10.0], (3, 1)), rtol=1e-15)


def test_a_spread_that_fits_no_mean_is_said() -> None:
    with pytest.raises(
        ValueError, match=r"output 'std' has shape \[4\], which fits no mean of shape \[6, 2\]"
    ):
        ratios.distribution(ratios.Policy.from_options(GAUSS), {"mean": np.zeros((6, 2)), "std": np.ones(4)})


def test_the_comparator_runs_a_per_action_std_vector_end_to_end() -> None:
    """The usual exported PPO actor: a state-independent std vector (act_dim 2), no error."""
    mean = np.random.RandomState(0).normal(0, 1, (64, 2))
    sides = {"mean": mean, "std": np.array([0.3, 0.6])}
    checks = {c.metric: c for c in RATIOS.compare(sides, dict(sides), dict(GAUSS))}
    assert checks["ppo_clip_share"].value == 0.0 and checks["ess"].value == pytest.approx(1.0)


def test_a_tanh_heads_weight_is_the_gaussians_ratio_at_u_in_both_paths() -> None:
    """tanh's Jacobian is the same on both sides and cancels: the parameters' weight is the
    Gaussians' ratio at u, and the models' own log-probabilities of a = tanh(u) (with the
    Jacobian, as the cell computes it) give the same weight."""
    rng = np.random.RandomState(1)
    m_t = rng.normal(0, 0.5, (8, 1))
    m_i, s = m_t + 1e-3, np.full((8, 1), 0.4)
    policy = ratios.Policy.from_options({"kind": "tanh", "mean": "mean", "std": "std"})
    t = ratios.distribution(policy, {"mean": m_t, "std": s})
    i = ratios.distribution(policy, {"mean": m_i, "std": s})
    draws = ratios.draw(i, 4, 7)
    assert np.allclose(draws.actions, np.tanh(draws.u))
    by_params = ratios.log_weights_from_params(t, i, draws)
    np.testing.assert_allclose(
        by_params, np.stack([_scipy_log_w(u, m_t, s, m_i, s) for u in draws.u]), rtol=1e-12
    )

    def cell_logp(mean: np.ndarray, a: np.ndarray) -> np.ndarray:  # log N(atanh a) - log(1 - a^2)
        u = np.arctanh(a)
        return (stats.norm.logpdf(u, mean, s) - np.log1p(-a * a)).sum(axis=-1)

    in_graph = ratios.log_weights_in_graph(
        np.stack([cell_logp(m_t, a) for a in draws.actions]),
        np.stack([cell_logp(m_i, a) for a in draws.actions]),
        draws,
    )
    np.testing.assert_allclose(in_graph, by_params, rtol=1e-9, atol=1e-9)


def test_a_masked_action_is_probability_zero_not_an_invalid_distribution() -> None:
    logits = np.array([[0.5, -np.inf, 1.0], [-np.inf, 2.0, 0.0], [1.0, 1.0, -np.inf]] * 4)
    policy = ratios.Policy.from_options({"kind": "categorical", "logits": "logits"})
    d = ratios.distribution(policy, {"logits": logits})
    assert d.valid.all() and not d.problems
    np.testing.assert_allclose(np.exp(d.log_probs), special.softmax(logits, axis=1), atol=1e-15)
    draws = ratios.draw(d, 64, 0)
    assert not np.any(np.isinf(logits[np.arange(12)[None, :], draws.actions]))  # never draws a masked one
    # Two identical sides: nothing is clipped, every sample counts, no KL.
    checks = {
        c.metric: c
        for c in RATIOS.compare({"logits": logits}, {"logits": logits.copy()}, {"kind": "categorical"})
    }
    assert checks["ppo_clip_share"].value == 0 and checks["ess"].value == pytest.approx(1.0)
    assert checks["kl_behaviour"].value == 0 and checks["ess"].passed


def test_an_action_masked_on_the_train_side_only_weighs_zero_and_is_clipped() -> None:
    infer = np.array([[0.0, 0.0]] * 16)
    train = np.array([[0.0, -np.inf]] * 16)  # the trainer masks action 1; serving draws it half the time
    policy = ratios.Policy.from_options({"kind": "categorical", "logits": "logits"})
    t, i = ratios.distribution(policy, {"logits": train}), ratios.distribution(policy, {"logits": infer})
    draws = ratios.draw(i, 8, 3)
    s = ratios.ratio_stats(ratios.log_weights_from_params(t, i, draws))
    w = np.where(draws.actions == 1, 0.0, 2.0).ravel()  # oracle: p_t / p_i per drawn action
    assert s.invalid == 0
    assert s.ppo_clip_share == pytest.approx(1.0)  # 0 and 2 are both beyond 1 +- 0.2
    assert s.tis_share == pytest.approx(np.mean(w > 2.0))
    assert s.ratio_mean == pytest.approx(w.mean(), rel=1e-12)
    assert s.ess == pytest.approx(w.sum() ** 2 / (w.size * (w * w).sum()), rel=1e-12)
    kl = ratios.behaviour_kl(t, i)  # KL(infer || train) = inf where the train side masks what infer draws
    assert np.all(np.isinf(kl)) and np.all(kl > 0)
    assert stats.entropy([0.5, 0.5], [1.0, 0.0]) == np.inf  # scipy agrees


def test_a_row_invalid_on_either_side_counts_the_same_on_both_weight_paths() -> None:
    """The train side's std is not positive on 1 of 8 rows: the parameters' path and the models'
    own log-probabilities (finite there: a cell computing logp from log_std) agree: 12.5% of
    samples without a valid weight, clipped, and an ESS of 0.875."""
    rng = np.random.RandomState(0)
    mean = rng.normal(0, 1, (8, 1))
    std_t = np.full((8, 1), 0.5)
    std_t[3] = -0.5
    train, infer = {"mean": mean, "std": std_t}, {"mean": mean.copy(), "std": np.full((8, 1), 0.5)}
    options = {**GAUSS, "samples_per_state": 4, "seed": 0}
    by_params = {c.metric: c for c in RATIOS.compare(train, infer, dict(options))}
    policy = ratios.Policy.from_options(options)
    draws = ratios.draw(ratios.distribution(policy, infer), 4, 0)
    logp = np.stack(
        [stats.norm.logpdf(a, mean, 0.5).sum(axis=-1) for a in draws.actions]
    )  # finite everywhere
    graph = {"kind": "gaussian", "mean": "mean", "std": "std", "logp": "logp", "actions": "actions"}
    sampled = f"logp{ratios.BEHAVIOUR}"
    in_graph = {
        c.metric: c
        for c in RATIOS.compare(
            {**train, sampled: logp}, {**infer, sampled: logp.copy()}, {**options, **graph}
        )
    }
    assert "own log-probabilities" in in_graph["ratio_mean"].message
    for checks in (by_params, in_graph):
        assert checks["ppo_clip_share"].value == pytest.approx(0.125)
        assert checks["ess"].value == pytest.approx(0.875)
        assert (
            not checks["ess"].passed and "row 3: train side: the std is not positive" in checks["ess"].message
        )
