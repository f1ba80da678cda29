"""Closed-loop rollouts: does the served policy *behave* like the trained one?

Element-wise agreement on a fixed batch says little about an episode: a per-step error of
1e-6 can stay 1e-6, or the environment can amplify it until the two trajectories part.
So the auditor runs gymnasium episodes (Pendulum-v1 by default: its observation and action
match the PPO probe) with the policy's deterministic action (the mean, clipped to the
action bounds) computed step by step by each stack's worker:

- closed loop: two copies of the environment with the same seed, one driven by the train
  stack, one by the infer stack; per-step action difference, the first step where it
  exceeds ``action_atol``, the largest observation divergence, and each side's return;
- open loop: the infer stack fed the train stack's observations, so its action difference
  is the per-step error alone; set next to the closed loop it separates per-step error
  from trajectory amplification.

Sampled mode (``[rollout] mode = "sampled"``), the way PPO collects data: each side's policy
gives its distribution (mean, std) at every step and its action is drawn with the step's
seeded noise, the same noise for both sides (common random numbers: identical policies give
identical trajectories). After each episode, the infer side's visited states and actions, a
rollout batch, are scored by both models in one batch each, as a PPO update recomputes
``old_log_prob`` and ``new_log_prob``: the episode's log importance weight (the sum over its
steps), the share of steps PPO would clip and their effective sample size
(auditor.compare.ratios).

The environments belong to neither stack: they run in a child of the auditor
(``auditor.policy.env_process``), so the daemon never imports gymnasium; the episode logic stays
here, and each step is one ``run`` request per side to the stack workers (batch 1) and one
``step`` per side to the environment process. A failing environment (unknown id, an error
in reset or step, the child dying or hanging) becomes an ERROR result, like a failing
worker. Episode logic is independent of the workers (policies are plain callables), so it
is tested without stacks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from auditor.compare import corrections, metrics, presets, ratios
from auditor.policy.env_process import EnvError, EnvProcess, RemoteEnv, Spaces, using
from auditor.results import CONSISTENT, DRIFT, ERROR, Episode, Finding, RolloutResult, removed_summary

Policy = Callable[[np.ndarray], np.ndarray]
"""Observation (1-D) -> the policy's deterministic action before clipping (1-D); in sampled
mode, its distribution's mean and std, concatenated (1-D, twice the action's size)."""
Scorer = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""(states (T, obs), actions (T, act) in the model's action space) -> log-probabilities (T,)."""


