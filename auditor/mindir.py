"""Read a MindIR's identity without importing any framework.

A MindIR is a protobuf ``ModelProto``; its fields are written in number order, so
``mind_ir_version`` (13) comes after the large graph (7). A small wire-format walk over the
top-level fields finds it without parsing the graph. Encrypted, truncated or foreign files
give ``readable=False`` with a reason, never an exception.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

_STRING_FIELDS = {1: "ir_version", 2: "producer_name", 3: "producer_version", 5: "model_version"}


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

    def describe(self) -> str:
        if not self.readable:
            return f"not a readable MindIR: {self.reason}"
        return (
            f"MindIR version {self.mind_ir_version} exported by {self.producer_name} "
            f"{self.model_version} (ir_version {self.ir_version})"
        )


class _WireError(ValueError):
    pass


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise _WireError(f"truncated varint at byte {pos}")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise _WireError(f"varint longer than 10 bytes at byte {pos}")


def read_info(data: bytes) -> MindIRInfo:
    digest = hashlib.sha256(data).hexdigest()
    fields: dict[str, object] = {}
    pos = 0
    seen_graph = False
    try:
        if not data:
            raise _WireError("empty file")
        while pos < len(data):
            key, pos = _varint(data, pos)
            number, wire = key >> 3, key & 7
            if number == 0:
                raise _WireError(f"field number 0 at byte {pos}")
            if wire == 0:
                value, pos = _varint(data, pos)
                if number == 13:
                    fields["mind_ir_version"] = value
                elif number == 10:
                    fields["little_endian"] = bool(value)
            elif wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            elif wire == 2:
                length, pos = _varint(data, pos)
                if pos + length > len(data):
                    raise _WireError(f"field {number} claims {length} bytes, file ends first")
                chunk = data[pos : pos + length]
                pos += length
                if number in _STRING_FIELDS:
                    try:
                        fields[_STRING_FIELDS[number]] = chunk.decode("utf-8")
                    except UnicodeDecodeError:
                        raise _WireError(f"field {number} is not text") from None
                elif number == 7:
                    seen_graph = True
            else:
                raise _WireError(f"wire type {wire} at byte {pos}")
            if pos > len(data):
                raise _WireError("truncated field")
        if not seen_graph or fields.get("producer_name") is None:
            raise _WireError("no graph or producer field")
    except _WireError as exc:
        return MindIRInfo(digest, len(data), False, f"encrypted or not a MindIR ({exc})")
    fields.setdefault("mind_ir_version", 0)
    return MindIRInfo(digest, len(data), True, **fields)  # type: ignore[arg-type]
