"""Narrowing the config like an inventory: each selector, their combination, the errors, what a
narrowed run covers, and the commands that take the selectors (no stack runs here)."""

from __future__ import annotations

import copy
import tomllib

import pytest
from click.testing import CliRunner

from auditor.cli.check import _target
from auditor.cli.main import cli
from auditor.config.load import parse
from auditor.config.selection import Scope, Selection, SelectionError, narrow
from auditor.extend.manager import Plugins

TEXT = """
[hosts.edge]
command = ["docker", "exec", "-i", "lite"]

[stacks.ms210]
role = "train"
runtime = "mindspore"
python = "/s/ms210/bin/python"
[stacks.ms210-graph]
role = "infer"
runtime = "mindspore-graph"
python = "/s/ms210/bin/python"
[stacks.ms20]
role = "train"
runtime = "mindspore"
python = "/s/ms20/bin/python"
[stacks.lite20]
role = "infer"
runtime = "mindspore-lite"
python = "/s/lite/bin/python"
host = "edge"

[[pairs]]
train = "ms210"
infer = "ms210-graph"
probes = ["ppo_policy", "obs_normalizer"]
[[pairs]]
train = "ms210"
infer = "lite20"
probes = ["ppo_policy", "obs_normalizer"]
[[pairs]]
train = "ms20"
infer = "lite20"
probes = ["ppo_policy", "action_sampler"]

[models.policy]
path = "policy.mindir"
stacks = ["lite20", "ms210-graph"]
golden = "p.npz"
[models.critic]
path = "critic.mindir"
stacks = ["lite20"]
reference = "ms210-graph"
"""
DOC = tomllib.loads(TEXT)


@pytest.fixture
def config():
    return parse(copy.deepcopy(DOC), "/etc/auditor/auditor.toml")


RUNTIMES = Plugins(entry_points=False).runtimes()


def units(c) -> set[str]:  # noqa: ANN001
    return {f"{p.name}:{x}" for p in c.pairs for x in p.probes} | {
        f"{m.name}@{t}" for m in c.models.values() for t in m.stacks
    }


@pytest.mark.parametrize(
    ("selection", "expected", "stacks"),
    [
        (
            Selection(stacks=("ms20",)),
            {"ms20->lite20:ppo_policy", "ms20->lite20:action_sampler"},
            {"ms20", "lite20"},
        ),
        (
            Selection(pairs=("ms210->lite20",)),
            {"ms210->lite20:ppo_policy", "ms210->lite20:obs_normalizer"},
            {"ms210", "lite20"},
        ),
        (
            Selection(probes=("obs_normalizer",)),
            {"ms210->ms210-graph:obs_normalizer", "ms210->lite20:obs_normalizer"},
            {"ms210", "ms210-graph", "lite20"},
        ),
        (Selection(models=("policy",)), {"policy@lite20", "policy@ms210-graph"}, {"lite20", "ms210-graph"}),
        # --probe and --model name what to run: they add up
        (
            Selection(probes=("action_sampler",), models=("critic",)),
            {"ms20->lite20:action_sampler", "critic@lite20"},
            {"ms20", "lite20", "ms210-graph"},
        ),
        # where and what must both hold
        (
            Selection(stacks=("ms210-graph",), probes=("ppo_policy",)),
            {"ms210->ms210-graph:ppo_policy"},
            {"ms210", "ms210-graph"},
        ),
        (
            Selection(hosts=("edge",), models=("policy", "critic")),
            {"policy@lite20", "critic@lite20"},
            {"lite20", "ms210-graph"},  # critic's reference runs too
        ),
        (Selection(pairs=("policy:golden->ms210-graph",)), {"policy@ms210-graph"}, {"ms210-graph"}),
        # a stack named alone reaches its models as reference or server
        (
            Selection(stacks=("ms210-graph",)),
            {
                "ms210->ms210-graph:ppo_policy",
                "ms210->ms210-graph:obs_normalizer",
                "policy@ms210-graph",
                "critic@lite20",
            },
            {"ms210", "ms210-graph", "lite20"},
        ),
    ],
)
def test_each_selector_and_their_combinations(config, selection, expected, stacks):
    n = narrow(config, selection)
    assert units(n.config) == expected
    assert set(n.config.stacks) == stacks
    assert n.scope is not None and n.scope.selectors == selection.to_json()
    assert set(n.scope.stacks) == stacks and n.config.fleet.publish == {}


