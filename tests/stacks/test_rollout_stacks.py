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
from tests.unit.cycle.test_rollout import children

pytestmark = pytest.mark.stacks


def test_an_environment_failing_mid_episode_fails_only_its_rollout(stacks, tmp_path, monkeypatch):
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
