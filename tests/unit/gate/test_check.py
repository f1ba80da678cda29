"""`auditor check` without the stacks: reading the model, its seeded batch, the operator
support table and rule, and the usage/input errors that stop before any worker starts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from auditor.plugins.runtimes.lite.spec import CPU_2_0 as LITE_20_CPU
from auditor.plugins.runtimes.lite.spec import LITE
from click.testing import CliRunner

from auditor.cli.main import cli
from auditor.config.load import load
from auditor.config.tables import Config, PairConfig, StackConfig
from auditor.extend.manager import Plugins
from auditor.policy.model_file import ModelInputError, other_formats, read_model, seeded_inputs
from auditor.results import LearnedOperator
from auditor.rules.engine import ExportedModel, RuleContext, blocked
from auditor.rules.operator_support import coverage, learn, learned_failures, operator_limits
from auditor.runtime import RuntimeSpec
from auditor.stacks.failures import diagnose
from auditor.stacks.worker import WorkerError
from auditor.worker.mindir import TensorInfo
from plugins.default_rules import operator_support
from tests.conftest import DEFAULT_CONFIG
from tests.unit.runtime.test_ort import onnx_model
from tests.unit.worker.test_mindir import PRIMS, model, policy_graph

LITE_LOG = (
    "[ERROR] ... schedule node return nullptr, name: Default/StandardNormal-op12, "
    "type: RandomStandardNormal\n"
)


def config_for(path: Path) -> Config:
    plugins = Plugins(entry_points=False)
    return load(path, runtimes=plugins.runtimes())


def test_read_model_names_the_file_and_the_problem(tmp_path: Path) -> None:
    good = tmp_path / "p.mindir"
    good.write_bytes(model(policy_graph(), PRIMS))
    data, info = read_model(good)
    assert (
        info.readable
        and data == good.read_bytes()
        and info.inputs == (TensorInfo("obs", (-1, 3), "float32"),)
    )
    cases = {
        tmp_path / "missing.mindir": "no such file",
        tmp_path: "is a directory",
    }
    (tmp_path / "text.mindir").write_text("not a model\n")
    cases[tmp_path / "text.mindir"] = "not a MindIR"
    (tmp_path / "cut.mindir").write_bytes(good.read_bytes()[:40])
    cases[tmp_path / "cut.mindir"] = "not a MindIR"
    (tmp_path / "empty.mindir").write_bytes(b"")
    cases[tmp_path / "empty.mindir"] = "empty file"
    for path, problem in cases.items():
        with pytest.raises(ModelInputError) as err:
            read_model(path)
        assert str(err.value).startswith(f"{path}: ") and problem in str(err.value)


def test_seeded_inputs_follow_the_declared_signature() -> None:
    spec = [
        TensorInfo("obs", (-1, 11), "float32"),
        TensorInfo("mask", (4,), "int32"),
        TensorInfo("b", (2,), "bool"),
    ]
    a, b = seeded_inputs(spec, seed=3), seeded_inputs(spec, seed=3)
    assert [x.shape for x in a] == [(1, 11), (4,), (2,)] and [x.dtype for x in a] == [
        np.float32,
        np.int32,
        np.bool_,
    ]
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[0], seeded_inputs(spec, seed=4)[0])
    with pytest.raises(ModelInputError, match="'s'.*string"):
        seeded_inputs([TensorInfo("s", (1,), "string")])


def test_what_a_failed_load_teaches_is_the_operator_the_runtime_named() -> None:
    stack = StackConfig("lite20", "infer", "mindspore-lite", "/p", "cpu")
    hello = {"runtime_package": "mindspore-lite", "runtime_version": "2.0.0"}
    error = WorkerError(
        "lite20", "load", "error", "build_from_file failed! Error is Common error code.", LITE_LOG
    )
    d = diagnose(error, LITE, "2.0.0", {"model_version": "2.0.0", "op_types": ["StandardNormal"]})
    got = learn(stack, hello, d)
    assert got is not None and (got.package, got.version, got.target, got.operator) == (
        "mindspore-lite",
        "2.0.0",
        "cpu",
        "StandardNormal",
    )
    assert "schedule node return nullptr" in got.message
    assert learn(stack, {}, d) is None
    # Another release's file failing on an operator teaches nothing about the runtime.
    cross = diagnose(error, LITE, "2.0.0", {"model_version": "2.2.11"})
    assert cross.status == "incompatible" and learn(stack, hello, cross) is None
    # A runtime's generic "unsupported operator: X" is a result, but teaches nothing: its name
    # for X need not be the artifact's.
    said = WorkerError("lite20", "load", "error", "RuntimeError: unsupported operator: Foo")
    generic = diagnose(said, LITE, "2.0.0", {"model_version": "2.0.0", "op_types": ["Foo"]})
    assert (generic.status, generic.operator) == ("unsupported", "Foo") and learn(
        stack, hello, generic
    ) is None


def _lite(version: str = "2.0.0", device: str = "cpu") -> tuple[dict, dict]:
    stacks = {"lite": StackConfig("lite", "infer", "mindspore-lite", "/p", device)}
    docs = {"lite": {"runtime": {"runtime_package": "mindspore-lite", "runtime_version": version}}}
    return stacks, docs


def test_only_the_plugins_table_blocks_a_load() -> None:
    """The hand-kept table blocks (no graph gets past a random operator without a kernel, or
    UniformReal's hang); what the sweep measured failing alone, or a load learned, does not:
    Lite 2.0 has no primitive for a lone SiLU yet runs a Dense + SiLU policy (measured)."""
    runtimes = Plugins(entry_points=False).runtimes()
    stacks, docs = _lite()
    assert operator_limits(stacks, docs, runtimes) == {"lite": dict(LITE_20_CPU)}
    assert operator_limits(*_lite("2.2.11"), runtimes) == {}  # no table for another build
    assert operator_limits(*_lite(device="ascend:0"), runtimes) == {}  # measured on CPU only
    own = {
        "mindspore-lite": RuntimeSpec(
            "mindspore-lite", "load", "m:C", unsupported_operators={"2.2.11:cpu": {"X": "y"}}
        )
    }
    assert operator_limits(*_lite("2.2.11"), own) == {"lite": {"X": "y"}}
    learned = [
        LearnedOperator("mindspore-lite", "2.2.11", "cpu", "Erf", "no kernel"),
        LearnedOperator("mindspore-lite", "2.0.0", "cpu", "SiLU", "Unsupported primitive"),
    ]
    said = learned_failures(learned, "mindspore-lite", "2.2.11", "cpu")
    assert list(said) == ["Erf"] and "a load on mindspore-lite 2.2.11 (cpu) failed: no kernel" in said["Erf"]
    assert learned_failures(learned, "mindspore-lite", "2.2.11", "ascend") == {}


def _info(ops: list[str], exported_by: str = "2.0.0") -> dict:
    return {"model_version": exported_by, "op_types": ops}


def test_the_measured_table_read_for_one_file() -> None:
    """Covered only by a table of the runtime's own release in which every operator worked in
    every graph the sweep tried; what it measured failing or computing differently is said."""
    runtimes = Plugins(entry_points=False).runtimes()
    lite = runtimes["mindspore-lite"].operator_tables
    graph = runtimes["mindspore-graph"].operator_tables
    plain = coverage(
        lite, "mindspore-lite", "2.0.0", "cpu", _info(["MatMul", "BiasAdd", "Tanh", "Load", "Depend"])
    )
    assert plain.covers and plain.works == ["BiasAdd", "MatMul", "Tanh"]  # plumbing proves nothing
    assert "2026" in plain.table.produced and "operator_sweep.py" in plain.table.produced
    norm = coverage(lite, "mindspore-lite", "2.0.0", "cpu", _info(["MatMul", "LayerNorm"]))
    assert not norm.covers and list(norm.wrong) == ["LayerNorm"] and "max abs difference" in norm.describe()
    silu = coverage(lite, "mindspore-lite", "2.0.0", "cpu", _info(["MatMul", "SiLU", "NoSuchOp"]))
    assert list(silu.failing) == ["SiLU"] and silu.unknown == ["NoSuchOp"] and not silu.covers
    assert "SiLU" in silu.known_failures() and "unknown" in silu.describe()
    cast = coverage(lite, "mindspore-lite", "2.0.0", "cpu", _info(["Cast", "MatMul"]))
    assert "Cast" in cast.wrong  # Lite skips fp16 casts on CPU (measured in CastAdd)
    # MindSpore 2.10 on a 2.0 file: its table never vouches, what failed in a minimal graph is said.
    cross = coverage(graph, "mindspore", "2.10.0", "cpu", _info(["MatMul", "ReduceSum"]))
    assert not cross.same_release and not cross.covers and "ReduceSum" in cross.known_failures()
    own = coverage(graph, "mindspore", "2.10.0", "cpu", _info(["MatMul", "ReduceSum"], "2.10.0"))
    assert own.covers
    none = coverage(lite, "mindspore-lite", "2.0.0", "ascend", _info(["MatMul"]))
    assert none.table is None and not none.covers and "no measured operator table" in none.describe()
    assert "measured: 2.0.0/cpu on MindSpore 2.0.0" in none.describe()


def test_operator_support_rule_blocks_the_variants_that_use_the_operator() -> None:
    stacks, docs = _lite()
    stacks["ms"] = StackConfig("ms", "train", "mindspore", "/p")
    docs["ms"] = {}
    pair = PairConfig("ms", "lite", ("sampler", "policy"))
    exported = [
        ExportedModel("ms", "sampler", "seeded", {"readable": True, "op_types": ["Add", "StandardNormal"]}),
        ExportedModel("ms", "policy", "fp32", {"readable": True, "op_types": ["MatMul", "Tanh"]}),
    ]
    ctx = RuleContext(stacks, docs, (pair,), exported, {}, {"lite": {"StandardNormal": "no CPU kernel"}})
    (f,) = operator_support(ctx)
    assert (
        f.kind == "unsupported"
        and f.subject == "ms->lite"
        and f.message.startswith("unsupported operator: StandardNormal")
    )
    assert f.details["facts"]["used_by"] == {"StandardNormal": ["sampler [seeded]"]}
    assert blocked([f], "ms->lite", "sampler", "seeded") is f
    assert blocked([f], "ms->lite", "policy", "fp32") is None
    assert list(operator_support(RuleContext(stacks, docs, (pair,), exported))) == []  # nothing known


def _invoke(tmp_path: Path, *args: str):  # noqa: ANN202
    return CliRunner().invoke(
        cli, ["--config", str(DEFAULT_CONFIG), "--db", str(tmp_path / "h.db"), "check", *args]
    )


def test_check_input_errors_exit_2_before_any_worker(tmp_path: Path) -> None:
    bad = tmp_path / "bad.mindir"
    bad.write_bytes(b"\x00\x01garbage")
    r = _invoke(tmp_path, "--model", str(bad))
    assert r.exit_code == 2 and f"auditor: {bad}: " in r.stderr and "not a MindIR" in r.stderr
    r = _invoke(tmp_path, "--model", str(bad), "--json")
    assert r.exit_code == 2 and json.loads(r.stdout)["error"].startswith(str(bad))
    r = _invoke(tmp_path, "--model", str(tmp_path / "nope.mindir"))
    assert r.exit_code == 2 and "no such file" in r.stderr
    r = _invoke(tmp_path, "--model", str(bad), "--stack", "nosuch")
    assert r.exit_code == 2 and "--stack nosuch: no stack 'nosuch'" in r.stderr
    r = _invoke(tmp_path)
    assert r.exit_code == 2 and "--model" in r.stderr
    assert not (tmp_path / "h.db").exists()


@pytest.mark.faults
def test_a_whole_onnx_file_is_named_as_onnx_not_as_a_damaged_mindir(tmp_path: Path) -> None:
    onnx = tmp_path / "policy.onnx"
    onnx.write_bytes(onnx_model(ops=("Gemm", "Tanh", "Gemm")))
    with pytest.raises(ModelInputError) as plain:
        read_model(onnx)  # no runtime loads another format: the MindIR reader's words
    assert "ONNX" not in str(plain.value) and "malformed" in str(plain.value)
    others = other_formats(Plugins(entry_points=False).runtimes())
    assert [f.name for f in others] == ["onnx"]
    with pytest.raises(ModelInputError) as named:
        read_model(onnx, others=others)
    said = str(named.value)
    assert said.startswith(f"{onnx}: a whole ONNX file (2 operator type(s), version 4), not a MindIR")
    assert "malformed" not in said
    r = _invoke(tmp_path, "--model", str(onnx))
    assert r.exit_code == 2 and "a whole ONNX file" in r.stderr and "malformed" not in r.stderr
    # A damaged ONNX file is not whole: the MindIR reader's words stay.
    onnx.write_bytes(onnx_model()[:-7])
    with pytest.raises(ModelInputError) as cut:
        read_model(onnx, others=others)
    assert "ONNX" not in str(cut.value)


def test_learned_operators_are_stored_and_read_back(history_db: Path) -> None:
    from auditor.history.store import Store
    from auditor.results import CycleResult

    store = Store.open(f"sqlite:///{history_db}")
    op = LearnedOperator("mindspore-lite", "2.0.0", "cpu", "StandardNormal", "schedule node return nullptr")
    for _ in range(2):  # learned again: one row, refreshed
        run_id = store.begin_run("test")
        store.finish_run(run_id, CycleResult(0.0, 1.0, "test", {}, [], [], learned_operators=[op]), {})
    (got,) = store.operator_limits()
    assert (got.package, got.version, got.target, got.operator, got.message) == (
        op.package,
        op.version,
        op.target,
        op.operator,
        op.message,
    )
    assert got.learned_at is not None
    store.close()


def test_a_stack_that_cannot_start_is_its_own_error_verdict(tmp_path: Path) -> None:
    config = tmp_path / "auditor.toml"
    config.write_text(
        '[stacks.gone]\nrole = "infer"\nruntime = "mindspore-lite"\npython = "/nonexistent/bin/python"\n'
        '[models.m]\npath = "m.mindir"\nstacks = ["gone"]\ngolden = "m.npz"\n'
    )
    good = tmp_path / "m.mindir"
    good.write_bytes(model(policy_graph(), PRIMS))
    r = CliRunner().invoke(cli, ["--config", str(config), "check", "--model", str(good), "--json"])
    doc = json.loads(r.stdout)
    assert r.exit_code == 1, r.output
    (v,) = doc["verdicts"]
    assert v["stack"] == "gone" and v["status"] == "error" and "/nonexistent/bin/python" in v["reason"]
    assert doc["model"]["sha256"] and doc["exit_code"] == 1


def test_a_stack_that_loads_another_format_is_not_checked_against_a_mindir(tmp_path: Path) -> None:
    from auditor.gate.preflight import INCOMPATIBLE, preflight

    plugins = Plugins(entry_points=False)
    doc = {
        "stacks": {
            "ms20": {"role": "train", "runtime": "mindspore", "python": "/nonexistent/python"},
            "ort": {"role": "infer", "runtime": "ort", "python": "/nonexistent/python"},
        },
        "pairs": [{"train": "ms20", "infer": "ort", "probes": ["ppo_policy"]}],
    }
    from auditor.config.load import parse

    config = parse(doc, "t.toml", runtimes=plugins.runtimes())
    path = tmp_path / "p.mindir"
    path.write_bytes(model(policy_graph(), PRIMS))
    report = preflight(config, str(path), ["ort"], [], [], plugins.runtimes())  # no worker is started
    (verdict,) = report.verdicts
    assert (verdict.stack, verdict.status) == ("ort", INCOMPATIBLE) and report.exit_code == 1
    assert verdict.reason == "ort loads ONNX files, not a MindIR; not checked"
