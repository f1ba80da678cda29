"""Read an ONNX model's identity and graph summary with the standard library only: the ONNX
artifact format's reader (``auditor.plugins.runtimes.ort.spec.ONNX``), the analogue of
``auditor/worker/mindir.py``. Written and validated against onnxruntime's own view of 16
MindSpore exports in notes/converter_onnx (B3).

Python 3.7 compatible (no walrus, no match, no builtin generics at runtime); no onnx package.
An ONNX file is a protobuf ``ModelProto`` (onnx/onnx.proto3). Fields used:

  ModelProto        1 ir_version (int64), 2 producer_name, 3 producer_version, 4 domain,
                    5 model_version (int64), 6 doc_string, 7 graph, 8 opset_import (repeated),
                    14 metadata_props (repeated StringStringEntryProto: 1 key, 2 value),
                    25 functions (repeated FunctionProto, counted only)
  OperatorSetIdProto 1 domain ("" = ai.onnx), 2 version
  GraphProto        1 node, 2 name, 5 initializer, 11 input, 12 output
  NodeProto         4 op_type, 7 domain
  TensorProto       1 dims, 2 data_type, 8 name, 14 data_location (1 = EXTERNAL)
  ValueInfoProto    1 name, 2 type
  TypeProto         1 tensor_type (Tensor: 1 elem_type, 2 shape); other kinds are reported by name
  TensorShapeProto  1 dim (Dimension: 1 dim_value, 2 dim_param)

Untrusted input: the wire-format primitives are ``auditor.worker.wire``'s (every length
checked, the number of fields read bounded), and any malformed file gives
``{"readable": False, "reason": ...}``; read_info never raises.

Quick sniff: an ONNX file starts with field 1 as a varint (byte 0x08); a MindIR starts with
field 1 as a string (byte 0x0a, "0.1.1"); a MindSpore Lite .ms (flatbuffer) has "MSL2" at
bytes 4..8.
"""

import hashlib

from auditor.worker.mindir import DTYPES
from auditor.worker.wire import Budget, WireError, fields, integer, message, packed_ints, text

MAX_FIELDS = 2000000

# onnx.TensorProto.DataType: MindIR's numbering (both come from onnx.proto) up to 16, then ONNX's own
ELEM_TYPES = dict(DTYPES)
ELEM_TYPES.update(
    {
        0: "undefined",
        17: "float8e4m3fn",
        18: "float8e4m3fnuz",
        19: "float8e5m2",
        20: "float8e5m2fnuz",
        21: "uint4",
        22: "int4",
        23: "float4e2m1",
    }
)
TYPE_KINDS = {1: "tensor", 4: "sequence", 5: "map", 8: "sparse_tensor", 9: "optional"}


def _each(value, what, budget):
    """The fields of a sub-message."""
    chunk = message(value, what)
    return fields(chunk, 0, len(chunk), budget)


def _shape(value, budget):
    dims = []
    for n, _, v in _each(value, "shape", budget):
        if n != 1:
            continue
        dim = None  # neither value nor param: unknown dimension
        for dn, _, dv in _each(v, "dimension", budget):
            if dn == 1:
                dim = integer(dv, "dim_value")
            elif dn == 2:
                dim = text(dv, "dim_param")
        dims.append(dim)
    return dims


def _value_info(value, what, budget):
    name, kind, elem, shape = "", None, None, None
    for n, _, v in _each(value, what, budget):
        if n == 1:
            name = text(v, "value_info name")
        elif n == 2:
            for tn, _, tv in _each(v, "type", budget):
                if tn in TYPE_KINDS:
                    kind = TYPE_KINDS[tn]
                if tn == 1:
                    for en, _, ev in _each(tv, "tensor type", budget):
                        if en == 1:
                            code = integer(ev, "elem_type")
                            elem = ELEM_TYPES.get(code, "type%d" % code)
                        elif en == 2:
                            shape = _shape(ev, budget)
    # shape None = rank unknown (no shape field); a list may hold ints, strings (symbolic) or None
    return {"name": name, "kind": kind, "dtype": elem, "shape": shape}


