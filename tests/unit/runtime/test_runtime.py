"""The runtime plugin API (auditor.runtime) and the built-in runtimes' knowledge written with it:
specs validate, formats read a file into the summary the rules see, failure forms read the
runtimes' own (verbatim, measured) messages, and version facts answer where
they are known and stay silent where not."""

from __future__ import annotations

import pytest

from auditor.extend.manager import Plugins
from auditor.runtime import (
    EXPORT,
    LOAD,
    MINDIR,
    OPERATOR,
    VERSION,
    ArtifactFormat,
    RuntimeSpec,
    find,
    form,
    formats_of,
    known_maxima,
    readers_facts,
    writers_of,
)
from tests.unit.worker.test_mindir import PRIMS, model, policy_graph

RUNTIMES = Plugins(entry_points=False).runtimes()

# Verbatim (notes/converter_onnx B1, FACTS.md): MindSpore 2.0's ONNX exporter on the seeded
# normal sampler, and Lite 2.0's native log on an ms210 export.
EXPORT_2_0 = (
    "RuntimeError: Can not find key StandardNormal in convert map. Exporting StandardNormal operator "
    "is not yet supported.\n\n----------------------------------------------------\n- C++ Call Stack: "
    "(For framework developers)\n----------------------------------------------------\n"
    "mindspore/ccsrc/transform/express_ir/onnx_exporter.cc:4092 ExportPrimitive\n"
)
LITE_TOO_NEW = (
    "[ERROR] ... RuntimeError: This software can only support the maximum mind ir version: 1, please "
    "install the latest version to support the mind ir version: 3\n"
)


def test_a_form_reads_its_groups_and_refuses_an_unknown_kind():
    f = form("no-kernel", r"no (\w+) kernel, file v(\d+), max v(\d+)", OPERATOR, LOAD, 1)
    found = f.find("load: no Erf kernel, file v3, max v1")
    assert (found.kind, found.words, found.operator) == (OPERATOR, "no Erf kernel, file v3, max v1", "Erf")
    assert f.find("something else") is None
    versions = form("too-new", r"file v(\d+), max v(\d+)", VERSION, LOAD, version=1, maximum=2)
    assert (versions.find("file v3, max v1").version, versions.find("file v3, max v1").maximum) == (3, 1)
    node = form("node", r"node (\S+) failed", OPERATOR, LOAD, 1)
    assert node.find("node Default/net/Erf-op12 failed").operator == "Erf"  # a node's name: its operator
    with pytest.raises(ValueError, match="kind"):
        form("x", "x", "error")
    with pytest.raises(ValueError, match="phase"):
        form("x", "x", OPERATOR, "build")


def test_the_generic_form_applies_to_every_runtime_and_its_own_come_first():
    own = form("mine", r"unsupported op (\w+) here", OPERATOR, LOAD, 1)
    assert find((own,), "unsupported op Foo here").form is own
    generic = find((), "Unsupported operator: Foo.Bar in graph")
    assert generic.operator == "Foo.Bar" and not generic.form.learned  # its name need not be the file's
    assert find((), "Common error code.") is None
    # a form is read at the request it is written at
    assert find((own,), "unsupported op Foo here", EXPORT).form is not own


def test_a_spec_validates_its_fields():
    with pytest.raises(ValueError, match="can must be"):
        RuntimeSpec("x", "train", "a:B")
    with pytest.raises(ValueError, match="module:Class"):
        RuntimeSpec("x", "load", "a.B")
    with pytest.raises(ValueError, match="loads must be an ArtifactFormat"):
        RuntimeSpec("x", "load", "a:B", loads="onnx")
    with pytest.raises(ValueError, match="exports must be a tuple of format names"):
        RuntimeSpec("x", "export", "a:B", exports="onnx")
    with pytest.raises(ValueError, match="suffix"):
        ArtifactFormat("x", "X", "x", lambda data: {})
    legacy = RuntimeSpec("old", "load", "a:B")  # a plugin written before formats: MindIR
    assert legacy.loads is MINDIR and legacy.exports == ("mindir",)


