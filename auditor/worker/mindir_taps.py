"""A copy of a MindIR whose graph also returns its inner values: where a model goes wrong.

A served model returns only its outputs, so when they drift nothing says which layer did it.
The copy keeps every node of the file and returns, after the file's own outputs, the value of
each computing node (a MatMul, a BiasAdd, a LayerNorm's output, an activation: up to a bound,
in the file's node order, which is the order they compute in). Both sides load the copy and
run the same inputs; the first inner value out of tolerance is where the stacks part
(auditor.policy.taps).

Each tapped value is named by the cell it belongs to: the parameters it reads (a Dense's
MatMul reads ``trunk.weight``: cell ``trunk``), else the scope MindSpore wrote on the node
(``Default/norm-LayerNorm/LayerNorm-op4``: cell ``norm``, type ``LayerNorm``).

The rewrite is done on the protobuf wire format with the standard library only (it runs in
the auditor; Python 3.7 compatible like auditor.worker.mindir). Field numbers beyond those
mindir.py reads: NodeProto 3 name, 7 domain (the node's scope); AttributeProto 16 type (19 a
tensor, 20 a tuple), 17 values (a tuple's elements), 18 seq_info; ValueInfoProto 4
denotation ("Tuple"), 5 attr_info. A file that is not laid out as MindSpore 2.x writes it (no
returned tuple, no MakeTuple primitive, a node without its output's shape) cannot be tapped:
TapError says why.
"""

from __future__ import annotations

from dataclasses import dataclass

from auditor.worker.mindir import _NOT_COMPUTING, MAX_FIELDS, _primitive, _resolve
from auditor.worker.wire import Budget, WireError, fields, message, text

MAX_TAPS = 64
"""Inner values returned at most (the first ones in the file's order)."""
_SKIP = (_NOT_COMPUTING - {"TupleGetItem"}) | {"Load", "UpdateState"}
"""Nodes whose value is not computed (a TupleGetItem is tapped: a LayerNorm's output is one)."""
_TENSOR, _TUPLE = 19, 20


class TapError(Exception):
    """Why a file cannot be tapped."""


@dataclass(frozen=True)
class Tap:
    """One inner value the copy returns."""

    value: str
    op: str
    cell: str
    """The cell path ("actor.norm"), "" where neither parameters nor scope say."""
    cell_type: str
    """The cell's class as the scope names it ("LayerNorm"), "" where it does not."""
    index: int = -1
    """Where the copy returns it: the file's own outputs first (0, 1, ...), then the taps."""

    def describe(self) -> str:
        """``norm (LayerNorm)``, ``mu (Dense: MatMul)``, ``(top level) (Exp)``."""
        where = self.cell or "(top level)"
        if self.cell_type and self.cell_type != self.op:
            return f"{where} ({self.cell_type}: {self.op})"
        return f"{where} ({self.op})"


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(number: int, value: object) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    data = value.encode() if isinstance(value, str) else bytes(value)  # type: ignore[arg-type]
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _copy(number: int, wire: int, value: object) -> bytes:
    if wire == 0:
        assert isinstance(value, int)
        return _field(number, value)
    if wire in (1, 5):
        assert isinstance(value, int)
        return _varint(number << 3 | wire) + value.to_bytes(8 if wire == 1 else 4, "little")
    return _field(number, bytes(value))  # type: ignore[arg-type]


@dataclass
class _Node:
    raw: bytes
    inputs: list
    outputs: list
    op: str
    scope: str
    element: bytes | None
    """The node's output as a tuple element's attribute (a tensor), None for a tuple output."""


def _node(chunk: memoryview, budget: Budget, refs: dict) -> _Node:
    inputs, outputs, op, scope, element = [], [], "", "", None
    for n, _, v in fields(chunk, 0, len(chunk), budget):
        if n == 1:
            inputs.append(text(v, "node input"))
        elif n == 2:
            outputs.append(text(v, "node output"))
        elif n == 4:
            op = _resolve(text(v, "node op_type"), refs)
        elif n == 7 and isinstance(v, memoryview):
            scope = text(v, "node domain")
        elif n == 5 and isinstance(v, memoryview):
            name, kind, tensor = "", None, None
            for an, _, av in fields(v, 0, len(v), budget):
                if an == 1:
                    name = text(av, "attribute name")
                elif an == 16 and isinstance(av, int):
                    kind = av
                elif an == 12 and tensor is None:
                    tensor = bytes(message(av, "attribute tensor"))
            if name == "shape" and kind == _TENSOR and tensor is not None:
                element = _field(12, tensor) + _field(16, _TENSOR)
    return _Node(bytes(chunk), inputs, outputs, op, scope, element)


def _cell(node: _Node, loads: dict, prefix: str) -> tuple[str, str]:
    """(cell path, cell type) of a node: the parameters it reads, else its scope."""
    params = []
    for name in node.inputs:
        if name in loads:
            param = loads[name]
            params.append(param[len(prefix) :] if param.startswith(prefix) else param)
    owners = sorted({p.rpartition(".")[0] for p in params if "." in p})
    parts = [s for s in node.scope.split("/")[1:-1] if s]  # Default/<cell>-<Type>/.../<Op>-opN
    path = ".".join(s.partition("-")[0] for s in parts)
    kind = parts[-1].partition("-")[2] if parts else ""
    if len(owners) == 1:
        owner = owners[0]
        return owner, kind if path == owner else ""
    return path, kind


