"""Read a MindIR's identity and a summary of its graph without importing any framework.

A MindIR is a protobuf ``ModelProto`` (proto2, ``mindspore/core/proto/mind_ir.proto``); its
fields are written in number order, so ``mind_ir_version`` (13) comes after the large graph
(7). A small wire-format reader walks the top-level fields, then the graph's nodes (for the
operator types) and parameters (for the weights' count, shapes and dtypes).

The file may come from anywhere (a shared database, another host), so the reader never
trusts it: every length is checked against what is left, nesting is fixed by the schema, and
the number of fields read is bounded. Encrypted, truncated or foreign files give
``readable=False`` with a reason, never an exception. A valid file whose graph is larger than
the bound keeps its identity and says why its graph was not summarised.

Also imported inside stack workers (the deployed-model collector), so it must run on Python
3.7 with the standard library only (tests/unit/worker/test_py37_compat.py).

Field numbers used (mind_ir.proto):
  ModelProto     1 ir_version, 2 producer_name, 3 producer_version, 5 model_version,
                 7 graph, 8 functions, 10 little_endian, 12 primitives, 13 mind_ir_version
  GraphProto     1 node, 2 name, 3 parameter, 5 input, 6 output
  NodeProto      1 input, 2 output (value names, graph-prefixed), 4 op_type ("REF::<primitive
                 name>" since MindSpore 2.0, else the type itself), 5 attribute (the one named
                 "shape" holds the node's output tensor: its dtype)
  AttributeProto 1 name, 12 tensors
  PrimitiveProto 1 name, 2 op_type
  ValueInfoProto 1 name, 2 tensor
  TensorProto    1 dims, 2 data_type, 7 name, 9 raw_data, 12 external_data
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from auditor.worker.wire import (
    Budget,
    BudgetExceeded,
    WireError,
    fields,
    message,
    packed_ints,
    signed,
    text,
    varint,
)

_STRING_FIELDS = {1: "ir_version", 2: "producer_name", 3: "producer_version", 5: "model_version"}

# TensorProto.DataType -> numpy-style names.
DTYPES = {
    1: "float32",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    8: "string",
    9: "bool",
    10: "float16",
    11: "float64",
    12: "uint32",
    13: "uint64",
    14: "complex64",
    15: "complex128",
    16: "bfloat16",
    17: "float64",
}

# MindSpore's encrypted export (mindspore.export(..., enc_key=...)) starts every block with a
# little-endian magic number: 0x7F3A5ED8 for AES-GCM (seen from 2.10), 0x7F3A5ED9 for AES-CBC
# (seen from 2.0).
ENCRYPTION_MAGIC = {b"\xd8\x5e\x3a\x7f": "AES-GCM", b"\xd9\x5e\x3a\x7f": "AES-CBC"}

# Bounds on the work one file can cause (about a second of reading at most). The PPO probe
# has about 350 fields (a node's attributes are skipped whole).
MAX_FIELDS = 500_000
MAX_OP_TYPES = 10_000


@dataclass(frozen=True)
class TensorInfo:
    """A graph input or parameter: name, shape (-1 for a dynamic dimension) and dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class MindIRInfo:
    sha256: str
    size: int
    readable: bool
    reason: str = ""
    ir_version: str | None = None
    producer_name: str | None = None
    producer_version: str | None = None
    model_version: str | None = None
    mind_ir_version: int | None = None
    little_endian: bool | None = None
    # The graph (main graph and functions), None when it was not summarised (see graph_note).
    op_types: tuple[str, ...] | None = None
    node_count: int | None = None
    parameter_count: int | None = None
    parameter_elements: int | None = None
    parameter_dtypes: tuple[str, ...] | None = None
    parameters: tuple[TensorInfo, ...] | None = None
    inputs: tuple[TensorInfo, ...] | None = None
    outputs: tuple[TensorInfo, ...] | None = None
    """The graph's declared outputs that are tensors (a tuple output declares none)."""
    compute_dtypes: tuple[str, ...] | None = None
    """The float dtypes the graph's computing nodes produce (casts, loads, constants and tuples
    left out): ("float16",) for a network that casts to fp16 before its layers, whatever
    dtype its inputs and outputs have."""
    float16_ops: tuple[str, ...] | None = None
    """The operator types that compute in float16 (empty when none does)."""
    output_sources: tuple[tuple[str, ...], ...] | None = None
    """Per output the network returns (a returned tuple flattened, in order): the operators
    that produce it, from the output inwards, through the ones that only relabel or reshape
    values (("Cast", "Tanh"): a tanh cast to another dtype); () where the graph does not say.
    What lets a model probe check each output's mathematical range (a tanh head in [-1, 1])."""
    graph_note: str = ""

    def describe(self) -> str:
        if not self.readable:
            return f"not a readable MindIR: {self.reason}"
        text = (
            f"MindIR version {self.mind_ir_version} exported by {self.producer_name} "
            f"{self.model_version} (ir_version {self.ir_version})"
        )
        if self.op_types is not None:
            text += (
                f", {self.node_count} nodes ({', '.join(self.op_types)}), {self.parameter_count} "
                f"parameters ({self.parameter_elements} values, {', '.join(self.parameter_dtypes or ())})"
            )
        elif self.graph_note:
            text += f"; graph not summarised: {self.graph_note}"
        return text


