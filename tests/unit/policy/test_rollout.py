"""Closed/open-loop rollouts with plain numpy policies (no stacks), their environments in the
environment process (and how it fails), and the [rollout] config."""

from __future__ import annotations

import contextlib
import copy
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import gymnasium
import numpy as np
import pytest

from auditor.config.tables import ConfigError, RolloutConfig
from auditor.extend.manager import builtin_probes
from auditor.policy import env_process
from auditor.policy.env_process import EnvError, EnvProcess
from auditor.policy.rollout import check_spaces, findings, rollout, run_episode, verdict
from auditor.results import CONSISTENT, DRIFT, ERROR
from tests.configs import build
from tests.conftest import REPO

W = np.array([-0.5, 0.1, -0.1])  # |action| <= 1.4: never clipped at Pendulum's bound 2


def policy(obs: np.ndarray) -> np.ndarray:
    """A damping controller: enough to make Pendulum's trajectory depend on the actions."""
    return np.array([float(W @ np.asarray(obs, np.float64))])


def offset(delta: float, after: int = 0):
    """The same policy, off by ``delta`` from step ``after`` (1-based) on."""
    calls = {"n": 0}

    def p(obs: np.ndarray) -> np.ndarray:
        calls["n"] += 1
        return policy(obs) + (delta if calls["n"] > after else 0.0)

    return p


def test_identical_policies_agree_at_every_step():
    e = run_episode("Pendulum-v1", 3, 0, policy, policy, 1e-6)
    assert e.steps == 200  # 0: until the environment ends it; Pendulum truncates at 200
    assert max(e.action_diff) == max(e.open_action_diff) == max(e.obs_diff) == 0.0
    assert e.first_exceed is None and e.train_return == e.infer_return
    # The train side's return is what the same policy gets alone in the environment.
    env = gymnasium.make("Pendulum-v1")
    obs, _ = env.reset(seed=3)
    total = 0.0
    for _ in range(200):
        obs, r, *_ = env.step(np.clip(policy(obs), -2, 2).astype(np.float32))
        total += float(r)
    assert e.train_return == pytest.approx(total)


def test_closed_loop_amplifies_what_the_open_loop_separates():
    # The infer side is off by 1e-4 from step 11 on.
    e = run_episode("Pendulum-v1", 0, 60, policy, offset(1e-4, after=10), 1e-3)
    assert e.steps == 60
    assert e.action_diff[:10] == (0.0,) * 10 and e.obs_diff[:10] == (0.0,) * 10
    # Open loop: the infer side fed the train side's observations sees only its own offset.
    assert all(d == pytest.approx(1e-4, rel=1e-6) for d in e.open_action_diff[10:])
    # Closed loop: the trajectories part after step 11, so the action difference changes.
    assert max(e.obs_diff) > 0.0
    assert e.action_diff[10] == pytest.approx(1e-4, rel=1e-6)
    assert any(abs(d - 1e-4) > 1e-6 for d in e.action_diff[11:])
    assert e.first_exceed == next((i + 1 for i, d in enumerate(e.action_diff) if d > 1e-3), None)
    assert e.open_first_exceed is None  # 1e-4 < 1e-3 at every step


def test_first_exceed_step_and_clipping():
    e = run_episode("Pendulum-v1", 1, 20, policy, offset(0.05, after=4), 0.01)
    assert e.first_exceed == e.open_first_exceed == 5
    # Actions are clipped to the action bounds before they are compared.
    big = run_episode("Pendulum-v1", 1, 5, lambda o: np.array([10.0]), lambda o: np.array([50.0]), 0.0)
    assert big.action_diff == (0.0,) * 5 and big.first_exceed is None


@pytest.mark.parametrize("delta", [0.0, 1e-7, 1e-3, 0.2])
def test_verdict_follows_the_numbers(delta):
    eps = [run_episode("Pendulum-v1", s, 50, policy, offset(delta, after=3), 1e-5) for s in (0, 1)]
    action_atol, return_atol = 1e-5, 0.05
    status, message = verdict(eps, action_atol, return_atol)
    exceeds = any(d > action_atol for e in eps for d in e.action_diff)
    returns = any(abs(e.train_return - e.infer_return) > return_atol for e in eps)
    assert status == (DRIFT if exceeds or returns else CONSISTENT)
    assert ("action difference exceeds" in message) == exceeds
    assert ("returns differ" in message) == returns


