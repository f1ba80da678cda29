"""The rollout corrections RL trainers ship, by name: what each would truncate, mask or reject
of the samples a training/rollout mismatch produces, in that trainer's own words.

A training/rollout mismatch is corrected by the trainer itself, and each user trains with one
correction. Each preset here is one trainer's setting as its source code applies it (read from
the trainers' repositories; docs/checks.md lists each with its formula), on the per-step
log-weights ``log w_t = log pi_train(a_t|s_t) - log pi_infer(a_t|s_t)`` of a sequence (an
episode; a probe's sample is a sequence of one step):

- ``verl_token_tis``: verl ``RolloutCorrectionConfig.decoupled_token_is()`` (``rollout_is:
  token``, threshold 2): truncates a step with w > 2;
- ``verl_seq_rs``: verl ``decoupled_seq_is_rs()`` (``rollout_rs: seq_sum_k1``, ``0.5_2.0``):
  rejects a sequence whose sum of -log w is outside [log 0.5, log 2];
- ``verl_geo_rs``: verl ``decoupled_geo_rs()`` (``rollout_rs: seq_mean_k1``, ``0.999_1.001``):
  rejects a sequence whose mean of -log w is outside [log 0.999, log 1.001];
- ``verl_k3_rs``: verl ``decoupled_k3_rs()`` (``rollout_rs: seq_mean_k3``, 0.01): rejects a
  sequence whose mean of w - 1 - log w is above 0.01 (verl clamps log w to ±20 first, here too);
- ``trl_seq_mask``: TRL ``GRPOConfig`` defaults (``vllm_importance_sampling_mode =
  "sequence_mask"``, ``vllm_importance_sampling_clip_max = 3.0``, no ``clip_min``): masks a
  sequence whose ratio exp(sum log w) is above 3;
- ``openrlhf_icepop``: OpenRLHF ``--algo.advantage.is_correction_type icepop`` at its default
  threshold ``0.5 5.0``: masks a step with w outside [0.5, 5];
- ``skyrl_geo_mask``: SkyRL's recommended ``off_policy_correction`` (``sequence_mask_metric:
  geometric``, ``geo_mask_low/high`` 0.99/1.01, ``outlier_token_is_threshold_low/high``
  1e-4/100): masks a sequence whose geometric-mean ratio is outside [0.99, 1.01] or that has a
  step with w below 1e-4 or above 100;
- ``nemo_seq_logprob_error``: NeMo RL ``grpo.seq_logprob_error_threshold = 2`` (its recipes'
  value; off by default): masks a sequence whose mean of exp|log w| (its
  ``seq_mult_prob_error``) is above 2.

A step without a valid weight (NaN, +inf: a state with no valid distribution on a side) is
removed by every preset, and its sequence by every sequence-level one: never a silent keep.
Pure Python, no numpy: the daemon names its Prometheus series by these names
(auditor.compare.ratio_names); auditor.compare.corrections evaluates them.
"""

from __future__ import annotations

from dataclasses import dataclass

TOKEN, SEQUENCE = "token", "sequence"


@dataclass(frozen=True)
class Preset:
    name: str
    trainer: str
    setting: str
    """How a user of that trainer turns it on, in its own config's words."""
    level: str
    """TOKEN: each step is judged alone; SEQUENCE: a step is removed with its whole sequence."""
    verb: str
    """What the trainer does with what it removes: truncate, mask or reject."""
    rule: str
    """What it removes, in a few words ("geometric-mean ratio outside [0.999, 1.001]")."""
    source: str
    """Where the trainer's code applies it."""

    @property
    def metric(self) -> str:
        """The share of samples (or episodes) it removes, as a stored figure."""
        return f"{self.name}_share"

    def say(self, share: float, of: str) -> str:
        """ "verl (decoupled_geo_rs) would reject 3.1% of the episodes: geometric-mean ratio
        outside [0.999, 1.001]"."""
        return f"{self.trainer} ({self.setting}) would {self.verb} {_percent(share)} of the {of}: {self.rule}"


def _percent(share: float) -> str:
    if share == 0 or share >= 0.01:
        return f"{100 * share:.1f}%"
    return f"{100 * share:.2g}%"


PRESETS = (
    Preset(
        "verl_token_tis",
        "verl",
        "decoupled_token_is",
        TOKEN,
        "truncate",
        "steps with w > 2",
        "verl/trainer/config/algorithm.py RolloutCorrectionConfig.decoupled_token_is",
    ),
    Preset(
        "verl_seq_rs",
        "verl",
        "decoupled_seq_is_rs",
        SEQUENCE,
        "reject",
        "sequence ratio outside [0.5, 2]",
        "verl/trainer/ppo/rollout_corr_helper.py seq_sum_k1",
    ),
    Preset(
        "verl_geo_rs",
        "verl",
        "decoupled_geo_rs",
        SEQUENCE,
        "reject",
        "geometric-mean ratio outside [0.999, 1.001]",
        "verl/trainer/ppo/rollout_corr_helper.py seq_mean_k1",
    ),
    Preset(
        "verl_k3_rs",
        "verl",
        "decoupled_k3_rs",
        SEQUENCE,
        "reject",
        "mean k3 = w - 1 - log w above 0.01",
        "verl/trainer/ppo/rollout_corr_helper.py seq_mean_k3",
    ),
    Preset(
        "trl_seq_mask",
        "TRL",
        "vllm_importance_sampling_mode = sequence_mask, clip_max 3",
        SEQUENCE,
        "mask",
        "sequence ratio above 3",
        "trl/trainer/grpo_trainer.py vllm_importance_sampling_mode",
    ),
    Preset(
        "openrlhf_icepop",
        "OpenRLHF",
        "is_correction_type icepop, threshold 0.5 5.0",
        TOKEN,
        "mask",
        "steps with w outside [0.5, 5]",
        "openrlhf/models/loss.py PolicyLoss (icepop)",
    ),
    Preset(
        "skyrl_geo_mask",
        "SkyRL",
        "sequence_mask_metric geometric 0.99/1.01, outlier tokens 1e-4/100",
        SEQUENCE,
        "mask",
        "geometric-mean ratio outside [0.99, 1.01] or a step's w below 1e-4 or above 100",
        "skyrl/backends/skyrl_train/utils/off_policy_correction_utils.py",
    ),
    Preset(
        "nemo_seq_logprob_error",
        "NeMo RL",
        "seq_logprob_error_threshold 2",
        SEQUENCE,
        "mask",
        "mean exp|log w| above 2",
        "nemo_rl/algorithms/grpo.py compute_and_apply_seq_logprob_error_masking",
    ),
)

BY_NAME = {p.name: p for p in PRESETS}

PPO = "ppo"
"""No trainer preset: the verdict holds PPO's own clip share, truncation share and ESS."""

TRAINERS = (PPO, *BY_NAME)
"""The values of ``[ppo] trainer``."""

__all__ = ["BY_NAME", "PPO", "PRESETS", "SEQUENCE", "TOKEN", "TRAINERS", "Preset"]
