"""The MindIR reader: synthetic files built field by field, hostile input, and real exports of
the PPO probe from MindSpore 2.0 and 2.10 checked against the stack's own protobuf parser."""

from __future__ import annotations

import json
import os
import random
import subprocess

import pytest

from auditor.worker import mindir
from auditor.worker.mindir import read_info

# -- a tiny protobuf writer for building test files ----------------------------------------------


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(number: int, value: int | bytes | str) -> bytes:
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    raw = value.encode() if isinstance(value, str) else value
    return varint(number << 3 | 2) + varint(len(raw)) + raw


def tensor(name: str, dims: list[int], dtype: int, packed: bool = False, raw: bytes = b"") -> bytes:
    body = field(1, b"".join(varint(d) for d in dims)) if packed else b"".join(field(1, d) for d in dims)
    return body + field(2, dtype) + field(7, name) + (field(9, raw) if raw else b"")


def node(op_type: str, name: str = "n") -> bytes:
    attribute = field(5, field(1, "transpose_b") + field(3, 1))  # skipped whole
    return field(1, "x") + field(2, name) + field(3, name) + field(4, op_type) + attribute


def model(
    graph: bytes,
    primitives: list[tuple[str, str]] = (),
    functions: list[bytes] = (),
    mind_ir_version: int | None = 3,
    version: str = "2.10.0",
) -> bytes:
    out = field(1, "1.1") + field(2, "MindSpore") + field(3, version) + field(5, version)
    out += field(7, graph)
    out += b"".join(field(8, f) for f in functions)
    out += field(10, 1)
    out += b"".join(field(12, field(1, n) + field(2, t)) for n, t in primitives)
    if mind_ir_version is not None:
        out += field(13, mind_ir_version)
    return out


def policy_graph(prefix: str = "g1") -> bytes:
    g = field(1, node("REF::Load:2")) + field(1, node("REF::MatMul:4")) + field(1, node("REF::MatMul:4"))
    g += field(1, node("REF::Tanh:9")) + field(1, node("Constant"))
    g += field(2, prefix)
    g += field(3, tensor(f"{prefix}:fc0.weight", [64, 3], 1, raw=b"\0" * 768))
    g += field(3, tensor(f"{prefix}:fc0.bias", [64], 1, packed=True))
    g += field(3, tensor(f"{prefix}:log_std", [1], 10))
    g += field(5, field(1, f"{prefix}:obs") + field(2, tensor("", [-1, 3], 1)))
    g += field(6, field(1, "out"))
    return g


PRIMS = [("Load:2", "Load"), ("MatMul:4", "MatMul"), ("Tanh:9", "Tanh")]

# -- synthetic files ------------------------------------------------------------------------------


def test_reads_identity_and_graph_summary():
    data = model(policy_graph(), PRIMS)
    info = read_info(data)
    assert info.readable, info.reason
    assert (info.ir_version, info.producer_name, info.model_version) == ("1.1", "MindSpore", "2.10.0")
    assert info.mind_ir_version == 3 and info.little_endian is True
    assert info.op_types == ("Constant", "Load", "MatMul", "Tanh")
    assert info.node_count == 5
    assert info.parameter_count == 3
    assert info.parameter_elements == 64 * 3 + 64 + 1
    assert info.parameter_dtypes == ("float16", "float32")
    # The graph-name prefix is dropped; packed and unpacked dims read the same.
    assert [(p.name, p.shape, p.dtype) for p in info.parameters] == [
        ("fc0.weight", (64, 3), "float32"),
        ("fc0.bias", (64,), "float32"),
        ("log_std", (1,), "float16"),
    ]
    assert [(i.name, i.shape, i.dtype) for i in info.inputs] == [("obs", (-1, 3), "float32")]
    assert info.sha256 == __import__("hashlib").sha256(data).hexdigest() and info.size == len(data)
    assert "MindIR version 3 exported by MindSpore 2.10.0" in info.describe()
    assert "MatMul" in info.describe() and "3 parameters" in info.describe()


