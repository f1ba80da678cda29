"""A runtime's failure as a user thinks of it (auditor.stacks.failures), on the runtimes' own
words, copied verbatim from the loads the operator sweep measured on the reference stacks."""

from __future__ import annotations

import pytest
from auditor.plugins.runtimes.lite.spec import LITE
from auditor.plugins.runtimes.mindspore.spec import MINDSPORE_GRAPH

from auditor.extend.manager import Plugins
from auditor.results import ERROR, INCOMPATIBLE, UNSUPPORTED
from auditor.runtime import FIRST_CALL, GENERIC, GRAPH, OPERATOR, VERSION
from auditor.runtime.failures import other_release
from auditor.stacks.failures import (
    diagnose,
    named_operators,
    runtime_lines,
    runtime_warnings,
    unsupported_operator,
)
from auditor.stacks.worker import WorkerError

COMMON = "build_from_file failed! Error is Common error code."


def glog(level: str, module: str, source: str, text: str) -> str:
    """A line as the runtimes write it at GLOG_v=2 (pid, thread, time, source file and line)."""
    when = "2026-12-03-23:37:02.193.229"
    return f"[{level}] {module}(18958,7fad00dfbb80,python):{when} [mindspore/{source}] {text}"


LIBNUMA = glog(
    "WARNING", "ME", "lite/src/extendrt/numa_adapter.cc:35", "NUMAAdapter] Open libnuma.so failed!try again."
)
CONV_NOISE = glog(
    "ERROR", "LITE", "lite/tools/optimizer/common/gllo_utils.cc:1", "IsConvNode] prim is nullptr"
)
SILU_LOG = "\n".join(
    [
        glog(
            "WARNING",
            "LITE",
            "lite/src/common/ops/ops_utils.h:50",
            "GetPrimitiveCreator] Unsupported primitive type in Create: SiLU",
        ),
        glog(
            "WARNING",
            "LITE",
            "lite/src/common/ops/anf_utils.cc:38",
            "GetPrimitiveT] can not find MSOpsRegistry for op: SiLU",
        ),
    ]
    * 20
    + [
        LIBNUMA,
        CONV_NOISE,
        glog(
            "ERROR",
            "ME",
            "lite/src/litert/lite_model.h:143",
            'ConvertNodes] "meta_graph is invalid, please check your model file."',
        ),
        glog(
            "ERROR",
            "ME",
            "lite/src/extendrt/cxx_api/model/model_impl.cc:190",
            "BuildByBufferImpl] compile graph failed.",
        ),
    ]
)
ARGMIN_LOG = (
    glog("ERROR", "ME", "lite/src/litert/kernel/cpu/base/argminmax_base.cc:51", "ReSize] Invalid topk 0")
    + "\n"
    + glog(
        "ERROR",
        "ME",
        "lite/src/litert/lite_session.cc:796",
        "PrepareKernels] node: Default/Argmin-op2 prepare failed.",
    )
)
NO_KERNEL_LOG = glog(
    "ERROR",
    "ME",
    "lite/src/litert/scheduler.cc:1508",
    "ScheduleSubGraphToKernels] schedule node return nullptr, "
    "name: Default/network-Policy/StandardNormal-op4, type: RandomStandardNormal",
)
TOPK_LOG = (
    glog(
        "ERROR",
        "LITE",
        "lite/tools/common/graph_util.cc:115",
        "GetShapeVectorAndIdxFromCNode] Abstract is not abstract tensor. Default/TopK-op3",
    )
    + "\n"
    + glog(
        "ERROR",
        "ME",
        "lite/src/extendrt/cxx_api/model/model.cc:100",
        "Build] Catch exception: Failure info [Get outputs info of funcgraph failed].",
    )
)
TOO_NEW = (
    "This software can only support the maximum mind ir version: 1, please install the latest version "
    "to support the mind ir version: 3"
)
TOO_NEW_LOG = glog(
    "ERROR", "ME", "lite/src/extendrt/cxx_api/model/model.cc:100", "Build] Catch exception: " + TOO_NEW
)
CROSS_MAJOR_WORDS = (
    "Loaded MindIR version is 0.1.1, but current MindSpore supported MindIR major version is 1. Cross-major "
    "version compatibility is not guaranteed, which may cause model load failure or functional errors."
)
CROSS_MAJOR = glog(
    "WARNING",
    "CORE",
    "core/load_mindir/load_model.cc:2445",
    "CheckAndWarnMindIRVersion] " + CROSS_MAJOR_WORDS,
)
STACK = "\n\n" + "-" * 52 + "\n- C++ Call Stack: (For framework developers)\n"