def test_rollout_result_summary_and_findings():
    r = rollout(
        pair="a->b",
        train="a",
        infer="b",
        probe="ppo_policy",
        variant="fp32",
        env="Pendulum-v1",
        seeds=[0, 1],
        steps=30,
        action_atol=1e-3,
        return_atol=1.0,
        train_policy=policy,
        infer_policy=offset(0.01, after=5),
    )
    assert r.status == DRIFT and len(r.episodes) == 2
    closed, opened = r.summary("closed-loop"), r.summary("open-loop")
    # The offset starts at step 6 of the first episode and is on from the start of the second.
    assert [e.first_exceed for e in r.episodes] == [6, 1] == [e.open_first_exceed for e in r.episodes]
    assert closed["first_exceed_step"] == 1 == opened["first_exceed_step"]
    assert closed["steps"] == 60 and closed["episodes_exceeding"] == 2
    assert closed["max_action_diff"] == max(d for e in r.episodes for d in e.action_diff)
    assert set(r.episode_metrics()["closed-loop"]) == {"seed0", "seed1"}
    (f,) = findings([r])
    assert f.kind == "rollout-divergence" and f.key == "a->b/ppo_policy/fp32/rollout/rollout-divergence"
    assert f.details["first_exceed_step"] == 1 and "first at step 1 (seed 1)" in f.message


def test_a_failing_side_makes_an_error_result():
    class Broken(Exception):
        pass

    calls = {"n": 0}

    def dies(obs):
        calls["n"] += 1
        if calls["n"] > 3:
            raise Broken("worker died")
        return policy(obs)

    r = rollout(
        pair="a->b",
        train="a",
        infer="b",
        probe="p",
        variant="v",
        env="Pendulum-v1",
        seeds=[0],
        steps=10,
        action_atol=1e-3,
        return_atol=1.0,
        train_policy=policy,
        infer_policy=dies,
        error_types=(Broken,),
    )
    assert r.status == ERROR and "rollout stopped at seed 0: worker died" in r.message
    assert findings([r])[0].severity == "error"


def test_check_spaces():
    assert check_spaces("Pendulum-v1", 3, 1) is None
    assert "takes 4 observation values, Pendulum-v1 gives 3" in check_spaces("Pendulum-v1", 4, 1)
    assert "gives 2 action values, Pendulum-v1 takes 1" in check_spaces("Pendulum-v1", 3, 2)


# -- the environment process -----------------------------------------------------------------


def children() -> set[int]:
    """This process's child processes, zombies (not reaped) included."""
    pids: set[int] = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        with contextlib.suppress(OSError):
            pids |= {int(p) for p in (task / "children").read_text().split()}
    return pids


