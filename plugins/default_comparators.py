"""The built-in comparators, registered through the same hook as any plugin's.

Each takes both sides' outputs by name and its options (the probe's defaults from
``comparator_options(params)``, then ``[probes.X.comparators.NAME]``, then the dtype's and the
variant's tables) and returns MetricChecks. Limits here are about what a policy *does*
(probability mass, action choices), so their defaults hold for every dtype; the element-wise
atol/rtol are the precision check. The math lives in auditor.compare.metrics.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from auditor.compare import corrections, floor, metrics, presets, ratios
from auditor.compare.outputs import Comparator, MetricCheck
from auditor.hookspecs import hookimpl

Outputs = dict[str, np.ndarray]


def _option(options: dict[str, Any], key: str, default: Any, kind: type = float) -> Any:
    value = options.get(key, default)
    if value is None:
        return None
    if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind is str and isinstance(value, str):
        return value
    if kind is object:
        return value
    raise ValueError(f"option {key!r} must be a {kind.__name__}, not {value!r}")


def _output(train: Outputs, infer: Outputs, name: str) -> tuple[np.ndarray, np.ndarray]:
    if name not in train or name not in infer:
        raise ValueError(f"no output {name!r} (outputs: {', '.join(train)}); set the 'output' option")
    return train[name], infer[name]


def _at_most(metric: str, value: float, limit: float | None, output: str | None, what: str) -> MetricCheck:
    """A check that passes when value <= limit (NaN never passes); limit None: informational."""
    if limit is None:
        return MetricCheck(metric, value, True, None, output)
    passed = value <= limit
    return MetricCheck(metric, value, passed, limit, output, "" if passed else what, "<=")


def _at_least(metric: str, value: float, limit: float | None, output: str | None, what: str) -> MetricCheck:
    if limit is None:
        return MetricCheck(metric, value, True, None, output)
    passed = value >= limit
    return MetricCheck(metric, value, passed, limit, output, "" if passed else what, ">=")


def _finite_or_inf(x: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(x), np.inf, x)


def gaussian_kl(train: Outputs, infer: Outputs, options: dict[str, Any]) -> list[MetricCheck]:
    """Per-sample KL(train || infer) of the policy's Gaussians: max and mean over the batch."""
    mean_name = _option(options, "mean", "mean", str)
    std_name = _option(options, "std", "std", str)
    m1, m2 = _output(train, infer, mean_name)
    s1, s2 = _output(train, infer, std_name)
    kl = _finite_or_inf(metrics.gaussian_kl(m1, s1, m2, s2))
    kl_max = float(kl.max()) if kl.size else 0.0
    kl_mean = float(kl.mean()) if kl.size else 0.0
    return [
        _at_most(
            "kl_max", kl_max, _option(options, "max_kl", 1e-4), None, "the policies' distributions differ"
        ),
        _at_most(
            "kl_mean", kl_mean, _option(options, "max_mean_kl", 1e-5), None, "the policies differ on average"
        ),
    ]