@dataclass(frozen=True)
class Sampler:
    """Sampled mode: how an action is drawn from a side's (mean, std), and how both sides score
    the infer side's episode. ``kind`` "gaussian": the action is u = mean + std * z, clipped
    to the action space; "tanh": the model scores a = tanh(u) and the environment gets
    ``scale`` * a."""

    kind: str
    scale: Any
    score_train: Scorer
    score_infer: Scorer
    clip_epsilon: float = ratios.CLIP_EPSILON
    offset: Any = 0.0
    """The environment gets ``scale`` * a + ``offset`` (a = u, or tanh(u))."""
    pre_squash: bool = False
    """The scorers take u, the Gaussian draw before tanh (weights from the distributions'
    parameters, where tanh's Jacobian cancels), rather than a = tanh(u)."""

    def draw(self, dist: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the environment's action before clipping, the model's action) for noise z; a
        categorical policy: ``dist`` its logits, z one uniform draw, the action an index drawn
        by the inverse of its distribution function (the same z, the same index for identical
        policies)."""
        if self.kind == "categorical":
            logits = np.asarray(dist, np.float64).reshape(-1)
            with np.errstate(invalid="ignore", over="ignore"):
                cdf = np.cumsum(np.exp(logits - np.logaddexp.reduce(logits)))
            index = min(
                int(np.searchsorted(cdf, float(np.asarray(z).reshape(-1)[0]) * cdf[-1])), len(cdf) - 1
            )
            action = np.asarray([index], np.int64)
            return action, action
        mean, std = np.split(np.asarray(dist, np.float64).reshape(-1), 2)
        u = mean + std * z
        a = np.tanh(u) if self.kind == "tanh" else u
        return np.asarray(self.scale) * a + np.asarray(self.offset), u if self.pre_squash else a

    def weights(self, states: np.ndarray, actions: np.ndarray) -> tuple[ratios.RatioStats, np.ndarray]:
        """Both models' log-probabilities of the infer side's steps: the log weights, with
        their statistics."""
        lt = np.asarray(self.score_train(states, actions), np.float64).reshape(-1)
        li = np.asarray(self.score_infer(states, actions), np.float64).reshape(-1)
        log_w = metrics.logp_delta(lt, li)
        return ratios.ratio_stats(log_w, self.clip_epsilon), log_w


@dataclass
class _Env:
    env: RemoteEnv
    obs: np.ndarray
    ret: float = 0.0
    done: bool = False
    rewards: list[float] = field(default_factory=list)


def _first(diffs: Sequence[float], atol: float) -> int | None:
    for i, d in enumerate(diffs):
        if not d <= atol:  # NaN counts as exceeding
            return i + 1
    return None


def run_episode(
    env_id: str,
    seed: int,
    steps: int,
    train_policy: Policy,
    infer_policy: Policy,
    action_atol: float,
    envs: EnvProcess | None = None,
    sampler: Sampler | None = None,
    env_path: str = "",
) -> Episode:
    """One closed-loop episode (plus its open-loop replay) of at most ``steps`` steps
    (0: until the environment ends it), its two environments made in ``envs`` (a child
    started and closed for this episode when None; ``env_path``: the folder of the user's
    environment package); ``sampler``: sampled mode. Raises EnvError when they fail."""
    with (
        using(envs) as proc,
        proc.make(env_id, env_path) as train_env,
        proc.make(env_id, env_path) as infer_env,
    ):
        return _episode(train_env, infer_env, seed, steps, train_policy, infer_policy, action_atol, sampler)


def _episode(
    train_env: RemoteEnv,
    infer_env: RemoteEnv,
    seed: int,
    steps: int,
    train_policy: Policy,
    infer_policy: Policy,
    action_atol: float,
    sampler: Sampler | None = None,
) -> Episode:
    space, proc = train_env.spaces, train_env.process
    if space.act_n is not None:
        return _discrete_episode(train_env, infer_env, seed, steps, train_policy, infer_policy, sampler)
    if space.act_low is None or space.act_high is None or space.act_dtype is None:
        raise EnvError("make", "error", f"{train_env.env_id} has no Box action space (bounds to clip to)")
    train, infer = (_Env(env, env.reset(seed)) for env in (train_env, infer_env))
    low, high = np.asarray(space.act_low, np.float64), np.asarray(space.act_high, np.float64)
    shape, dtype = space.act_shape, np.dtype(space.act_dtype)

    noise = np.random.RandomState(seed)  # sampled mode: the same draws for both sides
    visited: list[tuple[np.ndarray, np.ndarray]] = []  # the infer side's (state, model action)

    def act(policy: Policy, obs: np.ndarray, z: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        out = np.asarray(policy(obs), np.float64)
        env_action, model_action = (out, out) if sampler is None or z is None else sampler.draw(out, z)
        return np.clip(env_action.reshape(shape), low, high), model_action

    action_diff: list[float] = []
    open_diff: list[float] = []
    obs_diff: list[float] = []
    step = 0
    while steps <= 0 or step < steps:
        z = noise.standard_normal(shape) if sampler is not None else None
        a_train, _ = act(train_policy, train.obs, z)
        a_infer, m_infer = act(infer_policy, infer.obs, z)
        if sampler is not None:
            visited.append((np.asarray(infer.obs, np.float64).reshape(-1), m_infer))
        # Open loop: the infer stack on the train stack's observation. Until the
        # trajectories part, that is the closed-loop call itself: no second request.
        a_open = a_infer if np.array_equal(infer.obs, train.obs) else act(infer_policy, train.obs, z)[0]
        action_diff.append(float(np.max(np.abs(a_train - a_infer))))
        open_diff.append(float(np.max(np.abs(a_train - a_open))))
        obs_diff.append(_advance(proc, train, infer, a_train.astype(dtype), a_infer.astype(dtype)))
        step += 1
        if train.done or infer.done:
            break
    return _finished(seed, train, infer, (action_diff, open_diff, obs_diff), action_atol, sampler, visited)


def _advance(proc: EnvProcess, train: _Env, infer: _Env, a_train: Any, a_infer: Any) -> float:
    """Both environments stepped with their side's action (one request); the largest
    difference of the observations after it."""
    stepped = proc.step([(train.env, a_train), (infer.env, a_infer)])
    for side, (obs, reward, terminated, truncated) in zip((train, infer), stepped, strict=True):
        side.obs = obs
        side.ret += reward
        side.done = terminated or truncated
    return float(np.max(np.abs(train.obs.astype(np.float64) - infer.obs)))


def _finished(
    seed: int,
    train: _Env,
    infer: _Env,
    diffs: tuple[list[float], list[float], list[float]],
    atol: float,
    sampler: Sampler | None,
    visited: list[tuple[np.ndarray, np.ndarray]],
) -> Episode:
    """The episode from its per-step differences (closed loop, open loop, observations); in
    sampled mode with the infer side's steps weighed by both models."""
    action_diff, open_diff, obs_diff = diffs
    sampled: dict[str, float] = {}
    if sampler is not None and visited:
        states = np.stack([v[0] for v in visited])
        stats, log_w = sampler.weights(states, np.stack([np.asarray(v[1]).reshape(-1) for v in visited]))
        # a step without a finite weight leaves the episode's weight undefined: inf, and clipped
        log_sum = stats.log_weight_sum if not stats.invalid else math.inf
        valid = not stats.invalid  # a step of probability 0 on the train side (-inf) is valid
        sampled = {
            "log_ratio_sum": log_sum,
            "ppo_clip_share": stats.ppo_clip_share,
            "ess": stats.ess,
            # the geometric-mean ratio's log and the worst steps: comparable across lengths
            "log_ratio_mean": float(np.mean(log_w)) if valid else math.inf,
            "log_ratio_min": float(np.min(log_w)) if valid else -math.inf,
            "log_ratio_max": float(np.max(log_w)) if valid else math.inf,
        }
        # what each trainer's correction would remove of this episode (auditor.compare.presets)
        removed = corrections.removed_shares(np.asarray(log_w, np.float64).reshape(1, -1))
        sampled["removed"] = {name: r.steps for name, r in removed.items()}
        sampled["terms"] = ratios.mismatch_terms(log_w).figures()
    return Episode(
        seed=seed,
        steps=len(action_diff),
        action_diff=tuple(action_diff),
        open_action_diff=tuple(open_diff),
        obs_diff=tuple(obs_diff),
        train_return=train.ret,
        infer_return=infer.ret,
        first_exceed=_first(action_diff, atol),
        open_first_exceed=_first(open_diff, atol),
        **sampled,
    )


