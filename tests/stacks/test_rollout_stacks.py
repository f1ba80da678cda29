"""A rollout whose environment fails, in a real cycle on the real stacks: that rollout is an
error, the rest of the cycle runs and the whole run is stored, and no environment process is
left behind."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from auditor.config.load import load
from auditor.cycle.audit_run import AuditRun
from auditor.db import schema as m
from auditor.extend.manager import Plugins
from auditor.history.store import Store
from auditor.results import CONSISTENT, ERROR
from tests.conftest import REPO
from tests.fault_kit import small_config
from tests.unit.policy.test_rollout import children

pytestmark = pytest.mark.stacks


def test_an_environment_failing_mid_episode_fails_only_its_rollout(
    stacks, tmp_path, monkeypatch, warm_stacks
):
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the environment process imports tests.rollout_envs
    env = "tests.rollout_envs:AuditorRaisesInStep-v0"
    cfg = small_config(tmp_path, probes=("ppo_policy", "obs_normalizer"))
    text = cfg.read_text().replace(
        "[rollout]\nenabled = false", f'[rollout]\nenabled = true\nenv = "{env}"\nseeds = [0, 1]\nsteps = 10'
    )
    cfg.write_text(text)
    plugins = Plugins(entry_points=False)
    config = load(cfg, {n: p.default_params for n, p in plugins.probes().items()})
    assert config.rollout.env == env  # "module:Name-v0" passes validation: the child imports it
    store = Store.open(f"sqlite:///{tmp_path / 'h.db'}")
    if warm_stacks is not None:  # the session's zygotes are this process's children too: started first
        warm_stacks.ready()
    before = children()
    result = AuditRun(config, plugins, store).run()
    assert children() == before
    (ro,) = result.rollouts
    assert ro.status == ERROR and ro.episodes == ()
    assert ro.message.startswith(
        f"rollout stopped at seed 0: environment {env}: 'step' raised RuntimeError: "
        "the simulator diverged at step 3"
    )
    # The probes ran and are stored with the failed rollout, in one complete run.
    assert {(r.probe, r.status) for r in result.results} == {
        ("ppo_policy", CONSISTENT),
        ("obs_normalizer", CONSISTENT),
    }
    with Session(store.engine) as s:
        run = s.get(m.Run, result.run_id)
        rows = s.execute(
            select(m.ProbeResultRow.probe, m.ProbeResultRow.variant, m.ProbeResultRow.status).where(
                m.ProbeResultRow.run_id == result.run_id
            )
        ).all()
    assert run.status == "complete"
    assert sorted(rows) == [
        ("obs_normalizer", "fp32", CONSISTENT),
        ("ppo_policy", "fp32", CONSISTENT),
        ("ppo_policy", "fp32:closed-loop", ERROR),
        ("ppo_policy", "fp32:open-loop", ERROR),
    ]
    assert any(f.kind == ERROR and "diverged at step 3" in f.message for f in result.findings)
    store.close()


@pytest.mark.parametrize("variant", ["fp32", "tanh-fp32"])
def test_sampled_episodes_weigh_the_infer_sides_steps_as_ppo_would(stacks, tmp_path, variant):
    """[rollout] mode = "sampled" on ms20 -> lite20: each side draws its action from its policy
    with the same noise, and the infer side's 30 steps per episode are scored by both models in
    one batch each. Lite 2.0 computes the fp32 policy to ~1e-7, so nothing is clipped, the ESS
    is 1 to 6 decimals and each episode's weight is e^(a few 1e-6); the actions were drawn (the
    returns are not the deterministic episode's). With a trainer chosen for all (``[ppo]
    trainer``, TRL's) and another for the pair (verl's geometric rejection), the pair's judges
    the probe's samples and the episodes, in verl's words."""
    cfg = small_config(tmp_path, probes=("ppo_policy",))
    rollout_table = f'[rollout]\nenabled = true\nvariant = "{variant}"\nseeds = [0, 1]\nsteps = 30'
    text = cfg.read_text().replace('variants = ["fp32"]', '"variants" = ["fp32", "tanh-fp32"]', 1)
    plugins = Plugins(entry_points=False)
    known = {n: p.default_params for n, p in plugins.probes().items()}
    rolled, judged = {}, {}
    for mode in ("deterministic", "sampled"):
        written = text.replace("[rollout]\nenabled = false", f'{rollout_table}\nmode = "{mode}"')
        if mode == "sampled":
            written = written.replace(
                "[[pairs]]\n", '[ppo]\ntrainer = "trl_seq_mask"\n[[pairs]]\ntrainer = "verl_geo_rs"\n'
            )
        cfg.write_text(written)
        config = load(cfg, known)
        store = Store.open(f"sqlite:///{tmp_path / f'{mode}.db'}")
        result = AuditRun(config, plugins, store).run()
        (rolled[mode],) = result.rollouts
        judged[mode] = {
            c.metric: c
            for r in result.results
            if r.variant == variant
            for c in r.checks
            if c.limit is not None
        }
        if mode == "sampled":
            with Session(store.engine) as s:
                stored = dict(
                    s.execute(
                        select(m.MetricRow.name, m.MetricRow.value)
                        .join(m.ProbeResultRow, m.ProbeResultRow.metric_set_id == m.MetricRow.set_id)
                        .where(
                            m.ProbeResultRow.run_id == result.run_id,
                            m.ProbeResultRow.variant == f"{variant}:closed-loop",
                            m.MetricRow.output == "seed1",
                        )
                    ).all()
                )
        store.close()
    sampled, deterministic = rolled["sampled"], rolled["deterministic"]
    assert sampled.status == CONSISTENT, sampled.message
    assert "the stacks alone would clip 0.00% of the sampled steps at epsilon 0.2" in sampled.message
    assert sampled.message.startswith(
        "2 episodes: actions within 1e-05 at every step, returns within 0.1; verl (decoupled_geo_rs) "
        "would reject 0.0% of the episodes: geometric-mean ratio outside [0.999, 1.001]"
    ), sampled.message
    # the probe's own samples: PPO's terms judge by default, the pair's trainer with it chosen
    assert {"ppo_clip_share", "tis_share", "ess"} <= set(judged["deterministic"])
    assert "verl_geo_rs_share" not in judged["deterministic"]
    assert (
        judged["sampled"]["verl_geo_rs_share"].value == 0.0 and judged["sampled"]["verl_geo_rs_share"].passed
    )
    assert not {"ppo_clip_share", "tis_share", "ess", "trl_seq_mask_share"} & set(judged["sampled"])
    for e, d in zip(sampled.episodes, deterministic.episodes, strict=True):
        assert e.steps == 30 and e.ppo_clip_share == 0.0 and e.ess > 0.999999
        assert 0.0 < abs(e.log_ratio_sum) < 1e-3  # fp32 rounding, measured, not a default
        assert e.infer_return != pytest.approx(d.infer_return, abs=1e-3)
        assert d.log_ratio_sum is None  # deterministic episodes have no weights
    assert stored["log_ratio_sum"] == pytest.approx(sampled.episodes[1].log_ratio_sum)
    assert stored["ess"] == sampled.episodes[1].ess and stored["ppo_clip_share"] == 0.0
