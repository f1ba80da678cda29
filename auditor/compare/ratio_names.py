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

TERMS = (
    "ratio_min",
    "ratio_p01",
    "low_share",
    "tiny_share",
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "kl_train_infer",
    "js",
    "chi2",
    "mult_prob_error",
)
"""The same weights under the names trainers use (auditor.compare.ratios.MismatchTerms)."""

BANDS = (0.001, 0.01, 0.05)
"""Half-widths of the ratio bands whose retention is reported: ±0.1% is verl's geometric
rejection band (decoupled_geo_rs), ±1% and ±5% read how far the rest spread."""


def band_name(half_width: float) -> str:
    """``band_kept_0.1pct`` for a ±0.1% band."""
    return f"band_kept_{100 * half_width:g}pct"


CORRECTIONS = tuple(p.metric for p in PRESETS)
"""The share of samples each trainer's rollout correction would remove (auditor.compare.presets)."""

ALL = CHECKS + TERMS + tuple(band_name(d) for d in BANDS) + CORRECTIONS
"""Every figure the comparator records, in its order."""

__all__ = ["ALL", "BANDS", "CHECKS", "CORRECTIONS", "TERMS", "band_name"]