MS20_FILE = {
    "model_version": "2.0.0",
    "mind_ir_version": 1,
    "op_types": ["Cast", "MatMul", "ReduceMean", "SiLU"],
}
MS210_FILE = {"model_version": "2.10.0", "mind_ir_version": 3, "op_types": ["MatMul"]}


def err(op: str, message: str, log: str = "", kind: str = "error", stack: str = "lite20") -> WorkerError:
    return WorkerError(stack, op, kind, message, log=log, error_type="RuntimeError")


def test_every_form_has_a_known_kind_and_phase() -> None:
    for spec in Plugins(entry_points=False).runtimes().values():
        names = [f.name for f in (*spec.failures, *GENERIC)]
        assert len(names) == len(set(names)), spec.name
        assert all(f.phase in ("load", "run", "export", "") for f in spec.failures)


@pytest.mark.parametrize(
    "log, operator, form",
    [
        (SILU_LOG, "SiLU", "lite-unsupported-primitive"),
        (ARGMIN_LOG, "Argmin", "lite-kernel-prepare"),
        (NO_KERNEL_LOG, "StandardNormal", "lite-no-kernel"),
    ],
)
def test_lite_names_the_operator_only_in_its_log(log: str, operator: str, form: str) -> None:
    d = diagnose(err("load", COMMON, log), LITE, "2.0.0", MS20_FILE | {"op_types": [operator]})
    assert (d.status, d.phase, d.operator, d.kind, d.form) == (UNSUPPORTED, "load", operator, OPERATOR, form)
    assert d.learnable and f"cannot load operator {operator}" in d.summary and "fails to load it" in d.summary
    assert operator in d.remedy and d.words and operator in d.words
    # The runtime's lines are kept in their order, the naming one among them, noise left out.
    assert any(operator in line for line in d.log_lines)
    assert not any("libnuma" in line or "IsConvNode" in line for line in d.log_lines)


@pytest.mark.faults
def test_every_operator_that_fails_is_named_not_only_the_first() -> None:
    mish = glog(
        "WARNING",
        "LITE",
        "lite/src/common/ops/ops_utils.h:50",
        "GetPrimitiveCreator] Unsupported primitive type in Create: Mish",
    )
    log = SILU_LOG.replace(LIBNUMA, f"{mish}\n{LIBNUMA}")
    known = {"Erf": "load-fails: Unsupported primitive type in Create: Erf", "Gelu": "not in this file"}
    ops = {"op_types": ["MatMul", "SiLU", "Mish", "Erf"]}
    d = diagnose(err("load", COMMON, log), LITE, "2.0.0", MS20_FILE | ops, known=known)
    assert (d.status, d.operator) == (UNSUPPORTED, "SiLU")
    assert "cannot load operator SiLU; nor Mish (its log names it too); Erf (known:" in d.summary
    assert "Gelu" not in d.summary and "replace SiLU, Mish, Erf in the network" in d.remedy
    alone = diagnose(err("load", COMMON, SILU_LOG), LITE, "2.0.0", MS20_FILE | {"op_types": ["SiLU"]})
    assert "nor" not in alone.summary and "replace SiLU in the network" in alone.remedy


def test_repeated_lines_are_counted_and_short() -> None:
    lines = runtime_lines(SILU_LOG, LITE)
    assert lines[0] == (
        "[WARNING] LITE ops_utils.h GetPrimitiveCreator] Unsupported primitive type in Create: SiLU (x20)"
    )
    assert all("18958" not in line and "2026-12-03" not in line for line in lines)
    assert not any("libnuma" in line or "prim is nullptr" in line for line in lines)


def test_a_tuple_output_is_a_graph_shape_with_its_remedy() -> None:
    d = diagnose(err("load", COMMON, TOPK_LOG), LITE, "2.0.0", MS20_FILE | {"op_types": ["TopK"]})
    assert (d.status, d.operator, d.kind) == (UNSUPPORTED, "TopK", GRAPH)
    assert not d.learnable  # TopK unpacked loads: nothing to remember about the operator
    assert "return the tuple's elements one by one" in d.remedy