class _Incomplete(WireError):
    pass


def _tensor(chunk: memoryview, budget: Budget) -> TensorInfo:
    dims: list[int] = []
    dtype, name = 0, ""
    for number, wire, value in fields(chunk, 0, len(chunk), budget):
        if number == 1:
            dims.extend(packed_ints(wire, value, budget))
        elif number == 2 and wire == 0:
            assert isinstance(value, int)
            dtype = value
        elif number == 7:
            name = text(value, "tensor name")
    return TensorInfo(name, tuple(dims), DTYPES.get(dtype, f"type{dtype}"))


def _value_info(chunk: memoryview, budget: Budget) -> TensorInfo | None:
    name, tensor = "", None
    for number, _, value in fields(chunk, 0, len(chunk), budget):
        if number == 1:
            name = text(value, "input name")
        elif number == 2 and tensor is None:
            tensor = _tensor(message(value, "input tensor"), budget)
    if tensor is None:
        return None  # an input that is not a tensor (a tuple, a scalar attribute)
    return TensorInfo(name or tensor.name, tensor.shape, tensor.dtype)


@dataclass
class _Graph:
    name: str
    op_types: list[str]
    parameters: list[TensorInfo]
    inputs: list[TensorInfo]
    outputs: list[TensorInfo] = field(default_factory=list)
    node_dtypes: list[tuple[str, str]] = field(default_factory=list)
    """(op_type as written, the dtype of its output) of every node that declares one."""
    producers: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    """Value name -> (op_type as written, the node's input value names)."""
    output_names: list[str] = field(default_factory=list)
    """The graph's declared outputs by value name (a returned tuple too)."""


_FLOATS = ("float16", "bfloat16", "float32", "float64")
_NOT_COMPUTING = frozenset(
    {"Cast", "Load", "Constant", "MakeTuple", "TupleGetItem", "Depend", "UpdateState", "Return", "make_tuple"}
)
"""Nodes that move or relabel values: a network "computes in fp16" when its other nodes do."""


def _node_dtype(attribute: memoryview, budget: Budget) -> str | None:
    """The dtype of a node's "shape" attribute (its output tensor), None for other attributes."""
    name, dtype = "", None
    for n, _, v in fields(attribute, 0, len(attribute), budget):
        if n == 1:
            name = text(v, "attribute name")
        elif n == 12 and dtype is None:
            dtype = _tensor(message(v, "attribute tensor"), budget).dtype
    return dtype if name == "shape" else None


