"""A policy's episodes without stacks (auditor.policy.episodes): [models.NAME.rollout]'s config
checks, how one observation becomes a policy's inputs and its outputs an action, the sampled
mode's scoring (from the distributions' parameters, or by the models' own log-probability), a
user's own environment ("package.module:function") in the environment process, and episodes of
plain-callable models against an independent gymnasium loop. The real stacks:
test_model_rollout_stacks.py, test_rollout_stacks.py."""

from __future__ import annotations

import copy
import textwrap
from pathlib import Path

import gymnasium
import numpy as np
import pytest
from scipy import stats

from auditor.compare import ratios
from auditor.config.load import parse
from auditor.config.tables import ConfigError, RolloutConfig
from auditor.config.user_models import ModelConfig, ModelRollout
from auditor.policy import episodes
from auditor.policy.env_process import EnvProcess, env_problem
from auditor.results import CONSISTENT, DRIFT, ERROR


def with_models(doc: dict, models: dict, env_problem=None) -> object:
    d = copy.deepcopy(doc)
    d["models"] = models
    return parse(d, "/etc/auditor/auditor.toml", env_problem=env_problem)


def errors_of(doc: dict, models: dict, env_problem=None) -> list[str]:
    with pytest.raises(ConfigError) as err:
        with_models(doc, models, env_problem)
    return err.value.errors


GAUSS = {"kind": "gaussian", "mean": "mean", "std": "std"}


def test_the_rollout_table_parses_with_its_defaults_and_paths(doc: dict) -> None:
    cfg = with_models(
        doc,
        {
            "pend": {
                "path": "p.mindir",
                "reference": "ms210-graph",
                "output_names": ["mean", "std"],
                "policy": GAUSS,
                "rollout": {"env": "envs.pendulum:make", "path": "envs", "action_scale": 2, "seed": 5},
            },
            "off": {
                "path": "q.mindir",
                "reference": "ms210-graph",
                "rollout": {"env": "X-v0", "enabled": False},
            },
        },
    )
    r = cfg.models["pend"].rollout
    assert r == ModelRollout(
        "envs.pendulum:make", "/etc/auditor/envs", action_scale=(2.0,), seed=5
    ) and r.seeds == (5, 6, 7)
    assert cfg.models["off"].rollout is None


def test_rollout_config_errors_name_the_key(doc: dict) -> None:
    errors = errors_of(
        doc,
        {
            "nopolicy": {
                "path": "n.mindir",
                "reference": "ms210-graph",
                "rollout": {"env": "Pendulum-v1", "mode": "sampled"},
            },
            "names": {
                "path": "m.mindir",
                "reference": "ms210-graph",
                "output_names": ["mean", "std"],
                "inputs": [{"name": "obs", "shape": [1, 3]}],
                "rollout": {
                    "env": "Pendulum-v1",
                    "action": "torque",
                    "observation": "state",
                },
            },
            "scale": {
                "path": "s.mindir",
                "reference": "ms210-graph",
                "rollout": {"env": "P", "obs_scale": []},
            },
        },
    )
    text = "\n".join(errors)
    assert "models.nopolicy.rollout.mode: sampled episodes draw actions from the model's policy" in text
    assert (
        "models.names.rollout.action: 'torque' is not an output of the model (output_names: mean, std)"
        in text
    )
    assert "models.names.rollout.observation: 'state' is not an input of the model (inputs: obs)" in text
    assert "models.scale.rollout.obs_scale: must be a finite number" in text


def test_an_environment_that_cannot_be_made_is_a_config_error_with_its_path(doc: dict) -> None:
    asked = []

    def problem(env: str, path: str = "") -> str | None:
        asked.append((env, path))
        return "no gymnasium environment 'Pendulm-v1' is registered; did you mean Pendulum-v1?"

    errors = errors_of(
        doc,
        {
            "p": {
                "path": "p.mindir",
                "reference": "ms210-graph",
                "rollout": {"env": "Pendulm-v1", "path": "e"},
            }
        },
        problem,
    )
    assert ("Pendulm-v1", "/etc/auditor/e") in asked
    assert any(e.startswith("models.p.rollout.env: no gymnasium environment 'Pendulm-v1'") for e in errors)