def test_the_mindir_format_reads_a_file_into_the_summary_the_rules_see():
    summary = MINDIR.read(model(policy_graph(), PRIMS, mind_ir_version=3, version="2.10.0"))
    assert summary["readable"] and summary["op_types"] == ("Constant", "Load", "MatMul", "Tanh")
    assert MINDIR.version(summary) == 3 and MINDIR.producer(summary) == "2.10.0"
    assert summary["inputs"] == ({"name": "obs", "shape": (-1, 3), "dtype": "float32"},)
    broken = MINDIR.read(b"not a model")
    assert not broken["readable"] and broken["reason"] and MINDIR.version(broken) is None


def test_the_built_in_runtimes_read_their_own_messages():
    ms, graph, lite = RUNTIMES["mindspore"], RUNTIMES["mindspore-graph"], RUNTIMES["mindspore-lite"]
    export = ms.explain(EXPORT_2_0, EXPORT)
    assert (export.kind, export.operator, export.form.learned) == (OPERATOR, "StandardNormal", False)
    assert export.words == (
        "Can not find key StandardNormal in convert map. "
        "Exporting StandardNormal operator is not yet supported."
    )
    for loader in (graph, lite):  # both load a MindIR with MindSpore's own loader
        too_new = loader.explain(LITE_TOO_NEW, LOAD)
        assert (too_new.kind, too_new.maximum, too_new.version) == (VERSION, 1, 3)
    # each runtime knows its own words only: the exporter's are PyNative's, the node without a
    # kernel is Lite's
    assert graph.explain(EXPORT_2_0) is None and lite.explain(EXPORT_2_0) is None
    no_kernel = "schedule node return nullptr, name: Default/X-op1, type: Y"
    assert lite.explain(no_kernel).operator == "X" and graph.explain(no_kernel) is None


def test_version_facts_answer_where_known_and_stay_silent_where_not():
    lite = readers_facts(RUNTIMES, "mindspore-lite", "mindspore-lite")
    assert lite.reads("2.0.0", {}) == (1, "known limit of MindSpore Lite 2.0.0")
    assert lite.reads("2.3.0", {}) is None
    # a plugin runtime reporting Lite's package shares Lite's facts
    assert readers_facts(RUNTIMES, "lite-ascend", "mindspore-lite") is lite
    graph = readers_facts(RUNTIMES, "mindspore-graph", "mindspore")
    assert graph.reads("2.4.10", {"model_version": "2.10.0"}) == (
        2,
        "MindSpore 2.4.10 reads the version it writes",
    )
    assert graph.reads("2.10.0", {"model_version": "2.0.0"}) is None  # it reads older releases' files
    assert graph.reads("1.6.0", {"model_version": "2.10.0"}) is None  # before 1.7: no version check
    assert readers_facts(RUNTIMES, "nothing", "nothing") is None
    assert writers_of(RUNTIMES, "mindspore", "mindir")[3] == "MindSpore 2.5 and later"
    assert writers_of(RUNTIMES, None, "mindir")[1] == "MindSpore 1.7 to 2.2.x"  # a file on its own
    assert writers_of(RUNTIMES, "mindspore", "tflite") == {}


def test_formats_are_collected_from_the_load_runtimes():
    tflite = ArtifactFormat("tflite", "TFLite", ".tflite", lambda data: {"readable": False})
    extra = {**RUNTIMES, "tfl": RuntimeSpec("tfl", "load", "m:C", loads=tflite)}
    assert formats_of(extra)["tflite"] is tflite and formats_of(extra)["mindir"] is MINDIR
    assert set(formats_of(RUNTIMES)) >= {"mindir"}


def test_known_maxima_answers_for_the_releases_in_its_table_only():
    reads = known_maxima({"1.0.0": 3}, "measured on {version}")
    assert reads("1.0.0", {"mind_ir_version": 9}) == (3, "measured on 1.0.0")
    assert reads("1.0.1", {}) is None  # unknown, not guessed from a neighbour