def _graph(chunk: memoryview, budget: Budget, with_io: bool) -> _Graph:
    g = _Graph("", [], [], [])
    for number, _, value in fields(chunk, 0, len(chunk), budget):
        if number == 2:
            g.name = text(value, "graph name")
        elif number == 1:
            node = message(value, "graph node")
            op_type, dtype = None, None
            inputs: list[str] = []
            outputs: list[str] = []
            for n, _, v in fields(node, 0, len(node), budget):
                if n == 4:
                    op_type = text(v, "node op_type")
                    g.op_types.append(op_type)
                elif n == 5 and dtype is None and isinstance(v, memoryview):
                    dtype = _node_dtype(v, budget)
                elif n in (1, 2) and with_io:
                    (inputs if n == 1 else outputs).append(text(v, "node input/output"))
            if op_type is not None and dtype is not None:
                g.node_dtypes.append((op_type, dtype))
            if op_type is not None:
                for name in outputs:
                    g.producers[name] = (op_type, tuple(inputs))
        elif number == 3:
            g.parameters.append(_tensor(message(value, "graph parameter"), budget))
        elif number == 5 and with_io:
            info = _value_info(message(value, "graph input"), budget)
            if info is not None:
                g.inputs.append(info)
        elif number == 6 and with_io:
            chunk_out = message(value, "graph output")
            info = _value_info(chunk_out, budget)
            if info is not None:
                g.outputs.append(info)
            for n, _, v in fields(chunk_out, 0, len(chunk_out), budget):
                if n == 1:
                    g.output_names.append(text(v, "output name"))
    # Names are written "<graph name>:<name>"; the graph name is an export counter.
    prefix = g.name + ":"
    g.parameters = [_unprefixed(t, prefix) for t in g.parameters]
    g.inputs = [_unprefixed(t, prefix) for t in g.inputs]
    return g


def _unprefixed(t: TensorInfo, prefix: str) -> TensorInfo:
    if prefix != ":" and t.name.startswith(prefix):
        return TensorInfo(t.name[len(prefix) :], t.shape, t.dtype)
    return t


def _primitive(chunk: memoryview, budget: Budget) -> tuple[str, str]:
    name = op_type = ""
    for number, _, value in fields(chunk, 0, len(chunk), budget):
        if number == 1:
            name = text(value, "primitive name")
        elif number == 2:
            op_type = text(value, "primitive op_type")
    return name, op_type


def _resolve(op_type: str, primitives: dict[str, str]) -> str:
    """'REF::MatMul:4' names a primitive of the model; older files hold the type itself."""
    if not op_type.startswith("REF::"):
        return op_type
    ref = op_type[len("REF::") :]
    if ref in primitives and primitives[ref]:
        return primitives[ref]
    base, sep, suffix = ref.rpartition(":")
    return base if sep and suffix.isdigit() else ref


_PASS_FIRST = frozenset({"Depend", "Load"})
"""Nodes whose value is their first input's (the others only order side effects)."""
_RELABEL = frozenset({"Cast", "Identity", "Reshape", "Squeeze", "ExpandDims", "Transpose"})
"""Nodes that keep the values they are given (another dtype or shape): a range survives them."""
MAX_TRACE = 64
"""How deep an output is traced (nested tuples and relabelling nodes; a file may loop)."""


def _sources(g: _Graph, refs: dict[str, str]) -> tuple[tuple[str, ...], ...]:
    """Per returned value (a tuple flattened): its producing operators, outermost first."""
    found: list[tuple[str, ...]] = []

    def walk(name: str, depth: int) -> None:
        chain: list[str] = []
        seen = set()
        while depth < MAX_TRACE and name in g.producers and name not in seen:
            seen.add(name)
            op_type, inputs = g.producers[name]
            op = _resolve(op_type, refs)
            depth += 1
            if op in ("MakeTuple", "make_tuple") and not chain:
                for item in inputs:
                    walk(item, depth)
                return
            if op in _PASS_FIRST and inputs:
                name = inputs[0]
                continue
            chain.append(op)
            if op not in _RELABEL or not inputs:
                break
            name = inputs[0]
        found.append(tuple(chain))

    for name in g.output_names:
        walk(name, 0)
    return tuple(found)