def _discrete_episode(
    train_env: RemoteEnv,
    infer_env: RemoteEnv,
    seed: int,
    steps: int,
    train_policy: Policy,
    infer_policy: Policy,
    sampler: Sampler | None = None,
) -> Episode:
    """An episode in a Discrete action space: a policy gives its logits (or one value, the
    action index itself); the deterministic action is the argmax, a sampled one is drawn with
    the step's seeded uniform (the same for both sides). A step's action difference is 1 where
    the sides chose different actions, else 0."""
    proc, n = train_env.process, int(train_env.spaces.act_n or 0)
    train, infer = (_Env(env, env.reset(seed)) for env in (train_env, infer_env))
    noise = np.random.RandomState(seed)
    visited: list[tuple[np.ndarray, np.ndarray]] = []

    def act(policy: Policy, obs: np.ndarray, u: np.ndarray | None) -> int:
        out = np.asarray(policy(obs), np.float64).reshape(-1)
        if sampler is not None and u is not None:
            return int(sampler.draw(out, u)[0][0])
        if out.size == 1:
            return int(round(float(out[0])))
        return int(np.argmax(out))

    action_diff: list[float] = []
    open_diff: list[float] = []
    obs_diff: list[float] = []
    step = 0
    while steps <= 0 or step < steps:
        u = noise.uniform(size=1) if sampler is not None else None
        a_train, a_infer = act(train_policy, train.obs, u), act(infer_policy, infer.obs, u)
        if sampler is not None:
            visited.append((np.asarray(infer.obs, np.float64).reshape(-1), np.asarray([a_infer])))
        a_open = a_infer if np.array_equal(infer.obs, train.obs) else act(infer_policy, train.obs, u)
        action_diff.append(float(a_train != a_infer))
        open_diff.append(float(a_train != a_open))
        bad = [a for a in (a_train, a_infer) if not 0 <= a < n]
        if bad:
            raise EnvError(
                "step", "error", f"a policy chose action {bad[0]}, outside the {n} actions of the environment"
            )
        obs_diff.append(_advance(proc, train, infer, np.int64(a_train), np.int64(a_infer)))
        step += 1
        if train.done or infer.done:
            break
    return _finished(seed, train, infer, (action_diff, open_diff, obs_diff), 0.5, sampler, visited)