def logp_diff(train: Outputs, infer: Outputs, options: dict[str, Any]) -> list[MetricCheck]:
    """Log-probabilities of the same fixed actions on both sides (computed inside the cells).

    In a low-precision output (fp16, bf16) a limit finer than the dtype can show at a value is
    no limit but a false alarm: fp16 holds |logp| in [16, 32) to 2**-6 = 0.0156, above the
    default max_abs. Each limit is therefore at least ``max_ulps`` (default 4) units in the
    last place of the output's dtype at the element's value (metrics.rounding_unit), and the
    max check shows the element furthest beyond its own limit (the largest difference when
    none is beyond). In fp32 the widening is far below the defaults and changes nothing.
    ``rounding`` (the probe's envelopes, output -> array): per element, how far two correct
    evaluations in its dtype can be apart; a limit is at least that too."""
    name = _option(options, "output", "logp", str)
    a, b = _output(train, infer, name)
    d = metrics.logp_diff(a, b)
    ulps = _option(options, "max_ulps", 4.0)
    if ulps is None or not ulps >= 0:
        raise ValueError(f"option 'max_ulps' must be a number >= 0, not {ulps!r}")
    unit = ulps * metrics.rounding_unit(a, b)
    envelope = (options.get("rounding") or {}).get(name)
    if envelope is not None and np.size(envelope) == unit.size:
        # the probe's per-element rounding envelope (its rounding(params)): ill-conditioned
        # elements may differ by more than a few ULPs of the result in any correct runtime
        unit = np.maximum(unit, np.asarray(envelope, dtype=np.float64).ravel())
    diffs = metrics.logp_abs_diff(a, b)
    checks = []
    max_abs = _option(options, "max_abs", 1e-2)
    if max_abs is None or diffs.size == 0:
        checks.append(_at_most("logp_diff_max", d.max_abs, max_abs, name, "log-probabilities differ"))
    else:
        limits = np.maximum(max_abs, unit)
        # Shown: the element furthest beyond its own limit, or, where none is, the largest
        # difference; either way the check passes only if every element does.
        excess = diffs - limits
        worst = int(np.argmax(excess if excess.max() > 0 else diffs))
        checks.append(
            _at_most(
                "logp_diff_max", float(diffs[worst]), float(limits[worst]), name, "log-probabilities differ"
            )
        )
    max_mean = _option(options, "max_mean", 1e-3)
    max_mean_exp = _option(options, "max_mean_exp", 1.001)
    if unit.size:
        max_mean = None if max_mean is None else max(max_mean, float(np.mean(unit)))
        with np.errstate(over="ignore"):
            widened = float(np.mean(np.exp(unit)))
        # Values so large that their ULPs overflow exp are not rounding to allow for: never an
        # infinite limit (an inf would then pass).
        if max_mean_exp is not None and math.isfinite(widened):
            max_mean_exp = max(max_mean_exp, widened)
    return [
        *checks,
        _at_most("logp_diff_mean", d.mean_abs, max_mean, name, "log-probabilities differ"),
        _at_most(
            "exp_abs_logp_diff_mean",
            d.mean_exp_abs,
            max_mean_exp,
            name,
            "importance ratios drift from 1 (NeMo RL investigates above 1.05)",
        ),
        _at_most("logp_k3_kl", d.k3_kl, _option(options, "max_k3_kl", None), name, "k3 KL too large"),
        _at_most("prob_diff_max", d.prob_diff_max, _option(options, "max_prob_diff", None), name, ""),
    ]


def action_agreement(train: Outputs, infer: Outputs, options: dict[str, Any]) -> list[MetricCheck]:
    """Share of samples whose deterministic action agrees within ``atol`` on every dimension."""
    name = _option(options, "output", "action", str)
    atol = _option(options, "atol", 1e-3)
    a, b = _output(train, infer, name)
    rate = metrics.agreement_rate(a, b, atol)
    return [
        _at_least(
            "action_agreement",
            rate,
            _option(options, "min_rate", 1.0),
            name,
            f"actions differ by more than {atol:g} on {100 * (1 - rate):.2f}% of samples",
        )
    ]


def finite_where_train_finite(train: Outputs, infer: Outputs, options: dict[str, Any]) -> list[MetricCheck]:
    """Every output: elements the train side computes finite that the infer side does not."""
    limit = _option(options, "max_count", 0.0)
    return [
        _at_most(
            "nonfinite_where_train_finite",
            float(metrics.nonfinite_where_train_finite(t, infer[n])),
            limit,
            n,
            "the infer side gives NaN/Inf where the train side is finite",
        )
        for n, t in train.items()
        if n in infer
    ]


def ks_two_sample(train: Outputs, infer: Outputs, options: dict[str, Any]) -> list[MetricCheck]:
    """Do both sides' samples come from one distribution? Two-sample KS statistic and p-value."""
    name = _option(options, "output", "sample", str)
    a, b = _output(train, infer, name)
    ks = metrics.ks_two_sample(a, b)
    return [
        _at_most(
            "ks_statistic", ks.statistic, _option(options, "max_statistic", None), name, "samples differ"
        ),
        _at_least(
            "ks_pvalue",
            ks.pvalue,
            _option(options, "min_pvalue", 1e-3),
            name,
            "the two sides' samples are unlikely to come from one distribution",
        ),
    ]