ENV_PACKAGE = '''
import gymnasium
import numpy as np
from gymnasium.spaces import Box


class Drift(gymnasium.Env):
    """The observation moves by the action; reward -|obs|: the user's own simulator."""

    observation_space = Box(-10.0, 10.0, (2,), np.float32)
    action_space = Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = self.np_random.uniform(-1, 1, size=2).astype(np.float32)
        self.t = 0
        return self.x.copy(), {}

    def step(self, action):
        self.t += 1
        self.x = np.clip(self.x + 0.1 * float(action[0]), -10, 10).astype(np.float32)
        return self.x.copy(), -float(np.abs(self.x).sum()), False, self.t >= 20, {}


def make_env():
    return Drift()


def not_an_env():
    return 42


NOT_CALLABLE = 3
'''


@pytest.fixture()
def user_env(tmp_path: Path) -> Path:
    pkg = tmp_path / "usersim"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "envs.py").write_text(textwrap.dedent(ENV_PACKAGE))
    return tmp_path


def test_a_users_own_environment_function_is_made_from_its_folder(user_env: Path) -> None:
    with EnvProcess() as envs:
        env = envs.make("usersim.envs:make_env", str(user_env))
        assert env.spaces.obs_shape == (2,) and env.spaces.act_shape == (1,)
        obs = env.reset(3)
        stepped = env.step(np.array([1.0], np.float32))
        assert stepped[0] == pytest.approx(obs + 0.1)
        assert envs.problem("usersim.envs:make_env", str(user_env)) is None
        assert "cannot import 'nosuch.envs'" in str(envs.problem("nosuch.envs:make_env", str(user_env)))
        assert "NOT_CALLABLE is not a function" in str(
            envs.problem("usersim.envs:NOT_CALLABLE", str(user_env))
        )
        with pytest.raises(Exception, match="returned int, not a gymnasium environment"):
            envs.make("usersim.envs:not_an_env", str(user_env))
    assert env_problem("usersim.envs:make_env", str(user_env)) is None
    assert "cannot import 'usersim.envs'" in str(
        env_problem("usersim.envs:make_env", str(user_env / "nowhere"))
    )


def model(**kw: object) -> ModelConfig:
    base = dict(name="pend", path="p.mindir", stacks=("lite20",), reference="ms210-graph")
    base.update(kw)
    return ModelConfig(**base)  # type: ignore[arg-type]


class model_rollout:  # noqa: N801 - the episodes of a [models.NAME], as auditor.cycle.models plans them
    NotRolled = episodes.NotRolled
    Plan = episodes.Plan
    deterministic = staticmethod(episodes.deterministic)

    @staticmethod
    def plan(model, settings, defaults, inputs, input_names, output_names):  # noqa: ANN001, ANN205
        options = dict(model.policy or {})
        head = ratios.Policy.from_options(options) if options else None
        return episodes.plan(
            episodes.of_model(settings, defaults), head, options, inputs, input_names, output_names
        )

    @staticmethod
    def roll_out(p, *, envs, pair, reference, target, probe, variant, reference_run, served_run, act_dim):  # noqa: ANN001, ANN205
        base = dict(pair=pair, train=reference, infer=target, probe=probe, variant=variant)
        return episodes.roll_out(
            p,
            envs=envs,
            base=base,
            reference=episodes.Model(reference_run, reference_run),
            served=episodes.Model(served_run, served_run),
            act_dim=act_dim,
            who=f"model {probe}",
        )