@dataclass(frozen=True)
class SampledLimits:
    """Sampled mode's verdict: without a trainer preset, the share of an episode's steps PPO may
    clip and the lowest ESS; with one (``[ppo] trainer``), the share of episodes (steps, for a
    token-level correction) that trainer's correction may remove."""

    clip_epsilon: float = ratios.CLIP_EPSILON
    max_ppo_clip_share: float = 0.0
    min_ess: float = 0.99
    trainer: str = presets.PPO
    max_removed_share: float = 0.0

    def preset(self) -> presets.Preset | None:
        return presets.BY_NAME.get(self.trainer)


def verdict(
    episodes: Sequence[Episode], action_atol: float, return_atol: float, sampled: SampledLimits | None = None
) -> tuple[str, str]:
    """Status and message: drift when some step's action exceeds ``action_atol`` or some
    episode's return differs by more than ``return_atol``; in sampled mode also when an
    episode's steps would be clipped beyond ``max_ppo_clip_share`` or their ESS is below
    ``min_ess``."""
    problems = []
    exceeding = [e for e in episodes if e.first_exceed is not None]
    if exceeding:
        first = min(exceeding, key=lambda e: e.first_exceed or 0)
        open_exceeding = [e for e in episodes if e.open_first_exceed is not None]
        cause = (
            "the per-step error alone exceeds it (open loop too)"
            if open_exceeding
            else "the open-loop per-step error stays within it: the trajectory amplifies it"
        )
        problems.append(
            f"action difference exceeds {action_atol:g} in {len(exceeding)}/{len(episodes)} episodes, "
            f"first at step {first.first_exceed} (seed {first.seed}); {cause}"
        )
    worst = max(episodes, key=lambda e: e.return_diff if math.isfinite(e.return_diff) else math.inf)
    if not worst.return_diff <= return_atol:
        problems.append(
            f"returns differ by {worst.return_diff:.4g} (seed {worst.seed}: train {worst.train_return:.4g}, "
            f"infer {worst.infer_return:.4g}; limit {return_atol:g})"
        )
    ppo = sampled_words(episodes, sampled)
    if sampled is not None and ppo:
        preset = sampled.preset()
        if preset is not None:
            share = removed_share(episodes, preset)
            if share is None or not share <= sampled.max_removed_share:
                problems.append(f"{ppo} (limit: {sampled.max_removed_share:g})")
        else:
            clipped = [e for e in episodes if not (e.ppo_clip_share or 0.0) <= sampled.max_ppo_clip_share]
            thin = [e for e in episodes if not (e.ess if e.ess is not None else 0.0) >= sampled.min_ess]
            if clipped or thin:
                limit = f"limits: clip share {sampled.max_ppo_clip_share:g}, ESS {sampled.min_ess:g}"
                problems.append(f"{ppo} ({limit})")
    if problems:
        return DRIFT, "; ".join(problems)
    return CONSISTENT, (
        f"{len(episodes)} episodes: actions within {action_atol:g} at every step, "
        f"returns within {return_atol:g}" + (f"; {ppo}" if ppo else "")
    )


