"""The noise floor of the importance-ratio figures: what they read where nothing differs but
rounding, or but running again, measured in the same cycle on the same states.

Two floors, the larger of the two per figure:

- **rounding**: the training side's distribution against the same distribution with each of
  its parameters moved by u * ulp(x) in the serving side's dtype, u ~ U(-1/2, 1/2) seeded: the
  error of rounding a float64 value to that dtype, whatever computed it;
- **rerun**: the serving side against its own rerun in a fresh process, where the cycle reran
  it (a served file's serving sides, a policy drawing from seeded random ops), passed to the
  comparator as ``NAME@rerun`` outputs.

A check then fails on what exceeds its floor plus its limit (a share's floor with three standard
errors of sampling noise, ``allowance``): a limit below the floor could only page noise (fp16's
half-ULP alone moves w past verl's ±0.1% band on some samples).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from auditor.compare import ratios

RERUN = "@rerun"
"""The suffix of a serving side's output from its rerun in a fresh process."""

SEED_OFFSET = 104_729
"""The rounding noise's seed is the draws' seed plus this: another stream, still seeded."""


@dataclass(frozen=True)
class Floor:
    """The figures on no difference but noise (the worst of the measured floors)."""

    ppo_clip_share: float
    tis_share: float
    ess: float
    kl_k3: float
    mult_prob_error: float
    log_w: np.ndarray
    """The floor's finite log-weights, flat (the rounding floor's, or the rerun's where larger)."""
    rerun: bool
    """A rerun floor was measured (else the rounding floor alone)."""


def allowance(share: float, n: int) -> float:
    """What a share measured on ``n`` samples may read on noise alone, given its floor: the floor
    plus three standard errors of the difference of two such shares (0 where the floor is 0: no
    noise was seen, so none is allowed)."""
    if n <= 0 or share <= 0:
        return max(share, 0.0)
    return share + 3.0 * math.sqrt(2.0 * share * (1.0 - share) / n)


def rounded(
    outputs: dict[str, np.ndarray], names: list[str], dtype: np.dtype, seed: int
) -> dict[str, np.ndarray]:
    """``names`` of ``outputs`` in float64, each finite element moved by u * ulp(x) in ``dtype``,
    u ~ U(-1/2, 1/2) (RandomState(seed + SEED_OFFSET)); other outputs as they are."""
    rng = np.random.RandomState(seed + SEED_OFFSET)
    out = dict(outputs)
    for name in names:
        x = np.asarray(outputs[name], dtype=np.float64)
        finite = np.isfinite(x)
        with np.errstate(over="ignore", invalid="ignore"):
            ulp = np.abs(np.spacing(x.astype(dtype))).astype(np.float64)
        u = rng.uniform(-0.5, 0.5, size=x.shape)
        out[name] = np.where(finite, x + u * np.where(np.isfinite(ulp), ulp, 0.0), x)
    return out


def measure(
    policy: ratios.Policy,
    train: ratios.Distribution,
    train_outputs: dict[str, np.ndarray],
    infer_outputs: dict[str, np.ndarray],
    k: int,
    seed: int,
    keep: np.ndarray | None,
    eps: float,
    cap: float,
) -> Floor:
    """The floor of the figures ``importance_ratios`` records, on the same states (``keep``:
    those it judges) and as many draws."""
    names = policy.outputs()
    dtype = np.asarray(infer_outputs[names[0]]).dtype
    if not np.issubdtype(dtype, np.floating):
        dtype = np.dtype(np.float32)
    floors = []
    noisy = ratios.distribution(policy, rounded(train_outputs, names, dtype, seed))
    draws = ratios.draw(noisy, k, seed)
    floors.append(ratios.log_weights_from_params(train, noisy, draws))
    rerun = all(f"{n}{RERUN}" in infer_outputs for n in names)
    if rerun:
        first = ratios.distribution(policy, infer_outputs)
        again = ratios.distribution(policy, {n: infer_outputs[f"{n}{RERUN}"] for n in names})
        floors.append(ratios.log_weights_from_params(again, first, ratios.draw(first, k, seed)))
    if keep is not None:
        floors = [f[:, keep] for f in floors]
    # a floor's finite weights only: a state without a valid distribution is the check's to
    # fail, and must never lift the floor that excuses it (an inf floor would)
    finite = [f[np.isfinite(f)] for f in floors]
    measured = [(ratios.ratio_stats(f, eps, cap), ratios.mismatch_terms(f, cap)) for f in finite]
    worst = max(range(len(finite)), key=lambda j: measured[j][1].kl_k3)
    return Floor(
        ppo_clip_share=max(s.ppo_clip_share for s, _ in measured),
        tis_share=max(s.tis_share for s, _ in measured),
        ess=min(s.ess for s, _ in measured),
        kl_k3=max(t.kl_k3 for _, t in measured),
        mult_prob_error=max(t.mult_prob_error for _, t in measured),
        log_w=finite[worst],
        rerun=rerun,
    )


__all__ = ["RERUN", "Floor", "allowance", "measure", "rounded"]