@pytest.mark.faults
def test_a_model_whose_reference_is_the_training_network_keeps_its_train_stack():
    """`audit --model actor` with the training network as reference: the network's train
    stack runs (and is stored with the run), and the pair is named after it, not 'golden'."""
    doc = copy.deepcopy(DOC)
    doc["models"]["actor"] = {
        "path": "actor.mindir",
        "stacks": ["lite20"],
        "train": {"factory": "mypolicy.nets:build_actor", "stack": "ms20"},
    }
    c = parse(doc, "/etc/auditor/auditor.toml")
    n = narrow(c, Selection(models=("actor",)))
    assert set(n.config.stacks) == {"ms20", "lite20"} and units(n.config) == {"actor@lite20"}
    assert n.scope is not None and n.scope.pairs == ("actor:ms20->lite20",)
    assert narrow(c, Selection(pairs=("actor:ms20->lite20",))).config.models["actor"].stacks == ("lite20",)
    assert "actor@lite20" in units(narrow(c, Selection(stacks=("ms20",))).config)


def test_no_selector_is_the_whole_config(config):
    n = narrow(config, Selection())
    assert n.config is config and n.scope is None


def test_unknown_names_and_empty_selections_are_clear_errors(config):
    with pytest.raises(SelectionError) as exc:
        narrow(config, Selection(pairs=("ms20->ms210-graph",), probes=("ppo",), hosts=("gpu-box",)))
    text = str(exc.value)
    assert "--pair ms20->ms210-graph: no pair 'ms20->ms210-graph' in /etc/auditor/auditor.toml" in text
    assert "known: ms210->ms210-graph, ms210->lite20, ms20->lite20, policy:golden->lite20" in text
    assert "--probe ppo: no probe 'ppo'" in text and "--host gpu-box: no host 'gpu-box'" in text
    assert "(known: edge, local)" in text
    with pytest.raises(SelectionError, match="--stack ms20 --model policy select nothing"):
        narrow(config, Selection(stacks=("ms20",), models=("policy",)))


def test_scope_covers_what_the_run_ran():
    scope = Scope({"pair": ["ms20->lite20"]}, ("ms20->lite20",), ("ms20", "lite20"), ("ppo_policy",))
    assert scope.covers("ms20->lite20", {"probe": "ppo_policy"})
    assert not scope.covers("ms20->lite20", {"probe": "action_sampler"})
    assert scope.covers("lite20", {"rule": "deployed-model-watch"})
    assert not scope.covers("ms210->lite20", {"rule": "mindir"})
    assert scope.covers("lite20", {"probe": "ppo_policy", "source": "ms20"})
    assert not scope.covers("lite20", {"probe": "ppo_policy", "source": "ms210"})
    grouped = {"where": [{"subject": "ms20"}, {"subject": "ms210"}]}  # a cause that holds in several places
    assert not scope.covers("ms20", grouped)
    assert Scope.from_json(scope.to_json()) == scope and Scope.from_json(None) is None


def test_check_reaches_the_infer_stacks_of_its_selectors(config):
    assert _target(config, "policy", Selection(), RUNTIMES) == (
        "/etc/auditor/policy.mindir",
        ["lite20", "ms210-graph"],
    )
    assert _target(config, "x.mindir", Selection(), RUNTIMES) == ("x.mindir", ["ms210-graph", "lite20"])
    assert _target(config, "x.mindir", Selection(stacks=("ms20",)), RUNTIMES) == (
        "x.mindir",
        ["ms20"],
    )  # as named
    assert _target(config, "x.mindir", Selection(pairs=("ms20->lite20",)), RUNTIMES) == (
        "x.mindir",
        ["lite20"],
    )
    assert _target(config, "x.mindir", Selection(hosts=("edge",), probes=("ppo_policy",)), RUNTIMES) == (
        "x.mindir",
        ["lite20"],
    )


