"""What a trainer's rollout correction would do with the sampled episodes, in its own terms.

A training/rollout mismatch is corrected by the trainer itself, and each user trains with one
correction. These are the sequence-level ones verl ships as presets
(``verl.trainer.config.algorithm.RolloutCorrectionConfig``; its docs, docs/algo/rollout_corr.md),
with their default thresholds, evaluated on an episode's per-step log-weights
``log w_t = log pi_train(a_t|s_t) - log pi_infer(a_t|s_t)``:

- ``verl_seq_rs`` (``decoupled_seq_is_rs``: ``rollout_rs: sequence``, threshold 2, lower 0.5):
  the episode is rejected when its sequence ratio prod_t w_t is outside [0.5, 2];
- ``verl_geo_rs`` (``decoupled_geo_rs``: ``rollout_rs: geometric``, 1.001 / 0.999, and
  ``rollout_token_veto_threshold`` 1e-4): rejected when its geometric-mean ratio
  exp(mean_t log w_t) is outside [0.999, 1.001], or when any step's ratio is below 1e-4 (the
  veto).

Token-level corrections need no episode: verl's ``decoupled_token_is`` truncates w > 2, which
is ``tis_share`` on the probes' samples (auditor.compare.ratios). Pure Python (no numpy): the
results module, which the daemon reads, sums them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class EpisodeWeights:
    """An episode's log-weights in summary: their sum (the sequence's log weight), their mean
    (the log of the geometric-mean ratio) and their smallest (the worst step downwards); inf
    where a step has no valid weight."""

    log_sum: float
    log_mean: float
    log_min: float


@dataclass(frozen=True)
class Preset:
    name: str
    words: str
    """What it rejects, for the report ("sequence ratio outside [0.5, 2]")."""
    lower: float
    upper: float
    geometric: bool
    """Judge the geometric-mean ratio (else the sequence ratio)."""
    veto: float | None = None
    """Reject where any step's ratio is below this."""

    def rejects(self, e: EpisodeWeights) -> bool:
        value = e.log_mean if self.geometric else e.log_sum
        if not math.isfinite(value):
            return True  # a step without a valid weight: no ratio to keep it by
        if self.veto is not None and e.log_min < math.log(self.veto):
            return True
        return not math.log(self.lower) <= value <= math.log(self.upper)


PRESETS = (
    Preset("verl_seq_rs", "sequence ratio outside [0.5, 2]", 0.5, 2.0, False),
    Preset(
        "verl_geo_rs",
        "geometric mean outside [0.999, 1.001] or a step below 1e-4",
        0.999,
        1.001,
        True,
        veto=1e-4,
    ),
)


def rejected_shares(episodes: Sequence[EpisodeWeights]) -> dict[str, float]:
    """Per preset, the share of ``episodes`` it would reject (empty without episodes)."""
    if not episodes:
        return {}
    return {p.name: sum(p.rejects(e) for e in episodes) / len(episodes) for p in PRESETS}


__all__ = ["PRESETS", "EpisodeWeights", "Preset", "rejected_shares"]
