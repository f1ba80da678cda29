"""``auditor.testing``: the plugin author's helper judges a probe by the config's thresholds
(the ``[probes.NAME]`` table of the auditor.toml the auditor would read), not by defaults only."""

from __future__ import annotations

import pytest

from auditor.testing import Stack, probe_config

TRAIN = Stack("tr", "mindspore", "/opt/tr/bin/python")
INFER = Stack("inf", "mindspore-lite", "/opt/inf/bin/python")
CONFIG = """
[probes.ppo_policy]
atol = 2e-5
rtol = 2e-5
params = { batch = 32, seed = 0 }

[probes.ppo_policy.dtype.float16.outputs.logp]
atol = 4e-3
rtol = 4e-3

[probes.ppo_policy.comparators.logp_diff]
max_abs = 0.5
"""


def tolerance(cfg, output: str, variant: str, dtype: str):  # noqa: ANN001, ANN201
    t = cfg.probe("ppo_policy").tolerance_for(output, variant, dtype)
    return (t.atol, t.rtol)


def test_the_found_config_decides_by_default(tmp_path, monkeypatch):
    (tmp_path / "auditor.toml").write_text(CONFIG)
    monkeypatch.setenv("AUDITOR_CONFIG", str(tmp_path / "auditor.toml"))
    cfg, plugins = probe_config("ppo_policy", TRAIN, INFER)
    assert cfg.source == str(tmp_path / "auditor.toml") and "ppo_policy" in plugins.probes()
    assert tolerance(cfg, "mean", "fp32", "float32") == (2e-5, 2e-5)
    assert tolerance(cfg, "logp", "fp16", "float16") == (4e-3, 4e-3)
    assert tolerance(cfg, "mean", "fp16", "float16") == (1e-3, 1e-3)  # the built-in fp16 default
    assert cfg.probe("ppo_policy").params["batch"] == 32
    assert cfg.probe("ppo_policy").comparator_options("logp_diff", "fp32", "float32")["max_abs"] == 0.5
    assert [p.name for p in cfg.pairs] == ["tr->inf"] and not cfg.rollout.enabled


def test_a_named_config_no_config_and_overrides(tmp_path, monkeypatch):
    monkeypatch.delenv("AUDITOR_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)  # no ./auditor.toml here
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    (tmp_path / "mine.toml").write_text(CONFIG)
    cfg, _ = probe_config("ppo_policy", TRAIN, INFER, config=tmp_path / "mine.toml")
    assert tolerance(cfg, "logp", "fp16", "float16") == (4e-3, 4e-3)
    bare, _ = probe_config("ppo_policy", TRAIN, INFER, config=False)
    assert tolerance(bare, "logp", "fp16", "float16") == (1e-3, 1e-3)  # the built-in fp16 default
    assert tolerance(bare, "mean", "fp32", "float32") == (1e-5, 1e-5)
    found_none, _ = probe_config("ppo_policy", TRAIN, INFER)  # nothing to find: the defaults
    assert tolerance(found_none, "mean", "fp32", "float32") == (1e-5, 1e-5)
    over, _ = probe_config(
        "ppo_policy", TRAIN, INFER, config=tmp_path / "mine.toml", thresholds={"atol": 1e-3},
        variants=["fp32"], params={"batch": 8},
    )  # fmt: skip
    assert tolerance(over, "mean", "fp32", "float32") == (1e-3, 2e-5)
    assert over.probe("ppo_policy").params == {"batch": 8, "seed": 0} and over.probe(
        "ppo_policy"
    ).variants == ("fp32",)
    with pytest.raises(ValueError, match="file not found"):
        probe_config("ppo_policy", TRAIN, INFER, config=tmp_path / "absent.toml")
    with pytest.raises(ValueError, match="probes.ppo_policy"):
        probe_config("ppo_policy", TRAIN, INFER, config=False, thresholds={"atol": "wide"})