def sampled_words(episodes: Sequence[Episode], limits: SampledLimits | None) -> str:
    """Sampled mode in a trainer's words: "the stacks alone would clip 0.0% of the sampled
    steps at epsilon 0.2; ESS 1.0000 at least; a 200-step episode's weight e^-0.31 .. e^0.42",
    and with a trainer preset what its correction would remove ("verl (decoupled_geo_rs)
    would reject 33.3% of the episodes: geometric-mean ratio outside [0.999, 1.001]")."""
    sampled = [e for e in episodes if e.sampled]
    if not sampled or limits is None:
        return ""
    steps = sum(e.steps for e in sampled)
    clipped = sum((e.ppo_clip_share or 0.0) * e.steps for e in sampled)
    logs = [e.log_ratio_sum for e in sampled if e.log_ratio_sum is not None]
    ess = min(e.ess if e.ess is not None else 0.0 for e in sampled)
    span = max(e.steps for e in sampled)
    weights = (
        f"a {span}-step episode's weight e^{min(logs):.3g} .. e^{max(logs):.3g}"
        if all(math.isfinite(x) for x in logs)
        else "an episode's weight is not finite (a step without a valid weight)"
    )
    ppo = (
        f"the stacks alone would clip {100 * clipped / max(steps, 1):.2f}% of the sampled steps at epsilon "
        f"{limits.clip_epsilon:g}; ESS {ess:.4f} at least; {weights}"
    )
    preset = limits.preset()
    share = removed_share(sampled, preset) if preset is not None else None
    if preset is None:
        return ppo
    if share is None:
        return f"{ppo}; {preset.trainer}'s correction cannot be judged (episodes without its figures)"
    of = "episodes" if preset.level == presets.SEQUENCE else "sampled steps"
    return f"{preset.say(share, of)}; {ppo}"


def removed_share(episodes: Sequence[Episode], preset: presets.Preset) -> float | None:
    """What ``preset`` removes of the sampled episodes, as its verdict judges it: the share of
    episodes for a sequence-level correction, of steps for a token-level one (None: no episode
    carries its figures)."""
    summary = removed_summary([e for e in episodes if e.sampled])
    key = preset.metric if preset.level == presets.SEQUENCE else f"{preset.name}_step_share"
    return summary.get(key)


def worker_policy(
    worker: Any,
    model: str,
    output: int | tuple[int, ...],
    make_inputs: Callable[[np.ndarray], list[np.ndarray]],
) -> Policy:
    """A policy whose action is output ``output`` of ``model`` in a stack worker (several
    outputs: concatenated, the sampled mode's mean and std); ``make_inputs`` turns one
    observation into the model's inputs (batch 1)."""
    picks = (output,) if isinstance(output, int) else output

    def policy(obs: np.ndarray) -> np.ndarray:
        outputs = worker.request("run", model=model, inputs=make_inputs(obs)).result["outputs"]
        return np.concatenate([np.asarray(outputs[i], np.float64).reshape(-1) for i in picks])

    return policy


def spaces(env_id: str, envs: EnvProcess | None = None, env_path: str = "") -> Spaces:
    """The environment's spaces (made in ``envs``, or in a child of its own). Raises EnvError."""
    with using(envs) as proc, proc.make(env_id, env_path) as env:
        return env.spaces


def check_spaces(
    env_id: str,
    obs_dim: int | None,
    act_dim: int | None,
    envs: EnvProcess | None = None,
    env_path: str = "",
    who: str = "the probe",
    discrete: bool = False,
) -> str | None:
    """Why ``who`` cannot drive the environment, or None when it can (the environment made
    in ``envs``, or in a child of its own when None). ``discrete``: ``who`` may act in a
    Discrete space too (``act_dim`` its logits, or 1: the action index). Raises EnvError when
    it cannot be made."""
    return space_problem(spaces(env_id, envs, env_path), env_id, obs_dim, act_dim, who, discrete)


def space_problem(
    spaces: Spaces, env_id: str, obs_dim: int | None, act_dim: int | None, who: str, discrete: bool
) -> str | None:
    """check_spaces on spaces already asked for."""
    obs_shape, act_shape = spaces.obs_shape, spaces.act_shape
    if spaces.act_n is not None:
        if not discrete:
            return f"{env_id} has a Discrete action space; {who} gives continuous actions"
        if obs_shape is None or len(obs_shape) != 1:
            return f"{env_id} has no flat Box observation space"
        if obs_dim is not None and obs_dim != obs_shape[0]:
            return f"{who} takes {obs_dim} observation values, {env_id} gives {obs_shape[0]}"
        if act_dim is not None and act_dim not in (1, spaces.act_n):
            return f"{who} gives {act_dim} logits, {env_id} has {spaces.act_n} actions"
        return None
    if obs_shape is None or act_shape is None or len(obs_shape) != 1 or len(act_shape) != 1:
        return f"{env_id} has no flat Box observation/action space"
    if spaces.act_low is None:
        return f"{env_id} has neither a Box nor a Discrete action space"
    if obs_dim is not None and obs_dim != obs_shape[0]:
        return f"{who} takes {obs_dim} observation values, {env_id} gives {obs_shape[0]}"
    if act_dim is not None and act_dim != act_shape[0]:
        return f"{who} gives {act_dim} action values, {env_id} takes {act_shape[0]}"
    return None