@pytest.fixture
def faulty_envs(monkeypatch):
    """The environment process can import tests.rollout_envs; no child is left behind."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    before = children()
    yield
    assert children() == before


def _rollout(env: str, **kw) -> object:
    args = dict(
        pair="a->b",
        train="a",
        infer="b",
        probe="p",
        variant="v",
        env=env,
        seeds=[0, 1],
        steps=10,
        action_atol=1e-3,
        return_atol=1.0,
        train_policy=policy,
        infer_policy=policy,
    )
    return rollout(**{**args, **kw})


def test_unknown_env_is_an_error_result_with_a_hint(faulty_envs):
    r = _rollout("Pendulum-v9")
    assert r.status == ERROR and r.episodes == ()
    assert r.message.startswith(
        "rollout stopped at seed 0: no gymnasium environment 'Pendulum-v9' is registered"
    )
    assert "did you mean Pendulum-v1" in r.message
    with pytest.raises(EnvError) as exc:
        check_spaces("Pendulum-v9", 3, 1)
    assert exc.value.kind == "unknown"
    r = _rollout("no_such_module:Faulty-v0")
    assert "cannot import 'no_such_module' for environment 'no_such_module:Faulty-v0'" in r.message


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ("AuditorRaisesInStep-v0", "'step' raised RuntimeError: the simulator diverged at step 3"),
        (
            "AuditorRaisesInReset-v0",
            "'reset' raised ValueError: cannot reset: the simulator's licence expired",
        ),
    ],
)
def test_an_environment_that_raises_is_an_error_result(faulty_envs, env, said):
    r = _rollout(f"tests.rollout_envs:{env}")
    assert r.status == ERROR and r.episodes == ()
    assert r.message.startswith(f"rollout stopped at seed 0: environment tests.rollout_envs:{env}: {said}")
    # The environment's traceback is in the log, down to its own line.
    assert "rollout_envs.py" in r.log and said.rpartition(" raised ")[2] in r.log
    assert findings([r])[0].severity == "error"


def test_a_hanging_environment_is_killed_at_the_deadline(faulty_envs):
    with EnvProcess(request_timeout=2) as envs:
        r = _rollout("tests.rollout_envs:AuditorHangsInStep-v0", envs=envs)
        assert not envs.alive and envs.proc.returncode == -signal.SIGKILL
    assert r.status == ERROR
    assert "the environment gave no answer to 'step' within 2 s; its process was killed" in r.message


def test_an_abort_kills_a_hanging_environment_from_another_thread(faulty_envs, tmp_path, monkeypatch):
    # As Cycle.abort() does on SIGTERM: the rollout's thread is waiting for a step that hangs.
    # The kill waits for the environment's own word that it hangs in step (a fixed delay lost
    # the race on a loaded machine: the kill came while the child was still starting).
    marker = tmp_path / "hanging"
    monkeypatch.setenv("AUDITOR_TEST_HANG_MARKER", str(marker))

    def kill_when_hanging(envs: EnvProcess) -> None:
        deadline = time.monotonic() + 300
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        envs.kill()

    with EnvProcess(request_timeout=600) as envs:
        killer = threading.Thread(target=kill_when_hanging, args=(envs,))
        killer.start()
        r = _rollout("tests.rollout_envs:AuditorHangsInStep-v0", envs=envs)
        killer.join()
    assert r.status == ERROR and "within" not in r.message  # not the deadline: the kill
    assert "the environment process died during 'step' (killed by SIGKILL)" in r.message
    # Killed before its first request (an abort racing the rollout's start): nothing starts.
    unstarted = EnvProcess()
    unstarted.kill()
    with pytest.raises(EnvError, match="already closed"):
        unstarted.make("Pendulum-v1")
    assert unstarted.proc is None


def test_an_environment_process_killed_mid_episode_is_an_error_result(faulty_envs):
    with EnvProcess() as envs:
        calls = {"n": 0}

        def kills(obs):
            calls["n"] += 1
            if calls["n"] == 5:
                os.kill(envs.proc.pid, signal.SIGKILL)
                envs.proc.wait()  # the kill has landed before the next request
            return policy(obs)

        r = _rollout("Pendulum-v1", steps=20, infer_policy=kills, envs=envs)
    assert r.status == ERROR and r.episodes == ()
    assert r.message.startswith("rollout stopped at seed 0: the environment process")
    assert "killed by SIGKILL" in r.message


def test_a_policy_that_raises_leaves_no_environment_process(faulty_envs):
    def dies(obs):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _rollout("Pendulum-v1", infer_policy=dies)
    with pytest.raises(KeyboardInterrupt):
        run_episode("Pendulum-v1", 0, 5, policy, dies, 1e-3)


def test_what_an_environment_prints_does_not_reach_the_answers(faulty_envs):
    with EnvProcess() as envs:
        e = run_episode("tests.rollout_envs:AuditorPrints-v0", 0, 0, policy, policy, 1e-3, envs)
        assert e.steps == 10 and max(e.action_diff) == 0.0
    # On stderr instead (read by a thread: complete once the process has ended).
    assert "step 10: a chatty environment writes to stdout" in envs._log()


def test_missing_gymnasium_is_named(faulty_envs, tmp_path, monkeypatch):
    hidden = tmp_path / "gymnasium"
    hidden.mkdir()
    (hidden / "__init__.py").write_text("raise ImportError(\"No module named 'gymnasium'\")\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    r = _rollout("Pendulum-v1")
    assert r.status == ERROR
    assert f"gymnasium is not installed for {sys.executable}" in r.message and "install it" in r.message
    # Config validation cannot tell then: it leaves the verdict to the cycle.
    assert env_process.env_problem("Pendulum-v9") is None


def test_a_rollout_does_not_import_gymnasium_into_the_auditor():
    """The daemon runs rollouts every cycle: gymnasium stays in the environment process."""
    script = """
