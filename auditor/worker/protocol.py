"""Framed request/response messages between the auditor and a stack worker.

A frame is ``b"AUDF"`` + a 4-byte big-endian header length + a UTF-8 JSON header +
the raw blobs the header lists. Tensors and byte strings travel as blobs (never as
JSON lists), so a 256x64 float32 batch costs 64 KiB, not a megabyte of text, and
comes back bit for bit. In the JSON, a tensor is ``{"__tensor__": i, "dtype": "<f4",
"shape": [...]}`` and a byte string is ``{"__bytes__": i}``, where i indexes the blobs.

Python 3.7 compatible: the same module is used by the auditor and by the workers.
"""

import json
import struct

import numpy as np

MAGIC = b"AUDF"
_HEAD = struct.Struct(">4sI")
MAX_HEADER = 64 * 1024 * 1024
MAX_BLOBS = 4 * 1024 * 1024 * 1024


class ProtocolError(Exception):
    """The other side sent something that is not a frame."""


def _pack(value, blobs):
    if isinstance(value, np.ndarray):
        # tobytes() is C order whatever the layout; ascontiguousarray would turn shape () into (1,).
        blobs.append(value.tobytes())
        return {"__tensor__": len(blobs) - 1, "dtype": value.dtype.str, "shape": list(value.shape)}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (bytes, bytearray, memoryview)):
        blobs.append(bytes(value))
        return {"__bytes__": len(blobs) - 1}
    if isinstance(value, dict):
        return {str(k): _pack(v, blobs) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_pack(v, blobs) for v in value]
    return value


def _unpack(value, blobs):
    if isinstance(value, dict):
        if "__tensor__" in value:
            dtype = np.dtype(value["dtype"])
            shape = tuple(value["shape"])
            data = blobs[value["__tensor__"]]
            expected = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
            if len(data) != expected:
                raise ProtocolError(
                    "tensor of dtype %s and shape %s needs %d bytes, frame has %d"
                    % (dtype, shape, expected, len(data))
                )
            return np.frombuffer(data, dtype=dtype).reshape(shape).copy()
        if "__bytes__" in value:
            return blobs[value["__bytes__"]]
        return {k: _unpack(v, blobs) for k, v in value.items()}
    if isinstance(value, list):
        return [_unpack(v, blobs) for v in value]
    return value


def encode(message):
    """Serialize a message (dicts, lists, scalars, strings, numpy arrays, bytes) to one frame."""
    blobs = []
    body = _pack(message, blobs)
    header = json.dumps({"body": body, "blobs": [len(b) for b in blobs]}, allow_nan=True).encode("utf-8")
    return b"".join([_HEAD.pack(MAGIC, len(header)), header] + blobs)


def _read_exact(stream, n):
    chunks = []
    left = n
    while left:
        chunk = stream.read(left)
        if not chunk:
            raise EOFError("stream closed after %d of %d bytes" % (n - left, n))
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(stream, max_blobs=MAX_BLOBS):
    """Read one message from a binary stream; None on a clean end of stream. ``max_blobs``:
    the most bytes of tensors and byte strings one frame may announce (the auditor reads a
    worker's answers with what a tensor or a file could need, not the protocol's own limit)."""
    first = stream.read(_HEAD.size)
    if not first:
        return None
    if len(first) < _HEAD.size:
        first += _read_exact(stream, _HEAD.size - len(first))
    magic, length = _HEAD.unpack(first)
    if magic != MAGIC:
        raise ProtocolError("bad frame magic %r (is something else writing to the worker's stdout?)" % magic)
    if length > MAX_HEADER:
        raise ProtocolError("frame header of %d bytes is over the %d-byte limit" % (length, MAX_HEADER))
    try:
        header = json.loads(_read_exact(stream, length).decode("utf-8"))
        sizes = [int(n) for n in header["blobs"]]
        body = header["body"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ProtocolError("unreadable frame header: %s" % exc) from None
    if any(n < 0 for n in sizes) or sum(sizes) > max_blobs:
        raise ProtocolError(
            "frame announces %d bytes of tensors, over the %d-byte limit" % (sum(sizes), max_blobs)
        )
    blobs = [_read_exact(stream, n) for n in sizes]
    try:
        return _unpack(body, blobs)
    except (ValueError, IndexError, TypeError, KeyError) as exc:
        raise ProtocolError("frame body does not match its blobs: %s" % exc) from None


def write_frame(stream, message):
    stream.write(encode(message))
    stream.flush()
