"""The trainers' rollout corrections (auditor.compare.presets, auditor.compare.corrections)
against each trainer's rule as its own code writes it, re-derived here step by step in plain
Python (no numpy, no code of the auditor's), and worked by hand."""

from __future__ import annotations

import dataclasses
import math
import random
from types import SimpleNamespace

import numpy as np
import pytest

from auditor.compare import corrections
from auditor.compare.presets import BY_NAME, PRESETS, SEQUENCE, TOKEN
from auditor.policy.rollout import SampledLimits, sampled_words, verdict
from auditor.results import Episode, RolloutResult, removed_summary


def _clamp(x: float, bound: float = 20.0) -> float:
    return max(-bound, min(bound, x))


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


# Each oracle takes one sequence's log-weights (train - rollout) and returns, per step, whether
# the trainer drops it from its loss. Source lines in the comments.
def verl_token_tis(g: list[float]) -> list[bool]:
    # verl rollout_corr_helper: rollout_is="token": weight clamp(exp(log r), max=threshold 2.0)
    return [_exp(_clamp(x)) > 2.0 for x in g]


def verl_seq_rs(g: list[float]) -> list[bool]:
    # seq_sum_k1, "0.5_2.0": stat = sum(-log r); keep log(0.5) <= stat <= log(2)
    stat = sum(-_clamp(x) for x in g)
    return [not (math.log(0.5) <= stat <= math.log(2.0))] * len(g)


def verl_geo_rs(g: list[float]) -> list[bool]:
    # seq_mean_k1, "0.999_1.001": stat = mean(-log r); keep log(0.999) <= stat <= log(1.001)
    stat = sum(-_clamp(x) for x in g) / len(g)
    return [not (math.log(0.999) <= stat <= math.log(1.001))] * len(g)


def verl_k3_rs(g: list[float]) -> list[bool]:
    # seq_mean_k3, 0.01: stat = mean(exp(log r) - 1 - log r); keep stat <= 0.01
    stat = sum(math.exp(_clamp(x)) - 1.0 - _clamp(x) for x in g) / len(g)
    return [not stat <= 0.01] * len(g)


def trl_seq_mask(g: list[float]) -> list[bool]:
    # grpo_trainer: sequence_mask: exp(sum of per-token logps diff); masked where > clip_max 3.0
    # (clip_min None: -inf)
    return [_exp(sum(g)) > 3.0] * len(g)


def openrlhf_icepop(g: list[float]) -> list[bool]:
    # loss.py icepop: vllm_is = exp(log ratio); mask = (vllm_is >= 0.5) & (vllm_is <= 5.0)
    return [not (0.5 <= _exp(x) <= 5.0) for x in g]


def skyrl_geo_mask(g: list[float]) -> list[bool]:
    # off_policy_correction_utils: geo_mean = safe_exp(sum / n); masked outside [0.99, 1.01];
    # outlier tokens: safe_exp(log r) > 100 or < 1e-4 masks the sequence
    geo = math.exp(_clamp(sum(g) / len(g)))
    out = geo > 1.01 or geo < 0.99 or any(not 1e-4 <= math.exp(_clamp(x)) <= 100.0 for x in g)
    return [out] * len(g)


def nemo_seq_logprob_error(g: list[float]) -> list[bool]:
    # grpo.py: seq_mult_prob_error = mean(exp(|gen - prev|)); kept where <= threshold 2
    err = sum(_exp(abs(x)) for x in g) / len(g)
    return [not err <= 2.0] * len(g)


ORACLES = {f.__name__: f for f in (
    verl_token_tis, verl_seq_rs, verl_geo_rs, verl_k3_rs, trl_seq_mask, openrlhf_icepop,
    skyrl_geo_mask, nemo_seq_logprob_error,
)}  # fmt: skip


def test_every_preset_has_an_oracle_here():
    assert set(ORACLES) == {p.name for p in PRESETS}
    assert {p.level for p in PRESETS} == {TOKEN, SEQUENCE}


