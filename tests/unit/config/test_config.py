"""Tests for auditor.config.load: the shipped file, error collection, ${VAR} expansion, thresholds."""

from __future__ import annotations

import copy

import pytest

from auditor.common.paths import default_db_url
from auditor.compare.outputs import Tolerance
from auditor.config.load import load, parse
from auditor.config.tables import ConfigError, PairConfig, UnsetVariable, expand
from auditor.config.thresholds import ProbeConfig
from auditor.extend.manager import Plugins
from auditor.runtime import ArtifactFormat, RuntimeSpec
from tests.conftest import REPO

SHIPPED = REPO / "auditor.toml"
KNOWN = {"ppo_policy", "action_sampler", "obs_normalizer"}
RUNTIMES = Plugins(entry_points=False).runtimes()


def paths_of(err: ConfigError) -> list[str]:
    """The key path of each error ("stacks.x.role: message" -> "stacks.x.role")."""
    out = []
    for e in err.errors:
        path, sep, message = e.partition(": ")
        assert sep and message, f"error without 'path: message' form: {e!r}"
        out.append(path)
    return out


def minimal(**overrides) -> dict:
    doc = {
        "stacks": {
            "tr": {"role": "train", "runtime": "mindspore", "python": "/opt/tr/bin/python"},
            "inf": {"role": "infer", "runtime": "mindspore-lite", "python": "/opt/inf/bin/python"},
        },
        "pairs": [{"train": "tr", "infer": "inf", "probes": ["ppo_policy"]}],
    }
    doc.update(overrides)
    return doc


# -- the shipped auditor.toml --------------------------------------------------------------


def test_shipped_config_loads(monkeypatch, tmp_path):
    monkeypatch.setenv("AUDITOR_STACKS_DIR", str(tmp_path / "stacks"))
    cfg = load(SHIPPED, known_probes=KNOWN)
    assert cfg.source == str(SHIPPED)
    assert set(cfg.stacks) == {"ms210", "ms210-graph", "ms20", "lite20"}
    assert [p.name for p in cfg.pairs] == [
        "ms210->ms210-graph",
        "ms210->lite20",
        "ms20->lite20",
        "ms20->ms210-graph",
    ]
    assert all(p.probes == ("ppo_policy", "action_sampler", "obs_normalizer") for p in cfg.pairs)
    roles = {n: (s.role, s.runtime, s.device) for n, s in cfg.stacks.items()}
    assert roles == {
        "ms210": ("train", "mindspore", "cpu"),
        "ms210-graph": ("infer", "mindspore-graph", "cpu"),
        "ms20": ("train", "mindspore", "cpu"),
        "lite20": ("infer", "mindspore-lite", "cpu"),
    }
    # python paths are expanded from $AUDITOR_STACKS_DIR
    assert cfg.stacks["lite20"].python == f"{tmp_path}/stacks/lite20/bin/python"
    assert cfg.stacks["ms210-graph"].python == f"{tmp_path}/stacks/ms210/bin/python"
    assert cfg.probe("ppo_policy").thresholds == Tolerance(1e-5, 1e-5)
    assert cfg.probe("ppo_policy").params == {"batch": 256, "seed": 0}
    assert (cfg.worker.start_timeout, cfg.worker.request_timeout, cfg.worker.parallel) == (120.0, 120.0, 2)
    assert (cfg.latency.warmup, cfg.latency.iterations) == (5, 50)