def test_a_file_too_new_is_incompatible_with_both_versions_and_the_remedy() -> None:
    d = diagnose(err("load", COMMON, TOO_NEW_LOG), LITE, "2.0.0", MS210_FILE)
    assert (d.status, d.kind, d.maximum, d.file_version) == (INCOMPATIBLE, VERSION, 1, 3)
    assert "MindIR version 3" in d.summary and "at most version 1" in d.summary
    assert "export it with MindSpore 2.0.x" in d.remedy and "mindspore-lite 2.10.x" in d.remedy
    # MindSpore 2.0 raises the same words from mindspore.load.
    ms = diagnose(
        err("load", TOO_NEW + STACK, stack="ms20-graph"),
        MINDSPORE_GRAPH,
        "2.0.0",
        MS210_FILE,
    )
    assert (ms.status, ms.maximum, ms.file_version) == (INCOMPATIBLE, 1, 3)


@pytest.mark.parametrize(
    "message, operator",
    [
        ("Got null AbstractBasePtr for input [0] for primitive Cast" + STACK, "Cast"),
        ("Failed to get type in node:Default/ReduceMean-op0" + STACK, "ReduceMean"),
        (
            "Kernel select failed: KernelObjectTypeNotSupported: unsupported kernel object type for "
            "Default/Round-op0 with inputs (Tensor), outputs (Tensor).",
            "Round",
        ),
    ],
)
def test_another_release_failing_on_the_first_call_is_incompatible(message: str, operator: str) -> None:
    """MindSpore 2.10 GraphCell loads every 2.0 file (with its cross-major warning), then fails
    on the first call: incompatible, the version pair and both remedies, and the load's
    warning shown with the run's failure (the run's own log is empty)."""
    failed = err("run", message, "", stack="ms210-graph")
    d = diagnose(failed, MINDSPORE_GRAPH, "2.10.0", MS20_FILE, earlier_log=CROSS_MAJOR)
    assert (d.status, d.phase, d.operator, d.kind) == (INCOMPATIBLE, "run", operator, FIRST_CALL)
    assert "loads it, then fails on the first call" in d.summary and f"at operator {operator}" in d.summary
    assert "MindSpore 2.0.0 on mindspore 2.10.0, another release" in d.summary
    assert d.remedy == (
        "serve it with mindspore 2.0.x (the release that exported it), or export it with MindSpore 2.10.x"
    )
    assert any("Cross-major version compatibility" in line for line in d.log_lines)
    assert not d.learnable  # 2.10 runs the operator in its own files


def test_an_unnamed_failure_on_another_release_is_still_incompatible() -> None:
    d = diagnose(err("load", COMMON, LIBNUMA), LITE, "2.0.0", {"model_version": "2.2.11"})
    assert d.status == INCOMPATIBLE and "another release" in d.summary and "mindspore-lite 2.2.x" in d.remedy


def test_the_measured_table_names_what_the_runtime_did_not() -> None:
    known = {"LayerNorm": "wrong-output", "SiLU": "load-fails: Unsupported primitive type in Create: SiLU"}
    d = diagnose(err("load", COMMON, ""), LITE, "2.0.0", MS20_FILE, known=known)
    assert (d.status, d.operator, d.form) == (UNSUPPORTED, "SiLU", "operator-table")
    assert "the measured operator table says SiLU" in d.summary


def test_no_cause_gives_an_error_whose_remedy_never_points_at_an_empty_log() -> None:
    bare = diagnose(err("load", COMMON, ""), LITE, "2.0.0", MS20_FILE)
    assert bare.status == ERROR and bare.log_lines == ()
    assert "see the runtime's log above" not in bare.remedy and "wrote no line" in bare.remedy
    logged = diagnose(
        err("load", COMMON, '[ERROR] ME(1,7f,python):x [a/b.cc:1] F] "something else broke"'),
        LITE,
        "2.0.0",
        MS20_FILE,
    )
    assert logged.status == ERROR and logged.log_lines and "lines above" in logged.remedy


def test_a_hang_on_the_first_call_is_told_apart_from_a_load_failure() -> None:
    hung = diagnose(
        err("run", "no answer within 20 s; worker process group killed", kind="timeout"),
        LITE,
        "2.0.0",
        MS20_FILE | {"op_types": ["UniformReal"]},
        known={"UniformReal": "hangs in predict when its draw is both an output and an input of a node"},
    )
    assert hung.status == ERROR and "hangs on the first call" in hung.summary
    assert hung.operator == "UniformReal" and "hangs in predict" in hung.summary