def _returned(g: _Graph, refs: dict[str, str]) -> list[str]:
    """The value names the network returns, a returned tuple flattened (as _sources)."""
    out: list[str] = []

    def walk(name: str, depth: int) -> None:
        while depth < MAX_TRACE and name in g.producers:
            op_type, inputs = g.producers[name]
            op = _resolve(op_type, refs)
            if op in ("MakeTuple", "make_tuple"):
                for item in inputs:
                    walk(item, depth + 1)
                return
            if op in _PASS_FIRST and inputs:
                name, depth = inputs[0], depth + 1
                continue
            break
        out.append(name)

    for name in g.output_names:
        walk(name, 0)
    return out


def output_dependencies(data: bytes) -> tuple[tuple[str, ...], ...] | None:
    """Per output the network returns (as ``MindIRInfo.output_sources``): the graph inputs it is
    computed from, by name. A NaN in an input must reach the outputs computed from it (IEEE
    arithmetic), and only those; None when the file cannot be read."""
    view = memoryview(data)
    budget = Budget(MAX_FIELDS)
    graph, primitives = None, []
    try:
        for number, wire, value in fields(view, 0, len(view), budget):
            if wire == 2 and number == 7:
                graph = message(value, "graph")
            elif wire == 2 and number == 12:
                primitives.append(message(value, "primitive"))
        if graph is None:
            return None
        refs = dict(_primitive(p, budget) for p in primitives)
        g = _graph(graph, budget, with_io=True)
    except WireError:
        return None
    prefix = g.name + ":"
    names = {t.name for t in g.inputs}
    inputs = {prefix + n: n for n in names} if prefix != ":" else {}
    inputs.update({n: n for n in names})
    memo: dict[str, frozenset[str]] = {}

    def deps(start: str) -> frozenset[str]:
        found: set[str] = set()
        stack, seen = [start], set()
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            if name in memo:
                found |= memo[name]
            elif name in inputs:
                found.add(inputs[name])
            elif name in g.producers:
                stack.extend(g.producers[name][1])
        memo[start] = frozenset(found)
        return memo[start]

    order = [t.name for t in g.inputs]
    return tuple(tuple(n for n in order if n in deps(name)) for name in _returned(g, refs))


def _elements(shape: tuple[int, ...]) -> int | None:
    if any(d < 0 for d in shape):
        return None
    n = 1
    for d in shape:
        n *= d
    return n


def read_info(data: bytes) -> MindIRInfo:
    """What a MindIR says about itself; never raises on bad input."""
    digest = hashlib.sha256(data).hexdigest()
    if not data:
        return MindIRInfo(digest, 0, False, "not a MindIR (empty file)")
    if bytes(data[:4]) in ENCRYPTION_MAGIC:
        mode = ENCRYPTION_MAGIC[bytes(data[:4])]
        return MindIRInfo(
            digest, len(data), False, f"encrypted MindIR ({mode}): it can only be read with its key"
        )
    view = memoryview(data)
    budget = Budget(MAX_FIELDS)
    found: dict[str, object] = {}
    graph: memoryview | None = None
    functions: list[memoryview] = []
    primitives: list[memoryview] = []
    try:
        for number, wire, value in fields(view, 0, len(view), budget):
            if wire == 0 and number == 13:
                assert isinstance(value, int)
                found["mind_ir_version"] = signed(value)
            elif wire == 0 and number == 10:
                found["little_endian"] = bool(value)
            elif wire == 2 and number in _STRING_FIELDS:
                found[_STRING_FIELDS[number]] = text(value, f"field {number} ({_STRING_FIELDS[number]})")
            elif wire == 2 and number == 7:
                graph = message(value, "graph")
            elif wire == 2 and number == 8:
                functions.append(message(value, "function"))
            elif wire == 2 and number == 12:
                primitives.append(message(value, "primitive"))
        if graph is None or found.get("producer_name") is None:
            raise WireError("no graph or producer field")
    except WireError as exc:
        return MindIRInfo(digest, len(data), False, f"encrypted or not a MindIR ({exc})")
    has_version = "mind_ir_version" in found
    found.setdefault("mind_ir_version", 0)
    try:
        summary = _summary(graph, functions, primitives, budget, has_version)
    except BudgetExceeded as exc:
        return MindIRInfo(digest, len(data), True, graph_note=str(exc), **found)  # type: ignore[arg-type]
    except _Incomplete as exc:
        return MindIRInfo(digest, len(data), False, f"truncated or incomplete MindIR ({exc})")
    except WireError as exc:
        return MindIRInfo(digest, len(data), False, f"the graph is malformed ({exc})", **found)  # type: ignore[arg-type]
    return MindIRInfo(digest, len(data), True, **found, **summary)  # type: ignore[arg-type]


