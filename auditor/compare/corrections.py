"""What each trainer's rollout correction (auditor.compare.presets) removes of a batch of
log-weights: computed the way that trainer's code computes it, in float64, from the weights
already drawn (no model call).

The rules are written here as the trainers apply them, clamps included: verl clamps each
step's log-weight to ±20 before its rejection statistics, SkyRL clamps the delta it
exponentiates to ±20; TRL, OpenRLHF and NeMo RL exponentiate unclamped. A step without a
valid weight (NaN, +inf) is removed by every preset, with its sequence by the sequence-level
ones, where the trainers' own comparisons would silently keep a NaN.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from auditor.compare.presets import PRESETS, SEQUENCE, Preset

CLAMP = 20.0
"""verl's SAFETY_BOUND and SkyRL's safe_exp_delta clip: |log w| beyond it is clamped."""


def removed(preset: Preset, log_w: np.ndarray) -> np.ndarray:
    """(sequences, steps) booleans: the steps ``preset`` removes (truncates, masks or
    rejects) of sequences of equal length, given their log-weights (sequences, steps)."""
    g = np.asarray(log_w, dtype=np.float64)
    if g.ndim != 2:
        raise ValueError(f"log-weights must be (sequences, steps), not of shape {list(g.shape)}")
    bad = np.isnan(g) | (g == np.inf)
    c = np.clip(g, -CLAMP, CLAMP)
    n = preset.name
    with np.errstate(over="ignore", invalid="ignore"):
        if n == "verl_token_tis":
            steps = np.exp(c) > 2.0
        elif n == "openrlhf_icepop":
            w = np.exp(g)
            steps = ~((w >= 0.5) & (w <= 5.0))
        elif n == "verl_seq_rs":
            s = (-c).sum(axis=1)
            seqs = ~((s >= math.log(0.5)) & (s <= math.log(2.0)))
        elif n == "verl_geo_rs":
            s = (-c).mean(axis=1)
            seqs = ~((s >= math.log(0.999)) & (s <= math.log(1.001)))
        elif n == "verl_k3_rs":
            seqs = ~((np.exp(c) - 1.0 - c).mean(axis=1) <= 0.01)
        elif n == "trl_seq_mask":
            seqs = np.exp(g.sum(axis=1)) > 3.0
        elif n == "skyrl_geo_mask":
            geo = np.exp(np.clip(g.mean(axis=1), -CLAMP, CLAMP))
            w = np.exp(c)
            seqs = (geo > 1.01) | (geo < 0.99) | ((w > 100.0) | (w < 1e-4)).any(axis=1)
        elif n == "nemo_seq_logprob_error":
            seqs = ~(np.exp(np.abs(g)).mean(axis=1) <= 2.0)
        else:
            raise ValueError(f"no rule for preset {n!r}")
    if preset.level == SEQUENCE:
        return np.broadcast_to((seqs | bad.any(axis=1))[:, None], g.shape).copy()
    return steps | bad


@dataclass(frozen=True)
class Removed:
    """What a preset removes of a batch."""

    steps: float
    """The share of steps it removes (a rejected sequence's steps all count)."""
    sequences: float
    """The share of sequences it touches: rejects, or removes a step of."""

    @property
    def any(self) -> bool:
        return self.steps > 0


def removed_shares(log_w: np.ndarray) -> dict[str, Removed]:
    """Per preset, what it removes of sequences (sequences, steps); nothing for no step."""
    g = np.asarray(log_w, dtype=np.float64)
    if g.size == 0:
        return {p.name: Removed(0.0, 0.0) for p in PRESETS}
    out = {}
    for p in PRESETS:
        r = removed(p, g)
        out[p.name] = Removed(float(r.mean()), float(r.any(axis=1).mean()))
    return out


def sample_shares(log_w: np.ndarray) -> dict[str, float]:
    """Per preset, the share of independent samples (each a sequence of one step: a probe's
    drawn actions, any shape) it removes."""
    g = np.asarray(log_w, dtype=np.float64).reshape(-1, 1)
    return {name: r.steps for name, r in removed_shares(g).items()}


__all__ = ["CLAMP", "Removed", "removed", "removed_shares", "sample_shares"]