def normalizer_classes(train: Outputs, infer: Outputs, options: dict[str, Any]) -> list[MetricCheck]:
    """The observation normalizer, per class of input element (ordinary, huge, zero variance,
    NaN, ±Inf, denormal, ...): largest difference, non-finite mismatches, sign flips, clip
    disagreements, and NaN masking (NaN in, finite out) on each side.

    Options: ``classes``, an array of class names shaped like the output (from the probe);
    ``clip``, the clipping bound; ``max_nan_masked``: NaN inputs the infer side may turn into
    finite numbers beyond those the train side does (default 0).
    """
    name = _option(options, "output", "normalized", str)
    a, b = _output(train, infer, name)
    classes = np.asarray(_option(options, "classes", None, object))
    if classes.shape != a.shape:
        raise ValueError(f"option 'classes' has shape {classes.shape}, output {name!r} has {a.shape}")
    clip = _option(options, "clip", math.inf)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    checks: list[MetricCheck] = []
    for cls in dict.fromkeys(classes.ravel().tolist()):
        mask = classes == cls
        ta, ib = a64[mask], b64[mask]
        with np.errstate(invalid="ignore", over="ignore"):
            both = np.isfinite(ta) & np.isfinite(ib)
            diff = np.abs(ta[both] - ib[both])
        mismatch = np.count_nonzero(
            (np.isnan(ta) != np.isnan(ib))
            | (np.isposinf(ta) != np.isposinf(ib))
            | (np.isneginf(ta) != np.isneginf(ib))
        )
        checks += [
            MetricCheck(f"{cls}.max_abs", float(diff.max()) if diff.size else 0.0, True, None, name),
            _at_most(
                f"{cls}.nan_inf_mismatch",
                float(mismatch),
                0.0,
                name,
                f"{cls} inputs: NaN/Inf on one side only",
            ),
            _at_most(
                f"{cls}.sign_flips", float(metrics.sign_flips(ta, ib)), 0.0, name, f"{cls} inputs: signs flip"
            ),
            _at_most(
                f"{cls}.clip_disagreements",
                float(metrics.clip_disagreements(ta, ib, clip)),
                0.0,
                name,
                f"{cls} inputs: one side clips, the other does not",
            ),
        ]
        if cls == "nan":
            nan_in = np.ones(ta.shape, dtype=bool)
            masked_train = metrics.nan_masked(nan_in, ta)
            masked_infer = metrics.nan_masked(nan_in, ib)
            checks += [
                MetricCheck("nan.masked_train", float(masked_train), True, None, name),
                _at_most(
                    "nan.masked_infer",
                    float(masked_infer),
                    float(masked_train) + _option(options, "max_nan_masked", 0.0),
                    name,
                    "the infer side turns NaN observations into finite numbers (NaN masking)",
                ),
            ]
    return checks


MIN_ESS = 0.9995
"""The samples' lowest ESS by default: 1/(1 + Var w), so it fails once the weights spread by
about 2.2%; at 1,024 samples that sees a std scaled by 2% in every seed, where PPO's clip share
at 0.2 moves by 0.1% at 2.4% (bench/detection_power.py), and pages no fp32 rounding."""


