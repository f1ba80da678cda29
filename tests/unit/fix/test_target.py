"""What `auditor fix` is pointed at, checked before any stack runs: each wrong or ambiguous
choice is named with what there is; the candidates' config is the user's narrowed to one pair,
probe and variant (no stack runs here)."""

from __future__ import annotations

import copy
import tomllib

import pytest
from click.testing import CliRunner

from auditor.cli.main import cli
from auditor.config.load import parse
from auditor.extend.manager import Plugins
from auditor.fix.fixer import start_index
from auditor.fix.target import FixError, ProbeTarget
from auditor.policy.localize import LayerDivergence, Localization

TEXT = """
[stacks.ms210]
role = "train"
runtime = "mindspore"
python = "/s/ms210/bin/python"
[stacks.ms20]
role = "train"
runtime = "mindspore"
python = "/s/ms20/bin/python"
[stacks.lite20]
role = "infer"
runtime = "mindspore-lite"
python = "/s/lite/bin/python"

[[pairs]]
train = "ms210"
infer = "lite20"
probes = ["ppo_policy", "obs_normalizer"]
[[pairs]]
train = "ms20"
infer = "lite20"
probes = ["ppo_policy"]
trainer = "verl_seq_rs"

[rollout]
probe = "ppo_policy"
variant = "fp16"

[models.policy]
path = "policy.mindir"
stacks = ["lite20"]
golden = "p.npz"
"""
PLUGINS = Plugins(entry_points=False)


@pytest.fixture
def config():
    return parse(copy.deepcopy(tomllib.loads(TEXT)), "/etc/auditor/auditor.toml")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("nope", "lite20", None, None), "no probe or [models] entry 'nope'"),
        (("ppo_policy", "ms210", None, None), "no pair serves ppo_policy on stack 'ms210'"),
        (("ppo_policy", "lite20", None, None), "from 2 train stacks (ms210, ms20): choose one with --train"),
        (("ppo_policy", "lite20", "fp32", "ms20"), "computes in float32"),
        (("ppo_policy", "lite20", "fp99", "ms20"), "no variant 'fp99'"),
        (("ppo_policy", "lite20", "fp16", "ms999"), "no pair ms999->lite20 runs ppo_policy"),
        (("ppo_policy", "lite20", None, "ms20"), "2 float16 variants: fp16, tanh-fp16"),
    ],
)
def test_a_wrong_target_is_named_with_what_there_is(config, args, words) -> None:  # noqa: ANN001
    probe, stack, variant, train = args
    with pytest.raises(FixError) as err:
        ProbeTarget.of(config, PLUGINS, probe, stack, variant, train)
    assert words in str(err.value)


def test_candidates_run_the_users_config_narrowed_to_the_pair_probe_and_variant(config) -> None:  # noqa: ANN001
    target = ProbeTarget.of(config, PLUGINS, "ppo_policy", "lite20", "fp16", "ms20")
    cfg = target.narrowed()
    assert [(p.name, p.probes, p.trainer) for p in cfg.pairs] == [
        ("ms20->lite20", ("ppo_policy",), "verl_seq_rs")
    ]
    assert cfg.probe("ppo_policy").variants == ("fp16",)
    assert set(cfg.stacks) == {"ms20", "lite20"} and cfg.models == {}
    assert not cfg.telemetry.enabled
    assert cfg.rollout.enabled and cfg.rollout.pairs == ("ms20->lite20",)  # it rolls this variant out
    other = ProbeTarget.of(config, PLUGINS, "ppo_policy", "lite20", "tanh-fp16", "ms20")
    assert not other.narrowed().rollout.enabled


def test_the_search_starts_at_the_localized_cell() -> None:
    cells = ["hidden.0", "hidden.1", "head", ""]
    ok = LayerDivergence("fc0", True, 0, 0, 0, 1)
    bad = LayerDivergence("fc1", False, 1, 1, 1, 1)
    out = LayerDivergence("std", False, 1, 1, 1, 1, output=True)
    assert start_index(cells, None) == 0
    assert start_index(cells, Localization("fc1", "", (ok, bad))) == 1
    assert start_index(cells, Localization("std", "", (ok, ok, out))) == 2
    assert start_index(cells, Localization("head", "", ())) == 2  # a model's taps name its cells
    assert start_index(cells, Localization(None, "did not reproduce", ())) == 0


def test_the_command_says_what_it_cannot_fix_yet(tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "auditor.toml"
    path.write_text(TEXT)
    runner = CliRunner()
    got = runner.invoke(cli, ["--config", str(path), "fix", "policy", "--stack", "lite20"])
    assert got.exit_code == 2 and "[models.policy]" in got.output
    got = runner.invoke(cli, ["--config", str(path), "fix", "ppo_policy", "--stack", "lite20"])
    assert got.exit_code == 2 and "choose one with --train" in got.output
    both = ["--dtype", "float16", "--variant", "fp16"]
    got = runner.invoke(cli, ["--config", str(path), "fix", "ppo_policy", "--stack", "lite20", *both])
    assert got.exit_code == 2 and "give one" in got.output