def test_the_plan_fills_every_row_with_the_scaled_observation_and_reads_row_0() -> None:
    settings = ModelRollout("Pendulum-v1", obs_scale=(2.0,), obs_offset=(0.0, 1.0, 0.0))
    inputs = [np.zeros((4, 3), np.float32), np.full((4, 1), 7.0, np.float32)]
    p = model_rollout.plan(model(), settings, RolloutConfig(), inputs, ["obs", "mask"], ["action", "value"])
    assert (p.batch, p.obs_dim, p.action_at, p.mode) == (4, 3, 0, "deterministic")
    x = p.inputs(np.array([1.0, 2.0, 3.0]))
    assert x[0].dtype == np.float32 and np.array_equal(x[0], np.tile([[2.0, 5.0, 6.0]], (4, 1)))
    assert np.array_equal(x[1], inputs[1])  # other inputs keep their generated values
    part = p.inputs(np.array([[1.0, 0, 0], [0, 1.0, 0]]))[0]  # fewer states: the last repeated
    assert np.array_equal(part[:, 1], [1.0, 3.0, 3.0, 3.0])
    outputs = [np.arange(8.0).reshape(4, 2), np.zeros((4, 1))]
    assert p.row(outputs, 0).tolist() == [[0.0, 1.0]]


def test_the_deterministic_action_is_the_policys_mean_squashed_and_scaled() -> None:
    tanh = {"kind": "tanh", "mean": "mu", "log_std": "log_std"}
    settings = ModelRollout("Pendulum-v1", action_scale=(2.0,), action_offset=(0.5,))
    p = model_rollout.plan(
        model(policy=tanh),
        settings,
        RolloutConfig(),
        [np.zeros((1, 3), np.float32)],
        ["obs"],
        ["log_std", "mu"],
    )
    assert p.action_at == 1 and p.squash
    policy = model_rollout.deterministic(p, lambda x: [np.full((1, 1), -1.0), np.full((1, 1), 0.3)])
    assert policy(np.zeros(3)) == pytest.approx([2.0 * np.tanh(0.3) + 0.5])
    # sampled by default where [rollout] mode says so and the model is a Gaussian policy
    sampled = model_rollout.plan(
        model(policy=tanh),
        ModelRollout("Pendulum-v1"),
        RolloutConfig(mode="sampled"),
        p.template,
        ["obs"],
        ["log_std", "mu"],
    )
    assert sampled.mode == "sampled" and sampled.dist_at == (1, 0)
    assert sampled.limits.clip_epsilon == 0.2 and sampled.limits.min_ess == 0.99


def test_what_cannot_be_rolled_out_is_said() -> None:
    x = [np.zeros((1, 3), np.float32)]
    with pytest.raises(model_rollout.NotRolled, match="no input 'state'"):
        model_rollout.plan(
            model(), ModelRollout("P", observation="state"), RolloutConfig(), x, ["obs"], ["a"]
        )
    with pytest.raises(model_rollout.NotRolled, match=r"input ids is \[1, 3\] int32"):
        model_rollout.plan(
            model(), ModelRollout("P"), RolloutConfig(), [np.zeros((1, 3), np.int32)], ["ids"], ["a"]
        )
    with pytest.raises(model_rollout.NotRolled, match="no output 'torque'"):
        model_rollout.plan(model(), ModelRollout("P", action="torque"), RolloutConfig(), x, ["obs"], ["a"])


STD = 0.3