def importance_ratios(train: Outputs, infer: Outputs, options: dict[str, Any]) -> list[MetricCheck]:
    """PPO's importance ratios w = pi_train(a|s) / pi_infer(a|s) under the infer side's policy.

    Actions are drawn from the infer side's distribution (``samples_per_state`` per state,
    ``seed``), as the serving stack's rollouts draw them; the weights come from each side's
    in-graph log-probabilities of those actions where the cycle ran the models on them
    (``{logp}@behaviour``), else from the distributions' parameters in float64
    (auditor.compare.ratios). Held to: the share PPO would clip at ``clip_epsilon`` (0.2, as the
    seed's trainer) at most ``max_ppo_clip_share``, the share truncated importance sampling
    truncates at ``tis_cap`` (2) at most ``max_tis_share``, the effective sample size at least
    ``min_ess``; the ratio's mean, p99 and max and KL(pi_infer || pi_train) are recorded
    (``max_kl_behaviour`` to hold it: gaussian_kl already holds the distributions)."""
    policy = ratios.Policy.from_options(options)
    k, seed = ratios.sampling(options)
    eps = _option(options, "clip_epsilon", ratios.CLIP_EPSILON)
    cap = _option(options, "tis_cap", ratios.TIS_CAP)
    if eps is None or not 0 < eps < 1:
        raise ValueError(f"option 'clip_epsilon' must be a number in (0, 1), not {eps!r}")
    if cap is None or not cap > 1:
        raise ValueError(f"option 'tis_cap' must be a number > 1, not {cap!r}")
    trainer = _option(options, "trainer", presets.PPO, str)
    if trainer not in presets.TRAINERS:
        raise ValueError(f"option 'trainer' must be one of {', '.join(presets.TRAINERS)}, not {trainer!r}")
    preset = presets.BY_NAME.get(trainer)
    max_removed = _option(options, "max_removed_share", 0.0)
    t, i = ratios.distribution(policy, train), ratios.distribution(policy, infer)
    if t.valid.shape != i.valid.shape:
        raise ValueError(f"the two sides have {t.valid.size} and {i.valid.size} states")
    draws = ratios.draw(i, k, seed)
    sampled = f"{policy.logp}{ratios.BEHAVIOUR}"
    if policy.in_graph() and sampled in train and sampled in infer:
        log_w = ratios.log_weights_in_graph(train[sampled], infer[sampled], draws, t.valid)
        basis = "from the models' own log-probabilities"
    else:
        log_w = ratios.log_weights_from_params(t, i, draws)
        basis = "from the distributions' parameters in float64"
    alike = ratios.invalid_alike(t, i)
    if alike.any():  # the policy's own invalid output, the same on both stacks: not theirs to answer for
        log_w = log_w[:, ~alike]
    stats = ratios.ratio_stats(log_w, eps, cap)
    # the noise floor on the same states: each limit holds what exceeds it (auditor.compare.floor)
    fl = floor.measure(policy, t, train, infer, k, seed, ~alike if alike.any() else None, eps, cap)
    kl = ratios.behaviour_kl(t, i)
    kl = kl[~alike] if kl.shape == alike.shape else kl
    kl_mean = float(kl.mean()) if kl.size else 0.0
    # Why samples have no weight is said once, on the ESS; the others count them.
    also = f" ({stats.invalid} of {stats.n} samples have no valid weight)" if stats.invalid else ""
    states = ratios.invalid_states(t, i)
    why = f"{also[:-1]}: {states})" if also and states else also
    own = int(alike.sum())
    policy_own = (
        f"; {own} of {alike.size} states have no valid distribution on either side, bit for bit "
        "alike: the policy's own output, left out"
        if own
        else ""
    )
    expected = f"the noise floor is {100 * fl.ppo_clip_share:.2f}%" if fl.ppo_clip_share else "0 expected"
    clip_words = (
        f"the stacks alone would clip {100 * stats.ppo_clip_share:.2f}% of PPO samples at epsilon {eps:g} "
        f"({expected}){f', {stats.invalid} of {stats.n} without a valid weight' if stats.invalid else ''}"
        f"{policy_own}"
    )
    clip_limit = _above(
        _option(options, "max_ppo_clip_share", 0.0), floor.allowance(fl.ppo_clip_share, stats.n)
    )
    # the same weights under the names trainers use (lower tail, KL both ways, JS, chi2, NeMo's
    # token_mult_prob_error, band retention): recorded, for the history, --json and Prometheus
    terms = [
        MetricCheck(name, value, True, None, None)
        for name, value in ratios.mismatch_terms(log_w, cap).figures().items()
    ]
    # what each trainer's rollout correction would remove of these samples (each a sequence of
    # one step); the one ``trainer`` names is what the verdict judges, in that trainer's words
    removed = corrections.sample_shares(log_w)
    if preset is not None:
        share_floor = corrections.sample_shares(fl.log_w)[preset.name]
        max_removed = _above(max_removed, floor.allowance(share_floor, stats.n))
    trainers = [
        MetricCheck(
            p.metric,
            removed[p.name],
            removed[p.name] <= max_removed,
            max_removed,
            None,
            p.say(removed[p.name], "samples") + also,
            "<=",
        )
        if p is preset and max_removed is not None
        else MetricCheck(p.metric, removed[p.name], True, None, None)
        for p in presets.PRESETS
    ]
    ppo = [
        MetricCheck("ratio_mean", stats.ratio_mean, True, None, None, f"{stats.n} samples, {basis}"),
        # what the shares are of and at: the answer in PPO terms reads again from the figures
        MetricCheck("samples", float(stats.n), True, None, None),
        MetricCheck("invalid_samples", float(stats.invalid), True, None, None),
        MetricCheck("clip_epsilon", float(eps), True, None, None),
        MetricCheck("tis_cap", float(cap), True, None, None),
        MetricCheck("ratio_p99", stats.ratio_p99, True, None, None),
        MetricCheck("ratio_max", stats.ratio_max, True, None, None),
        # said whether it passes: the report's line in PPO terms quotes it
        MetricCheck(
            "ppo_clip_share",
            stats.ppo_clip_share,
            stats.ppo_clip_share <= clip_limit if clip_limit is not None else True,
            clip_limit,
            None,
            clip_words,
            "<=" if clip_limit is not None else "",
        ),
        _at_most(
            "tis_share",
            stats.tis_share,
            _above(_option(options, "max_tis_share", 0.0), floor.allowance(fl.tis_share, stats.n)),
            None,
            f"truncated importance sampling would truncate {100 * stats.tis_share:.2f}% of samples "
            f"at w > {cap:g}{also}",
        ),
        _at_least(
            "ess",
            stats.ess,
            _above(_option(options, "min_ess", MIN_ESS), fl.ess - 1.0),
            None,
            f"the stacks alone cut the effective sample size to {stats.ess:.4f} of the batch{why}",
        ),
        _at_most(
            "kl_behaviour",
            kl_mean,
            _option(options, "max_kl_behaviour", None),
            None,
            "KL(pi_infer || pi_train) too large",
        ),
    ]
    if preset is not None:  # the trainer's correction judges: PPO's own terms are recorded
        ppo = [
            MetricCheck(
                c.metric, c.value, True, None, None, c.message if c.metric == "ppo_clip_share" else ""
            )
            if c.metric in ("ppo_clip_share", "tis_share", "ess")
            else c
            for c in ppo
        ]
    drawn = _train_drawn(t, i, k, seed, alike, eps, cap, clip_limit, preset, max_removed)
    floors = [
        MetricCheck("floor_ppo_clip_share", fl.ppo_clip_share, True, None, None),
        MetricCheck("floor_tis_share", fl.tis_share, True, None, None),
        MetricCheck("floor_ess", fl.ess, True, None, None),
        MetricCheck("floor_kl_k3", fl.kl_k3, True, None, None),
        MetricCheck("floor_mult_prob_error", fl.mult_prob_error, True, None, None),
        MetricCheck("floor_rerun", float(fl.rerun), True, None, None),
    ]
    return [*ppo, *terms, *trainers, *drawn, *floors]


