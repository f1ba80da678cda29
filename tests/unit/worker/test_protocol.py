"""Tests for auditor.worker.protocol: framing, bit-exact tensors, and malformed input."""

from __future__ import annotations

import io
import json
import math
import struct

import numpy as np
import pytest

from auditor.worker.protocol import MAGIC, MAX_HEADER, ProtocolError, encode, read_frame, write_frame


def roundtrip(message):
    stream = io.BytesIO(encode(message))
    out = read_frame(stream)
    assert stream.read() == b"", "read_frame must consume exactly one frame"
    return out


def assert_same_tensor(got, expected: np.ndarray) -> None:
    assert isinstance(got, np.ndarray)
    assert got.dtype == expected.dtype
    assert got.dtype.str == expected.dtype.str  # byte order included
    assert got.shape == expected.shape
    # Logical (C-order) bytes: independent of the source's memory layout.
    assert got.tobytes() == expected.tobytes()


def frame(header: dict | bytes, *blobs: bytes, magic: bytes = MAGIC) -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack(">4sI", magic, len(raw)) + raw + b"".join(blobs)


rng = np.random.default_rng(1234)

DTYPE_CASES = {
    "float32": rng.standard_normal((2, 3)).astype(np.float32),
    "float16": rng.standard_normal((4,)).astype(np.float16),
    "float64": np.array([0.1, -0.0, 1e308, 5e-324, -math.pi]),
    "int8": np.array([-128, -1, 0, 127], dtype=np.int8),
    "int32": np.array([[-(2**31), 2**31 - 1], [7, -7]], dtype=np.int32),
    "int64": np.array([-(2**63), 2**63 - 1, 3], dtype=np.int64),
    "uint8": np.arange(256, dtype=np.uint8),
    "bool": np.array([True, False, True, True]),
    "complex64": (rng.standard_normal(3) + 1j * rng.standard_normal(3)).astype(np.complex64),
}


@pytest.mark.parametrize("name", list(DTYPE_CASES))
def test_dtypes_round_trip_bit_exact(name):
    arr = DTYPE_CASES[name]
    out = roundtrip({"x": arr})
    assert set(out) == {"x"}
    assert_same_tensor(out["x"], arr)


def test_nonfinite_and_signed_zero_tensor_values_are_bit_exact():
    arr = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0], dtype=np.float32)
    # a NaN with a payload other than the default one
    arr = np.concatenate([arr, np.array([0x7FC00123], dtype=np.uint32).view(np.float32)])
    assert_same_tensor(roundtrip(arr), arr)


_BASE = np.arange(24, dtype=np.float32).reshape(2, 3, 4) * 1.5
SHAPE_CASES = {
    "scalar": np.array(3.25, dtype=np.float32),
    "empty": np.zeros((0,), dtype=np.float32),
    "empty_2d": np.zeros((3, 0), dtype=np.int64),
    "vector": np.array([1.0, 2.0, 3.0], dtype=np.float32),
    "3d": _BASE,
    "strided_slice": np.arange(30, dtype=np.int32).reshape(5, 6)[:, ::2],
    "negative_stride": _BASE[::-1, :, ::-2],
    "transposed": _BASE.T,
    "fortran": np.asfortranarray(np.arange(12, dtype=np.float64).reshape(3, 4)),
    "big_endian": np.array([1.5, -2.25, 3e38, np.inf], dtype=">f4"),
    "big_endian_2d": np.arange(6, dtype=">i8").reshape(2, 3),
}


@pytest.mark.parametrize("arr", list(SHAPE_CASES.values()), ids=list(SHAPE_CASES))
def test_shapes_and_layouts_round_trip(arr):
    out = roundtrip({"t": arr})["t"]
    assert_same_tensor(out, arr)
    np.testing.assert_array_equal(out, arr)
    assert out.flags.c_contiguous


def test_scalar_tensor_value_survives():
    """Whatever the shape bug, a 0-d tensor's value must survive."""
    arr = np.array(-7, dtype=np.int16)
    out = roundtrip(arr)
    assert out.dtype == np.int16
    assert out.size == 1
    assert int(out.reshape(())) == -7