import sys
import numpy as np
from auditor.policy.env_process import env_problem
from auditor.policy.rollout import rollout
assert env_problem("Pendulum-v1") is None and "did you mean" in env_problem("Pendulum-v9")
r = rollout(pair="a->b", train="a", infer="b", probe="p", variant="v", env="Pendulum-v1",
            seeds=[0, 1], steps=20, action_atol=1e-3, return_atol=1.0,
            train_policy=lambda o: np.array([-0.5 * o[0]]), infer_policy=lambda o: np.array([-0.5 * o[0]]))
assert r.status == "consistent" and len(r.episodes) == 2, r.message
print(sorted(m for m in sys.modules if m.split(".")[0] == "gymnasium"))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# -- config ------------------------------------------------------------------------------------


def test_rollout_defaults_and_shipped_config(default_doc):
    doc = copy.deepcopy(default_doc)
    config = build(doc, builtin_probes())
    assert config.rollout == RolloutConfig(pairs=())
    doc.pop("rollout")
    assert build(doc, builtin_probes()).rollout == RolloutConfig()


def test_rollout_config_errors_all_at_once(default_doc):
    doc = copy.deepcopy(default_doc)
    doc["rollout"] = {
        "seeds": [0, -1, "x"],
        "steps": -5,
        "action_atol": -1.0,
        "return_atol": "big",
        "pairs": ["nope->x"],
        "probe": "unknown",
        "colour": 1,
    }
    with pytest.raises(ConfigError) as exc:
        build(doc, builtin_probes())
    errors = "\n".join(exc.value.errors)
    for expected in (
        "rollout.seeds[1]: must be a whole number from 0 to 4294967295, not -1",
        "rollout.seeds[2]: must be a whole number from 0 to 4294967295, not string 'x'",
        "rollout.steps: must be a whole number from 0 to 1000000, not -5",
        "rollout.action_atol: must be a finite number from 0 to 1000000, not -1.0",
        "rollout.return_atol: must be a finite number from 0 to 1000000, not string 'big'",
        "rollout.pairs[0]: no pair 'nope->x'",
        "rollout.probe: unknown probe 'unknown'",
        "rollout.colour: unknown key",
    ):
        assert expected in errors


def test_rollout_pairs_must_run_the_probe(default_doc):
    doc = copy.deepcopy(default_doc)
    doc["rollout"] = {"pairs": ["ms20->lite20"], "probe": "ppo_policy"}
    assert build(doc, builtin_probes()).rollout.pairs == ("ms20->lite20",)
    doc["pairs"][2]["probes"] = ["obs_normalizer"]
    doc["rollout"]["pairs"] = ["ms20->lite20"]
    with pytest.raises(ConfigError) as exc:
        build(doc, builtin_probes())
    assert "rollout.pairs[0]: pair ms20->lite20 does not run probe 'ppo_policy'" in exc.value.errors


# -- sampled mode: actions drawn as PPO collects data, the steps scored by both sides ----------


STD = 0.5


def dist(shift: float = 0.0):
    """A Gaussian policy giving (mean, std) concatenated, as worker_policy does in sampled mode."""
    return lambda obs: np.array([policy(obs)[0] + shift, STD])


def scorer(shift: float = 0.0, seen: list | None = None):
    """log N(a; mean(s) + shift, STD) of given steps, recording what it was asked (scipy's density)."""
    from scipy import stats

    def score(states: np.ndarray, actions: np.ndarray) -> np.ndarray:
        if seen is not None:
            seen.append((states.copy(), actions.copy()))
        means = np.array([policy(s)[0] + shift for s in states])
        return stats.norm.logpdf(actions[:, 0], means, STD)

    return score


