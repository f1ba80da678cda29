"""The ort runtime package without the stack: its ONNX reader on files built here (the field
numbers of onnx.proto3), its failure forms on onnxruntime 1.32's verbatim messages
(notes/converter_onnx B4), and the auditor's generic parts showing it without knowing it
(config pairs, the rules, drift, Prometheus)."""

from __future__ import annotations

import pytest
from auditor.plugins.runtimes.ort import onnx_wire
from auditor.plugins.runtimes.ort.spec import ONNX

from auditor.config.load import parse
from auditor.config.tables import ConfigError, PairConfig, StackConfig
from auditor.exposition.families import stack_versions
from auditor.extend.manager import Plugins
from auditor.fingerprint.drift import diff
from auditor.results import INCOMPATIBLE, UNSUPPORTED, StackReport
from auditor.rules.engine import ExportedModel, RuleContext
from auditor.runtime import OPERATOR, VERSION, RuntimeSpec
from auditor.stacks.failures import diagnose
from auditor.stacks.worker import WorkerError
from plugins.default_rules import mindir_version, operator_support
from tests.unit.worker.test_mindir import PRIMS, field, model, policy_graph

RUNTIMES = Plugins(entry_points=False).runtimes()
ORT = RUNTIMES["ort"]


def value_info(name: str, elem: int, dims: list[int | str]) -> bytes:
    shape = b"".join(field(1, field(1, d) if isinstance(d, int) else field(2, d)) for d in dims)
    return field(1, name) + field(2, field(1, field(1, elem) + field(2, shape)))


def onnx_model(ir_version: int = 4, ops: tuple[str, ...] = ("Gemm", "Tanh", "Gemm")) -> bytes:
    graph = b"".join(field(1, field(4, op)) for op in ops) + field(2, "g")
    graph += field(5, field(1, 2) + field(2, 1) + field(8, "w"))  # an initializer, float
    graph += field(11, value_info("h", 1, ["batch", 3])) + field(11, value_info("w", 1, [2]))
    graph += field(12, value_info("5", 10, [256, 1]))
    return (
        field(1, ir_version)
        + field(2, "MindSpore")
        + field(3, "1.0")
        + field(7, graph)
        + field(8, field(1, "") + field(2, 11))
    )


def test_the_onnx_reader_gives_the_summary_the_rules_and_reports_read():
    info = ONNX.read(onnx_model())
    assert info["readable"] and ONNX.version(info) == 4 and ONNX.producer(info) is None
    assert (info["producer_name"], info["producer_version"]) == ("MindSpore", "1.0")
    assert info["opset_import"] == [{"domain": "", "version": 11}]
    assert info["op_types"] == ["Gemm", "Tanh"] and info["op_type_counts"] == {"Gemm": 2, "Tanh": 1}
    # graph inputs that are weights (initializers) are not the model's inputs
    assert info["inputs"] == [{"name": "h", "kind": "tensor", "dtype": "float32", "shape": ["batch", 3]}]
    assert info["outputs"] == [{"name": "5", "kind": "tensor", "dtype": "float16", "shape": [256, 1]}]


