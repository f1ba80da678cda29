"""A policy's closed-loop episodes, the same way for every policy: its reference side (a train
stack's network, or a reference stack running the file) and each serving stack drive two copies
of the environment from the same seeds, step by step, each in its own worker (the episode
engine is auditor.policy.rollout); the result gives each side's returns, the largest action
difference, the first step where the actions part beyond ``action_atol`` and how far the
observations went apart.

One observation fills every row of the observation input of the model a side acts with (a
probe's export at batch 1, a file at its own batch, often 1), scaled ``obs_scale * obs +
obs_offset``; the other inputs keep the policy's own values; the action is row 0 of the action
output (``action_scale * action + action_offset`` for the environment, clipped to its bounds;
tanh of it first where it is a tanh head's mean). In sampled mode (a Gaussian, tanh or
categorical head) each side draws from its own distribution with the same seeded noise; after
each episode the serving side's visited states and actions are scored by both sides, as a PPO
update recomputes ``old_log_prob`` and ``new_log_prob``: by the models themselves where the head's
log-probability of given actions is an output (what a trainer computes), else in float64 from
the distributions' parameters (the serving side with the distribution it acted with). A golden
holds outputs of fixed inputs and cannot act: the result says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from auditor.compare import metrics
from auditor.compare import ratios as ratio_math
from auditor.config.tables import RolloutConfig
from auditor.config.user_models import ModelRollout
from auditor.policy import rollout
from auditor.policy.env_process import EnvError, EnvProcess
from auditor.results import ERROR, RolloutResult
from auditor.stacks.worker import WorkerError

Run = Callable[[list[np.ndarray]], list[np.ndarray]]
"""One side's model: inputs (its batch) -> outputs."""


class NotRolled(Exception):
    """Why the policy cannot drive its environment (said in the rollout's result)."""


@dataclass(frozen=True)
class Settings:
    """What the episodes are: ``[models.NAME.rollout]``, or ``[rollout]`` for a probe."""

    env: str
    path: str = ""
    seeds: tuple[int, ...] = (0, 1, 2)
    steps: int = 200
    observation: str | None = None
    action: str | None = None
    obs_scale: Any = (1.0,)
    obs_offset: Any = (0.0,)
    action_scale: Any = (1.0,)
    action_offset: Any = (0.0,)
    sample_scale: Any = None
    """A drawn action's scale for the environment (None: ``action_scale``): a probe's action
    output is already in the environment's units, its tanh head's draws are not."""
    mode: str | None = None
    action_atol: float = 1e-5
    return_atol: float = 0.1
    limits: rollout.SampledLimits | None = None
    """Sampled mode's limits (None: the head's options)."""
    default_mode: str = "deterministic"
    """The mode of a policy with a head when ``mode`` is unset (``[rollout] mode``)."""


def of_model(settings: ModelRollout, defaults: RolloutConfig) -> Settings:
    return Settings(
        env=settings.env,
        path=settings.path,
        seeds=settings.seeds,
        steps=settings.max_steps,
        observation=settings.observation,
        action=settings.action,
        obs_scale=settings.obs_scale,
        obs_offset=settings.obs_offset,
        action_scale=settings.action_scale,
        action_offset=settings.action_offset,
        mode=settings.mode,
        default_mode=defaults.mode,
        action_atol=settings.action_atol if settings.action_atol is not None else defaults.action_atol,
        return_atol=settings.return_atol if settings.return_atol is not None else defaults.return_atol,
    )


def of_config(cfg: RolloutConfig, outputs: Sequence[str], max_action: float, tanh: bool) -> Settings:
    """``[rollout]`` for a probe: its ``obs`` input, its ``action`` output (else its mean)."""
    return Settings(
        env=cfg.env,
        seeds=tuple(cfg.seeds),
        steps=cfg.steps,
        observation="obs",
        action="action" if "action" in outputs else "mean" if "mean" in outputs else None,
        sample_scale=(max_action if tanh else 1.0,),
        mode=cfg.mode,
        action_atol=cfg.action_atol,
        return_atol=cfg.return_atol,
        limits=rollout.SampledLimits(cfg.clip_epsilon, cfg.max_ppo_clip_share, cfg.min_ess),
    )


