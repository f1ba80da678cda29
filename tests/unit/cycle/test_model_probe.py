"""[models.NAME] parsing, model-probe inputs (generated, recorded, checked against the file's
signature) and the golden .npz format, without the stacks."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from auditor.compare.golden import GoldenError, read_golden, write_golden
from auditor.compare.outputs import Tolerance
from auditor.config.load import parse
from auditor.config.tables import ConfigError
from auditor.config.user_models import InputSpec, ModelConfig, expand_patterns
from auditor.policy.model_file import ModelInputError, model_inputs
from auditor.worker.mindir import MindIRInfo, TensorInfo


def with_models(doc: dict, models: dict, source: str = "/etc/auditor/auditor.toml") -> object:
    d = copy.deepcopy(doc)
    d["models"] = models
    return parse(d, source)


def errors_of(doc: dict, models: dict) -> list[str]:
    with pytest.raises(ConfigError) as err:
        with_models(doc, models)
    return err.value.errors


def test_models_section_parses_with_paths_relative_to_the_config(doc: dict) -> None:
    cfg = with_models(
        doc,
        {
            "policy": {
                "path": "export/policy.mindir",
                "reference": "ms210-graph",
                "atol": 1e-4,
                "outputs": {"mean": {"rtol": 1e-3}},
                "inputs": [{"name": "obs", "shape": [4, 11], "generator": "uniform", "low": -2, "high": 2}],
            },
            "served": {"path": "/srv/p.mindir", "stacks": ["lite20"], "golden": "g.npz", "seed": 3},
        },
    )
    p = cfg.models["policy"]
    assert p.path == "/etc/auditor/export/policy.mindir" and p.reference == "ms210-graph"
    assert p.stacks == ("lite20",)  # every infer stack but the reference
    assert p.tolerance_for("logits") == Tolerance(1e-4, 1e-5)
    assert p.tolerance_for("mean") == Tolerance(1e-4, 1e-3)
    # the probes' threshold machinery: an fp16 output gets the built-in fp16 thresholds,
    # as a probe's fp16 variant does ([probes.P.dtype.D] over [probes.P])
    assert p.tolerance_for("logits", "float16") == Tolerance(1e-3, 1e-3)
    assert p.tolerance_for("logits", "float32") == Tolerance(1e-4, 1e-5)
    assert p.inputs == (InputSpec("obs", (4, 11), "float32", "uniform", 0.0, 1.0, -2.0, 2.0),)
    s = cfg.models["served"]
    assert s.golden == "/etc/auditor/g.npz" and s.reference is None and s.reference_label == "golden"
    assert s.seed == 3 and s.stacks == ("lite20",)


def test_models_section_reports_every_problem_with_its_path(doc: dict) -> None:
    errors = errors_of(
        doc,
        {
            "a": {"stacks": ["nope"], "golden": "g.npz", "reference": "ms210-graph", "colour": 1},
            "b": {
                "path": "b.mindir",
                "golden": "g.npz",
                "atol": -1,
                "inputs": [{"name": "x", "shape": [0], "dtype": "complex", "generator": "npz"}],
            },
        },
    )
    text = "\n".join(errors)
    for expected in (
        "models.a.colour: unknown key",
        "models.a.path: is required",
        "models.a.stacks: no stack named 'nope'",
        "models.a: needs exactly one reference",
        "models.b.atol: must be a finite number from 0 to 1000000, not -1",
        "models.b.inputs[0].shape[0]: must be a whole number from 1 to",
        "models.b.inputs[0].dtype: must be one of float16, float32",
        "models.b.inputs[0].npz: is required with generator = 'npz'",
    ):
        assert expected in text, text


def test_stack_models_and_a_config_with_models_but_no_pairs(doc: dict, tmp_path: Path) -> None:
    d = copy.deepcopy(doc)
    d["stacks"]["lite20"]["models"] = ["policy/*.mindir", "/srv/fixed.mindir"]
    d.pop("pairs")
    d["rollout"]["enabled"] = False
    d["models"] = {"m": {"path": "m.mindir", "golden": "m.npz"}}
    cfg = parse(d, str(tmp_path / "auditor.toml"))
    assert cfg.stacks["lite20"].models == (str(tmp_path / "policy/*.mindir"), "/srv/fixed.mindir")
    assert cfg.pairs == ()
    (tmp_path / "policy").mkdir()
    (tmp_path / "policy" / "b.mindir").write_bytes(b"x")
    (tmp_path / "policy" / "a.mindir").write_bytes(b"x")
    assert expand_patterns(cfg.stacks["lite20"].models) == [
        "/srv/fixed.mindir",  # a plain path stays, even missing: its absence is news
        str(tmp_path / "policy" / "a.mindir"),
        str(tmp_path / "policy" / "b.mindir"),
    ]
    d["stacks"]["lite20"]["models"] = "policy.mindir"
    with pytest.raises(ConfigError, match=r"stacks.lite20.models: must be an array"):
        parse(d, "x.toml")


INFO = MindIRInfo("0" * 64, 10, True, inputs=(TensorInfo("obs", (-1, 11), "float32"),))


def model(**kw: object) -> ModelConfig:
    return ModelConfig("m", "/models/m.mindir", ("lite20",), reference="ms210-graph", **kw)  # type: ignore[arg-type]


def test_inputs_from_the_signature_and_from_specs() -> None:
    (x,), names = model_inputs(model(seed=1), INFO)
    assert names == ["obs"] and x.shape == (1, 11) and x.dtype == np.float32
    spec = InputSpec("obs", (5, 11), "float32", "uniform", low=2.0, high=3.0)
    (u,), _ = model_inputs(model(inputs=(spec,)), INFO)
    assert u.shape == (5, 11) and u.min() >= 2.0 and u.max() <= 3.0
    (again,), _ = model_inputs(model(inputs=(spec,)), INFO)
    assert np.array_equal(u, again)  # seeded


def test_input_spec_mismatches_name_the_input_and_the_file(tmp_path: Path) -> None:
    bad_shape = InputSpec("obs", (5, 12))
    with pytest.raises(
        ModelInputError, match=r"inputs\[0\] \(obs\): shape \[5, 12\] does not fit /models/m.mindir"
    ):
        model_inputs(model(inputs=(bad_shape,)), INFO)
    with pytest.raises(ModelInputError, match=r"dtype float64, but /models/m.mindir's input obs is float32"):
        model_inputs(model(inputs=(InputSpec("obs", (5, 11), "float64"),)), INFO)
    with pytest.raises(ModelInputError, match=r"lists 2 input\(s\), but /models/m.mindir takes 1"):
        model_inputs(model(inputs=(InputSpec("a", (1, 11)), InputSpec("b", (1, 11)))), INFO)
    np.savez(tmp_path / "obs.npz", obs=np.ones((3, 11), np.float32))
    recorded = InputSpec("obs", (3, 11), generator="npz", npz=str(tmp_path / "obs.npz"))
    (x,), _ = model_inputs(model(inputs=(recorded,)), INFO)
    assert np.array_equal(x, np.ones((3, 11), np.float32))
    misshaped = InputSpec("obs", (4, 11), generator="npz", npz=str(tmp_path / "obs.npz"))
    with pytest.raises(
        ModelInputError, match=r"obs.npz\['obs'\] has shape \[3, 11\], the spec says \[4, 11\]"
    ):
        model_inputs(model(inputs=(misshaped,)), INFO)
    missing = InputSpec("obs", (3, 11), generator="npz", npz=str(tmp_path / "obs.npz"), key="x")
    with pytest.raises(ModelInputError, match=r"has no array 'x' \(it has: obs\)"):
        model_inputs(model(inputs=(missing,)), INFO)
    (tmp_path / "junk.npz").write_text("junk")
    junk = InputSpec("obs", (3, 11), generator="npz", npz=str(tmp_path / "junk.npz"))
    with pytest.raises(ModelInputError, match=r"junk.npz: not a readable .npz"):
        model_inputs(model(inputs=(junk,)), INFO)


def test_golden_round_trip_and_its_errors(tmp_path: Path) -> None:
    x = np.arange(22, dtype=np.float32).reshape(2, 11)
    p = write_golden(
        tmp_path / "g.npz", [x], [x[:, :4], x[:, :2]], ["obs"], ["logits", "mean"], model_sha256="ab"
    )
    g = read_golden(p)
    assert np.array_equal(g.inputs[0], x) and [y.shape for y in g.outputs] == [(2, 4), (2, 2)]
    assert g.model_sha256 == "ab" and g.meta["format"] == "auditor-golden" and g.meta["version"] == 1
    with np.load(p, allow_pickle=False) as z:  # plain numpy reads it
        assert sorted(z.files) == ["input_0", "meta", "output_0", "output_1"]
    cases = {
        "nometa.npz": ({"input_0": x, "output_0": x}, "no 'meta' array"),
        "noout.npz": (
            {"input_0": x, "meta": np.array(json.dumps({"format": "auditor-golden", "version": 1}))},
            "needs input_0",
        ),
        "gap.npz": (
            {
                "input_0": x,
                "output_1": x,
                "meta": np.array(json.dumps({"format": "auditor-golden", "version": 1})),
            },
            "not numbered 0..0",
        ),
        "v9.npz": ({"meta": np.array(json.dumps({"format": "auditor-golden", "version": 9}))}, "version 9"),
    }
    for name, (arrays, problem) in cases.items():
        np.savez(tmp_path / name, **arrays)
        with pytest.raises(GoldenError, match=problem) as err:
            read_golden(tmp_path / name)
        assert str(err.value).startswith(str(tmp_path / name))
    with pytest.raises(GoldenError, match="no such golden file"):
        read_golden(tmp_path / "missing.npz")
    (tmp_path / "text.npz").write_text("hello")
    with pytest.raises(GoldenError, match="not a golden .npz"):
        read_golden(tmp_path / "text.npz")


FIXTURES = str(Path(__file__).resolve().parents[2] / "model_fixtures")


def test_the_training_network_as_reference(doc: dict) -> None:
    """train = { factory, checkpoint, stack, path, kwargs }: its package is found to travel to the
    stack; the train stack is the reference side of the pair."""
    cfg = with_models(
        doc,
        {
            "policy": {
                "path": "p.mindir",
                "stacks": ["lite20"],
                "train": {
                    "factory": "mypolicy.nets:build_actor",
                    "checkpoint": "actor.ckpt",
                    "stack": "ms20",
                    "path": FIXTURES,
                    "kwargs": {"kind": "fp16_mlp"},
                },
            }
        },
    )
    m = cfg.models["policy"]
    assert m.train is not None and m.reference is None and m.golden is None
    assert (m.train.stack, m.train.module, m.train.checkpoint) == (
        "ms20",
        "mypolicy.nets",
        "/etc/auditor/actor.ckpt",
    )
    assert m.train.kwargs == {"kind": "fp16_mlp"} and m.reference_label == m.reference_stack == "ms20"
    assert m.train.package() == ("mypolicy", str(Path(FIXTURES, "mypolicy").resolve()))
    assert (
        m.train.describe()
        == "the training network (mypolicy.nets:build_actor with actor.ckpt, PyNative on ms20)"
    )
    # The package travels with every worker the config's Reach opens.
    from auditor.stacks.session import reach

    assert ("mypolicy", str(Path(FIXTURES, "mypolicy").resolve())) in reach(cfg, {}).packages


def test_a_training_network_that_cannot_be_reached_is_named(doc: dict) -> None:
    network = {"factory": "mypolicy.nets:build_actor", "path": FIXTURES}
    errors = "\n".join(
        errors_of(
            doc,
            {
                "two": {"path": "a.mindir", "reference": "ms210-graph", "train": network},
                "nostack": {"path": "a.mindir", "train": network},  # two train stacks: say which
                "infer": {"path": "a.mindir", "train": {**network, "stack": "lite20"}},
                "toplevel": {
                    "path": "a.mindir",
                    "train": {**network, "factory": "nets:build", "stack": "ms20"},
                },
            },
        )
    )
    for expected in (
        "models.two: needs exactly one reference",
        "models.nostack.train.stack: is required: name the train stack that builds the network (train "
        "stacks: ms210, ms20)",
        "models.infer.train.stack: 'lite20' is not a train stack the auditor drives",
        "models.toplevel.train.factory: must be 'package.module:function'",
    ):
        assert expected in errors, errors


def test_a_factory_whose_package_is_not_here_is_that_models_business(doc: dict) -> None:
    """A package that train.path does not hold is known before the stack tries (the model's
    error at each cycle, not the config's); one found nowhere here may be installed in the train
    stack's own environment, so only the stack's import can say."""
    cfg = with_models(
        doc,
        {
            "wrongpath": {
                "path": "a.mindir",
                "train": {"factory": "nosuchpkg.nets:f", "stack": "ms20", "path": FIXTURES},
            },
            "installed": {"path": "a.mindir", "train": {"factory": "theirpkg.nets:f", "stack": "ms20"}},
        },
    )
    wrong, installed = cfg.models["wrongpath"].train, cfg.models["installed"].train
    assert wrong is not None and installed is not None
    assert wrong.missing() == (
        f"train.path {FIXTURES} holds no package 'nosuchpkg' (the factory nosuchpkg.nets:f)"
    )
    assert installed.missing() is None and installed.package() is None


def test_a_file_computing_in_fp16_is_judged_with_fp16_thresholds_unless_the_user_set_theirs(
    doc: dict,
) -> None:
    cfg = with_models(
        doc,
        {
            "plain": {"path": "a.mindir", "golden": "g.npz"},
            "mine": {"path": "a.mindir", "golden": "g.npz", "outputs": {"mean": {"atol": 1e-4}}},
            "all": {"path": "a.mindir", "golden": "g.npz", "rtol": 1e-5},
        },
    )
    plain, mine, every = cfg.models["plain"], cfg.models["mine"], cfg.models["all"]
    assert plain.tolerance_for("out", "float32") == Tolerance(1e-5, 1e-5)
    assert plain.tolerance_for("out", "float32", "float16") == Tolerance(1e-3, 1e-3)
    assert mine.tolerance_for("logits", "float32", "float16") == Tolerance(1e-3, 1e-3)
    assert mine.tolerance_for("mean", "float32", "float16") == Tolerance(1e-4, 1e-5)  # theirs
    assert every.tolerance_for("mean", "float32", "float16") == Tolerance(1e-5, 1e-5)
    assert plain.user_set("x") is False and every.user_set("x") is True