def canonical_sha256(data: bytes) -> str | None:
    """A digest of a MindIR that does not depend on the order of its top-level ``primitives``
    (field 12): MindSpore Lite's converter writes them in a different order each time (the same
    conversion twice gives other bytes, measured). None when ``data`` is not a MindIR's wire
    format."""
    view = memoryview(data)
    parts: list[bytes] = []
    primitives: list[bytes] = []
    try:
        pos = 0
        for number, wire, _value in fields(view, 0, len(view), Budget(MAX_FIELDS)):
            start, pos = pos, _next_field(view, pos)
            (primitives if number == 12 and wire == 2 else parts).append(bytes(view[start:pos]))
    except WireError:
        return None
    h = hashlib.sha256()
    for chunk in parts + sorted(primitives):
        h.update(chunk)
    return h.hexdigest()


def _next_field(data: memoryview, pos: int) -> int:
    """Where the top-level field starting at ``pos`` ends (already checked by ``fields``)."""
    key, pos = varint(data, pos, len(data))
    wire = key & 7
    if wire == 0:
        return varint(data, pos, len(data))[1]
    if wire in (1, 5):
        return pos + (8 if wire == 1 else 4)
    length, pos = varint(data, pos, len(data))
    return pos + length


def _summary(
    graph: memoryview,
    functions: list[memoryview],
    primitives: list[memoryview],
    budget: Budget,
    has_version: bool,
) -> dict[str, object]:
    refs = dict(_primitive(p, budget) for p in primitives)
    main = _graph(graph, budget, with_io=True)
    op_types = list(main.op_types)
    for f in functions:
        op_types += _graph(f, budget, with_io=False).op_types
    # Protobuf has no end marker: a file cut after the graph is still a valid message. Files
    # whose nodes refer to primitives ("REF::") come from writers that also write the
    # primitives and mind_ir_version after the graph, so their absence means a cut file.
    referenced = [t for t in op_types if t.startswith("REF::")]
    missing = sorted({t[len("REF::") :] for t in referenced} - set(refs))
    if missing:
        raise _Incomplete(f"nodes refer to primitive {missing[0]!r}, which the file does not define")
    if referenced and not has_version:
        raise _Incomplete("the file ends before its mind_ir_version")
    distinct = sorted({_resolve(t, refs) for t in op_types})
    if len(distinct) > MAX_OP_TYPES:
        raise BudgetExceeded(f"more than {MAX_OP_TYPES} distinct operator types")
    computing = [
        (op, dtype)
        for op, dtype in ((_resolve(t, refs), d) for t, d in main.node_dtypes)
        if op not in _NOT_COMPUTING and dtype in _FLOATS
    ]
    counts = [_elements(p.shape) for p in main.parameters]
    return {
        "op_types": tuple(distinct),
        "node_count": len(op_types),
        "parameter_count": len(main.parameters),
        "parameter_elements": None if None in counts else sum(c for c in counts if c is not None),
        "parameter_dtypes": tuple(sorted({p.dtype for p in main.parameters})),
        "parameters": tuple(main.parameters),
        "inputs": tuple(main.inputs),
        "outputs": tuple(main.outputs),
        "compute_dtypes": tuple(sorted({d for _, d in computing})),
        "float16_ops": tuple(sorted({op for op, d in computing if d == "float16"})),
        "output_sources": _sources(main, refs),
    }