def _tensor(value, budget):
    dims, dtype, name, external = [], 0, "", False
    for n, w, v in _each(value, "initializer", budget):
        if n == 1:
            dims.extend(packed_ints(w, v, budget))
        elif n == 2:
            dtype = integer(v, "data_type")
        elif n == 8:
            name = text(v, "tensor name")
        elif n == 14:
            external = integer(v, "data_location") == 1
    return {
        "name": name,
        "dims": dims,
        "dtype": ELEM_TYPES.get(dtype, "type%d" % dtype),
        "external": external,
    }


def _graph(value, budget):
    g = {"name": "", "nodes": [], "initializers": [], "inputs": [], "outputs": []}
    for n, _, v in _each(value, "graph", budget):
        if n == 1:
            op_type, domain = "", ""
            for nn, _, nv in _each(v, "node", budget):
                if nn == 4:
                    op_type = text(nv, "op_type")
                elif nn == 7:
                    domain = text(nv, "node domain")
            g["nodes"].append((domain, op_type))
        elif n == 2:
            g["name"] = text(v, "graph name")
        elif n == 5:
            g["initializers"].append(_tensor(v, budget))
        elif n == 11:
            g["inputs"].append(_value_info(v, "graph input", budget))
        elif n == 12:
            g["outputs"].append(_value_info(v, "graph output", budget))
    return g


def read_info(data):
    """Identity and graph summary of an ONNX model (bytes). Never raises."""
    data = bytes(data)
    info = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "readable": False}
    if not data:
        info["reason"] = "empty file"
        return info
    if data[4:8] == b"MSL2":
        info["reason"] = "not ONNX: a MindSpore Lite flatbuffer (.ms, identifier MSL2)"
        return info
    view = memoryview(data)
    budget = Budget(MAX_FIELDS)
    top = {"opset_import": [], "metadata_props": {}, "functions": 0}
    graph = None
    try:
        for n, _, v in fields(view, 0, len(view), budget):
            if n == 1:
                top["ir_version"] = integer(v, "ir_version")
            elif n in (2, 3, 4, 6):
                key = {2: "producer_name", 3: "producer_version", 4: "domain", 6: "doc_string"}[n]
                top[key] = text(v, key)
            elif n == 5:
                top["model_version"] = integer(v, "model_version")
            elif n == 7:
                graph = v
            elif n == 8:
                domain, version = "", None
                for on, _, ov in _each(v, "opset_import", budget):
                    if on == 1:
                        domain = text(ov, "opset domain")
                    elif on == 2:
                        version = integer(ov, "opset version")
                top["opset_import"].append({"domain": domain, "version": version})
            elif n == 14:
                key = value = ""
                for mn, _, mv in _each(v, "metadata_props", budget):
                    if mn == 1:
                        key = text(mv, "metadata key")
                    elif mn == 2:
                        value = text(mv, "metadata value")
                top["metadata_props"][key] = value
            elif n == 25:
                top["functions"] += 1
        if "ir_version" not in top or graph is None:
            raise WireError("no ir_version or no graph (not an ONNX ModelProto)")
        g = _graph(graph, budget)
    except WireError as exc:
        if data[:1] == b"\x0a":
            info["reason"] = "not ONNX (starts like a MindIR: field 1 is a string): %s" % exc
        else:
            info["reason"] = "truncated or not an ONNX model: %s" % exc
        return info
    init_names = set(t["name"] for t in g["initializers"])
    counts = {}
    for domain, op in g["nodes"]:
        key = op if domain in ("", "ai.onnx") else domain + "::" + op
        counts[key] = counts.get(key, 0) + 1
    info.update(top)
    info.update(
        {
            "readable": True,
            "graph_name": g["name"],
            "node_count": len(g["nodes"]),
            "op_types": sorted(counts),
            "op_type_counts": counts,
            "initializer_count": len(g["initializers"]),
            "initializer_dtypes": sorted(set(t["dtype"] for t in g["initializers"])),
            "external_data": any(t["external"] for t in g["initializers"]),
            # graph inputs that are not initializers (IR < 4 lists weights as inputs too)
            "inputs": [x for x in g["inputs"] if x["name"] not in init_names],
            "outputs": g["outputs"],
        }
    )
    return info
