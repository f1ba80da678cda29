"""auditor.worker.files: every path that is not a usable file fails at once with its name and
the problem (FIFO, device, directory, symlink loop, too large, too slow), and an .npz is
checked before numpy allocates or anyone computes with it (text, complex, objects, a header
that claims more than the file holds, a zip bomb)."""

from __future__ import annotations

import io
import json
import os
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from auditor.compare.golden import GoldenError, read_golden, write_golden
from auditor.worker import files
from auditor.worker.files import FileProblem, Limits

SMALL = Limits(64 * 1024, 5.0)


def finishes(fn: Callable[[], object], seconds: float = 20.0) -> object:
    """Run ``fn`` in a thread: the test fails (instead of hanging the suite) if it blocks."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the test
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{fn} blocked for {seconds} s"
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box.get("value")


def problem(path: object, limits: Limits = SMALL) -> str:
    with pytest.raises(FileProblem) as err:
        finishes(lambda: files.read_bytes(path, limits))
    assert str(err.value).startswith(f"{path}: ")
    return err.value.problem


def test_a_regular_file_and_a_link_to_one_are_read(tmp_path: Path) -> None:
    (tmp_path / "m.mindir").write_bytes(b"x" * 5000)
    os.symlink(tmp_path / "m.mindir", tmp_path / "link.mindir")
    assert files.read_bytes(tmp_path / "m.mindir", SMALL) == b"x" * 5000
    assert files.read_bytes(str(tmp_path / "link.mindir"), SMALL) == b"x" * 5000
    assert files.read_bytes(tmp_path / "m.mindir") == b"x" * 5000  # the default limits


def test_what_is_not_a_regular_file_fails_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    assert problem(tmp_path / "fifo") == "is a FIFO (named pipe), not a regular file"
    assert problem("/dev/zero") == "is a character device, not a regular file"
    assert problem(tmp_path) == "is a directory, not a regular file"
    os.symlink(tmp_path / "b", tmp_path / "a")
    os.symlink(tmp_path / "a", tmp_path / "b")
    assert "symlink loop" in problem(tmp_path / "a")
    os.symlink(tmp_path / "gone", tmp_path / "dangling")
    assert problem(tmp_path / "dangling") == "no such file"
    assert problem(tmp_path / "missing") == "no such file"
    (tmp_path / "f").write_text("x")
    assert "not a directory" in problem(tmp_path / "f" / "below")
    assert problem(str(tmp_path / "nul\0byte")) == "not a valid path"


def test_the_size_cap_is_checked_before_and_while_reading(tmp_path: Path) -> None:
    big = tmp_path / "big.mindir"
    with big.open("wb") as f:
        f.truncate(3 * 1024**3)  # sparse: 3 GiB that take no disk
    said = problem(big, files.DEFAULT_LIMITS)
    assert said.startswith("is 3.0 GiB, more than the 2.0 GiB the auditor reads") and "max_size_mb" in said
    # /proc files say size 0 and hold more: the cap holds while reading
    said = problem("/proc/self/maps", Limits(64, 5.0))
    assert said.startswith("is at least") and "more than the 64 B" in said


def test_a_read_that_never_completes_gives_up_at_its_deadline() -> None:
    r, w = os.pipe()  # a read of an empty pipe blocks, as one on a hung network mount does
    try:
        with pytest.raises(FileProblem, match=r"not read within 0.5 s .*read_timeout"):
            finishes(lambda: files._read_fd("/mnt/hung/m.mindir", r, Limits(1024, 0.5)))
    finally:
        os.close(w)  # the reader thread then sees the end of the pipe and closes r


def npz_bytes(**arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def npz_problem(path: Path, data: bytes, limits: Limits = SMALL) -> str:
    path.write_bytes(data)
    with pytest.raises(FileProblem) as err:
        files.read_npz(path, limits)
    return err.value.problem


def test_npz_arrays_must_be_numbers(tmp_path: Path) -> None:
    ok = tmp_path / "ok.npz"
    ok.write_bytes(npz_bytes(a=np.ones(3, np.float16), b=np.arange(3), c=np.array([True])))
    got = files.read_npz(ok, SMALL)
    assert sorted(got) == ["a", "b", "c"] and got["a"].dtype == np.float16
    p = tmp_path / "x.npz"
    assert "array 'a' holds text (dtype <U3)" in npz_problem(p, npz_bytes(a=np.array(["abc"])))
    assert "holds complex numbers" in npz_problem(p, npz_bytes(a=np.ones(2, np.complex64)))
    assert "holds text (dtype |S1)" in npz_problem(p, npz_bytes(a=np.array([b"x"])))
    rec = np.zeros(2, dtype=[("x", "f4"), ("y", "i4")])
    assert "array 'a' holds dtype" in npz_problem(p, npz_bytes(a=rec))
    assert "datetime" in npz_problem(p, npz_bytes(a=np.array(["2020-01-01"], "datetime64[D]")))
    buf = io.BytesIO()
    np.savez(buf, a=np.array([{"x": 1}], dtype=object))  # pickled: never loaded
    assert "holds Python objects" in npz_problem(p, buf.getvalue())
    # numeric=False leaves the check to the caller (a golden's meta is text)
    p.write_bytes(npz_bytes(meta=np.array("{}")))
    assert files.read_npz(p, SMALL, numeric=False)["meta"].dtype.kind == "U"


def test_npz_sizes_are_checked_before_numpy_allocates(tmp_path: Path) -> None:
    p = tmp_path / "x.npz"
    # a header that claims a terabyte over a few bytes of data
    npy = io.BytesIO()
    np.lib.format.write_array_header_1_0(npy, {"descr": "<f8", "fortran_order": False, "shape": (2**37,)})
    npy.write(b"\0" * 64)
    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w") as z:
        z.writestr("a.npy", npy.getvalue())
    said = npz_problem(p, zipped.getvalue(), files.DEFAULT_LIMITS)
    assert "array 'a' declares" in said and "1.0 TiB" in said and "more than the 2.0 GiB" in said
    said = npz_problem(p, zipped.getvalue(), Limits(2**50, 5.0))
    assert "but holds 192 B: the file is damaged" in said
    # a zip bomb: small on disk, large unpacked
    bomb = io.BytesIO()
    np.savez_compressed(bomb, a=np.zeros(1024 * 1024, np.float64))
    assert len(bomb.getvalue()) < SMALL.max_bytes
    assert "unpacks to is 8.0 MiB" in npz_problem(p, bomb.getvalue())
    with zipfile.ZipFile(zipped, "w") as z:
        z.writestr("notes.txt", "hello")
    assert "member 'notes.txt' is not an .npy array" in npz_problem(p, zipped.getvalue())
    assert npz_problem(p, b"PK\x03\x04 truncated").startswith("not a readable .npz")
    assert npz_problem(p, b"hello").startswith("not a readable .npz (BadZipFile")
    os.mkfifo(tmp_path / "fifo.npz")
    with pytest.raises(FileProblem, match="FIFO"):
        finishes(lambda: files.read_npz(tmp_path / "fifo.npz", SMALL))


def golden_with(path: Path, meta: dict, **arrays: np.ndarray) -> Path:
    x = np.ones((2, 3), np.float32)
    arrays = {"input_0": x, "output_0": x, **arrays}
    path.write_bytes(npz_bytes(meta=np.array(json.dumps(meta)), **arrays))
    return path


META = {"format": "auditor-golden", "version": 1}


@pytest.mark.parametrize(
    ("meta", "arrays", "said"),
    [
        ({**META, "output_names": 5}, {}, "meta output_names must be a list of names (strings), not int 5"),
        ({**META, "input_names": ["obs", 3]}, {}, "meta input_names must be a list of names"),
        ({**META, "output_names": ["a", "a"]}, {}, "meta output_names names an array twice"),
        ({**META, "model_sha256": 7}, {}, "meta model_sha256 must be a str, not int 7"),
        ({**META, "seed": True}, {}, "meta seed must be a int"),
        ({**META, "version": True}, {}, "golden format version True"),
        ({"format": "auditor-golden", "version": "1"}, {}, "golden format version '1'"),
        (META, {"output_0": np.array(["left", "right"])}, "array 'output_0' holds text"),
        (META, {"output_0": np.ones(3, np.complex128)}, "array 'output_0' holds complex numbers"),
        (META, {"input_0": np.array([b"raw"])}, "array 'input_0' holds text (dtype |S3)"),
        (META, {"extra": np.ones(1)}, "unexpected array(s) 'extra'"),
    ],
)
def test_a_golden_is_checked_whole_before_use(tmp_path: Path, meta: dict, arrays: dict, said: str) -> None:
    p = golden_with(tmp_path / "g.npz", meta, **arrays)
    with pytest.raises(GoldenError) as err:
        read_golden(p)
    assert str(err.value).startswith(f"{p}: ") and said in str(err.value)


def test_a_golden_meta_that_is_not_one_json_text(tmp_path: Path) -> None:
    p = tmp_path / "g.npz"
    x = np.ones(2, np.float32)
    p.write_bytes(npz_bytes(input_0=x, output_0=x, meta=np.array([1.0, 2.0])))
    with pytest.raises(GoldenError, match=r"'meta' is not one JSON text \(float64, shape \[2\]\)"):
        read_golden(p)
    p.write_bytes(npz_bytes(input_0=x, output_0=x, meta=np.array("[" * 100000)))
    with pytest.raises(GoldenError, match="'meta' is not JSON"):
        read_golden(p)


def test_a_golden_written_by_the_auditor_reads_back_within_limits(tmp_path: Path) -> None:
    x = np.ones((4, 3), np.float32)
    p = write_golden(tmp_path / "g.npz", [x], [x], ["obs"], ["mean"], model_sha256="ab", seed=3)
    assert read_golden(p, SMALL).output_names == ["mean"]
    with pytest.raises(GoldenError, match=r"g.npz: is .* more than the 100 B"):
        read_golden(p, Limits(100, 5.0))
    os.mkfifo(tmp_path / "fifo.npz")
    with pytest.raises(GoldenError, match="is a FIFO"):
        finishes(lambda: read_golden(tmp_path / "fifo.npz"))