def test_old_files_without_primitives_and_without_version():
    """MindSpore 1.x wrote op types directly and no mind_ir_version (= 0)."""
    g = field(1, node("MatMul")) + field(1, node("BiasAdd")) + field(2, "g")
    info = read_info(model(g, mind_ir_version=None, version="1.6.0"))
    assert info.readable and info.mind_ir_version == 0
    assert info.op_types == ("BiasAdd", "MatMul") and info.parameter_count == 0
    assert info.parameter_elements == 0 and info.parameter_dtypes == ()


def test_function_graphs_count_their_operators_not_their_parameters():
    main = field(1, node("REF::Sub:7")) + field(2, "main")
    fn = field(1, node("REF::ReLU:3")) + field(1, node("Switch")) + field(2, "fn")
    fn += field(3, tensor("fn:w", [2], 1))
    info = read_info(model(main, [("Sub:7", "Sub"), ("ReLU:3", "ReLU")], functions=[fn]))
    assert info.op_types == ("ReLU", "Sub", "Switch") and info.node_count == 3
    assert info.parameter_count == 0


def test_a_cut_after_the_graph_is_detected_by_the_missing_primitives_or_version():
    """Protobuf has no end marker: the fields after the graph tell whether the file is whole."""
    g = policy_graph()
    no_primitives = read_info(model(g, [], mind_ir_version=None))
    assert not no_primitives.readable
    assert "refer to primitive 'Load:2', which the file does not define" in no_primitives.reason
    no_version = read_info(model(g, PRIMS, mind_ir_version=None))
    assert not no_version.readable and "ends before its mind_ir_version" in no_version.reason
    assert no_version.reason.startswith("truncated or incomplete MindIR")


def test_asdict_is_json_serialisable_for_the_artifacts_table():
    from dataclasses import asdict

    doc = json.loads(json.dumps(asdict(read_info(model(policy_graph(), PRIMS)))))
    assert doc["op_types"] == ["Constant", "Load", "MatMul", "Tanh"]
    assert doc["parameters"][0] == {"name": "fc0.weight", "shape": [64, 3], "dtype": "float32"}


# -- hostile input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"", "empty file"),
        (b"hello, this is a text file\n", "not a MindIR"),
        (bytes(1000), "field number 0"),
        (b"\xff" * 64, "varint longer than 10 bytes"),
        (field(1, "x") + field(3, "y"), "no graph or producer field"),  # a protobuf, not a MindIR
        (b"\xd8\x5e\x3a\x7f" + bytes(range(200)), "encrypted MindIR (AES-GCM)"),
        (b"\xd9\x5e\x3a\x7f" + bytes(range(200)), "encrypted MindIR (AES-CBC)"),
        (field(2, b"\xff\xfe") + field(7, b""), "not text"),
        (b"\x0b\x00", "wire type 3"),
    ],
)
def test_rejects_with_a_reason(data, words):
    info = read_info(data)
    assert not info.readable
    assert words in info.reason
    assert info.describe().startswith("not a readable MindIR: ")
    assert info.op_types is None and info.mind_ir_version is None


def test_random_bytes_are_never_readable_and_never_raise():
    rng = random.Random(1234)
    for size in (1, 2, 7, 64, 1000, 100_000):
        for _ in range(20):
            info = read_info(rng.randbytes(size))
            assert not info.readable, size
            assert info.reason


def test_every_truncation_is_rejected_or_reads_the_same():
    """A cut file is rejected, unless the cut fell after everything the reader uses."""
    data = model(policy_graph(), PRIMS) + field(14, field(1, "k") + field(2, "v"))  # 2.10's user_info
    whole = read_info(data)
    same = ("mind_ir_version", "model_version", "op_types", "parameters", "inputs")
    readable = []
    for cut in range(1, len(data)):
        info = read_info(data[:cut])
        if info.readable:
            readable.append(cut)
            assert [getattr(info, k) for k in same] == [getattr(whole, k) for k in same], cut
        else:
            assert any(w in info.reason for w in ("claims", "truncated", "producer", "runs past")), (
                cut,
                info.reason,
            )
    end_of_version = len(data) - len(field(14, field(1, "k") + field(2, "v")))
    assert readable and min(readable) == end_of_version