def sampler(train_shift=0.0, infer_shift=0.0, kind="gaussian", seen=None, infer_score=None):
    from auditor.policy.rollout import Sampler

    scale = 2.0 if kind == "tanh" else 1.0  # the tanh head is scaled to the action bounds
    return Sampler(kind, scale, scorer(train_shift, seen), infer_score or scorer(infer_shift), 0.2)


def test_sampled_episodes_draw_with_the_same_noise_and_score_the_infer_steps():
    seen: list = []
    e = run_episode("Pendulum-v1", 4, 50, dist(), dist(), 1e-6, sampler=sampler(seen=seen))
    assert e.sampled and e.log_ratio_sum == 0.0 and e.ppo_clip_share == 0.0 and e.ess == 1.0
    assert max(e.action_diff) == 0.0 and e.train_return == e.infer_return
    # the infer side's trajectory, stepped independently: a_t = mean(s_t) + STD * z_t, z from the seed
    env = gymnasium.make("Pendulum-v1")
    obs, _ = env.reset(seed=4)
    noise = np.random.RandomState(4)
    states, actions, total = [], [], 0.0
    for _ in range(50):
        a = policy(obs) + STD * noise.standard_normal((1,))
        states.append(np.asarray(obs, np.float64))
        actions.append(a)
        obs, r, *_ = env.step(np.clip(a, -2, 2).astype(np.float32))
        total += float(r)
    assert e.infer_return == pytest.approx(total)
    (scored,) = seen  # one batch for the whole episode
    assert scored[0] == pytest.approx(np.stack(states)) and scored[1] == pytest.approx(np.stack(actions))
    deterministic = run_episode("Pendulum-v1", 4, 50, policy, policy, 1e-6)
    assert deterministic.infer_return != pytest.approx(e.infer_return)  # the actions were drawn


def test_a_shifted_policy_has_the_episode_weight_ppo_would_compute():
    from scipy import stats

    seen: list = []
    e = run_episode("Pendulum-v1", 2, 40, dist(), dist(0.3), 1.0, sampler=sampler(0.0, 0.3, seen=seen))
    states, actions = seen[0]
    means = np.array([policy(s)[0] for s in states])
    log_w = stats.norm.logpdf(actions[:, 0], means, STD) - stats.norm.logpdf(actions[:, 0], means + 0.3, STD)
    assert e.log_ratio_sum == pytest.approx(log_w.sum(), rel=1e-12)
    w = np.exp(log_w)
    assert e.ppo_clip_share == pytest.approx(np.mean(np.abs(w - 1) > 0.2))
    assert e.ess == pytest.approx(w.sum() ** 2 / (len(w) * (w * w).sum()), rel=1e-9)
    from auditor.policy.rollout import SampledLimits

    status, message = verdict([e], 1.0, 1e9, SampledLimits())
    assert status == DRIFT and "the stacks alone would clip" in message and "40-step episode" in message
    ok, words = verdict([e], 1.0, 1e9, SampledLimits(max_ppo_clip_share=1.0, min_ess=0.0))
    assert ok == CONSISTENT and "ESS" in words  # within its limits, the figures are still said


def test_a_tanh_policy_scores_the_squashed_action_and_scales_it_for_the_environment():
    seen: list = []
    e = run_episode("Pendulum-v1", 1, 10, dist(), dist(), 1e-6, sampler=sampler(kind="tanh", seen=seen))
    _, actions = seen[0]
    assert np.all(np.abs(actions) < 1.0) and e.log_ratio_sum == 0.0


def test_a_step_without_a_finite_weight_is_clipped_and_said():
    def broken(states: np.ndarray, actions: np.ndarray) -> np.ndarray:
        out = scorer()(states, actions)
        out[3] = np.nan
        return out

    e = run_episode("Pendulum-v1", 0, 10, dist(), dist(), 1e-6, sampler=sampler(infer_score=broken))
    assert e.log_ratio_sum == float("inf") and e.ppo_clip_share == pytest.approx(0.1)
    from auditor.policy.rollout import SampledLimits

    status, message = verdict([e], 1e-6, 1.0, SampledLimits())
    assert status == DRIFT and "not finite" in message