def test_check_leaves_out_the_infer_stacks_that_load_another_format_unless_named():
    doc = copy.deepcopy(DOC)
    doc["stacks"]["ort"] = {"role": "infer", "runtime": "ort", "python": "/o/bin/python"}
    config = parse(doc, "/etc/auditor/auditor.toml", runtimes=RUNTIMES)
    assert "ort" not in _target(config, "x.mindir", Selection(), RUNTIMES)[1]
    assert _target(config, "x.mindir", Selection(stacks=("ort",)), RUNTIMES)[1] == ["ort"]


def test_commands_reject_unknown_selectors_before_any_work(tmp_path):
    cfg = tmp_path / "auditor.toml"
    cfg.write_text(TEXT)
    runner = CliRunner()
    for args in (
        ["audit", "--pair", "a->b"],
        ["fingerprint", "--host", "nowhere"],
        ["check", "--model", "x.mindir", "--probe", "nope"],
        ["golden", "record", "--model", "nope"],
    ):
        out = runner.invoke(cli, ["--config", str(cfg), "--db", str(tmp_path / "h.db"), *args])
        assert out.exit_code == 2, (args, out.output)
        assert (
            "no pair 'a->b'" in out.stderr
            or "no host 'nowhere'" in out.stderr
            or "no probe 'nope'" in out.stderr
            or "no model 'nope'" in out.stderr
        ), out.stderr
    assert not (tmp_path / "h.db").exists()  # nothing stored, nothing started


def test_golden_record_refuses_a_train_stack_naming_what_to_use(tmp_path):
    cfg = tmp_path / "auditor.toml"
    cfg.write_text(TEXT)
    out = CliRunner().invoke(cli, ["--config", str(cfg), "golden", "record", "policy", "--stack", "ms20"])
    assert out.exit_code == 2
    assert "golden record --stack ms20: ms20 runs mindspore, a train runtime" in out.stderr
    assert "record on a stack that does: ms210-graph, lite20" in out.stderr
    probe = CliRunner().invoke(cli, ["--config", str(cfg), "golden", "record", "--probe", "ppo_policy"])
    assert probe.exit_code == 2 and "auditor baseline show" in probe.stderr


def test_a_model_referenced_or_served_by_a_train_stack_is_refused_by_the_config():
    doc = copy.deepcopy(DOC)
    doc["models"]["critic"]["reference"] = "ms20"
    doc["models"]["policy"]["stacks"] = ["ms210"]
    from auditor.config.tables import ConfigError

    with pytest.raises(ConfigError) as exc:
        parse(doc, "/etc/auditor/auditor.toml")
    assert (
        "models.critic.reference: ms20 runs mindspore, a train runtime that does not load a MindIR; "
        "name a stack that does: ms210-graph, lite20" in exc.value.errors
    )
    assert any(e.startswith("models.policy.stacks: ms210 runs mindspore") for e in exc.value.errors)


def test_a_narrowed_pair_keeps_its_trainer() -> None:
    """A pair judged by its own trainer's correction is judged by it in a narrowed run too
    (`audit --pair`, `auditor fix`): narrowing once rebuilt the pair without its trainer."""
    doc = copy.deepcopy(DOC)
    doc["pairs"][2]["trainer"] = "verl_seq_rs"
    narrowed = narrow(parse(doc, "/etc/auditor/auditor.toml"), Selection(pairs=("ms20->lite20",)))
    assert [(p.name, p.trainer) for p in narrowed.config.pairs] == [("ms20->lite20", "verl_seq_rs")]