def rollout(
    *,
    pair: str,
    train: str,
    infer: str,
    probe: str,
    variant: str,
    env: str,
    seeds: Sequence[int],
    steps: int,
    action_atol: float,
    return_atol: float,
    train_policy: Policy,
    infer_policy: Policy,
    error_types: tuple[type[BaseException], ...] = (),
    envs: EnvProcess | None = None,
    sampler: Sampler | None = None,
    limits: SampledLimits | None = None,
    env_path: str = "",
) -> RolloutResult:
    """Every seed's episode, and the verdict; a failure of either side (one of
    ``error_types``) or of the environments (EnvError) becomes an ERROR result naming it.
    The environments run in ``envs``, or in a child started and closed here when None."""
    with using(envs) as proc:
        base = dict(
            pair=pair,
            train=train,
            infer=infer,
            probe=probe,
            variant=variant,
            env=env,
            action_atol=action_atol,
            return_atol=return_atol,
        )
        episodes: list[Episode] = []
        try:
            for seed in seeds:
                episodes.append(
                    run_episode(
                        env, seed, steps, train_policy, infer_policy, action_atol, proc, sampler, env_path
                    )
                )
        except (EnvError, *error_types) as exc:
            describe = getattr(exc, "describe", None)
            text = describe() if callable(describe) else str(exc)
            return RolloutResult(
                status=ERROR,
                message=f"rollout stopped at seed {seeds[len(episodes)]}: {text}",
                episodes=tuple(episodes),
                log=getattr(exc, "log", ""),
                **base,
            )
        status, message = verdict(
            episodes, action_atol, return_atol, (limits or SampledLimits()) if sampler is not None else None
        )
        return RolloutResult(status=status, message=message, episodes=tuple(episodes), **base)


def findings(rollouts: Sequence[RolloutResult]) -> list[Finding]:
    """A ``rollout-divergence`` finding per drifting rollout, an error finding per failed one."""
    out = []
    for r in rollouts:
        if r.status == CONSISTENT:
            continue
        kind, severity = ("rollout-divergence", "warning") if r.status == DRIFT else (ERROR, "error")
        out.append(
            Finding(
                kind,
                severity,
                r.pair,
                f"{r.pair}/{r.probe}/{r.variant}/rollout/{kind}",
                f"{r.env} rollout of {r.probe} [{r.variant}]: {r.message}",
                {"probe": r.probe, "variant": r.variant, "env": r.env, **r.summary("closed-loop")},
            )
        )
    return out


def report_lines(r: RolloutResult) -> list[str]:
    """The rollout block of the text report."""
    head = f"  rollout {r.env} · {r.probe} [{r.variant}] · {len(r.episodes)} episodes  {r.status.upper()}"
    if not r.episodes:
        return [head, *("    " + line for line in r.message.splitlines())]
    closed, opened = r.summary("closed-loop"), r.summary("open-loop")

    def first(value: float) -> str:
        return f"step {int(value)}" if value else "never"

    rows = [
        ["loop", "max |Δaction|", "mean |Δaction|", f"first > {r.action_atol:g}", "max |Δobs|", "returns"],
        [
            "closed",
            f"{closed['max_action_diff']:.3g}",
            f"{closed['mean_action_diff']:.3g}",
            first(closed["first_exceed_step"]),
            f"{closed['max_obs_diff']:.3g}",
            f"train {closed['train_return']:.2f}, infer {closed['infer_return']:.2f} "
            f"(max |Δ| {closed['max_return_diff']:.3g})",
        ],
        [
            "open",
            f"{opened['max_action_diff']:.3g}",
            f"{opened['mean_action_diff']:.3g}",
            first(opened["first_exceed_step"]),
            "0",
            "-",
        ],
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [head] + [
        "    " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    if r.status != CONSISTENT or any(e.sampled for e in r.episodes):  # sampled: the PPO words
        lines += ["    " + line for line in r.message.splitlines()]
    return lines