def test_shipped_config_python_defaults_to_xdg_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("AUDITOR_STACKS_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cfg = load(SHIPPED, known_probes=KNOWN)
    assert cfg.stacks["ms20"].python == f"{tmp_path}/cache/auditor/stacks/ms20/bin/python"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cfg = load(SHIPPED, known_probes=KNOWN)
    assert cfg.stacks["ms20"].python == f"{tmp_path}/home/.cache/auditor/stacks/ms20/bin/python"


def test_shipped_config_rejects_unknown_probe_when_probe_set_given():
    with pytest.raises(ConfigError) as info:
        load(SHIPPED, known_probes={"other"})
    assert "probes.ppo_policy" in paths_of(info.value)
    assert "pairs[0].probes[0]" in paths_of(info.value)


# -- every problem at once ------------------------------------------------------------------


def broken_doc(negative_atol: bool) -> tuple[dict, list[str]]:
    """A document with one instance of many problems, and the key path each must produce."""
    probe = {"rtol": "small"}
    if negative_atol:
        probe["atol"] = -1e-3
    doc = {
        "bogus": {"x": 1},
        "worker": {"parallel": "2"},
        "stacks": {
            "tr": {"role": "train", "runtime": "mindspore", "python": "/p"},
            "inf": {"role": "infer", "runtime": "mindspore-graph", "python": "/p"},
            "badrole": {"role": "trainer", "runtime": "mindspore", "python": "/p"},
            "badrt": {"role": "infer", "runtime": "lite", "python": "/p"},
            "litetrain": {"role": "train", "runtime": "mindspore-lite", "python": "/p"},
            "baddev": {"role": "infer", "runtime": "mindspore-lite", "python": "/p", "device": "cuda:0"},
            "nopy": {"role": "infer", "runtime": "mindspore-graph"},
            "extra": {"role": "infer", "runtime": "mindspore-graph", "python": "/p", "gpu": True},
        },
        "probes": {"ppo_policy": probe, "nosuch": {}},
        "pairs": [
            {"train": "tr", "infer": "inf", "probes": ["ppo_policy"]},
            {"train": "missing", "infer": "inf", "probes": ["ppo_policy"]},
            {"train": "inf", "infer": "baddev", "probes": ["ppo_policy"]},
            {"train": "tr", "infer": "baddev", "probes": []},
            {"train": "tr", "infer": "extra", "probes": ["ppo_policy", "nope"]},
            {"train": "tr", "infer": "inf", "probes": ["ppo_policy"]},
        ],
    }
    expected = [
        "bogus",  # unknown section
        "worker.parallel",  # string where a number is expected
        "stacks.badrole.role",
        "stacks.badrt.runtime",  # unknown runtime
        "stacks.litetrain.runtime",  # mindspore-lite cannot export
        "stacks.baddev.device",
        "stacks.nopy.python",  # missing
        "stacks.extra.gpu",  # unknown key in a stack
        "probes.ppo_policy.rtol",  # string where a number is expected
        "probes.nosuch",  # unknown probe
        "pairs[1].train",  # no such stack
        "pairs[2].train",  # stack with role infer
        "pairs[3].probes",  # empty list
        "pairs[4].probes[1]",  # unknown probe name
        "pairs[5]",  # duplicate of pairs[0]
    ]
    if negative_atol:
        expected.append("probes.ppo_policy.atol")
    return doc, expected


def test_all_problems_reported_at_once_with_key_paths():
    doc, expected = broken_doc(negative_atol=False)
    with pytest.raises(ConfigError) as info:
        parse(doc, "broken.toml", KNOWN, RUNTIMES)
    err = info.value
    got = paths_of(err)
    assert sorted(got) == sorted(expected), err.errors
    assert len(got) == len(set(got)), "one entry per problem"
    assert err.source == "broken.toml"
    assert str(err).startswith(f"broken.toml: {len(expected)} problem(s)")
    by_path = dict(e.split(": ", 1) for e in err.errors)
    assert "'trainer'" in by_path["stacks.badrole.role"]
    assert "'lite'" in by_path["stacks.badrt.runtime"]
    assert "mindspore-graph" in by_path["stacks.badrt.runtime"]  # lists the known runtimes
    assert "'mindspore-lite'" in by_path["stacks.litetrain.runtime"]
    assert "'cuda:0'" in by_path["stacks.baddev.device"]
    assert "required" in by_path["stacks.nopy.python"]
    assert "'missing'" in by_path["pairs[1].train"]
    assert "'infer'" in by_path["pairs[2].train"]
    assert "'nope'" in by_path["pairs[4].probes[1]"]
    assert "twice" in by_path["pairs[5]"]
    assert "'2'" in by_path["worker.parallel"]
    assert "'small'" in by_path["probes.ppo_policy.rtol"]


def test_all_problems_reported_at_once_including_negative_atol():
    doc, expected = broken_doc(negative_atol=True)
    with pytest.raises(ConfigError) as info:
        parse(doc, "broken.toml", KNOWN, RUNTIMES)
    assert sorted(paths_of(info.value)) == sorted(expected)


def test_runtimes_are_checked_against_the_plugins_only_when_given():
    doc = minimal()
    doc["stacks"]["inf"]["runtime"] = "tflite"
    assert parse(doc, known_probes=KNOWN).stacks["inf"].runtime == "tflite"  # no plugins: not checked
    with pytest.raises(ConfigError) as info:
        parse(doc, known_probes=KNOWN, runtimes=RUNTIMES)
    assert paths_of(info.value) == ["stacks.inf.runtime"]


def test_a_pair_needs_a_train_runtime_that_exports_what_its_infer_runtime_loads():
    tflite = ArtifactFormat("tflite", "TFLite", ".tflite", lambda data: {"readable": False})
    runtimes = {**RUNTIMES, "tflite": RuntimeSpec("tflite", "load", "m:C", loads=tflite)}
    doc = minimal(
        models={"m": {"path": "p.mindir", "golden": "g.npz", "stacks": ["inf", "tfl"]}},
    )
    doc["stacks"]["tfl"] = {"role": "infer", "runtime": "tflite", "python": "/p"}
    doc["pairs"].append({"train": "tr", "infer": "tfl", "probes": ["ppo_policy"]})
    with pytest.raises(ConfigError) as info:
        parse(doc, known_probes=KNOWN, runtimes=runtimes)
    by_path = dict(e.split(": ", 1) for e in info.value.errors)
    assert set(by_path) == {"pairs[1]", "models.m.stacks"}
    assert by_path["pairs[1]"] == (
        "tfl (tflite) loads TFLite files, which tr (mindspore) cannot export (it exports: mindir, onnx)"
    )
    assert "loads TFLite files, not the MindIR" in by_path["models.m.stacks"]
    # Without a served list, a model is served by the infer stacks that load MindIR.
    del doc["models"]["m"]["stacks"], doc["pairs"][1]
    assert parse(doc, known_probes=KNOWN, runtimes=runtimes).models["m"].stacks == ("inf",)


@pytest.mark.parametrize("side", ["train", "infer"])
def test_a_pair_side_that_is_not_a_name_is_an_error_not_a_crash(side):
    """The runtime check of a pair looks its stacks up by name; a list there (found by the
    config fuzzer) said its error instead of raising TypeError."""
    doc = minimal()
    doc["pairs"][0][side] = []
    with pytest.raises(ConfigError) as info:
        parse(doc, known_probes=KNOWN, runtimes=RUNTIMES)
    assert f"pairs[0].{side}" in paths_of(info.value)


def test_negative_per_output_atol_is_a_config_error():
    doc = minimal(probes={"ppo_policy": {"outputs": {"mean": {"atol": -1}}}})
    with pytest.raises(ConfigError) as info:
        parse(doc, known_probes=KNOWN)
    assert paths_of(info.value) == ["probes.ppo_policy.outputs.mean.atol"]


@pytest.mark.parametrize(
    ("section", "value", "path"),
    [
        ("worker", {"start_timeout": 0}, "worker.start_timeout"),
        ("worker", {"request_timeout": -5.0}, "worker.request_timeout"),
        ("worker", {"parallel": True}, "worker.parallel"),  # a bool is not an int here
        ("worker", {"parallel": 1.5}, "worker.parallel"),
        ("worker", {"threads": 4}, "worker.threads"),
        ("latency", {"warmup": -1}, "latency.warmup"),
        ("latency", {"iterations": 0}, "latency.iterations"),
        ("storage", {"url": 5}, "storage.url"),
        ("storage", {"path": "x"}, "storage.path"),
        ("stacks", {"tr": "not a table"}, "stacks.tr"),
        ("probes", {"ppo_policy": {"outputs": {"mean": 1e-3}}}, "probes.ppo_policy.outputs.mean"),
        ("probes", {"ppo_policy": {"tolerance": 1}}, "probes.ppo_policy.tolerance"),
        ("pairs", {"train": "tr"}, "pairs"),  # a table, not an array of tables
    ],
)
def test_single_problem_has_its_key_path(section, value, path):
    doc = minimal()
    if section == "stacks":
        doc["stacks"].update(value)
        doc["pairs"] = [{"train": "inf2", "infer": "inf", "probes": ["ppo_policy"]}]
        doc["stacks"]["inf2"] = {"role": "train", "runtime": "mindspore", "python": "/p"}
    else:
        doc[section] = value
    with pytest.raises(ConfigError) as info:
        parse(doc, known_probes=KNOWN)
    got = paths_of(info.value)
    assert path in got, info.value.errors
    if section != "pairs":  # "pairs" not an array also means "no pairs configured"
        assert got == [path], info.value.errors


def test_pair_missing_train_and_infer():
    doc = minimal(pairs=[{"probes": ["ppo_policy"]}])
    with pytest.raises(ConfigError) as info:
        parse(doc, known_probes=KNOWN)
    assert sorted(paths_of(info.value)) == ["pairs[0].infer", "pairs[0].train"]


def test_valid_minimal_document_parses():
    cfg = parse(minimal(), "m.toml", KNOWN)
    assert cfg.pairs == (PairConfig("tr", "inf", ("ppo_policy",)),)
    assert cfg.stacks["inf"].runtime == "mindspore-lite"
    assert cfg.stacks["tr"].device == "cpu" and cfg.stacks["tr"].host == "local"
    # without known_probes any probe name is accepted
    doc = minimal()
    doc["pairs"][0]["probes"] = ["anything"]
    assert parse(doc).pairs[0].probes == ("anything",)


def test_devices_accepted():
    for device in ("cpu", "ascend:0", "gpu:3", "ascend:12"):
        doc = minimal()
        doc["stacks"]["inf"]["device"] = device
        assert parse(doc).stacks["inf"].device == device
    for device in ("ascend", "gpu:", "GPU:0", "cpu:0", "ascend:x"):
        doc = minimal()
        doc["stacks"]["inf"]["device"] = device
        with pytest.raises(ConfigError) as info:
            parse(doc)
        assert paths_of(info.value) == ["stacks.inf.device"], device


# -- files ------------------------------------------------------------------------------------


def test_not_toml(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[stacks\nrole = train\n")
    with pytest.raises(ConfigError) as info:
        load(path)
    assert info.value.source == str(path)
    assert len(info.value.errors) == 1
    assert info.value.errors[0].startswith("not valid TOML: ")
    assert "line 1" in info.value.errors[0]
    assert str(path) in str(info.value)


def test_missing_file(tmp_path):
    path = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as info:
        load(path)
    assert info.value.errors == ["file not found"]
    assert str(info.value).startswith(f"{path}: 1 problem(s)")


def test_unreadable_file(tmp_path):
    path = tmp_path / "latin1.toml"
    path.write_bytes(b"# caf\xe9\n")
    with pytest.raises(ConfigError) as info:
        load(path)
    assert info.value.errors[0].startswith("cannot read: ")
    with pytest.raises(ConfigError) as info:
        load(tmp_path)  # a directory
    assert info.value.errors[0].startswith("cannot read: ")


def test_no_pairs(tmp_path):
    path = tmp_path / "nopairs.toml"
    path.write_text('[stacks.a]\nrole = "train"\nruntime = "mindspore"\npython = "/p"\n')
    with pytest.raises(ConfigError) as info:
        load(path)
    assert len(info.value.errors) == 1
    assert info.value.errors[0].startswith("pairs: no pairs configured")
    with pytest.raises(ConfigError) as info:
        parse(minimal(pairs=[]))
    assert paths_of(info.value) == ["pairs"]


def test_empty_file_reports_no_pairs(tmp_path):
    path = tmp_path / "empty.toml"
    path.write_text("")
    with pytest.raises(ConfigError) as info:
        load(path)
    assert paths_of(info.value) == ["pairs"]


# -- ${VAR} expansion ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        ("$A/bin", {"A": "/opt"}, "/opt/bin"),
        ("${A}bin", {"A": "/opt/"}, "/opt/bin"),
        ("$A_B", {"A": "x", "A_B": "y"}, "y"),  # longest name
        ("${A}_B", {"A": "x", "A_B": "y"}, "x_B"),
        ("${A:-/default}/x", {}, "/default/x"),
        ("${A:-/default}/x", {"A": "/set"}, "/set/x"),
        ("${A:-/default}/x", {"A": ""}, "/default/x"),  # empty uses the default
        ("${A:-}/x", {}, "/x"),
        ("${A:-${B:-x}/y}", {}, "x/y"),
        ("${A:-${B:-x}/y}", {"B": "b"}, "b/y"),
        ("${A:-${B:-x}/y}", {"A": "a", "B": "b"}, "a"),
        ("${A:-${B:-${C:-z}}}/w", {}, "z/w"),  # deeper nesting
        ("${A:-${B:-${C:-z}}}/w", {"C": "c"}, "c/w"),
        ("$A-$B", {"A": "1", "B": "2"}, "1-2"),
        ("no vars", {"A": "1"}, "no vars"),
        ("cost $5", {}, "cost $5"),  # not a variable name
    ],
)
def test_expand(text, env, expected):
    assert expand(text, env=env) == expected


@pytest.mark.faults
@pytest.mark.parametrize("text", ["$UNSET/x", "${UNSET}/x", "${A:-${UNSET}}/x", "$EMPTY/x"])
def test_an_unset_variable_without_a_default_is_named_not_dropped(text):
    with pytest.raises(UnsetVariable) as err:
        expand(text, env={"EMPTY": ""})
    name = err.value.name
    assert name in ("UNSET", "EMPTY") and f"uses ${{{name}}}, which is not set" in str(err.value)
    assert repr(text) in str(err.value) and f"${{{name}:-default}}" in str(err.value)


def test_expand_home(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert expand("~/stacks", env={}) == f"{tmp_path}/stacks"
    assert expand("~", env={}) == str(tmp_path)
    assert expand("${D:-~/.cache}/x", env={}) == f"{tmp_path}/.cache/x"
    assert expand("$D/x", env={"D": "~"}) == f"{tmp_path}/x"
    assert expand("/a/~/b", env={}) == "/a/~/b"  # only a leading ~


def test_expand_uses_os_environ_by_default(monkeypatch):
    monkeypatch.setenv("AUDITOR_TEST_VAR", "/from/env")
    assert expand("${AUDITOR_TEST_VAR}/x") == "/from/env/x"
    assert expand("${AUDITOR_TEST_VAR:-}/x", env={}) == "/x"


def test_expand_does_not_reexpand_values():
    assert expand("$A", env={"A": "p$B", "B": "leak"}) == "p$B"


def test_stack_values_are_expanded(monkeypatch, tmp_path):
    monkeypatch.setenv("AUDITOR_T_ROOT", "/opt/root")
    monkeypatch.setenv("HOME", str(tmp_path))
    doc = minimal()
    doc["stacks"]["inf"].update(
        python="${AUDITOR_T_ROOT}/bin/python",
        ascend_root="~/Ascend",
        env={"LD_LIBRARY_PATH": "$AUDITOR_T_ROOT/lib:${AUDITOR_T_MISSING:-/usr/lib}"},
    )
    s = parse(doc).stacks["inf"]
    assert s.python == "/opt/root/bin/python"
    assert s.ascend_root == f"{tmp_path}/Ascend"
    assert s.env == {"LD_LIBRARY_PATH": "/opt/root/lib:/usr/lib"}


def test_stack_env_values_must_be_strings():
    doc = minimal()
    doc["stacks"]["inf"]["env"] = {"OK": "1", "N": 2}
    with pytest.raises(ConfigError) as info:
        parse(doc)
    assert paths_of(info.value) == ["stacks.inf.env.N"]


# -- thresholds ---------------------------------------------------------------------------------


def test_per_output_thresholds_override_and_inherit():
    doc = minimal(
        probes={
            "ppo_policy": {
                "atol": 1e-5,
                "rtol": 2e-5,
                "outputs": {"mean": {"atol": 1e-4}, "std": {"rtol": 0.5}, "both": {"atol": 0, "rtol": 1}},
            }
        }
    )
    probe = parse(doc, known_probes=KNOWN).probe("ppo_policy")
    assert probe.thresholds == Tolerance(1e-5, 2e-5)
    assert probe.tolerance_for("mean") == Tolerance(atol=1e-4, rtol=2e-5)
    assert probe.tolerance_for("std") == Tolerance(atol=1e-5, rtol=0.5)
    assert probe.tolerance_for("both") == Tolerance(atol=0.0, rtol=1.0)
    assert probe.tolerance_for("value") == Tolerance(1e-5, 2e-5)  # not listed: probe level
    assert isinstance(probe.tolerance_for("both").atol, float)


def test_probe_level_inherits_global_default():
    doc = minimal(probes={"ppo_policy": {"rtol": 1e-3, "outputs": {"mean": {"atol": 1e-2}}}})
    probe = parse(doc).probe("ppo_policy")
    assert probe.thresholds == Tolerance(Tolerance().atol, 1e-3)
    assert probe.tolerance_for("mean") == Tolerance(1e-2, 1e-3)


def test_unconfigured_probe_gets_defaults():
    cfg = parse(minimal())
    assert cfg.probe("ppo_policy") == ProbeConfig("ppo_policy")
    assert cfg.probe("ppo_policy").tolerance_for("anything") == Tolerance()


# -- storage ------------------------------------------------------------------------------------


def test_storage_url_defaults_to_per_user_sqlite(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    expected = f"sqlite:///{tmp_path}/state/auditor/history.db"
    assert default_db_url() == expected
    assert parse(minimal()).db_url == expected
    assert parse(minimal(storage={"url": ""})).db_url == expected
    assert load(SHIPPED, known_probes=KNOWN).db_url == expected  # the shipped url = ""


def test_storage_url_default_without_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert parse(minimal()).db_url == f"sqlite:///{tmp_path}/.local/state/auditor/history.db"
    monkeypatch.setenv("XDG_STATE_HOME", "")  # empty counts as unset
    assert parse(minimal()).db_url == f"sqlite:///{tmp_path}/.local/state/auditor/history.db"


def test_storage_url_explicit(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    url = "postgresql://auditor@db/history"
    assert parse(minimal(storage={"url": url})).db_url == url


def test_parse_does_not_modify_document():
    doc = minimal(probes={"ppo_policy": {"atol": 1e-4, "params": {"batch": 8}}})
    before = copy.deepcopy(doc)
    cfg = parse(doc)
    assert doc == before
    cfg.probe("ppo_policy").params["batch"] = 9
    assert doc["probes"]["ppo_policy"]["params"]["batch"] == 8


def _policy_doc(policy: dict, **model) -> dict:
    return minimal(
        models={"m": {"path": "p.mindir", "golden": "g.npz", "stacks": ["inf"], **model, "policy": policy}}
    )


def test_a_declared_policy_becomes_the_importance_ratios_options():
    doc = _policy_doc(
        {"kind": "gaussian", "mean": "mu", "log_std": "log_std"}, output_names=["mu", "log_std"]
    )
    policy = parse(doc, known_probes=KNOWN, runtimes=RUNTIMES).models["m"].policy
    assert policy == {
        "kind": "gaussian",
        "mean": "mu",
        "log_std": "log_std",
        "samples_per_state": 4,
        "clip_epsilon": 0.2,
        "tis_cap": 2.0,
        "max_ppo_clip_share": 0.0,
        "max_tis_share": 0.0,
    }  # min_ess and the trainer: the comparator's and [ppo]'s defaults
    assert parse(minimal(), known_probes=KNOWN, runtimes=RUNTIMES).models == {}


@pytest.mark.parametrize(
    ("policy", "model", "path", "words"),
    [
        ({"kind": "beta"}, {}, "models.m.policy.kind", "gaussian"),
        ({"kind": "gaussian", "mean": "mean"}, {}, "models.m.policy.std", "set std or log_std (one)"),
        (
            {"kind": "gaussian", "mean": "mean", "std": "s", "log_std": "l"},
            {},
            "models.m.policy.std",
            "set std or log_std (one)",
        ),
        ({"kind": "tanh", "std": "std"}, {}, "models.m.policy.mean", "names its mean output"),
        ({"kind": "categorical"}, {}, "models.m.policy.logits", "names its logits output"),
        (
            {"kind": "categorical", "logits": "logits", "mean": "mean"},
            {},
            "models.m.policy.mean",
            "a categorical policy has no mean",
        ),
        (
            {"kind": "gaussian", "mean": "mu", "std": "sigma"},
            {"output_names": ["mu", "std"]},
            "models.m.policy.std",
            "'sigma' is not an output of the model (output_names: mu, std)",
        ),
        ({"kind": "categorical", "logits": "l", "clip_epsilon": 1.5}, {}, "models.m.policy.clip_epsilon", ""),
        ({"kind": "categorical", "logits": "l", "color": "red"}, {}, "models.m.policy.color", ""),
    ],
)
def test_a_policy_that_cannot_be_one_is_a_config_error_naming_the_key(policy, model, path, words):
    with pytest.raises(ConfigError) as info:
        parse(_policy_doc(policy, **model), known_probes=KNOWN, runtimes=RUNTIMES)
    by_path = dict(e.split(": ", 1) for e in info.value.errors)
    assert path in by_path, info.value.errors
    assert words in by_path[path]


# -- [queue] ---------------------------------------------------------------------------------


def test_retired_leases_table_says_what_replaced_it():
    with pytest.raises(ConfigError) as info:
        parse(minimal(leases={"enabled": True, "slot": 900}), "x.toml")
    (said,) = [e for e in info.value.errors if e.startswith("leases:")]
    assert "replaced by [queue]" in said and "--cycle" in said and "timeout" in said


def test_queue_needs_a_postgresql_history_and_three_heartbeats_per_timeout():
    with pytest.raises(ConfigError) as info:
        parse(minimal(queue={"enabled": True}, storage={"url": "sqlite:////tmp/h.db"}), "x.toml")
    assert "queue.enabled" in paths_of(info.value)
    with pytest.raises(ConfigError) as info:
        parse(minimal(queue={"enabled": True, "heartbeat": 30, "timeout": 60}), "x.toml")
    assert any("three heartbeats" in e for e in info.value.errors), info.value.errors
    cfg = parse(minimal(queue={"enabled": True}, storage={"url": "postgresql://a@db/x"}), "x.toml")
    assert cfg.queue.enabled and cfg.queue.timeout >= 3 * cfg.queue.heartbeat


def test_the_trainer_is_chosen_for_all_and_per_pair():
    cfg = parse(minimal(), known_probes=KNOWN)
    assert cfg.ppo.trainer == "ppo" and cfg.ppo.max_removed_share == 0.0 and cfg.pairs[0].trainer is None
    doc = minimal(ppo={"trainer": "verl_geo_rs", "max_removed_share": 0.01})
    doc["pairs"][0]["trainer"] = "trl_seq_mask"
    cfg = parse(doc, known_probes=KNOWN)
    assert cfg.ppo.options() == {"trainer": "verl_geo_rs", "max_removed_share": 0.01}
    assert cfg.ppo.options(cfg.pairs[0].trainer)["trainer"] == "trl_seq_mask"
    doc = minimal(ppo={"trainer": "verl"})
    doc["pairs"][0]["trainer"] = "icepop"
    with pytest.raises(ConfigError) as info:
        parse(doc, known_probes=KNOWN)
    by_path = dict(e.split(": ", 1) for e in info.value.errors)
    assert set(by_path) == {"ppo.trainer", "pairs[0].trainer"}
    assert by_path["ppo.trainer"].startswith("must be one of ppo, verl_token_tis, verl_seq_rs")