@dataclass(frozen=True)
class Plan:
    """How one observation becomes the policy's inputs and its outputs an action."""

    settings: Settings
    template: list[np.ndarray]
    """One step's inputs, at the batch of the model a side acts with."""
    score_template: list[np.ndarray]
    """The inputs of the model that scores an episode's steps (sampled mode)."""
    obs_at: int
    action_at: int
    squash: bool
    """The action output is a tanh policy's mean: the deterministic action is tanh of it."""
    mode: str
    policy: ratio_math.Policy | None
    dist_at: tuple[int, int] | None
    """Sampled mode: the outputs holding the mean and the std (or log_std)."""
    limits: rollout.SampledLimits
    in_graph: tuple[int, int] | None = None
    """Sampled mode, scored by the models: (the log-probability output, the actions input)."""

    @property
    def action_atol(self) -> float:
        return self.settings.action_atol

    @property
    def return_atol(self) -> float:
        return self.settings.return_atol

    @staticmethod
    def batch_of(template: list[np.ndarray], at: int) -> int:
        x = template[at]
        return int(x.shape[0]) if x.ndim == 2 else 1

    @property
    def batch(self) -> int:
        return self.batch_of(self.template, self.obs_at)

    @property
    def obs_dim(self) -> int:
        return int(self.template[self.obs_at].shape[-1])

    def inputs(self, states: np.ndarray, template: list[np.ndarray] | None = None) -> list[np.ndarray]:
        """The model's inputs with ``states`` (n <= batch rows) in the observation input, the
        last state repeated over the rows left."""
        template = self.template if template is None else template
        s = self.settings
        batch = self.batch_of(template, self.obs_at)
        states = np.asarray(states, np.float64).reshape(-1, self.obs_dim)
        scaled = np.asarray(s.obs_scale) * states + np.asarray(s.obs_offset)
        rows = np.concatenate([scaled, np.repeat(scaled[-1:], batch - len(scaled), axis=0)])
        x = list(template)
        ref = template[self.obs_at]
        x[self.obs_at] = np.ascontiguousarray(rows.astype(ref.dtype).reshape(ref.shape))
        return x

    def row(self, outputs: Sequence[Any], index: int, n: int = 1) -> np.ndarray:
        """Rows 0..n of output ``index``, float64, flattened per row."""
        out = np.asarray(outputs[index], np.float64)
        out = out.reshape(out.shape[0], -1) if out.ndim >= 2 else out.reshape(1, -1)
        return out[:n]


def plan(
    settings: Settings,
    head: ratio_math.Policy | None,
    head_options: dict[str, Any],
    template: list[np.ndarray],
    input_names: list[str],
    output_names: list[str],
    score_template: list[np.ndarray] | None = None,
) -> Plan:
    """The plan of a policy's episodes; NotRolled says why there is none."""
    obs_name = settings.observation or (input_names[0] if input_names else "")
    if obs_name not in input_names:
        raise NotRolled(f"the policy has no input {obs_name!r} (inputs: {', '.join(input_names)})")
    obs_at = input_names.index(obs_name)
    if template[obs_at].ndim not in (1, 2) or template[obs_at].dtype.kind != "f":
        raise NotRolled(
            f"input {obs_name} is {list(template[obs_at].shape)} {template[obs_at].dtype}: an observation "
            "input is [batch, values] or [values] floats"
        )
    gaussian = head is not None and head.kind in ("gaussian", "tanh")
    categorical = head is not None and head.kind == "categorical"
    default = head.mean if head is not None and gaussian else output_names[0]
    if head is not None and categorical:
        default = head.logits
    action = settings.action or default
    if action not in output_names:
        raise NotRolled(f"the policy has no output {action!r} (outputs: {', '.join(output_names)})")
    mode = settings.mode or (settings.default_mode if gaussian or categorical else "deterministic")
    dist_at = in_graph = None
    if mode == "sampled":
        if head is None or not (gaussian or categorical):
            raise NotRolled("sampled episodes need a policy = { ... } to draw from")
        spread = head.std if head.std is not None else str(head.log_std)
        wanted = (head.logits, head.logits) if categorical else (head.mean, spread)
        missing = [n for n in wanted if n not in output_names]
        if missing:
            raise NotRolled(f"the policy's output {missing[0]!r} is not an output of the model")
        dist_at = (output_names.index(wanted[0]), output_names.index(wanted[1]))
        if head.in_graph() and str(head.logp) in output_names and str(head.actions) in input_names:
            in_graph = (output_names.index(str(head.logp)), input_names.index(str(head.actions)))
    limits = settings.limits or rollout.SampledLimits(
        float(head_options.get("clip_epsilon", ratio_math.CLIP_EPSILON)),
        float(head_options.get("max_ppo_clip_share", 0.0)),
        float(head_options.get("min_ess", 0.99)),
    )
    # the trainer whose correction the episodes are judged by: the head's ([ppo], a pair's own)
    limits = dataclasses.replace(
        limits,
        trainer=str(head_options.get("trainer", limits.trainer)),
        max_removed_share=float(head_options.get("max_removed_share", limits.max_removed_share)),
    )
    return Plan(
        settings=settings,
        template=[np.asarray(x) for x in template],
        score_template=[np.asarray(x) for x in (score_template if score_template is not None else template)],
        obs_at=obs_at,
        action_at=output_names.index(action),
        squash=head is not None and head.kind == "tanh" and action == head.mean,
        mode=mode,
        policy=head,
        dist_at=dist_at,
        limits=limits,
        in_graph=in_graph,
    )


