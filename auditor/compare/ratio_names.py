"""The names the importance_ratios comparator stores its figures under, without numpy: the
daemon (auditor.exposition.families) names its Prometheus series by them and never imports
the math (auditor.compare.ratios)."""

from __future__ import annotations

from auditor.compare.presets import PRESETS

CHECKS = (
    "ratio_mean",
    "ratio_p99",
    "ratio_max",
    "ppo_clip_share",
    "tis_share",
    "ess",
    "kl_behaviour",
    "samples",
    "invalid_samples",
    "clip_epsilon",
    "tis_cap",
)
"""PPO's own terms: ratios, clip and truncation shares, ESS, KL, and what they were taken at."""

MEAN_TERMS = (
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "kl_train_infer",
    "js",
    "chi2",
    "mult_prob_error",
    "policy_kl_error",
    "js_divergence_error",
    "chi2_token",
    "abs_log_ratio_mean",
)
"""The terms that are means over the samples: over several episodes, their steps' weighted mean."""

TERMS = ("ratio_min", "ratio_p01", "low_share", "tiny_share", *MEAN_TERMS, "abs_log_ratio_max")
"""The same weights under the names trainers use (auditor.compare.ratios.MismatchTerms)."""

TRAINER_NAMES = {
    "verl": {
        "rollout_corr/kl": "kl_k1",
        "rollout_corr/k3_kl": "kl_k3",
        "rollout_corr/chi2_token": "chi2_token",
    },
    "NeMo RL": {
        "token_mult_prob_error": "mult_prob_error",
        "gen_kl_error": "kl_k3",
        "policy_kl_error": "policy_kl_error",
        "js_divergence_error": "js_divergence_error",
    },
    "TRL": {
        "sampling/sampling_logp_difference/mean": "abs_log_ratio_mean",
        "sampling/sampling_logp_difference/max": "abs_log_ratio_max",
    },
}
"""Per trainer, its logged metric's name -> the figure that is its value on the same samples
(each a one-step sequence): the formula its code computes, evaluated without cancellation."""

BANDS = (0.001, 0.01, 0.05)
"""Half-widths of the ratio bands whose retention is reported: ±0.1% is verl's geometric
rejection band (decoupled_geo_rs), ±1% and ±5% read how far the rest spread."""


def band_name(half_width: float) -> str:
    """``band_kept_0.1pct`` for a ±0.1% band."""
    return f"band_kept_{100 * half_width:g}pct"


TRAIN_DRAWN = (
    "train_drawn_ppo_clip_share",
    "train_drawn_tis_share",
    "train_drawn_ratio_max",
    "train_drawn_kl",
    "train_drawn_unsupported_share",
    "train_drawn_removed_share",
)
"""The ratios under actions drawn from the training side (auditor.compare.ratios.train_drawn):
the shares PPO clips and TIS truncates, the largest ratio, KL(p || q), the share the serving side
gives probability 0, and the chosen trainer's correction's share."""

FLOOR = (
    "floor_ppo_clip_share",
    "floor_tis_share",
    "floor_ess",
    "floor_kl_k3",
    "floor_mult_prob_error",
    "floor_rerun",
)
"""The noise floor of the figures on the same states (auditor.compare.floor): rounding to the
serving dtype, and the serving side's rerun where the cycle reran it (floor_rerun 1)."""

CORRECTIONS = tuple(p.metric for p in PRESETS)
"""The share of samples each trainer's rollout correction would remove (auditor.compare.presets)."""


def by_trainer(figures: dict[str, float]) -> dict[str, dict[str, float]]:
    """The figures a result recorded, under each trainer's own metric names (those it has)."""
    out = {}
    for trainer, names in TRAINER_NAMES.items():
        known = {theirs: figures[ours] for theirs, ours in names.items() if ours in figures}
        if known:
            out[trainer] = known
    return out


ALL = CHECKS + TERMS + tuple(band_name(d) for d in BANDS) + CORRECTIONS + TRAIN_DRAWN + FLOOR
"""Every figure the comparator records, in its order."""

__all__ = [
    "ALL",
    "BANDS",
    "CHECKS",
    "CORRECTIONS",
    "TERMS",
    "TRAINER_NAMES",
    "TRAIN_DRAWN",
    "band_name",
    "by_trainer",
]
