"""Metrics for categorical policies, run in the auditor on both sides' outputs.

- argmax_agreement: share of observations where both sides pick the same greedy action.
  A served policy that picks another action is wrong however small the logit difference.
- probability_difference: max and mean |p_train - p_infer| over actions, the quantity RL
  trainers watch for train/rollout mismatch (FACTS.md, verl's probability diff).
"""

from __future__ import annotations

import numpy as np

from auditor.compare.outputs import MetricCheck

DEFAULTS = {"min_argmax_agreement": 1.0, "max_probability_difference": 1e-5}


def argmax_agreement(train: dict[str, np.ndarray], infer: dict[str, np.ndarray], options: dict) -> list:
    limit = float(options.get("min_argmax_agreement", DEFAULTS["min_argmax_agreement"]))
    a = np.argmax(train["logits"], axis=-1)
    b = np.argmax(infer["logits"], axis=-1)
    rate = float(np.mean(a == b)) if a.size else 1.0
    return [
        MetricCheck(
            "argmax_agreement",
            rate,
            rate >= limit,
            limit,
            "logits",
            f"greedy actions agree on {rate:.2%} of observations (need at least {limit:.2%})",
        )
    ]


def probability_difference(train: dict[str, np.ndarray], infer: dict[str, np.ndarray], options: dict) -> list:
    limit = float(options.get("max_probability_difference", DEFAULTS["max_probability_difference"]))
    diff = np.abs(train["probs"].astype(np.float64) - infer["probs"].astype(np.float64))
    worst = float(diff.max()) if diff.size else 0.0
    return [
        MetricCheck(
            "prob_diff_max",
            worst,
            bool(worst <= limit),
            limit,
            "probs",
            f"largest action-probability difference {worst:.3g} (limit {limit:.3g})",
        ),
        MetricCheck("prob_diff_mean", float(diff.mean()) if diff.size else 0.0, True, None, "probs"),
    ]