def test_big_endian_keeps_values_not_just_bytes():
    arr = np.array([1.0, 2.5, -3.0], dtype=">f4")
    out = roundtrip(arr)
    assert out.dtype.byteorder == ">"
    assert out.tolist() == [1.0, 2.5, -3.0]


def test_nested_message_with_several_tensors_and_blobs():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([1, 2, 3], dtype=np.int8)
    c = np.array([[True], [False]])
    message = {
        "op": "run",
        "id": 17,
        "ratio": 0.5,
        "flag": True,
        "none": None,
        "text": "héllo ✓",
        "inputs": [a, {"mask": c, "raw": b"\x00\x01\xffAUDF"}, (b, "tag")],
        "meta": {"model": bytearray(b"mindir-bytes"), "view": memoryview(b"mv"), "empty": b""},
        7: "int key",
    }
    out = roundtrip(message)
    assert out["op"] == "run" and out["id"] == 17 and out["ratio"] == 0.5
    assert out["flag"] is True and out["none"] is None and out["text"] == "héllo ✓"
    assert out["7"] == "int key"  # keys become strings, as in JSON
    assert_same_tensor(out["inputs"][0], a)
    assert_same_tensor(out["inputs"][1]["mask"], c)
    assert out["inputs"][1]["raw"] == b"\x00\x01\xffAUDF"
    assert isinstance(out["inputs"][1]["raw"], bytes)
    assert isinstance(out["inputs"][2], list)  # tuples come back as lists
    assert_same_tensor(out["inputs"][2][0], b)
    assert out["inputs"][2][1] == "tag"
    assert out["meta"] == {"model": b"mindir-bytes", "view": b"mv", "empty": b""}
    assert all(type(v) is bytes for v in out["meta"].values())


def test_tensors_travel_as_blobs_not_json():
    arr = np.zeros((256, 64), dtype=np.float32)
    data = encode({"batch": arr})
    (length,) = struct.unpack(">I", data[4:8])
    header = json.loads(data[8 : 8 + length])
    assert header["blobs"] == [arr.nbytes]
    assert header["body"] == {"batch": {"__tensor__": 0, "dtype": "<f4", "shape": [256, 64]}}
    assert len(data) == 8 + length + arr.nbytes


def test_nan_and_inf_in_json_part():
    out = roundtrip({"values": [math.nan, math.inf, -math.inf, 1.0], "x": {"y": math.nan}})
    nan, pinf, ninf, one = out["values"]
    assert math.isnan(nan) and pinf == math.inf and ninf == -math.inf and one == 1.0
    assert math.isnan(out["x"]["y"])


def test_numpy_scalars_become_python_scalars():
    out = roundtrip(
        {
            "f32": np.float32(1.5),
            "f64": np.float64(-0.25),
            "i64": np.int64(2**40),
            "u8": np.uint8(255),
            "b": np.bool_(True),
            "nan": np.float32("nan"),
            "list": [np.int32(3), np.float16(0.5)],
        }
    )
    assert out["f32"] == 1.5 and type(out["f32"]) is float
    assert out["f64"] == -0.25 and type(out["f64"]) is float
    assert out["i64"] == 2**40 and type(out["i64"]) is int
    assert out["u8"] == 255 and type(out["u8"]) is int
    assert out["b"] is True
    assert math.isnan(out["nan"])
    assert out["list"] == [3, 0.5] and [type(v) for v in out["list"]] == [int, float]


def test_decoded_arrays_are_writable_copies():
    arr = np.arange(4, dtype=np.float32)
    data = encode({"a": arr, "b": arr})
    out = read_frame(io.BytesIO(data))
    for key in ("a", "b"):
        assert out[key].flags.writeable
        assert out[key].flags.owndata
    out["a"][0] = 42.0
    assert out["b"][0] == 0.0  # two tensors never share memory
    assert arr[0] == 0.0


def test_frames_back_to_back_then_clean_eof():
    messages = [{"n": i, "t": np.full((i,), i, dtype=np.int32), "b": bytes([i]) * i} for i in range(4)]
    stream = io.BytesIO(b"".join(encode(m) for m in messages))
    for i in range(4):
        out = read_frame(stream)
        assert out["n"] == i
        assert_same_tensor(out["t"], messages[i]["t"])
        assert out["b"] == bytes([i]) * i
    assert read_frame(stream) is None
    assert read_frame(stream) is None


