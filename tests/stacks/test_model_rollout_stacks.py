"""[models.NAME.rollout] on the real stacks: a Pendulum-v1 policy of the user's (3 observation
values, 1 action; tests/model_fixtures/mypolicy, kind pendulum_gauss) trained and exported by
ms20 in the test, its episodes (docs/own-policy.md's block as written) run by the training
network in PyNative on ms20 against the exported file served by lite20; the same file at
batch 4 in sampled mode against ms210-graph as the reference stack, in the user's own
environment ("package.module:function"); a golden reference, which cannot act, said in the
result.

Measured on these stacks: lite20's action differs from ms20 PyNative's by up to ~8e-5 at a
Pendulum state (its tanh on the trunk's larger pre-activations; ~1e-7 on normal(0, 1) inputs),
so the default action_atol 1e-5 sees drift and 1e-3 does not."""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from auditor.cli.main import cli
from tests import docs
from tests.conftest import DEFAULT_CONFIG, REPO
from tests.user_models import export_policies

pytestmark = pytest.mark.stacks

FIXTURES = REPO / "tests" / "model_fixtures"


@pytest.fixture(scope="module")
def audit(stacks: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    d = tmp_path_factory.mktemp("model-rollouts")
    export_policies("ms20", d / "b1", ("pendulum_gauss",), batch=1)
    export_policies("ms20", d / "b4", ("pendulum_gauss",), batch=4)
    export_policies("ms20", d / "cart", ("cartpole_logits",), batch=1)
    sim = d / "sim" / "usersim"
    sim.mkdir(parents=True)
    (sim / "__init__.py").write_text("")
    (sim / "envs.py").write_text(
        textwrap.dedent(
            '''
            import gymnasium


            def pendulum(g=9.81):
                """The user's own environment: here Pendulum with their gravity."""
                return gymnasium.make("Pendulum-v1", g=g)
            '''
        )
    )
    np.savez(d / "obs.npz", obs=np.zeros((1, 3), np.float32))
    head = DEFAULT_CONFIG.read_text().split("# --- pairs")[0]
    head = head.replace("[rollout]\nenabled = true", "[rollout]\nenabled = false")
    train = (
        f'train = {{ factory = "mypolicy.nets:build_actor", checkpoint = "b1/pendulum_gauss.ckpt", '
        f'stack = "ms20", path = "{FIXTURES}", kwargs = {{ kind = "pendulum_gauss" }} }}'
    )
    gauss = 'policy = { kind = "gaussian", mean = "mean", std = "std" }'
    # docs/own-policy.md's episodes block, as written, for the Pendulum policy
    [episodes] = [
        b
        for lang, b in docs.blocks("docs/own-policy.md", "Auditing your own policy")
        if "[models.policy.rollout]" in b
    ]
    config = d / "auditor.toml"
    config.write_text(
        head
        + f"""
[models.policy]
path = "b1/pendulum_gauss.mindir"
stacks = ["lite20"]
output_names = ["mean", "std"]
{train}
{gauss}
{episodes}
[models.pend_tight]
path = "b1/pendulum_gauss.mindir"
stacks = ["lite20"]
output_names = ["mean", "std"]
{train}
[models.pend_tight.rollout]
env = "Pendulum-v1"
episodes = 2
max_steps = 60

[models.pend_sampled]
path = "b4/pendulum_gauss.mindir"
stacks = ["lite20"]
reference = "ms210-graph"
output_names = ["mean", "std"]
{gauss}
[models.pend_sampled.rollout]
env = "usersim.envs:pendulum"
path = "sim"
mode = "sampled"
max_steps = 100
action_atol = 1e-3

[models.cart]
path = "cart/cartpole_logits.mindir"
stacks = ["lite20"]
output_names = ["logits"]
policy = {{ kind = "categorical", logits = "logits" }}
[models.cart.train]
factory = "mypolicy.nets:build_actor"
checkpoint = "cart/cartpole_logits.ckpt"
stack = "ms20"
path = "{FIXTURES}"
kwargs = {{ kind = "cartpole_logits" }}
[models.cart.rollout]
env = "CartPole-v1"
max_steps = 100

[models.cart_sampled]
path = "cart/cartpole_logits.mindir"
stacks = ["lite20"]
reference = "ms210-graph"
output_names = ["logits"]
policy = {{ kind = "categorical", logits = "logits" }}
[models.cart_sampled.rollout]
env = "CartPole-v1"
mode = "sampled"
max_steps = 100

[models.pend_golden]
path = "b1/pendulum_gauss.mindir"
stacks = ["lite20"]
golden = "pend.golden.npz"
output_names = ["mean", "std"]
[models.pend_golden.rollout]
env = "Pendulum-v1"
"""
    )
    runner = CliRunner()
    base = ["--config", str(config), "--db", str(d / "history.db")]
    recorded = runner.invoke(cli, [*base, "golden", "record", "pend_golden", "--stack", "ms210-graph"])
    assert recorded.exit_code == 0, recorded.output
    result = runner.invoke(cli, [*base, "audit", "--json"])
    assert result.stdout.startswith("{"), result.output[-3000:]
    text = runner.invoke(cli, [*base, "audit"])  # the report a person reads; a second cycle
    return {"dir": d, "base": base, "audit": result, "doc": json.loads(result.stdout), "text": text}


def rollouts(audit: dict) -> dict[str, dict]:
    return {r["probe"]: r for r in audit["doc"]["rollouts"]}


def test_the_training_network_and_the_served_file_drive_pendulum_episode_by_episode(audit: dict) -> None:
    """docs/own-policy.md's block: 3 episodes of 200 steps, action_atol 1e-3."""
    r = rollouts(audit)["policy"]
    assert (r["pair"], r["train"], r["infer"], r["variant"], r["env"]) == (
        "policy:ms20->lite20",
        "ms20",
        "lite20",
        "model",
        "Pendulum-v1",
    )
    assert r["status"] == "consistent", r["message"]
    episodes = r["episodes"]
    assert [e["seed"] for e in episodes] == [0, 1, 2] and all(e["steps"] == 200 for e in episodes)
    for e in episodes:  # each side's return, a real Pendulum return (-16.3 per step at worst)
        assert -16.3 * 200 <= e["train_return"] < 0 and -16.3 * 200 <= e["infer_return"] < 0
        assert abs(e["train_return"] - e["infer_return"]) <= 0.1
        # the two stacks are different programs: their actions are not bitwise equal
        assert 0 < max(e["action_diff"]) <= 1e-3 and e["first_exceed"] is None


def test_lite20_turns_a_nan_observation_into_an_action(audit: dict) -> None:
    """The nan-inf input class on the same policy: the training network (ms20 PyNative) keeps
    NaN rows NaN, Lite 2.0 gives finite actions for them (measured)."""
    masked = [
        f for f in audit["doc"]["findings"] if f["kind"] == "nan-hazard" and f["details"]["probe"] == "policy"
    ]
    assert len(masked) == 1 and masked[0]["subject"] == "lite20", masked
    assert (
        masked[0]["details"]["input_class"] == "nan-inf"
        and "nan_hazard = false" in masked[0]["details"]["action"]
    )


def test_a_tight_action_tolerance_names_the_first_step_and_the_cause(audit: dict) -> None:
    r = rollouts(audit)["pend_tight"]
    assert r["status"] == "drift" and r["action_atol"] == 1e-5
    first = min(e["first_exceed"] for e in r["episodes"] if e["first_exceed"] is not None)
    assert f"first at step {first}" in r["message"] and "open loop too" in r["message"]
    assert first <= 10  # as docs/own-policy.md says
    assert all(e["steps"] == 60 for e in r["episodes"])
    finding = [f for f in audit["doc"]["findings"] if f["kind"] == "rollout-divergence"]
    assert [f["subject"] for f in finding] == ["pend_tight:ms20->lite20"]


def test_sampled_episodes_in_the_users_own_environment_with_a_reference_stack(audit: dict) -> None:
    r = rollouts(audit)["pend_sampled"]
    assert (r["train"], r["infer"], r["env"]) == ("ms210-graph", "lite20", "usersim.envs:pendulum")
    assert r["status"] == "consistent", r["message"]
    for e in r["episodes"]:
        assert e["steps"] == 100 and math.isfinite(e["log_ratio_sum"]) and abs(e["log_ratio_sum"]) < 0.05
        assert e["ppo_clip_share"] == 0.0 and e["ess"] > 0.999
    assert "the stacks alone would clip 0.00% of the sampled steps" in r["message"]


def test_a_categorical_policy_drives_cartpole_by_its_argmax_and_by_draws(audit: dict) -> None:
    """A discrete policy (2 logits) on CartPole-v1: the training network and lite20 choose the
    same action at every step (argmax), and in sampled mode draw the same actions from the
    same uniforms, with weights ~1 (their logits agree within float32 rounding)."""
    r = rollouts(audit)["cart"]
    assert r["status"] == "consistent", r["message"]
    for e in r["episodes"]:
        assert max(e["action_diff"]) == 0.0 and e["train_return"] == e["infer_return"] > 0
    s = rollouts(audit)["cart_sampled"]
    assert s["status"] == "consistent" and s["train"] == "ms210-graph", s["message"]
    for e in s["episodes"]:
        assert e["ppo_clip_share"] == 0.0 and e["ess"] > 0.9999 and abs(e["log_ratio_sum"]) < 1e-3


def test_a_golden_reference_says_it_cannot_act(audit: dict) -> None:
    r = rollouts(audit)["pend_golden"]
    assert r["status"] == "error" and r["episodes"] == []
    assert r["message"].startswith("rollout not run: the reference is a golden file")
    assert audit["audit"].exit_code != 0  # asked for and not done: not a clean outcome


def test_the_report_shows_each_models_rollout_line_under_its_model(audit: dict) -> None:
    lines = audit["text"].output.splitlines()
    for name, status in (("policy", "consistent"), ("pend_tight", "DRIFT"), ("pend_golden", "ERROR")):
        head = next(i for i, line in enumerate(lines) if line.startswith(f"model {name}:"))
        rolled = next(line for line in lines[head:] if line.lstrip().startswith(f"rollout {name} [model]"))
        assert status in rolled, rolled
    assert audit["text"].exit_code == audit["audit"].exit_code  # the same verdict, run again