def test_a_malformed_graph_is_not_readable_but_keeps_the_identity():
    bad_graph = field(1, b"\x22\x10abc")  # a node whose op_type claims 16 bytes, has 3
    info = read_info(model(bad_graph))
    assert not info.readable
    assert "the graph is malformed" in info.reason and "claims 16 bytes" in info.reason
    assert info.mind_ir_version == 3 and info.model_version == "2.10.0"


def test_work_is_bounded_on_hostile_input():
    """Bounded by counting: the reader stops at MAX_FIELDS fields, and says so (how long it took
    is bench/ territory)."""
    info = read_info(b"\x08\x00" * 2_000_000)  # four million bytes of one-byte fields
    assert not info.readable and f"more than {mindir.MAX_FIELDS} protobuf fields" in info.reason
    # A graph with more nodes than the bound: the identity is kept, the summary is not.
    nodes = field(1, field(4, "")) * (mindir.MAX_FIELDS // 2 + 10)
    info = read_info(model(nodes, mind_ir_version=2))
    assert info.readable and info.mind_ir_version == 2
    assert info.op_types is None and "protobuf fields" in info.graph_note
    assert "graph not summarised" in info.describe()


def shaped(op_type: str, dims: list[int], dtype: int) -> bytes:
    """A node whose "shape" attribute holds its output tensor, as MindSpore 2.0 and 2.10 write it."""
    return field(4, op_type) + field(
        5, field(1, "shape") + field(12, tensor("", dims, dtype)) + field(16, 19)
    )


def test_the_dtypes_the_layers_compute_in_are_read_from_each_nodes_output():
    """Layers cast to float16 inside a float32 graph (Dense.to_float): computes in float16."""
    g = field(1, shaped("REF::Cast:2", [8, 11], 10)) + field(1, shaped("REF::MatMul:4", [8, 32], 10))
    g += field(1, shaped("REF::Load:3", [32, 11], 1)) + field(1, shaped("REF::Cast:2", [8, 4], 1))
    g += field(1, node("REF::Tanh:9")) + field(2, "g")
    info = read_info(
        model(g, [("Cast:2", "Cast"), ("MatMul:4", "MatMul"), ("Load:3", "Load"), ("Tanh:9", "Tanh")])
    )
    assert info.compute_dtypes == ("float16",) and info.float16_ops == ("MatMul",)
    plain = read_info(
        model(policy_graph(), PRIMS)
    )  # no node says its dtype: nothing known to compute in fp16
    assert plain.compute_dtypes == () and plain.float16_ops == ()


def test_no_recursion_into_attributes_or_unknown_fields():
    """A node attribute holding a deeply nested message is skipped whole, not walked."""
    nested = b""
    for _ in range(2000):
        nested = field(7, nested)
    g = field(1, field(4, "MatMul") + field(5, nested)) + field(2, "g")
    info = read_info(model(g))
    assert info.readable and info.op_types == ("MatMul",)


# -- real exports ---------------------------------------------------------------------------------

PB_DUMP = r"""
import collections, importlib.util, json, sys
spec = importlib.util.spec_from_file_location("mind_ir_pb2", sys.argv[1])
pb = importlib.util.module_from_spec(spec); spec.loader.exec_module(pb)
m = pb.ModelProto(); m.ParseFromString(open(sys.argv[2], "rb").read())
prims = {p.name: p.op_type for p in m.primitives}
ops = [prims.get(n.op_type[5:], n.op_type) if n.op_type.startswith("REF::") else n.op_type
       for n in m.graph.node]
print(json.dumps({
    "mind_ir_version": m.mind_ir_version, "model_version": m.model_version, "ir_version": m.ir_version,
    "ops": sorted(set(ops)), "nodes": len(m.graph.node),
    "params": [[p.name.split(":")[-1], list(p.dims), p.data_type] for p in m.graph.parameter],
}))
"""


@pytest.fixture(scope="module")
def exports(stacks, default_doc, tmp_path_factory):
    """The PPO probe (fp32 and fp16) exported on ms20 and ms210 through the stack worker."""
    from auditor.config.load import parse
    from auditor.extend.manager import Plugins, builtin_probes

    config = parse(default_doc, "test")
    spec = builtin_probes()["ppo_policy"]
    tmp = tmp_path_factory.mktemp("exports")
    out = {}
    for stack in ("ms20", "ms210"):
        with Plugins(entry_points=False).reach(config).worker(stack) as w:
            w.start()
            for dtype in ("float32", "float16"):
                params = spec.params({"batch": 8, "dtype": dtype})
                w.request(
                    "build",
                    model=dtype,
                    probe={"module": spec.module, "params": params},
                    weights=spec.make_weights(params),
                )
                x = spec.make_inputs(params)
                data = w.request(
                    "export", model=dtype, inputs=x, path=str(w.workdir / f"{dtype}.mindir")
                ).result["artifact"]
                path = tmp / f"{stack}-{dtype}.mindir"
                path.write_bytes(data)
                out[(stack, dtype)] = (path, spec.make_weights(params), x)
    return out


@pytest.mark.stacks
@pytest.mark.parametrize(
    ("stack", "mind_ir_version", "model_version"), [("ms20", 1, "2.0.0"), ("ms210", 3, "2.10.0")]
)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_real_exports(exports, stack, mind_ir_version, model_version, dtype):
    path, weights, inputs = exports[(stack, dtype)]
    info = read_info(path.read_bytes())
    assert info.readable, info.reason
    assert info.producer_name == "MindSpore"
    assert info.mind_ir_version == mind_ir_version and info.model_version == model_version
    assert {"MatMul", "BiasAdd", "Tanh", "Exp"} <= set(info.op_types)
    assert info.parameter_count == len(weights)
    assert info.parameter_elements == sum(w.size for w in weights.values())
    assert info.parameter_dtypes == (dtype,)
    assert info.compute_dtypes == (dtype,)  # the fp16 variant computes in fp16 all through
    assert sorted(p.shape for p in info.parameters) == sorted(w.shape for w in weights.values())
    assert [(i.shape, i.dtype) for i in info.inputs] == [(x.shape, str(x.dtype)) for x in inputs]


@pytest.mark.stacks
@pytest.mark.parametrize("stack", ["ms20", "ms210"])
def test_agrees_with_the_stacks_own_protobuf_parser(exports, stacks, stack):
    python = stacks / stack / "bin" / "python"
    pb2 = next((stacks / stack / "lib").glob("python3.*/site-packages/mindspore/train/mind_ir_pb2.py"))
    path = exports[(stack, "float32")][0]
    proc = subprocess.run(
        [str(python), "-c", PB_DUMP, str(pb2), str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        # 2.0's generated module predates the protobuf 4 C++ runtime in its own venv.
        env={**os.environ, "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python"},
    )
    assert proc.returncode == 0, proc.stderr
    ref = json.loads(proc.stdout)
    info = read_info(path.read_bytes())
    assert info.mind_ir_version == ref["mind_ir_version"] and info.ir_version == ref["ir_version"]
    assert info.model_version == ref["model_version"]
    assert list(info.op_types) == ref["ops"] and info.node_count == ref["nodes"]
    assert [[p.name, list(p.shape), p.dtype] for p in info.parameters] == [
        [n, d, mindir.DTYPES[t]] for n, d, t in ref["params"]
    ]


@pytest.mark.stacks
@pytest.mark.parametrize("stack", ["ms20", "ms210"])
def test_truncated_real_export_is_rejected_or_reads_the_same(exports, stack):
    data = exports[(stack, "float32")][0].read_bytes()
    whole = read_info(data)
    assert whole.readable and whole.op_types and whole.mind_ir_version in (1, 3)
    rejected = 0
    for cut in list(range(1, len(data), 97)) + list(range(len(data) - 200, len(data))):
        info = read_info(data[:cut])
        if info.readable:
            assert (info.mind_ir_version, info.op_types) == (whole.mind_ir_version, whole.op_types), cut
        else:
            rejected += 1
            assert info.reason, cut  # a rejection says why
    assert rejected >= len(data) // 97 // 2  # most cuts land inside a field: those are rejected


ENCRYPT = r"""
import sys, numpy as np, mindspore as ms
from mindspore import nn
ms.export(nn.Dense(3, 2), ms.Tensor(np.ones((2, 3), np.float32)), file_name=sys.argv[1],
          file_format="MINDIR", enc_key=b"0123456789abcdef", enc_mode=sys.argv[2])
"""


@pytest.mark.stacks
@pytest.mark.parametrize(("stack", "mode"), [("ms210", "AES-GCM"), ("ms20", "AES-CBC")])
def test_real_encrypted_export_is_named_encrypted(stacks, tmp_path, stack, mode):
    python = stacks / stack / "bin" / "python"
    proc = subprocess.run(
        [str(python), "-c", ENCRYPT, str(tmp_path / "enc"), mode], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    info = read_info((tmp_path / "enc.mindir").read_bytes())
    assert not info.readable and f"encrypted MindIR ({mode})" in info.reason


def test_output_sources_trace_each_returned_value_through_tuples_and_relabelling() -> None:
    """What produces each output, as MindSpore 2.0 and 2.10 write it: the graph returns a
    Depend of a MakeTuple of the heads; a Cast or Reshape keeps its input's values."""

    def op(op_type: str, out: str, *inputs: str) -> bytes:
        return field(
            1, b"".join(field(1, i) for i in inputs) + field(2, out) + field(3, out) + field(4, op_type)
        )

    g = op("REF::Tanh:9", "g:t", "g:x") + op("Cast", "g:c", "g:t", "g:dtype") + op("Softmax", "g:s", "g:l")
    g += op("BiasAdd", "g:b", "g:m", "g:bias") + op("Reshape", "g:loop", "g:loop")  # a loop ends
    g += op("MakeTuple", "g:tup", "g:c", "g:s", "g:b", "g:loop", "g:unknown")
    g += op("UpdateState", "g:u", "g:tup") + op("Depend", "g:d", "g:tup", "g:u")
    g += field(2, "g") + field(6, field(1, "g:d"))
    info = read_info(model(g, PRIMS))
    assert info.readable, info.reason
    assert info.output_sources == (("Cast", "Tanh"), ("Softmax",), ("BiasAdd",), ("Reshape",), ())
    single = read_info(model(op("Sigmoid", "g:y", "g:x") + field(2, "g") + field(6, field(1, "g:y")), PRIMS))
    assert single.output_sources == (("Sigmoid",),)


def test_output_dependencies_name_the_inputs_each_output_is_computed_from() -> None:
    """A NaN in an input reaches the outputs computed from it, and only those: per returned
    value, the graph inputs it is computed from (through tuples, casts and loops)."""

    def op(op_type: str, out: str, *inputs: str) -> bytes:
        return field(
            1, b"".join(field(1, i) for i in inputs) + field(2, out) + field(3, out) + field(4, op_type)
        )

    g = op("MatMul", "g:h", "g:obs", "g:w") + op("REF::Tanh:9", "g:t", "g:h")
    g += op("Add", "g:v", "g:mask", "g:bias")  # computed from the mask only
    g += op("Exp", "g:std", "g:log_std")  # from a parameter only
    g += op("Mul", "g:both", "g:t", "g:v") + op("Add", "g:loop", "g:loop", "g:t")  # a loop ends
    g += op("MakeTuple", "g:tup", "g:t", "g:v", "g:std", "g:both", "g:loop")
    g += op("Depend", "g:d", "g:tup", "g:u")
    g += field(2, "g")
    g += field(5, field(1, "g:obs") + field(2, tensor("", [1, 3], 1)))
    g += field(5, field(1, "g:mask") + field(2, tensor("", [1, 3], 1)))
    g += field(6, field(1, "g:d"))
    data = model(g, PRIMS)
    assert mindir.output_dependencies(data) == (("obs",), ("mask",), (), ("obs", "mask"), ("obs",))
    assert mindir.output_dependencies(b"\xff\xff garbage") is None


def _shaped_op(op_type: str, out: str, dims: list[int], *inputs: str, scope: str = "") -> bytes:
    """A node whose output is a float32 tensor of ``dims`` (its "shape" attribute, as MindSpore
    writes it: a tensor element, type 19), in scope ``scope``."""
    shape = field(1, "shape") + field(12, b"".join(field(1, d) for d in dims) + field(2, 1)) + field(16, 19)
    body = b"".join(field(1, i) for i in inputs) + field(2, out) + field(3, out) + field(4, op_type)
    return field(1, body + field(5, shape) + (field(7, scope) if scope else b""))


def tappable_graph() -> bytes:
    """obs -> Dense (MatMul, BiasAdd reading fc.weight, fc.bias) -> ReLU -> Tanh, returned as
    Depend(MakeTuple(tanh, relu), state): the layout MindSpore 2.x writes."""
    g = _shaped_op("REF::Load:2", "g:w", [4, 3], "g:fc.weight", "g:u0")
    g += _shaped_op("REF::MatMul:4", "g:m", [2, 4], "g:obs", "g:w", scope="Default/fc-Dense/MatMul-op1")
    g += _shaped_op("REF::Load:2", "g:b", [4], "g:fc.bias", "g:u0")
    g += _shaped_op("BiasAdd", "g:ba", [2, 4], "g:m", "g:b", scope="Default/fc-Dense/BiasAdd-op2")
    g += _shaped_op("ReLU", "g:r", [2, 4], "g:ba", scope="Default/act-ReLU/ReLU-op3")
    g += _shaped_op("REF::Tanh:9", "g:t", [2, 4], "g:r", scope="Default/head-Tanh/Tanh-op4")
    g += field(
        1,
        field(1, "g:t")
        + field(1, "g:r")
        + field(2, "g:tup")
        + field(3, "g:tup")
        + field(4, "REF::MakeTuple:7"),
    )
    g += field(
        1,
        field(1, "g:tup") + field(1, "g:u1") + field(2, "g:d") + field(3, "g:d") + field(4, "REF::Depend:8"),
    )
    g += field(2, "g") + field(3, tensor("g:fc.weight", [4, 3], 1)) + field(3, tensor("g:fc.bias", [4], 1))
    g += field(5, field(1, "g:obs") + field(2, tensor("", [2, 3], 1)))
    g += field(6, field(1, "g:d"))
    return g


def test_a_tapped_copy_returns_the_outputs_then_each_computing_nodes_value() -> None:
    from auditor.worker.mindir_taps import TapError, tap

    prims = [*PRIMS, ("MakeTuple:7", "MakeTuple"), ("Depend:8", "Depend")]
    data = model(tappable_graph(), prims)
    copy, taps, cells = tap(data)
    info = read_info(copy)
    assert info.readable, info.reason
    # the file's two outputs first, then MatMul and BiasAdd (ReLU is an output: returned once)
    assert info.output_sources == (("Tanh",), ("ReLU",), ("MatMul",), ("BiasAdd",))
    assert [t.describe() for t in taps] == ["fc (Dense: MatMul)", "fc (Dense: BiasAdd)"]
    assert [(t.describe(), t.index) for t in cells] == [
        ("fc (Dense: MatMul)", 2),
        ("fc (Dense: BiasAdd)", 3),
        ("act (ReLU)", 1),
        ("head (Tanh)", 0),
    ]
    assert info.inputs == read_info(data).inputs and info.parameters == read_info(data).parameters
    with pytest.raises(TapError, match="no inner value"):  # the copy returns every value already
        tap(copy)
    with pytest.raises(TapError, match="no MakeTuple primitive"):
        tap(model(tappable_graph(), PRIMS))
    with pytest.raises(TapError, match="not a readable MindIR"):
        tap(b"\x0a\xff\xff")