def weights(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.RandomState(seed)
    return rng.normal(0, 0.5, (3, 8)), rng.normal(0, 0.5, (8, 1))


def net(shift: float = 0.0, batch: int = 4):
    """A plain-callable 'model' of the file's batch: mean = 2 tanh(tanh(obs W1) W2) + shift, a
    constant std; float32 like a served file."""
    w1, w2 = weights(0)

    def run(inputs: list[np.ndarray]) -> list[np.ndarray]:
        obs = np.asarray(inputs[0], np.float64)
        assert obs.shape == (batch, 3)
        mean = 2 * np.tanh(np.tanh(obs @ w1) @ w2) + shift
        return [mean.astype(np.float32), np.full((batch, 1), STD, np.float32)]

    return run


def roll(p: model_rollout.Plan, served: object, reference: object = None, act_dim: int = 1) -> object:
    """The plan's episodes: ``reference`` (default net()) on ms20 against ``served`` on lite20."""
    with EnvProcess() as envs:
        return model_rollout.roll_out(
            p,
            envs=envs,
            pair="pend:ms20->lite20",
            reference="ms20",
            target="lite20",
            probe="pend",
            variant="model",
            reference_run=reference if reference is not None else net(),
            served_run=served,
            act_dim=act_dim,
        )


def test_episodes_of_two_callable_models_match_an_independent_loop() -> None:
    """The reference and the served model (a constant error of 3e-4 in the mean) on Pendulum-v1;
    the returns against gymnasium stepped here with the reference's actions."""
    p = model_rollout.plan(
        model(policy=GAUSS),
        ModelRollout("Pendulum-v1", episodes=2, max_steps=30, seed=11),
        RolloutConfig(),
        [np.zeros((4, 3), np.float32)],
        ["obs"],
        ["mean", "std"],
    )
    r = roll(p, net(3e-4))
    assert r.status == DRIFT and [e.seed for e in r.episodes] == [11, 12]
    assert "first at step 1" in r.message and "open loop too" in r.message
    assert max(r.episodes[0].open_action_diff) == pytest.approx(3e-4, rel=1e-3)
    env = gymnasium.make("Pendulum-v1")
    obs, _ = env.reset(seed=11)
    total = 0.0
    for _ in range(30):
        a = net()([np.tile(np.asarray(obs, np.float32), (4, 1))])[0][0]
        obs, reward, *_ = env.step(np.clip(a.astype(np.float64), -2, 2).astype(np.float32))
        total += float(reward)
    assert r.episodes[0].train_return == pytest.approx(total, rel=1e-9)


def test_sampled_episodes_weigh_each_step_against_scipy() -> None:
    """Sampled: the served side's log-density is the one it acted with, the reference's comes
    from its model in batches; the episode's log weight against scipy's densities."""
    p = model_rollout.plan(
        model(policy=GAUSS),
        ModelRollout("Pendulum-v1", episodes=1, max_steps=25, mode="sampled"),
        RolloutConfig(),
        [np.zeros((4, 3), np.float32)],
        ["obs"],
        ["mean", "std"],
    )
    r = roll(p, net(0.05))
    (e,) = r.episodes
    assert e.sampled and e.steps == 25
    # the served side's trajectory, stepped independently with its draws (the seed's noise)
    env = gymnasium.make("Pendulum-v1")
    obs, _ = env.reset(seed=0)
    noise = np.random.RandomState(0)
    log_w = []
    for _ in range(25):
        x = np.tile(np.asarray(obs, np.float32), (4, 1))
        mean_i = float(net(0.05)([x])[0][0, 0])
        mean_t = float(net()([x])[0][0, 0])
        u = mean_i + np.float64(np.float32(STD)) * noise.standard_normal((1,))[0]
        log_w.append(
            stats.norm.logpdf(u, mean_t, np.float32(STD)) - stats.norm.logpdf(u, mean_i, np.float32(STD))
        )
        obs, *_ = env.step(np.clip([u], -2, 2).astype(np.float32))
    assert e.log_ratio_sum == pytest.approx(sum(log_w), rel=1e-6)
    w = np.exp(log_w)
    assert e.ppo_clip_share == pytest.approx(np.mean(np.abs(w - 1) > 0.2))
    assert e.ess == pytest.approx(w.sum() ** 2 / (len(w) * (w * w).sum()), rel=1e-9)
    assert r.status in (CONSISTENT, DRIFT) and "the stacks alone would clip" in r.message


def test_an_environment_whose_spaces_do_not_fit_is_an_error_result() -> None:
    p = model_rollout.plan(
        model(), ModelRollout("Pendulum-v1"), RolloutConfig(), [np.zeros((1, 5), np.float32)], ["obs"], ["a"]
    )
    r = roll(p, net())
    assert (
        r.status == ERROR
        and r.message == "rollout not run: model pend takes 5 observation values, Pendulum-v1 gives 3"
    )


def logits_net(shift: float = 0.0, batch: int = 1):
    """A CartPole 'model' of the file's batch: two logits from the 4 observation values."""
    w = np.random.RandomState(3).normal(0, 1.0, (4, 2))

    def run(inputs: list[np.ndarray]) -> list[np.ndarray]:
        obs = np.asarray(inputs[0], np.float64)
        assert obs.shape == (batch, 4)
        logits = obs @ w
        logits[:, 0] += shift
        return [logits.astype(np.float32)]

    return run


CATEGORICAL = {"kind": "categorical", "logits": "logits"}


def cartpole(mode: str = "deterministic", steps: int = 60) -> model_rollout.Plan:
    return model_rollout.plan(
        model(policy=CATEGORICAL),
        ModelRollout("CartPole-v1", episodes=1, max_steps=steps, mode=mode, seed=7),
        RolloutConfig(),
        [np.zeros((1, 4), np.float32)],
        ["obs"],
        ["logits"],
    )


def roll_cartpole(p: model_rollout.Plan, served: object) -> object:
    return roll(p, served, logits_net(), act_dim=2)


def test_a_categorical_policy_drives_a_discrete_environment_by_its_argmax() -> None:
    r = roll_cartpole(cartpole(), logits_net())
    (e,) = r.episodes
    assert r.status == CONSISTENT and max(e.action_diff) == 0.0 and e.train_return == e.infer_return
    env = gymnasium.make("CartPole-v1")  # the same episode stepped here with the argmax
    obs, _ = env.reset(seed=7)
    total, steps = 0.0, 0
    for _ in range(60):
        a = int(np.argmax(logits_net()([np.asarray(obs, np.float32)[None]])[0][0]))
        obs, reward, terminated, truncated, _ = env.step(a)
        total, steps = total + float(reward), steps + 1
        if terminated or truncated:
            break
    assert (e.steps, e.train_return) == (steps, total)
    # a large bias on action 0: the sides choose differently, said as a step where they part
    apart = roll_cartpole(cartpole(), logits_net(shift=50.0))
    (gone,) = apart.episodes
    assert apart.status == DRIFT and max(gone.action_diff) == 1.0  # it always picks action 0
    assert gone.first_exceed == gone.action_diff.index(1.0) + 1 and "first at step" in apart.message


def test_sampled_categorical_episodes_weigh_the_drawn_actions() -> None:
    """Sampled: one seeded uniform per step draws both sides' actions (inverse CDF); the
    episode's log weight is log softmax(train)[a] - log softmax(served)[a] summed over the
    served side's steps, as numpy computes it here."""
    p = cartpole("sampled", 40)
    r = roll_cartpole(p, logits_net(shift=0.3))
    (e,) = r.episodes
    env = gymnasium.make("CartPole-v1")
    obs, _ = env.reset(seed=7)
    noise = np.random.RandomState(7)
    log_w = []
    for _ in range(e.steps):
        x = np.asarray(obs, np.float32)[None]
        lt = logits_net()([x])[0][0].astype(np.float64)
        li = logits_net(shift=0.3)([x])[0][0].astype(np.float64)
        pi = np.exp(li - np.logaddexp.reduce(li))
        a = min(int(np.searchsorted(np.cumsum(pi), noise.uniform() * np.cumsum(pi)[-1])), 1)
        log_w.append((lt - np.logaddexp.reduce(lt))[a] - (li - np.logaddexp.reduce(li))[a])
        obs, _, terminated, truncated, _ = env.step(a)
        if terminated or truncated:
            break
    assert e.log_ratio_sum == pytest.approx(sum(log_w), rel=1e-9)
    w = np.exp(log_w)
    assert e.ppo_clip_share == pytest.approx(np.mean(np.abs(w - 1) > 0.2))


def test_a_policy_of_the_wrong_kind_for_the_space_is_said() -> None:
    p = model_rollout.plan(
        model(policy=CATEGORICAL),
        ModelRollout("Pendulum-v1"),
        RolloutConfig(),
        [np.zeros((1, 3), np.float32)],
        ["obs"],
        ["logits"],
    )
    r = roll(p, net())
    assert r.status == ERROR and "a categorical policy acts in a discrete action space" in r.message
    g = model_rollout.plan(
        model(policy=GAUSS),
        ModelRollout("CartPole-v1"),
        RolloutConfig(),
        [np.zeros((1, 4), np.float32)],
        ["obs"],
        ["mean", "std"],
    )
    r = roll_cartpole(g, logits_net())
    assert r.status == ERROR and "a gaussian policy acts in a continuous action space" in r.message
