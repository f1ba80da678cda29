"""Closed-loop episodes of a user's own model (``[models.NAME.rollout]``), the way the
built-in probe's rollouts run (auditor.policy.rollout): the model's reference side (its
training network, or a reference stack running the same file) and each serving stack drive
two copies of the user's environment from the same seeds, step by step, each in its own
worker; the result gives each side's returns, the largest action difference, the first step
where the actions part beyond ``action_atol`` and how far the observations went apart.

A model is not built for batch 1: its file may take a fixed batch. So one observation fills
every row of the observation input (scaled: ``obs_scale * obs + obs_offset``), the other
inputs keep the model's generated values, and the action is row 0 of the action output
(``action_scale * action + action_offset`` for the environment, clipped to its bounds). In
sampled mode (a Gaussian or tanh ``policy``), each side draws from its own (mean, std) with
the same seeded noise; the serving side's distribution at each state it acted in is the one
it acted with (PPO's ``old_log_prob``, recorded while collecting), the reference side scores
those states in batches of the file's batch (the update's ``new_log_prob``), both in float64
from the distributions' parameters. A golden reference holds outputs of fixed inputs and
cannot act: the result says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from auditor.compare import metrics
from auditor.compare import ratios as ratio_math
from auditor.config.tables import RolloutConfig
from auditor.config.user_models import ModelConfig, ModelRollout
from auditor.policy import rollout
from auditor.policy.env_process import EnvError, EnvProcess
from auditor.results import ERROR, RolloutResult
from auditor.stacks.worker import WorkerError

Run = Callable[[list[np.ndarray]], list[np.ndarray]]
"""One side's model: inputs (the file's batch) -> outputs."""


class NotRolled(Exception):
    """Why the model cannot drive its environment (said in the rollout's result)."""


@dataclass(frozen=True)
class Plan:
    """How one observation becomes the model's inputs and its outputs an action."""

    settings: ModelRollout
    template: list[np.ndarray]
    obs_at: int
    action_at: int
    squash: bool
    """The action output is a tanh policy's mean: the deterministic action is tanh of it."""
    mode: str
    action_atol: float
    return_atol: float
    policy: ratio_math.Policy | None
    dist_at: tuple[int, int] | None
    """Sampled mode: the outputs holding the mean and the std (or log_std)."""
    limits: rollout.SampledLimits
    """Sampled mode's verdict: the policy's clip_epsilon, max_ppo_clip_share and min_ess."""

    @property
    def batch(self) -> int:
        x = self.template[self.obs_at]
        return int(x.shape[0]) if x.ndim == 2 else 1

    @property
    def obs_dim(self) -> int:
        return int(self.template[self.obs_at].shape[-1])

    def inputs(self, states: np.ndarray) -> list[np.ndarray]:
        """The model's inputs with ``states`` (n <= batch rows) in the observation input, the
        last state repeated over the rows left."""
        s = self.settings
        states = np.asarray(states, np.float64).reshape(-1, self.obs_dim)
        scaled = np.asarray(s.obs_scale) * states + np.asarray(s.obs_offset)
        rows = np.concatenate([scaled, np.repeat(scaled[-1:], self.batch - len(scaled), axis=0)])
        x = list(self.template)
        ref = self.template[self.obs_at]
        x[self.obs_at] = np.ascontiguousarray(rows.astype(ref.dtype).reshape(ref.shape))
        return x

    def row(self, outputs: Sequence[Any], index: int, n: int = 1) -> np.ndarray:
        """Rows 0..n of output ``index``, float64, flattened per row."""
        out = np.asarray(outputs[index], np.float64)
        out = out.reshape(out.shape[0], -1) if out.ndim >= 2 else out.reshape(1, -1)
        return out[:n]


def plan(
    model: ModelConfig,
    settings: ModelRollout,
    defaults: RolloutConfig,
    inputs: list[np.ndarray],
    input_names: list[str],
    output_names: list[str],
) -> Plan:
    """The plan of a model's episodes; NotRolled says why there is none."""
    if model.golden is not None:
        raise NotRolled(
            f"the reference is a golden file ({model.golden}): it holds outputs of fixed inputs and "
            "cannot act in an environment; set reference = STACK or train = { factory = ... } to "
            "roll the model out"
        )
    obs_name = settings.observation or (input_names[0] if input_names else "")
    if obs_name not in input_names:
        raise NotRolled(f"the model has no input {obs_name!r} (inputs: {', '.join(input_names)})")
    obs_at = input_names.index(obs_name)
    if inputs[obs_at].ndim not in (1, 2) or inputs[obs_at].dtype.kind != "f":
        raise NotRolled(
            f"input {obs_name} is {list(inputs[obs_at].shape)} {inputs[obs_at].dtype}: an observation "
            "input is [batch, values] or [values] floats"
        )
    options = dict(model.policy or {})
    policy = ratio_math.Policy.from_options(options) if options else None
    gaussian = policy is not None and policy.kind in ("gaussian", "tanh")
    categorical = policy is not None and policy.kind == "categorical"
    default = policy.mean if policy is not None and gaussian else output_names[0]
    if policy is not None and categorical:
        default = policy.logits
    action = settings.action or default
    if action not in output_names:
        raise NotRolled(f"the model has no output {action!r} (outputs: {', '.join(output_names)})")
    mode = settings.mode or (defaults.mode if gaussian or categorical else "deterministic")
    dist_at = None
    if mode == "sampled":
        if policy is None or not (gaussian or categorical):
            raise NotRolled("sampled episodes need a policy = { ... } to draw from")
        spread = policy.std if policy.std is not None else str(policy.log_std)
        wanted = (policy.logits, policy.logits) if categorical else (policy.mean, spread)
        missing = [n for n in wanted if n not in output_names]
        if missing:
            raise NotRolled(f"the policy's output {missing[0]!r} is not an output of the model")
        dist_at = (output_names.index(wanted[0]), output_names.index(wanted[1]))
    return Plan(
        settings=settings,
        template=[np.asarray(x) for x in inputs],
        obs_at=obs_at,
        action_at=output_names.index(action),
        squash=policy is not None and policy.kind == "tanh" and action == policy.mean,
        mode=mode,
        action_atol=settings.action_atol if settings.action_atol is not None else defaults.action_atol,
        return_atol=settings.return_atol if settings.return_atol is not None else defaults.return_atol,
        policy=policy,
        dist_at=dist_at,
        limits=rollout.SampledLimits(
            float(options.get("clip_epsilon", ratio_math.CLIP_EPSILON)),
            float(options.get("max_ppo_clip_share", 0.0)),
            float(options.get("min_ess", 0.99)),
        ),
    )


def worker_run(worker: Any, model_id: str) -> Run:
    """A side's model in its stack worker."""

    def run(inputs: list[np.ndarray]) -> list[np.ndarray]:
        return list(worker.request("run", model=model_id, inputs=inputs).result["outputs"])

    return run


def raw(p: Plan, run: Run) -> rollout.Policy:
    """The side's action output at one observation, as it is (a Discrete space's logits or index)."""

    def policy(obs: np.ndarray) -> np.ndarray:
        return p.row(run(p.inputs(obs)), p.action_at)[0]

    return policy


def deterministic(p: Plan, run: Run) -> rollout.Policy:
    """The side's action at one observation, in the environment's units (before clipping)."""
    s = p.settings

    def policy(obs: np.ndarray) -> np.ndarray:
        a = p.row(run(p.inputs(obs)), p.action_at)[0]
        if p.squash:
            a = np.tanh(a)
        return np.asarray(s.action_scale) * a + np.asarray(s.action_offset)

    return policy


class Sampled:
    """Sampled mode: a side's (mean, std) at one observation, each kept by the observation's
    bytes (the distribution the side acted with), and its float64 log-density of given draws."""

    def __init__(self, p: Plan, run: Run):
        self.p, self.run = p, run
        self.seen: dict[bytes, np.ndarray] = {}

    @property
    def categorical(self) -> bool:
        return self.p.policy is not None and self.p.policy.kind == "categorical"

    def dist(self, outputs: Sequence[Any], n: int) -> tuple[np.ndarray, np.ndarray]:
        """(mean, std) per row; a categorical policy: (logits, logits)."""
        assert self.p.dist_at is not None and self.p.policy is not None
        if self.categorical:
            logits = self.p.row(outputs, self.p.dist_at[0], n)
            return logits, logits
        mean = self.p.row(outputs, self.p.dist_at[0], n)
        spread = self.p.row(outputs, self.p.dist_at[1], n)
        with np.errstate(over="ignore", invalid="ignore"):
            std = spread if self.p.policy.std is not None else np.exp(spread)
        return mean, np.broadcast_to(std, mean.shape)

    def policy(self, obs: np.ndarray) -> np.ndarray:
        mean, std = self.dist(self.run(self.p.inputs(obs)), 1)
        out = mean[0] if self.categorical else np.concatenate([mean[0], std[0]])
        self.seen[np.asarray(obs, np.float64).reshape(-1).tobytes()] = out
        return out

    def score_acted(self, states: np.ndarray, us: np.ndarray) -> np.ndarray:
        """log pi(u|s) with the distribution this side acted with at each state."""
        out = []
        for s, u in zip(states, us, strict=True):
            key = np.asarray(s, np.float64).reshape(-1).tobytes()
            dist = self.seen[key] if key in self.seen else self.policy(s)
            if self.categorical:
                out.append(float(_log_softmax(dist[None])[0, int(np.asarray(u).reshape(-1)[0])]))
                continue
            mean, std = np.split(dist, 2)
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
                out.append(float(metrics.gaussian_logp(u[None], mean[None], std[None])[0]))
        return np.asarray(out)

    def score_batched(self, states: np.ndarray, us: np.ndarray) -> np.ndarray:
        """log pi(u|s) from this side's model run on the states in batches of the file's batch,
        as an update recomputes them."""
        out = []
        batch = self.p.batch
        for start in range(0, len(states), batch):
            part = states[start : start + batch]
            mean, std = self.dist(self.run(self.p.inputs(part)), len(part))
            drawn = us[start : start + len(part)]
            if self.categorical:
                index = np.asarray(drawn, np.int64).reshape(-1)
                out.append(_log_softmax(mean)[np.arange(len(part)), index])
                continue
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
                out.append(metrics.gaussian_logp(drawn, mean, std))
        return np.concatenate(out)


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    x = np.asarray(logits, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        return x - np.logaddexp.reduce(x, axis=-1, keepdims=True)


def roll_out(
    p: Plan,
    *,
    envs: EnvProcess,
    pair: str,
    reference: str,
    target: str,
    probe: str,
    variant: str,
    reference_run: Run,
    served_run: Run,
    act_dim: int,
) -> RolloutResult:
    """The model's episodes, reference against one serving stack, and their verdict."""
    s = p.settings
    base = dict(
        pair=pair,
        train=reference,
        infer=target,
        probe=probe,
        variant=variant,
        env=s.env,
        action_atol=p.action_atol,
        return_atol=p.return_atol,
    )
    try:
        spaces = rollout.spaces(s.env, envs, s.path)  # made once: the check and the kind of space
        problem = rollout.space_problem(spaces, s.env, p.obs_dim, act_dim, f"model {probe}", True)
        discrete = problem is None and spaces.act_n is not None
    except EnvError as exc:
        return RolloutResult(status=ERROR, message=f"rollout not run: {exc.describe()}", log=exc.log, **base)
    categorical = p.policy is not None and p.policy.kind == "categorical"
    if problem is None and categorical and not discrete:
        problem = f"a categorical policy acts in a discrete action space; {s.env}'s actions are continuous"
    if problem is None and p.policy is not None and not categorical and discrete:
        problem = (
            f"a {p.policy.kind} policy acts in a continuous action space; {s.env}'s actions are discrete"
        )
    if problem is not None:
        return RolloutResult(status=ERROR, message=f"rollout not run: {problem}", **base)
    sampler = None
    if discrete and p.mode != "sampled":  # the action output as it is: logits (argmax) or an index
        train_policy, infer_policy = raw(p, reference_run), raw(p, served_run)
    elif p.mode == "sampled":
        ref, served = Sampled(p, reference_run), Sampled(p, served_run)
        assert p.policy is not None
        sampler = rollout.Sampler(
            p.policy.kind,
            np.asarray(s.action_scale),
            score_train=ref.score_batched,
            score_infer=served.score_acted,
            clip_epsilon=p.limits.clip_epsilon,
            offset=np.asarray(s.action_offset),
            pre_squash=True,
        )
        train_policy, infer_policy = ref.policy, served.policy
    else:
        train_policy, infer_policy = deterministic(p, reference_run), deterministic(p, served_run)
    return rollout.rollout(
        **base,
        seeds=s.seeds,
        steps=s.max_steps,
        train_policy=train_policy,
        infer_policy=infer_policy,
        error_types=(WorkerError,),
        envs=envs,
        sampler=sampler,
        limits=p.limits,
        env_path=s.path,
    )