def test_the_onnx_reader_names_what_is_wrong_and_never_raises():
    data = onnx_model()
    assert ONNX.read(b"")["reason"] == "empty file"
    assert "truncated or not an ONNX model" in ONNX.read(data[: len(data) // 2])["reason"]
    mindir = ONNX.read(model(policy_graph(), PRIMS))
    assert not mindir["readable"] and mindir["reason"].startswith("not ONNX (starts like a MindIR")
    assert "MindSpore Lite flatbuffer" in ONNX.read(b"\x24\0\0\0MSL2" + b"\0" * 20)["reason"]
    # a bound on the work: a file that is all fields stops at the budget, with a reason
    assert not onnx_wire.read_info(b"\x08\x01" * (onnx_wire.MAX_FIELDS + 1))["readable"]


def test_onnxruntime_messages_become_results():
    prefix = (
        "[ONNXRuntimeError] : 10 : INVALID_GRAPH : Load model from /w/p.onnx failed:"
        "This is an invalid model. "
    )
    no_op = (
        prefix + 'In Node, ("2Tanh", NoSuchOp, "", -1) : ... Error No Op registered for NoSuchOp '
        "with domain_version of 11"
    )
    op = ORT.explain(no_op, "load")
    assert (op.kind, op.operator, op.form.learned) == (OPERATOR, "NoSuchOp", True)
    kernel = ORT.explain(
        "NOT_IMPLEMENTED : Could not find an implementation for Gemm(6) node with name '1Gemm'"
    )
    assert (kernel.kind, kernel.operator) == (OPERATOR, "Gemm")
    ir = ORT.explain(
        "model.cc:256 onnxruntime::Model::Model(...) Unsupported model IR version: 99, "
        "max supported IR version: 14"
    )
    assert (ir.kind, ir.version, ir.maximum) == (VERSION, 99, 14)
    opset = ORT.explain(
        "Opset 30 is under development and support for this is limited. ... Current official support for "
        "domain ai.onnx is till opset 28."
    )
    assert opset.kind == VERSION and opset.maximum is None
    assert ORT.explain("INVALID_PROTOBUF : Load model from /w/t.onnx failed:Protobuf parsing failed.") is None
    assert ORT.reads("1.32.0", {}) == (14, "onnxruntime 1.32.0 says so when it refuses a newer file")
    assert ORT.reads("1.20.0", {}) is None
    # The same diagnosis as every runtime's: unsupported with the operator, learned; too new a
    # file incompatible with both versions, in ONNX's words.
    d = diagnose(WorkerError("ort", "load", "error", no_op), ORT, "1.32.0", {"op_types": ["NoSuchOp"]})
    assert (d.status, d.operator, d.phase, d.learnable) == (UNSUPPORTED, "NoSuchOp", "load", True)
    assert "ort (onnxruntime 1.32.0, cpu) fails to load it: it cannot load operator NoSuchOp" in d.summary
    said = "Unsupported model IR version: 99, max supported IR version: 14"
    v = diagnose(WorkerError("ort", "load", "error", said), ORT, "1.32.0", {"ir_version": 99})
    assert (v.status, v.maximum, v.file_version) == (INCOMPATIBLE, 14, 99)
    assert "the file has ONNX version 99, the runtime reads at most version 14" in v.summary
    assert "another release" not in v.summary and "writes ONNX version 14 or lower" in v.remedy


def _ort_pair(
    ir_version: int, ops: tuple[str, ...] = ("Gemm",), learned_ops: dict | None = None
) -> RuleContext:
    stacks = {
        "ms20": StackConfig("ms20", "train", "mindspore", "/p"),
        "ort": StackConfig("ort", "infer", "ort", "/p"),
        "lite20": StackConfig("lite20", "infer", "mindspore-lite", "/p"),
    }
    runtime = {"runtime": {"runtime_package": "onnxruntime", "runtime_version": "1.32.0"}}
    lite = {"runtime": {"runtime_package": "mindspore-lite", "runtime_version": "2.0.0"}}
    summary = ONNX.read(onnx_model(ir_version, ops))
    exported = [
        ExportedModel("ms20", "ppo_policy", "fp32", summary, "onnx"),
        ExportedModel(
            "ms20", "ppo_policy", "fp32", {"readable": True, "mind_ir_version": 9, "op_types": ["Erf"]}
        ),
    ]
    pairs = (PairConfig("ms20", "ort", ("ppo_policy",)), PairConfig("ms20", "lite20", ("ppo_policy",)))
    return RuleContext(
        stacks, {"ms20": {}, "ort": runtime, "lite20": lite}, pairs, exported, {}, learned_ops or {}, RUNTIMES
    )


def test_the_same_rules_hold_an_onnx_export_against_what_ort_reads():
    """Each pair sees the export in the format its infer runtime loads: the ONNX file against
    onnxruntime's IR maximum and operators, the MindIR (version 9 here) against Lite's."""
    found = {f.subject: f for f in mindir_version(_ort_pair(ir_version=15))}
    f = found["ms20->ort"]
    assert f.key == "ms20->ort/onnx-version" and f.kind == "incompatible"
    assert f.message.startswith(
        "ort (ort 1.32.0) cannot load the ONNX exported by ms20 (MindSpore): the file has ONNX version 15, "
        "the runtime reads at most version 14 (onnxruntime 1.32.0 says so when it refuses a newer file)"
    )
    assert found["ms20->lite20"].key == "ms20->lite20/mindir-version"  # the MindIR, not the ONNX
    assert [x.subject for x in mindir_version(_ort_pair(ir_version=4))] == ["ms20->lite20"]
    ctx = _ort_pair(4, ("Gemm", "Erf"), {"ort": {"Erf": "no kernel"}, "lite20": {"Tanh": "x"}})
    (op,) = operator_support(ctx)
    assert op.subject == "ms20->ort" and "cannot run the ONNX exported by ms20" in op.message


def test_a_pair_of_ort_and_a_train_runtime_that_cannot_export_onnx_is_a_config_error():
    doc = {
        "stacks": {
            "ms20": {"role": "train", "runtime": "mindspore", "python": "/p"},
            "ort": {"role": "infer", "runtime": "ort", "python": "/p"},
        },
        "pairs": [{"train": "ms20", "infer": "ort", "probes": ["ppo_policy"]}],
    }
    assert parse(doc, runtimes=RUNTIMES).pairs[0].name == "ms20->ort"  # MindSpore exports ONNX
    mindir_only = {**RUNTIMES, "old": RuntimeSpec("old", "export", "m:C")}  # exports MindIR only
    doc["stacks"]["ms20"]["runtime"] = "old"
    with pytest.raises(ConfigError) as err:
        parse(doc, runtimes=mindir_only)
    assert err.value.errors == [
        "pairs[0]: ort (ort) loads ONNX files, which ms20 (old) cannot export (it exports: mindir)"
    ]


def test_drift_and_prometheus_show_ort_without_knowing_it():
    before = {"runtime": {"runtime": "ort", "runtime_package": "onnxruntime", "runtime_version": "1.32.0"}}
    after = {"runtime": {**before["runtime"], "runtime_version": "1.33.0"}}
    (change,) = diff(before, after)
    assert change.words == "onnxruntime 1.32.0 -> 1.33.0" and change.important
    report = StackReport("ort", "infer", "ort", "/p", "cpu", "local", after)
    labels = stack_versions(report)
    assert (labels["runtime_package"], labels["runtime_version"]) == ("onnxruntime", "1.33.0")
    assert labels["mindspore"] == labels["mindspore_lite"] == ""