def _above(limit: float | None, floor_value: float) -> float | None:
    """A limit lifted by the noise floor (None: not held)."""
    return None if limit is None else limit + floor_value


def _train_drawn(
    t: ratios.Distribution,
    i: ratios.Distribution,
    k: int,
    seed: int,
    alike: np.ndarray,
    eps: float,
    cap: float,
    clip_limit: float | None,
    preset: presets.Preset | None,
    max_removed: float | None,
) -> list[MetricCheck]:
    """The same ratios under actions drawn from the training side (NeMo RL's stricter protocol:
    what the serving side never samples is seen only there), from the distributions' parameters
    in float64, held to the same limit as the serving side's draws: PPO's clip share, or the
    chosen trainer's correction's share."""
    d = ratios.train_drawn(t, i, k, seed, ~alike if alike.any() else None, eps, cap)
    n = max(d.stats.n, 1)
    zero = (
        f"; the serving side gives {d.unsupported} of them probability 0 (support it never samples)"
        if d.unsupported
        else ""
    )
    checks = [
        MetricCheck("train_drawn_tis_share", d.stats.tis_share, True, None, None),
        MetricCheck("train_drawn_ratio_max", d.stats.ratio_max, True, None, None),
        MetricCheck("train_drawn_kl", d.kl, True, None, None),
        MetricCheck("train_drawn_unsupported_share", d.unsupported / n, True, None, None),
    ]
    clip = d.stats.ppo_clip_share
    clip_words = (
        f"on {d.stats.n} actions drawn from the training side, the stacks alone would clip "
        f"{100 * clip:.2f}% at epsilon {eps:g}{zero}"
    )
    if preset is None:
        checks.insert(0, _at_most("train_drawn_ppo_clip_share", clip, clip_limit, None, clip_words))
        return checks
    checks.insert(0, MetricCheck("train_drawn_ppo_clip_share", clip, True, None, None))
    share = corrections.sample_shares(d.log_w)[preset.name]
    words = f"on {d.stats.n} actions drawn from the training side, {preset.say(share, 'samples')}{zero}"
    checks.append(_at_most("train_drawn_removed_share", share, max_removed, None, words))
    return checks


COMPARATORS: tuple[tuple[str, Callable[..., list[MetricCheck]]], ...] = (
    ("gaussian_kl", gaussian_kl),
    ("logp_diff", logp_diff),
    ("action_agreement", action_agreement),
    ("finite_where_train_finite", finite_where_train_finite),
    ("ks_two_sample", ks_two_sample),
    ("normalizer_classes", normalizer_classes),
    ("importance_ratios", importance_ratios),
)


@hookimpl
def auditor_comparators() -> list[Comparator]:
    return [
        Comparator(name, fn, (fn.__doc__ or "").strip().splitlines()[0], drawn=fn is importance_ratios)
        for name, fn in COMPARATORS
    ]
