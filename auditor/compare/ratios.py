"""The train/infer mismatch in PPO's own terms: importance ratios under the behaviour policy.

When rollouts (and ``old_log_prob``) come from the inference stack and the update runs on the
training stack, PPO's ratio ``w = pi_train(a|s) / pi_infer(a|s)`` is not 1 before a single
gradient step: the stacks alone make on-policy PPO off-policy. This module draws actions from
the **infer side's** distribution (seeded, several per state), turns each side's
log-probabilities of them into log-weights, and summarises them the way an RL trainer reads
them: the ratio's mean, p99 and max, the share of samples PPO would clip (|w - 1| > epsilon)
and truncated importance sampling would truncate (w > C), the effective sample size and
KL(pi_infer || pi_train).

The log-weights come either from each side's own in-graph log-probability of the drawn
actions (the cycle runs both models on them: what the trainer computes, rounding included) or,
where no model can be run (``auditor compare``, a publication), from each side's distribution
parameters in float64. Everything here is numpy, float64, and never turns an invalid
distribution into a silent NaN: a sample whose weight is not finite, or whose state has an
invalid distribution on either side, counts as clipped and truncated and is named.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from auditor.compare import metrics
from auditor.compare.ratio_names import BANDS, TERMS, band_name

KINDS = ("gaussian", "tanh", "categorical")
"""Policy heads: a diagonal Gaussian, a tanh-squashed one (actions tanh(u), u Gaussian), and a
categorical distribution over logits."""

CLIP_EPSILON = 0.2
"""PPO's clip range, as in the seed's trainer (and the PPO paper)."""
TIS_CAP = 2.0
"""Truncated importance sampling's cap C (verl and OpenRLHF default to 2)."""
SAMPLES_PER_STATE = 4
"""Actions drawn per state: 4 x a 256-state batch = 1,024 samples, a PPO minibatch's size."""
BEHAVIOUR = "@behaviour"
"""The suffix of an output computed on the drawn actions (``logp@behaviour``: the model's
in-graph log-probabilities, (k, states)), passed to the comparator next to the outputs."""


@dataclass(frozen=True)
class Policy:
    """Which outputs of a model make its action distribution, and (optionally) which output is
    its in-graph log-probability of which input's actions, at which observations."""

    kind: str
    mean: str = "mean"
    std: str | None = "std"
    log_std: str | None = None
    logits: str = "logits"
    logp: str | None = None
    actions: str | None = None
    """The input the model scores (``logp`` is its log-probability): where both are set and
    the model can be run, the weights come from the model's own log-probabilities."""

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> Policy:
        kind = options.get("kind")
        if kind not in KINDS:
            raise ValueError(f"option 'kind' must be one of {', '.join(KINDS)}, not {kind!r}")
        log_std = options.get("log_std")
        return cls(
            kind=kind,
            mean=str(options.get("mean", "mean")),
            std=None if log_std is not None else str(options.get("std", "std")),
            log_std=None if log_std is None else str(log_std),
            logits=str(options.get("logits", "logits")),
            logp=None if options.get("logp") is None else str(options["logp"]),
            actions=None if options.get("actions") is None else str(options["actions"]),
        )

    def outputs(self) -> list[str]:
        """The outputs the distribution is made of."""
        if self.kind == "categorical":
            return [self.logits]
        return [self.mean, self.std if self.std is not None else str(self.log_std)]

    def in_graph(self) -> bool:
        return self.logp is not None and self.actions is not None


@dataclass(frozen=True)
class Distribution:
    """One side's distribution per state, in float64: (mean, std) or log-probabilities over
    categories; ``valid[i]`` is False where state i's distribution is not one (a std <= 0 or not
    finite, a NaN mean or logit), with the reason in ``problems[i]``."""

    kind: str
    mean: np.ndarray | None
    std: np.ndarray | None
    log_probs: np.ndarray | None
    valid: np.ndarray
    problems: dict[int, str]


