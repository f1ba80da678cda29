"""verl's sequence-level rollout corrections on sampled episodes (auditor.compare.presets),
against their documented rules, worked by hand."""

from __future__ import annotations

import math
from types import SimpleNamespace

from auditor.compare.presets import PRESETS, EpisodeWeights, rejected_shares
from auditor.policy.rollout import sampled_words
from auditor.results import Episode, RolloutResult


def weights(log_w: list[float]) -> EpisodeWeights:
    return EpisodeWeights(sum(log_w), sum(log_w) / len(log_w), min(log_w))


def test_each_rule_as_verl_documents_it():
    seq, geo = PRESETS
    # 100 steps at ratio 1.01: product 2.7 (outside [0.5, 2]), geometric mean 1.01 (outside ±0.1%)
    drifting = weights([math.log(1.01)] * 100)
    assert seq.rejects(drifting) and geo.rejects(drifting)
    # 100 steps at 1.0005: product 1.05, geometric mean 1.0005: both keep it
    close = weights([math.log(1.0005)] * 100)
    assert not seq.rejects(close) and not geo.rejects(close)
    # one step 20,000x less likely among 99,999 exact ones: the geometric mean is 0.9999
    veto = weights([math.log(5e-5)] + [0.0] * 99_999)
    assert abs(veto.log_mean) < math.log(1.001)  # the band keeps it ...
    assert geo.rejects(veto)  # ... the veto (a step below 1e-4) does not
    assert seq.rejects(veto)  # its product is 5e-5
    # a step without a valid weight: nothing to keep it by
    assert seq.rejects(EpisodeWeights(math.inf, math.inf, -math.inf))


def test_shares_over_episodes_and_from_rollout_results():
    eps = [
        Episode(0, 3, (0.0,) * 3, (0.0,) * 3, (0.0,) * 3, 1.0, 1.0, None, None, *figures(log_w))
        for log_w in ([0.0, 0.0, 0.0], [0.9, 0.0, 0.0], [1e-4, 1e-4, 1e-4], [-0.5, -0.5, 0.0])
    ]
    shares = rejected_shares([e.weights() for e in eps])
    # by hand: products 1, e^0.9 = 2.46, e^3e-4, e^-1 = 0.37; geometric means 1, e^0.3, e^1e-4, e^-0.33
    assert shares == {"verl_seq_rs": 2 / 4, "verl_geo_rs": 2 / 4}
    result = RolloutResult(
        "p", "t", "i", "ppo_policy", "fp32", "Pendulum-v1", "consistent", "", 0.1, 0.1, tuple(eps)
    )
    summary = result.sampled_summary()
    assert summary["verl_seq_rs_share"] == 0.5 and summary["verl_geo_rs_share"] == 0.5
    assert math.isclose(summary["max_abs_log_ratio_mean"], 1 / 3)  # the fourth: (-0.5 - 0.5 + 0) / 3


def figures(log_w: list[float]) -> tuple:
    """An episode's sampled figures (log_ratio_sum, ppo_clip_share, ess, mean, min, max)."""
    return (sum(log_w), 0.0, 1.0, sum(log_w) / len(log_w), min(log_w), max(log_w))


def test_the_rollout_line_says_what_verl_would_reject():
    eps = [
        Episode(s, 3, (0.0,) * 3, (0.0,) * 3, (0.0,) * 3, 1.0, 1.0, None, None, *figures(log_w))
        for s, log_w in enumerate(([0.0, 0.0, 0.0], [0.9, 0.0, 0.0]))
    ]
    line = sampled_words(eps, SimpleNamespace(clip_epsilon=0.2))
    assert line.endswith(
        "verl would reject 50% (sequence ratio outside [0.5, 2]) and 50% (geometric mean outside "
        "[0.999, 1.001] or a step below 1e-4) of the episodes"
    )