@pytest.mark.parametrize("name", sorted(ORACLES))
def test_each_preset_removes_what_its_trainer_removes(name):
    """Sequences of 1-40 steps whose log-weights spread from 1e-5 (two fp32 stacks) to 10 (a
    broken kernel), around each threshold the trainers set: every step's verdict agrees."""
    rng = random.Random(51)
    preset, oracle = BY_NAME[name], ORACLES[name]
    seen = set()
    for _ in range(400):
        steps = rng.choice((1, 2, 5, 40))
        scale = rng.choice((1e-5, 3e-4, 1e-3, 5e-3, 0.05, 0.7, 3.0, 10.0))
        bias = rng.choice((0.0, 0.0, 1e-3, -1e-3, 0.4, -0.7))
        g = [bias + rng.gauss(0.0, scale) for _ in range(steps)]
        got = corrections.removed(preset, np.array([g])).tolist()[0]
        assert got == oracle(g), (name, g)
        seen.add(any(got))
    assert seen == {True, False}  # both verdicts were exercised


def test_by_hand():
    def drops(name: str, ratios: list[float]) -> bool:
        return bool(corrections.removed(BY_NAME[name], np.log(np.array([ratios]))).any())

    # 100 steps at 1.01: sequence ratio 2.7 (> 2), geometric mean 1.01 (> 1.001)
    assert drops("verl_seq_rs", [1.01] * 100) and drops("verl_geo_rs", [1.01] * 100)
    # 100 steps at 1.0005: ratio 1.05, geometric mean 1.0005: verl keeps it, so does SkyRL
    for name in ("verl_seq_rs", "verl_geo_rs", "skyrl_geo_mask", "trl_seq_mask", "verl_k3_rs"):
        assert not drops(name, [1.0005] * 100), name
    # TRL masks only above 3 (no lower bound by default): ratio 0.01 kept, 3.5 masked
    assert not drops("trl_seq_mask", [0.01]) and drops("trl_seq_mask", [3.5])
    # OpenRLHF's IcePop band [0.5, 5] is per step: 4.9 kept, 0.49 masked
    assert not drops("openrlhf_icepop", [4.9, 1.0]) and drops("openrlhf_icepop", [0.49, 1.0])
    # SkyRL: one step at 5e-5 among 999 exact ones keeps the geometric mean at 0.99: the
    # outlier rule masks the sequence all the same
    assert drops("skyrl_geo_mask", [5e-5] + [1.0] * 999)
    # NeMo RL: mean exp|log w| of (1.5, 1/1.5, 2.9) = (1.5 + 1.5 + 2.9) / 3 = 1.97: kept; of
    # (1.5, 1/1.5, 3.1), 2.03: masked
    nemo = "nemo_seq_logprob_error"
    assert not drops(nemo, [1.5, 1 / 1.5, 2.9]) and drops(nemo, [1.5, 1 / 1.5, 3.1])
    # k3 of a ratio 1.1 is 1.1 - 1 - log 1.1 = 0.00469: kept at 0.01; of 1.2, 0.0177: rejected
    assert not drops("verl_k3_rs", [1.1]) and drops("verl_k3_rs", [1.2])


def test_a_step_without_a_valid_weight_is_never_kept():
    for p in PRESETS:
        r = corrections.removed(p, np.array([[0.0, np.nan, 0.0], [0.0, np.inf, 0.0]]))
        assert r[:, 1].all(), p.name
        assert r.all() == (p.level == SEQUENCE), p.name
    # a weight of 0 (the train side gives the action probability 0) is a valid weight: verl's
    # token TIS and TRL's sequence mask bound it from above only and keep it; every other drops it
    zero = np.array([[-np.inf, 0.0]])
    kept = {p.name for p in PRESETS if not corrections.removed(p, zero).any()}
    assert kept == {"trl_seq_mask", "verl_token_tis"}


def test_shares_of_samples_and_of_sequences():
    g = np.log(np.array([[1.0, 1.0, 1.0], [2.5, 1.0, 1.0], [1.0005] * 3, [0.6, 0.6, 1.0]]))
    shares = corrections.removed_shares(g)
    # verl's token TIS truncates the single 2.5 step: 1 of 12 steps, 1 of 4 sequences
    assert shares["verl_token_tis"] == corrections.Removed(1 / 12, 1 / 4)
    # verl's sequence rejection drops the 2nd (ratio 2.5) and 4th (0.36) whole: 6 of 12 steps
    assert shares["verl_seq_rs"] == corrections.Removed(6 / 12, 2 / 4)
    # as independent samples: 2.5 and NaN truncated, NaN the only one TRL masks
    samples = corrections.sample_shares(np.log(np.array([1.0, 2.5, 0.4, 1e-5, np.nan])))
    assert samples["verl_token_tis"] == 2 / 5 and samples["trl_seq_mask"] == 1 / 5
    assert samples["openrlhf_icepop"] == 3 / 5