def test_empty_stream_is_clean_eof():
    assert read_frame(io.BytesIO(b"")) is None


def test_write_frame_writes_and_flushes():
    class Sink(io.BytesIO):
        flushed = 0

        def flush(self):
            self.flushed += 1
            super().flush()

    sink = Sink()
    write_frame(sink, {"op": "ping", "x": np.ones(2)})
    assert sink.flushed >= 1
    assert sink.getvalue() == encode({"op": "ping", "x": np.ones(2)})


class Trickle(io.RawIOBase):
    """A stream that returns at most a few bytes per read, like a pipe under load."""

    def __init__(self, data: bytes, step: int = 3):
        self.data, self.pos, self.step = data, 0, step

    def readable(self):
        return True

    def read(self, n=-1):
        n = self.step if n < 0 else min(n, self.step)
        chunk = self.data[self.pos : self.pos + n]
        self.pos += len(chunk)
        return chunk


def test_short_reads_are_reassembled():
    arr = np.arange(10, dtype=np.float64)
    stream = Trickle(encode({"a": arr, "b": b"xyz"}) * 2)
    for _ in range(2):
        out = read_frame(stream)
        assert_same_tensor(out["a"], arr)
        assert out["b"] == b"xyz"
    assert read_frame(stream) is None


@pytest.mark.parametrize("cut", [1, 5, 7, 8, 12, -17, -1])
def test_truncated_frame_raises_eoferror(cut):
    data = encode({"a": np.arange(8, dtype=np.float32), "b": b"0123456789"})
    cut = cut if cut > 0 else len(data) + cut
    with pytest.raises(EOFError):
        read_frame(io.BytesIO(data[:cut]))


def test_truncated_second_frame_raises_after_first_is_read():
    one = encode({"n": 1})
    stream = io.BytesIO(one + encode({"n": 2})[:-1])
    assert read_frame(stream) == {"n": 1}
    with pytest.raises(EOFError):
        read_frame(stream)


def test_bad_magic_raises_protocol_error():
    data = encode({"n": 1})
    with pytest.raises(ProtocolError, match="magic"):
        read_frame(io.BytesIO(b"XXXX" + data[4:]))
    # e.g. a stray print() on the worker's stdout
    with pytest.raises(ProtocolError):
        read_frame(io.BytesIO(b"hello world\n" + data))


def test_tensor_byte_count_must_match_shape():
    header = {"body": {"t": {"__tensor__": 0, "dtype": "<f4", "shape": [2, 3]}}, "blobs": [20]}
    with pytest.raises(ProtocolError, match="24 bytes"):
        read_frame(io.BytesIO(frame(header, b"\x00" * 20)))
    header["blobs"] = [28]
    with pytest.raises(ProtocolError):
        read_frame(io.BytesIO(frame(header, b"\x00" * 28)))
    # the same frame with the right count decodes
    header["blobs"] = [24]
    out = read_frame(io.BytesIO(frame(header, b"\x00" * 24)))
    assert_same_tensor(out["t"], np.zeros((2, 3), dtype=np.float32))


def test_tensor_byte_count_checked_for_scalar_shape():
    header = {"body": {"__tensor__": 0, "dtype": "<f8", "shape": []}, "blobs": [4]}
    with pytest.raises(ProtocolError):
        read_frame(io.BytesIO(frame(header, b"\x00" * 4)))


def test_over_limit_header_length_raises_protocol_error():
    head = struct.pack(">4sI", MAGIC, MAX_HEADER + 1)
    # No header bytes follow: the limit must be checked before trying to read them.
    with pytest.raises(ProtocolError, match="limit"):
        read_frame(io.BytesIO(head))
    with pytest.raises(ProtocolError):
        read_frame(io.BytesIO(struct.pack(">4sI", MAGIC, 0xFFFFFFFF)))


def test_header_at_limit_is_not_rejected_as_over_limit():
    # A header of exactly MAX_HEADER bytes passes the limit check; here the stream then
    # ends, which is an EOFError rather than a ProtocolError.
    with pytest.raises(EOFError):
        read_frame(io.BytesIO(struct.pack(">4sI", MAGIC, MAX_HEADER)))