def distribution(policy: Policy, outputs: dict[str, np.ndarray]) -> Distribution:
    """One side's distribution from its outputs (by name); ValueError names a missing output or
    a spread that fits no mean. A categorical policy's ``-inf`` logit is an action of
    probability 0 (a masked action), not an invalid distribution; a NaN or ``+inf`` logit, or
    every logit ``-inf``, is. A Gaussian's std (or log_std) may be per state ``[batch,
    act_dim]`` or ``[batch, 1]``, one value for every state and action (a scalar), or one per
    action dimension ``[act_dim]`` / ``[1, act_dim]`` (the exported PPO actor's
    state-independent log_std, a parameter vector)."""
    missing = [n for n in policy.outputs() if n not in outputs]
    if missing:
        raise ValueError(
            f"the policy's output {missing[0]!r} is not an output of the model "
            f"(outputs: {', '.join(outputs) or 'none'})"
        )
    problems: dict[int, str] = {}
    if policy.kind == "categorical":
        logits = np.asarray(outputs[policy.logits], dtype=np.float64)
        logits = logits.reshape(logits.shape[0], -1) if logits.ndim > 1 else logits.reshape(1, -1)
        nan, up = np.isnan(logits).any(axis=1), (logits == np.inf).any(axis=1)
        masked = (logits == -np.inf).all(axis=1)
        for i in np.flatnonzero(nan | up | masked):
            problems[int(i)] = (
                "a logit is NaN"
                if nan[i]
                else "a logit is +inf"
                if up[i]
                else "every action is masked (-inf)"
            )
        bad = nan | up | masked
        with np.errstate(invalid="ignore", over="ignore"):
            safe = np.where(bad[:, None], 0.0, logits)
            log_probs = safe - np.logaddexp.reduce(safe, axis=1, keepdims=True)
        return Distribution(policy.kind, None, None, log_probs, ~bad, problems)
    mean = np.asarray(outputs[policy.mean], dtype=np.float64)
    if policy.std is not None:
        spread = np.asarray(outputs[policy.std], dtype=np.float64)
        std = spread
    else:
        spread = np.asarray(outputs[str(policy.log_std)], dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            std = np.exp(spread)
    mean = mean.reshape(mean.shape[0], -1) if mean.ndim > 1 else mean.reshape(-1, 1)
    std = _spread_like(std, mean, policy.std or str(policy.log_std))
    bad_mean = ~np.isfinite(mean).all(axis=1)
    with np.errstate(invalid="ignore"):
        bad_std = ~bad_mean & ~(np.isfinite(std).all(axis=1) & (std > 0).all(axis=1))
    for i in np.flatnonzero(bad_mean):
        problems[int(i)] = "the mean is not finite"
    rows = np.flatnonzero(bad_std)
    if rows.size:  # each distinct std said once (a state-independent one: once for every row)
        found, which = np.unique(np.ascontiguousarray(std[rows]), axis=0, return_inverse=True)
        words = [f"the std is not positive and finite ({_show(v)})" for v in found]
        for i, w in zip(rows, np.asarray(which).reshape(-1), strict=True):
            problems[int(i)] = words[w]
    return Distribution(policy.kind, mean, np.array(std), None, ~(bad_mean | bad_std), problems)


def invalid_alike(train: Distribution, infer: Distribution) -> np.ndarray:
    """(states,): the state has no valid distribution on either side, and both sides gave it
    the same parameters bit for bit. That is the policy's own output (a std it declares
    negative, a NaN it computes), not a difference of the stacks: a trainer on either stack
    gets the same, and it is said as the policy's, never counted as clipped by the stacks."""
    both = ~train.valid & ~infer.valid
    if not both.any():
        return both
    pairs = (
        [(train.log_probs, infer.log_probs)]
        if train.kind == "categorical"
        else [(train.mean, infer.mean), (train.std, infer.std)]
    )
    same = both.copy()
    for a, b in pairs:
        if a is None or b is None or np.shape(a) != np.shape(b):
            return np.zeros_like(both)
        bits_a = np.ascontiguousarray(a, dtype=np.float64).view(np.uint64).reshape(len(both), -1)
        bits_b = np.ascontiguousarray(b, dtype=np.float64).view(np.uint64).reshape(len(both), -1)
        same &= (bits_a == bits_b).all(axis=1)
    return same


def _spread_like(std: np.ndarray, mean: np.ndarray, name: str) -> np.ndarray:
    """The std shaped like the mean ``[batch, act_dim]``: per state, one value, or one per action
    dimension (a 1-D vector of act_dim values is per action, even where act_dim equals the
    batch: that is how a state-independent log_std is exported)."""
    rows, dims = mean.shape
    if std.size == 1:
        return np.broadcast_to(std.reshape(1, 1), mean.shape)
    if std.ndim == 1 and std.size == dims:
        return np.broadcast_to(std.reshape(1, dims), mean.shape)
    if std.ndim == 1 and dims == 1 and std.size == rows:
        return std.reshape(rows, 1)
    flat = std.reshape(std.shape[0], -1) if std.ndim > 1 else std.reshape(1, -1)
    if flat.shape in ((rows, dims), (rows, 1), (1, dims)):
        return np.broadcast_to(flat, mean.shape)
    raise ValueError(
        f"output {name!r} has shape {list(std.shape)}, which fits no mean of shape {list(mean.shape)}: "
        "a std is per state ([batch, act_dim] or [batch, 1]), one value, or one per action ([act_dim])"
    )


def _show(x: np.ndarray) -> str:
    return ", ".join(f"{v:.4g}" for v in np.asarray(x).ravel()[:4])


@dataclass(frozen=True)
class Draws:
    """Actions drawn from the infer side's distribution: ``k`` per state, shaped (k, states, ...)
    in the space the model takes (``actions``: tanh-squashed for a tanh head, indices for a
    categorical one) and, for Gaussian heads, before squashing (``u``). A state whose infer
    distribution is invalid gets placeholder actions (zeros) and counts as invalid."""

    actions: np.ndarray
    u: np.ndarray | None
    valid: np.ndarray
    """(states,): the infer distribution of the state is valid."""


def draw(infer: Distribution, k: int, seed: int) -> Draws:
    """``k`` seeded draws per state from the infer side's distribution (float64)."""
    rng = np.random.RandomState(seed)
    if infer.kind == "categorical":
        assert infer.log_probs is not None
        states, n = infer.log_probs.shape
        # Inverse CDF on uniform draws: one uniform per sample, the same for any n.
        cdf = np.cumsum(np.exp(infer.log_probs), axis=1)
        uniform = rng.uniform(0.0, 1.0, size=(k, states))
        index = (cdf[None, :, :] < (uniform * cdf[:, -1][None, :])[:, :, None]).sum(axis=2)
        index = np.where(infer.valid[None, :], np.minimum(index, n - 1), 0)
        return Draws(index.astype(np.int64), None, infer.valid)
    assert infer.mean is not None and infer.std is not None
    noise = rng.standard_normal((k,) + infer.mean.shape)
    valid = infer.valid[None, :, None]
    u = np.where(valid, infer.mean[None] + infer.std[None] * noise, 0.0)
    actions = np.tanh(u) if infer.kind == "tanh" else u
    return Draws(actions, u, infer.valid)


def log_weights_from_params(train: Distribution, infer: Distribution, draws: Draws) -> np.ndarray:
    """log w = log pi_train(a|s) - log pi_infer(a|s) per draw, (k, states), in float64 from the
    distributions' parameters. For a tanh head both log-densities of a = tanh(u) carry the
    same Jacobian term, which cancels: the weight is the ratio of the two Gaussians at u.
    NaN where either side's distribution of the state is invalid."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if train.kind == "categorical":
            assert train.log_probs is not None and infer.log_probs is not None
            idx = draws.actions
            cols = np.arange(idx.shape[1])[None, :]
            lw = train.log_probs[cols, idx] - infer.log_probs[cols, idx]
        else:
            assert draws.u is not None
            lw = np.stack(
                [
                    metrics.gaussian_logp(u, train.mean, train.std)
                    - metrics.gaussian_logp(u, infer.mean, infer.std)
                    for u in draws.u
                ]
            )
    both = train.valid & infer.valid
    return np.where(both[None, :], lw, np.nan)


def log_weights_in_graph(
    train_logp: np.ndarray, infer_logp: np.ndarray, draws: Draws, train_valid: np.ndarray | None = None
) -> np.ndarray:
    """log w from the two models' own log-probabilities of the drawn actions, (k, states):
    what a trainer computes. NaN where the infer distribution of the state was invalid (its
    placeholder actions were not drawn from it) and, given ``train_valid``, where the train
    side's was: a row invalid on either side counts the same on both weight paths."""
    shape = (draws.actions.shape[0], draws.valid.shape[0])
    a = np.asarray(train_logp, dtype=np.float64).reshape(shape)
    b = np.asarray(infer_logp, dtype=np.float64).reshape(shape)
    both = draws.valid if train_valid is None else draws.valid & np.asarray(train_valid, bool)
    return np.where(both[None, :], metrics.logp_delta(a, b), np.nan)


@dataclass(frozen=True)
class RatioStats:
    """What the stacks' difference does to a PPO update, over n sampled (state, action) pairs."""

    n: int
    ratio_mean: float
    ratio_p99: float
    ratio_max: float
    ppo_clip_share: float
    """Share of samples with |w - 1| > epsilon: PPO clips them before any learning."""
    tis_share: float
    """Share with w > C: truncated importance sampling truncates them."""
    ess: float
    """(sum w)^2 / (n sum w^2): 1.0 = every sample counts fully."""
    invalid: int
    """Samples whose weight is not finite or whose state has no valid distribution on a side
    (counted as clipped and truncated)."""
    log_weight_sum: float
    """Sum of the finite log-weights: a sequence's log importance weight when the samples are
    the steps of one episode."""


def ratio_stats(
    log_w: np.ndarray, clip_epsilon: float = CLIP_EPSILON, tis_cap: float = TIS_CAP
) -> RatioStats:
    """The statistics of w = exp(log_w) over every sample. A log-weight of -inf is a weight of
    0 (the train side gives the drawn action probability 0: a masked action): valid, clipped,
    not truncated, weighing 0 in the ESS. Any other non-finite log-weight (NaN, +inf: a state
    without a valid distribution on a side) is an invalid sample: clipped, truncated, left out
    of the mean and weighing 0 in the ESS (which is scaled by the valid share), and it makes
    ratio_max and a p99 that reaches it inf."""
    lw = np.asarray(log_w, dtype=np.float64).ravel()
    n = lw.size
    if n == 0:
        return RatioStats(0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0, 0.0)
    ok = np.isfinite(lw) | (lw == -np.inf)
    good = lw[ok]
    invalid = n - good.size
    with np.errstate(over="ignore"):
        w = np.exp(good)
    # ESS without overflow: the weights scaled by their largest (exactly 1 for equal weights).
    top = good.max() if good.size else -np.inf
    if good.size and np.isfinite(top):
        scaled = np.exp(good - top)
        ess_valid = float(scaled.sum() ** 2 / (good.size * np.sum(scaled * scaled)))
        ratio_mean = float(np.mean(w))
    else:  # no sample, or every weight 0
        ess_valid, ratio_mean = 0.0, (0.0 if good.size else math.inf)
    all_w = np.full(n, np.inf)
    all_w[ok] = w
    clipped = int(np.count_nonzero(np.abs(w - 1.0) > clip_epsilon)) + invalid
    truncated = int(np.count_nonzero(w > tis_cap)) + invalid
    finite = good[np.isfinite(good)]
    return RatioStats(
        n=n,
        ratio_mean=ratio_mean,
        ratio_p99=float(np.quantile(all_w, 0.99, method="higher")),
        ratio_max=float(all_w.max()),
        ppo_clip_share=clipped / n,
        tis_share=truncated / n,
        ess=min(1.0, ess_valid) * good.size / n,
        invalid=invalid,
        log_weight_sum=float(finite.sum()) if finite.size == good.size else -math.inf,
    )


TINY_RATIO = 1e-4
"""A ratio below this is a catastrophic step: verl vetoes the whole sequence of such a token
(``rollout_token_veto_threshold``, typically 1e-4)."""


@dataclass(frozen=True)
class MismatchTerms:
    """The train/infer mismatch under the names RL trainers use for it, from the same log-weights
    ``log w = logp_train - logp_infer`` on actions drawn from the infer side (q; the train side
    is p). Sample estimates over the drawn actions (float64); every term is inf when a sample
    has no valid weight (NaN, +inf), and the shares count such a sample as rejected.

    - ``ratio_min``, ``ratio_p01``: the lower tail, where masking schemes reject;
    - ``low_share``: w < 1/C (C the TIS cap: below the lower bound of verl's rejection at threshold 2);
      ``tiny_share``: w < 1e-4 (verl's veto threshold);
    - ``kl_k1`` = mean(-log w), ``kl_k2`` = mean((log w)^2 / 2), ``kl_k3`` = mean(w - 1 - log w):
      Schulman's estimators of KL(q || p), the ones verl's k1/k2/k3 rejection thresholds;
    - ``kl_train_infer`` = mean(w log w - w + 1): KL(p || q), the other direction (NeMo RL
      reports both); the added 1 - w is 0 in expectation (E_q[w] = 1) and makes every term
      >= 0, as k3 does for the first direction;
    - ``js`` = mean(log(2/(1+w)) + w log(2w/(1+w))) / 2: Jensen-Shannon, nats, bounded by ln 2;
    - ``chi2`` = mean((w - 1)^2): chi-square(p || q), the variance of the weights;
    - ``mult_prob_error`` = mean(exp|log w|): NeMo RL's ``token_mult_prob_error`` (1 = none);
    - ``band_kept``: per half-width d in BANDS, the share with |w - 1| <= d;
    - as trainers log them where their formula differs from the above: NeMo RL's
      ``policy_kl_error`` = mean(1/w - 1 + log w) (its k3 with the log ratio reversed) and
      ``js_divergence_error`` = mean of (k3(log p - log m) + k3(log q - log m)) / 2, m = (p + q) / 2
      (each side's k3 against the mixture); verl's ``chi2_token`` = mean(w^2) - 1 (w clamped at
      e^±20); TRL's ``sampling_logp_difference`` mean and max of |log w|.
    """

    ratio_min: float
    ratio_p01: float
    low_share: float
    tiny_share: float
    kl_k1: float
    kl_k2: float
    kl_k3: float
    kl_train_infer: float
    js: float
    chi2: float
    mult_prob_error: float
    band_kept: tuple[float, ...]
    policy_kl_error: float = 0.0
    js_divergence_error: float = 0.0
    chi2_token: float = 0.0
    abs_log_ratio_mean: float = 0.0
    abs_log_ratio_max: float = 0.0

    def figures(self) -> dict[str, float]:
        """Each term by its stored metric name."""
        out = {k: float(getattr(self, k)) for k in TERMS}
        out.update({band_name(d): v for d, v in zip(BANDS, self.band_kept, strict=True)})
        return out


def mismatch_terms(log_w: np.ndarray, tis_cap: float = TIS_CAP) -> MismatchTerms:
    """The terms of MismatchTerms over every sample of ``log_w`` (any shape). A log-weight of
    -inf is a weight of 0 (the train side gives the drawn action probability 0): valid, in the
    lower tail, and an infinite k1, k3 and mult_prob_error."""
    lw = np.asarray(log_w, dtype=np.float64).ravel()
    n = lw.size
    if n == 0:
        return MismatchTerms(1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, tuple(1.0 for _ in BANDS))
    ok = np.isfinite(lw) | (lw == -np.inf)
    bad = n - int(np.count_nonzero(ok))
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        w = np.exp(lw[ok])
        all_w = np.zeros(n)  # an invalid sample sits at the bottom of the tail: rejected
        all_w[ok] = w
        shares = [
            (int(np.count_nonzero(w < 1.0 / tis_cap)) + bad) / n,
            (int(np.count_nonzero(w < TINY_RATIO)) + bad) / n,
        ]
        kept = tuple(int(np.count_nonzero(np.abs(w - 1.0) <= d)) / n for d in BANDS)
        if bad:
            inf = math.inf
            return MismatchTerms(
                0.0, 0.0, *shares, inf, inf, inf, inf, inf, inf, inf, kept, inf, inf, inf, inf, inf
            )
        g = lw
        # w log w and w log(2w/(1+w)) are 0 at w = 0 (their limit), not NaN
        # per sample without cancellation near log w = 0 (auditor.compare.metrics)
        k3, wlogw, js = metrics.k3_terms(g), metrics.reverse_kl_terms(g), metrics.js_terms(g)
        return MismatchTerms(
            ratio_min=float(all_w.min()),
            ratio_p01=float(np.quantile(all_w, 0.01, method="lower")),
            low_share=shares[0],
            tiny_share=shares[1],
            kl_k1=float(np.mean(-g)),
            kl_k2=float(np.mean(0.5 * g * g)),
            kl_k3=float(np.mean(k3)),
            kl_train_infer=float(np.mean(wlogw)),
            js=float(np.mean(js)),
            chi2=float(np.mean(np.expm1(g) ** 2)),
            mult_prob_error=float(np.mean(np.exp(np.abs(g)))),
            band_kept=kept,
            policy_kl_error=float(np.mean(metrics.k3_terms(-g))),
            js_divergence_error=float(np.mean(_mixture_k3(g))),
            chi2_token=float(np.mean(np.expm1(2.0 * np.clip(g, -20.0, 20.0)))),
            abs_log_ratio_mean=float(np.mean(np.abs(g))),
            abs_log_ratio_max=float(np.max(np.abs(g))),
        )


def _mixture_k3(g: np.ndarray) -> np.ndarray:
    """NeMo RL's per-sample Jensen-Shannon: (k3(log p - log m) + k3(log q - log m)) / 2 with
    m = (p + q) / 2, written in log w = log p - log q alone: log p - log m = -log1p(expm1(-log
    w) / 2), log q - log m = -log1p(expm1(log w) / 2)."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        to_p = -np.log1p(0.5 * np.expm1(-g))
        to_q = -np.log1p(0.5 * np.expm1(g))
        return 0.5 * metrics.k3_terms(to_p) + 0.5 * metrics.k3_terms(to_q)


@dataclass(frozen=True)
class TrainDrawn:
    """The ratios under actions drawn from the **training** side's distribution (NeMo RL's
    stricter protocol): log w = log p(a) - log q(a) with a ~ p, from both sides' distribution
    parameters in float64. Where the serving side gives a training-side action probability 0
    (support it never samples: a masked logit, a collapsed std) the weight is +inf."""

    log_w: np.ndarray
    stats: RatioStats
    unsupported: int
    """Samples the serving side gives probability (density) 0."""
    kl: float
    """mean(log w) over the valid samples: the k1 estimate of KL(p || q) under p (inf where a
    sample has no finite weight)."""


def train_drawn(
    train: Distribution,
    infer: Distribution,
    k: int,
    seed: int,
    keep: np.ndarray | None = None,
    clip_epsilon: float = CLIP_EPSILON,
    tis_cap: float = TIS_CAP,
) -> TrainDrawn:
    """``k`` seeded draws per state from the train side, weighed by both sides' parameters;
    ``keep`` (states,) leaves out states (the policy's own invalid output, alike on both sides)."""
    draws = draw(train, k, seed)
    log_w = log_weights_from_params(train, infer, draws)
    if keep is not None:
        log_w = log_w[:, keep]
    unsupported = int(np.count_nonzero(log_w == np.inf))
    stats = ratio_stats(log_w, clip_epsilon, tis_cap)
    finite = log_w[np.isfinite(log_w)]
    kl = float(finite.mean()) if finite.size == log_w.size and finite.size else math.inf
    return TrainDrawn(log_w, stats, unsupported, kl if log_w.size else 0.0)


def behaviour_kl(train: Distribution, infer: Distribution) -> np.ndarray:
    """KL(pi_infer || pi_train) per state in closed form (float64): the Gaussians' (a tanh
    squash is a bijection and leaves the KL unchanged), or sum p_i (log p_i - log p_t) over
    categories. inf where either side's distribution is invalid."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if train.kind == "categorical":
            assert train.log_probs is not None and infer.log_probs is not None
            p = np.exp(infer.log_probs)
            terms = np.where(p > 0, p * (infer.log_probs - train.log_probs), 0.0)
            kl = terms.sum(axis=1)
        else:
            kl = metrics.gaussian_kl(infer.mean, infer.std, train.mean, train.std)
    kl = np.where(np.isnan(kl), np.inf, kl)
    return np.where(train.valid & infer.valid, np.maximum(kl, 0.0), np.inf)


def sampling(options: dict[str, Any]) -> tuple[int, int]:
    """(samples per state, seed) from the comparator's options: the cycle that runs the models on
    the drawn actions and the comparator that judges them must draw the same ones."""
    k, seed = options.get("samples_per_state", SAMPLES_PER_STATE), options.get("seed", 0)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 1024:
        raise ValueError(f"option 'samples_per_state' must be an integer from 1 to 1024, not {k!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"option 'seed' must be an integer >= 0, not {seed!r}")
    return k, seed


def behaviour_inputs(
    policy: Policy, input_names: list[str], inputs: list[np.ndarray], draws: Draws
) -> list[list[np.ndarray]]:
    """The model's inputs for each of the k draws: its own inputs (the same states) with the
    drawn actions, in the actions input's dtype and shape, in place of ``policy.actions``."""
    if policy.actions not in input_names:
        raise ValueError(
            f"the policy's actions input {policy.actions!r} is not an input of the model "
            f"(inputs: {', '.join(input_names)})"
        )
    at = input_names.index(str(policy.actions))
    template = np.asarray(inputs[at])
    batches = []
    for actions in draws.actions:
        x = list(inputs)
        with np.errstate(over="ignore"):  # a draw past the dtype's range is ±inf, scored as such
            x[at] = np.asarray(actions).astype(template.dtype).reshape(template.shape)
        batches.append(x)
    return batches


def invalid_states(train: Distribution, infer: Distribution, shown: int = 3) -> str:
    """Words for the states whose distribution is invalid on a side, rows with the same reason
    together: "rows 0-255: infer side: the std is not positive and finite (-6.3e-05)"."""
    reasons: dict[str, list[int]] = {}
    for i in sorted(set(train.problems) | set(infer.problems)):
        sides = [
            f"{side} side: {d.problems[i]}"
            for side, d in (("train", train), ("infer", infer))
            if i in d.problems
        ]
        reasons.setdefault("; ".join(sides), []).append(i)
    words = [f"{_rows(rows)}: {reason}" for reason, rows in reasons.items()]
    more = f"; {len(words) - shown} more" if len(words) > shown else ""
    return "; ".join(words[:shown]) + more


def _rows(rows: list[int]) -> str:
    if len(rows) == 1:
        return f"row {rows[0]}"
    if rows == list(range(rows[0], rows[-1] + 1)):
        return f"rows {rows[0]}-{rows[-1]}"
    listed = ", ".join(str(r) for r in rows[:5])
    return f"rows {listed}" + (f" and {len(rows) - 5} more" if len(rows) > 5 else "")