def episode(seed: int, log_w: list[float]) -> Episode:
    removed = {n: r.steps for n, r in corrections.removed_shares(np.array([log_w])).items()}
    return Episode(
        seed, len(log_w), (0.0,) * len(log_w), (0.0,) * len(log_w), (0.0,) * len(log_w), 1.0, 1.0,
        None, None, sum(log_w), 0.0, 1.0, sum(log_w) / len(log_w), min(log_w), max(log_w), removed,
    )  # fmt: skip


def test_episodes_summary_verdict_and_line_in_the_trainers_words():
    eps = [episode(s, w) for s, w in enumerate(([0.0] * 4, [0.9, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 2.0]))]
    summary = removed_summary(eps)
    # verl's sequence rejection: the 2nd (e^0.9 = 2.46) and 3rd (e^2) episodes, all their steps
    assert summary["verl_seq_rs_share"] == 2 / 3 and summary["verl_seq_rs_step_share"] == 8 / 12
    # verl's token TIS: one step of each of those (2.46 and 7.4 > 2)
    assert summary["verl_token_tis_share"] == 2 / 3 and summary["verl_token_tis_step_share"] == 2 / 12
    result = RolloutResult(
        "p", "t", "i", "ppo_policy", "fp32", "Pendulum-v1", "consistent", "", 0.1, 0.1, tuple(eps)
    )
    assert result.sampled_summary()["verl_seq_rs_share"] == 2 / 3

    geo = SampledLimits(trainer="verl_seq_rs")
    line = sampled_words(eps, geo)
    assert line.startswith(
        "verl (decoupled_seq_is_rs) would reject 66.7% of the episodes: sequence ratio outside [0.5, 2]; "
        "the stacks alone would clip 0.00% of the sampled steps"
    )
    status, message = verdict(eps, 1e-5, 0.1, geo)
    assert status == "drift" and "66.7% of the episodes" in message and "(limit: 0)" in message
    # a token-level correction judges its share of steps: 2 of 12 steps, within a limit of 0.2
    tis = SampledLimits(trainer="verl_token_tis", max_removed_share=0.2)
    assert verdict(eps, 1e-5, 0.1, tis)[0] == "consistent"
    assert "would truncate 16.7% of the sampled steps: steps with w > 2" in sampled_words(eps, tis)
    # PPO's own terms (the default): the presets are figures, not the verdict
    assert verdict(eps, 1e-5, 0.1, SampledLimits())[0] == "consistent"
    assert "would reject" not in sampled_words(eps, SimpleNamespace(clip_epsilon=0.2, preset=lambda: None))


def test_sampled_episodes_carry_the_mismatch_terms_over_all_their_steps():
    """Over episodes of different lengths, each mean term is the mean over every step (as if one
    batch), the lowest ratio and the largest |log w| the extremes: checked against the terms of
    the steps concatenated."""
    from auditor.compare.ratios import mismatch_terms
    from auditor.results import terms_summary

    steps = [[0.01, -0.02, 0.0], [0.3, -0.1, 0.05, 0.0, 0.2, -0.4, 0.1]]
    eps = [
        dataclasses.replace(episode(s, w), terms=mismatch_terms(np.array(w)).figures())
        for s, w in enumerate(steps)
    ]
    whole = mismatch_terms(np.array(steps[0] + steps[1])).figures()
    summary = terms_summary(eps)
    for name in ("kl_k1", "kl_k3", "kl_train_infer", "js", "chi2", "policy_kl_error", "chi2_token"):
        assert summary[name] == pytest.approx(whole[name], rel=1e-12), name
    assert summary["ratio_min"] == whole["ratio_min"] and summary["abs_log_ratio_max"] == 0.4
    assert terms_summary([episode(0, [0.0])]) == {}  # stored before the terms were