def test_a_runtime_of_another_family_is_never_a_release_pair() -> None:
    assert other_release("2.10.0", "2.0.0") and other_release("2.0.0", "2.10.0")
    assert not other_release("2.10.0", "2.10.0")
    assert not other_release("2.0.1", "2.0.0")
    assert not other_release(None, "2.0.0")
    # Only a runtime whose spec pairs its releases with the exporter's reads a release pair.
    runtimes = Plugins(entry_points=False).runtimes()
    paired = [n for n, r in runtimes.items() if r.paired_release]
    assert paired == ["mindspore", "mindspore-graph", "mindspore-lite"]
    failed = err("load", "[ONNXRuntimeError] : 1 : FAIL : something", stack="ort")
    d = diagnose(failed, runtimes["ort"], "1.20.0", {"model_version": "2.0.0"})
    assert d.status == ERROR and "another release" not in d.summary


def test_a_successful_load_keeps_its_warnings_without_noise() -> None:
    # Lite reads MindIR with MindSpore's loader: its log format knows the cross-major warning too.
    assert runtime_warnings(CROSS_MAJOR + "\n" + LIBNUMA + "\n" + CONV_NOISE, LITE) == (
        "[WARNING] CORE load_model.cc CheckAndWarnMindIRVersion] " + CROSS_MAJOR_WORDS,
    )


def test_operator_helpers() -> None:
    assert unsupported_operator(err("load", COMMON, NO_KERNEL_LOG), LITE) == "StandardNormal"
    assert unsupported_operator(err("load", COMMON, NO_KERNEL_LOG, kind="timeout"), LITE) is None
    assert unsupported_operator(err("load", COMMON, NO_KERNEL_LOG), None) is None  # Lite's words: its forms
    named = named_operators(SILU_LOG, LITE.failures)
    assert [(f, o) for f, o, _ in named] == [
        ("lite-unsupported-primitive", "SiLU"),
        ("lite-no-ops-registry", "SiLU"),
    ]


def test_a_runtime_without_a_log_format_keeps_no_lines() -> None:
    """The log is read with the stack's runtime's format only: ONNX Runtime declares none, and
    without a runtime nothing says how to read it; the runtime's message is read all the same."""
    ort = Plugins(entry_points=False).runtimes()["ort"]
    assert ort.log is None
    assert runtime_lines(SILU_LOG, ort) == [] and runtime_lines(SILU_LOG, None) == []
    assert runtime_warnings(CROSS_MAJOR, ort) == () and runtime_warnings(CROSS_MAJOR, None) == ()
    d = diagnose(err("load", "unsupported operator: SiLU", SILU_LOG, stack="ort"), ort, "1.32.0")
    assert (d.status, d.operator, d.log_lines) == (UNSUPPORTED, "SiLU", ())
    assert d.words == "unsupported operator: SiLU"


def test_the_cross_major_warning_is_ranked_before_plain_warnings() -> None:
    """Of a load's warnings only a few are kept: MindSpore's log format ranks its warning that
    the file is another release's before the others, wherever it is in the log."""
    plain = [
        glog("WARNING", "ME", f"ccsrc/pipeline/step{i}.cc:1", f"Step{i}] nothing wrong") for i in range(8)
    ]
    kept = runtime_warnings("\n".join([*plain, CROSS_MAJOR]), MINDSPORE_GRAPH)
    assert len(kept) == 7 and kept[-1] == "... 3 more line(s) of the runtime's log"
    assert kept[5] == "[WARNING] CORE load_model.cc CheckAndWarnMindIRVersion] " + CROSS_MAJOR_WORDS
    assert kept[:5] == tuple(f"[WARNING] ME step{i}.cc Step{i}] nothing wrong" for i in range(5))


def test_named_operators_give_the_short_line_with_the_log_format() -> None:
    short = named_operators(SILU_LOG, LITE.failures, LITE.log)[0][2]
    assert (
        short == "[WARNING] LITE ops_utils.h GetPrimitiveCreator] Unsupported primitive type in Create: SiLU"
    )
    raw = named_operators(SILU_LOG, LITE.failures)[0][2]
    assert raw.startswith("[WARNING] LITE(18958,") and raw.endswith(
        "Unsupported primitive type in Create: SiLU"
    )
