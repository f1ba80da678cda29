"""Protobuf's wire format read without protobuf: the primitives every artifact reader shares
(``worker/mindir.py`` for MindIR, the ort runtime's ``onnx_wire.py`` for ONNX; both formats are
protobuf messages).

The bytes may come from anywhere, so nothing is trusted: every length is checked against what
is left, the number of fields read is bounded (``Budget``), and a malformed message raises
``WireError`` saying where, which a reader turns into ``readable=False`` with the reason.

Python 3.7 and the standard library only: imported inside stack workers too.
"""

from __future__ import annotations

from collections.abc import Iterator


class WireError(ValueError):
    """The bytes are not the message they should be."""


class BudgetExceeded(WireError):
    """More fields than the reader agreed to read."""


class Budget:
    """Counts fields read across the whole file; past the limit the reader stops."""

    def __init__(self, limit: int):
        self.limit = self.left = limit

    def take(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise BudgetExceeded(f"more than {self.limit} protobuf fields")


def varint(data: memoryview, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise WireError(f"truncated varint at byte {pos}")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise WireError(f"varint longer than 10 bytes at byte {pos}")


def signed(value: int) -> int:
    """int64 fields are written as two's complement in 64 bits."""
    return value - (1 << 64) if value >= 1 << 63 else value


def fields(
    data: memoryview, start: int, end: int, budget: Budget
) -> Iterator[tuple[int, int, int | memoryview]]:
    """(field number, wire type, value) of one message; value is an int or a view of the bytes."""
    pos = start
    while pos < end:
        budget.take()
        at = pos
        key, pos = varint(data, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise WireError(f"field number 0 at byte {at}")
        if wire == 0:
            value, pos = varint(data, pos, end)
            yield number, wire, value
        elif wire == 1 or wire == 5:
            width = 8 if wire == 1 else 4
            if pos + width > end:
                raise WireError(f"field {number} at byte {at}: {width}-byte value runs past its message")
            yield number, wire, int.from_bytes(data[pos : pos + width], "little")
            pos += width
        elif wire == 2:
            length, pos = varint(data, pos, end)
            if pos + length > end:
                raise WireError(
                    f"field {number} at byte {at} claims {length} bytes, only {end - pos} are left"
                )
            yield number, wire, data[pos : pos + length]
            pos += length
        else:
            raise WireError(f"wire type {wire} at byte {at}")


def text(value: int | memoryview, what: str) -> str:
    if not isinstance(value, memoryview):
        raise WireError(f"{what} is not a string")
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        raise WireError(f"{what} is not text") from None


def message(value: int | memoryview, what: str) -> memoryview:
    if not isinstance(value, memoryview):
        raise WireError(f"{what} is not a message")
    return value


def integer(value: int | memoryview, what: str) -> int:
    """An int64 field."""
    if isinstance(value, memoryview):
        raise WireError(f"{what} is not a varint")
    return signed(value)


def packed_ints(wire: int, value: int | memoryview, budget: Budget, what: str = "dims") -> list[int]:
    """A repeated int64 field: one varint, or (packed) a run of varints."""
    if wire == 0:
        assert isinstance(value, int)
        return [signed(value)]
    if wire != 2:
        raise WireError(f"{what} is neither a varint nor a packed run of varints")
    assert isinstance(value, memoryview)
    out, pos = [], 0
    while pos < len(value):
        budget.take()
        v, pos = varint(value, pos, len(value))
        out.append(signed(v))
    return out