def tap(data: bytes, limit: int = MAX_TAPS, ops=None) -> tuple[bytes, list[Tap], list[Tap]]:
    """The copy of ``data`` that also returns its inner values; what each one is (in the order
    the copy returns them, after the file's own outputs); and every computing node the copy
    returns, its own outputs included, in the file's node order (a cell's place in the graph).
    A value is returned once: a runtime may refuse a graph that returns one twice. ``ops``: a
    set of operator names: only the inner values those compute are returned (a policy's
    bounded hidden nodes, auditor.policy.hidden). Raises TapError."""
    view = memoryview(data)
    budget = Budget(MAX_FIELDS)
    try:
        top = list(fields(view, 0, len(view), budget))
        refs = dict(_primitive(message(v, "primitive"), budget) for n, w, v in top if n == 12 and w == 2)
        graphs = [v for n, w, v in top if n == 7 and w == 2]
        if len(graphs) != 1:
            raise TapError("the file has no single graph")
        graph = graphs[0]
        parts = list(fields(graph, 0, len(graph), budget))
        name = next((text(v, "graph name") for n, _, v in parts if n == 2), "")
        nodes = [_node(message(v, "node"), budget, refs) for n, _, v in parts if n == 1]
        outputs = [message(v, "graph output") for n, _, v in parts if n == 6]
    except WireError as exc:
        raise TapError(f"not a readable MindIR ({exc})") from None
    if len(outputs) != 1:
        raise TapError(f"the graph declares {len(outputs)} outputs, not one")
    returned = next(
        (text(v, "output name") for n, _, v in fields(outputs[0], 0, len(outputs[0]), budget) if n == 1), ""
    )
    producers = {o: node for node in nodes for o in node.outputs}
    make_tuple = next((f"REF::{k}" for k, v in refs.items() if v == "MakeTuple"), None)
    depend = next((f"REF::{k}" for k, v in refs.items() if v == "Depend"), None)
    if make_tuple is None:
        raise TapError("the file has no MakeTuple primitive to return a tuple with")
    # The returned value: Depend(MakeTuple(outputs...), state) as MindSpore 2.x writes it, or a tensor.
    state = None
    top_value = returned
    node = producers.get(returned)
    if node is not None and node.op == "Depend" and len(node.inputs) == 2:
        top_value, state = node.inputs
        node = producers.get(top_value)
    elements = list(node.inputs) if node is not None and node.op == "MakeTuple" else [top_value]
    attrs = []
    for e in elements:
        producer = producers.get(e)
        if producer is None or producer.element is None:
            raise TapError(f"the output {e} is not a tensor whose shape the file gives")
        attrs.append(producer.element)
    prefix = name + ":"
    loads = {n.outputs[0]: n.inputs[0] for n in nodes if n.op == "Load" and n.outputs and n.inputs}
    taps = []
    ordered = []
    for n in nodes:
        if len(taps) >= limit:
            break
        if n.op in _SKIP or n.element is None or not n.outputs:
            continue
        op = n.op
        if op == "TupleGetItem":  # the value of the node whose tuple it takes apart
            source = producers.get(n.inputs[0]) if n.inputs else None
            if source is None:
                continue
            op = source.op
        if ops is not None and op not in ops:
            continue
        cell, kind = _cell(n, loads, prefix)
        if n.outputs[0] in elements:
            ordered.append(Tap(n.outputs[0], op, cell, kind, elements.index(n.outputs[0])))
            continue
        t = Tap(n.outputs[0], op, cell, kind, len(elements) + len(taps))
        taps.append((n, t))
        ordered.append(t)
    if not taps:
        raise TapError("the graph has no inner value to return")
    values = elements + [t.value for _, t in taps]
    items = b"".join(_field(17, a) for a in attrs + [n.element for n, _ in taps])  # type: ignore[misc]
    shape = _field(16, _TUPLE) + items + _field(18, _field(1, 0))
    tuple_name = prefix + "auditor_taps"
    new_nodes = _field(
        1,
        b"".join(_field(1, v) for v in values)
        + _field(2, tuple_name)
        + _field(3, tuple_name)
        + _field(4, make_tuple)
        + _field(5, _field(1, "shape") + shape)
        + _field(7, "Default/MakeTuple-auditor"),
    )
    out_name = tuple_name
    if state is not None and depend is not None:
        out_name = prefix + "auditor_taps_depend"
        new_nodes += _field(
            1,
            _field(1, tuple_name)
            + _field(1, state)
            + _field(2, out_name)
            + _field(3, out_name)
            + _field(4, depend)
            + _field(5, _field(1, "shape") + shape)
            + _field(7, "Default/Depend-auditor"),
        )
    output = _field(6, _field(1, out_name) + _field(4, "Tuple") + _field(5, shape))
    body = b"".join(_copy(n, w, v) for n, w, v in parts if n != 6) + new_nodes + output
    out = b"".join(_field(7, body) if n == 7 and w == 2 else _copy(n, w, v) for n, w, v in top)
    return out, [t for _, t in taps], ordered