@dataclass(frozen=True)
class Model:
    """One side's model in its worker: the one it acts with (``act``, at the plan's template's
    batch) and the one that scores an episode's steps (``score``, at its score template's)."""

    act: Run
    score: Run


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
    bytes (the distribution the side acted with), and its log-probabilities of given draws."""

    def __init__(self, p: Plan, model: Model):
        self.p, self.model = p, model
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
        mean, std = self.dist(self.model.act(self.p.inputs(obs)), 1)
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
        """log pi(u|s) from this side's scoring model run on the states in batches of its batch,
        as an update recomputes them: its own log-probability output of the actions where the
        head has one, else from its distribution's parameters."""
        p = self.p
        template = p.score_template
        batch = p.batch_of(template, p.obs_at)
        out = []
        for start in range(0, len(states), batch):
            part = states[start : start + batch]
            drawn = us[start : start + len(part)]
            x = p.inputs(part, template)
            if p.in_graph is not None:
                logp_at, act_at = p.in_graph
                ref = template[act_at]
                rows = np.asarray(drawn, np.float64).reshape(len(part), -1)
                rows = np.concatenate([rows, np.repeat(rows[-1:], batch - len(part), axis=0)])
                x[act_at] = np.ascontiguousarray(rows.astype(ref.dtype).reshape(ref.shape))
                got = self.model.score(x)[logp_at]
                out.append(np.asarray(got, np.float64).reshape(-1)[: len(part)])
                continue
            mean, std = self.dist(self.model.score(x), len(part))
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


def not_rolled(base: dict[str, Any], why: str, log: str = "") -> RolloutResult:
    return RolloutResult(status=ERROR, message=f"rollout not run: {why}", log=log, **base)


def roll_out(
    p: Plan,
    *,
    envs: EnvProcess,
    base: dict[str, Any],
    reference: Model,
    served: Model,
    act_dim: int,
    who: str,
) -> RolloutResult:
    """The policy's episodes, reference against one serving stack, and their verdict.
    ``base``: the result's identity (pair, train, infer, probe, variant)."""
    s = p.settings
    base = {**base, "env": s.env, "action_atol": p.action_atol, "return_atol": p.return_atol}
    categorical = p.policy is not None and p.policy.kind == "categorical"
    try:
        spaces = rollout.spaces(s.env, envs, s.path)  # made once: the check and the kind of space
        problem = rollout.space_problem(spaces, s.env, p.obs_dim, act_dim, who, True)
        discrete = problem is None and spaces.act_n is not None
    except EnvError as exc:
        return not_rolled(base, exc.describe(), exc.log)
    if problem is None and categorical and not discrete:
        problem = f"a categorical policy acts in a discrete action space; {s.env}'s actions are continuous"
    if problem is None and p.policy is not None and not categorical and discrete:
        problem = (
            f"a {p.policy.kind} policy acts in a continuous action space; {s.env}'s actions are discrete"
        )
    if problem is not None:
        return not_rolled(base, problem)
    sampler = None
    if discrete and p.mode != "sampled":  # the action output as it is: logits (argmax) or an index
        train_policy, infer_policy = raw(p, reference.act), raw(p, served.act)
    elif p.mode == "sampled":
        ref, mine = Sampled(p, reference), Sampled(p, served)
        assert p.policy is not None
        in_graph = p.in_graph is not None
        sampler = rollout.Sampler(
            p.policy.kind,
            np.asarray(s.sample_scale if s.sample_scale is not None else s.action_scale),
            score_train=ref.score_batched,
            score_infer=mine.score_batched if in_graph else mine.score_acted,
            clip_epsilon=p.limits.clip_epsilon,
            offset=np.asarray(s.action_offset),
            pre_squash=not in_graph,
        )
        train_policy, infer_policy = ref.policy, mine.policy
    else:
        train_policy, infer_policy = deterministic(p, reference.act), deterministic(p, served.act)
    return rollout.rollout(
        **{
            k: base[k]
            for k in ("pair", "train", "infer", "probe", "variant", "env", "action_atol", "return_atol")
        },
        seeds=s.seeds,
        steps=s.steps,
        train_policy=train_policy,
        infer_policy=infer_policy,
        error_types=(WorkerError,),
        envs=envs,
        sampler=sampler,
        limits=p.limits,
        env_path=s.path,
    )
