"""Reading a file the auditor is pointed at, without trusting it: models, goldens, recorded
inputs and the MindIR files a stack serves all come through here, in the auditor and inside
stack workers (the ``models`` collector).

A path in a config can name anything: a FIFO (an ``open`` that never returns), a device
(``/dev/zero`` never ends), a directory, a symlink loop, a file larger than memory, or a
file on a network mount that hangs. So a read

- checks that the path is a regular file (``stat``, which follows symlinks: a loop is named
  as one), opens it without blocking (a FIFO swapped in after the ``stat`` cannot hang the
  ``open``) and checks the open descriptor again;
- caps the size (``max_bytes``) before reading, and again while reading (a growing file,
  or a ``/proc`` file whose size says 0);
- reads in a thread with a deadline (``timeout``): a read stuck in the kernel leaves that
  thread behind, never the caller;

and ``read_npz`` then checks an ``.npz`` before numpy allocates anything: members are
``.npy`` arrays whose declared sizes fit the cap (no zip bomb, no header that claims a
terabyte), loaded with ``allow_pickle=False``, of numeric dtypes (bool, integers, floats).

Every problem is a ``FileProblem`` whose message names the file and what is wrong with it,
so the caller fails only what needed that file. Python 3.7, standard library and numpy.
"""

from __future__ import annotations

import errno
import io
import os
import stat
import threading
import zipfile
from collections import namedtuple

MIB = 1024 * 1024
DEFAULT_MAX_MB = 2048
"""2 GiB: a MindIR is one protobuf message, which protobuf cannot make larger than 2 GiB
(bigger models are exported with their weights in separate files, which the auditor does
not read), and a golden or recorded-input file holds a few batches. A larger path is a
mistake (a disk image, a device, the wrong file), stopped before it is read into memory."""
DEFAULT_TIMEOUT = 60.0
"""Seconds: 2 GiB from a slow disk (about 50 MB/s) in under a minute; a read that takes
longer is a hung network mount."""
MAX_ARRAYS = 4096
"""Members of one .npz: a golden has one per model input and output."""
CHUNK = 4 * MIB
NUMERIC_KINDS = "biuf"
"""numpy dtype kinds the auditor computes with: bool, signed and unsigned integers, floats."""

Limits = namedtuple("Limits", ["max_bytes", "timeout"])
"""How much of one file is read, and for how long (``[files]`` in auditor.toml)."""
DEFAULT_LIMITS = Limits(DEFAULT_MAX_MB * MIB, DEFAULT_TIMEOUT)


class FileProblem(Exception):
    """A file that cannot be used; ``str()`` is ``path: problem``."""

    def __init__(self, path, problem):
        self.path = str(path)
        self.problem = problem
        Exception.__init__(self, "%s: %s" % (self.path, problem))


def size_text(n):
    """Bytes in words: 512 B, 3.0 MiB, 2.0 GiB."""
    if n < 1024:
        return "%d B" % n
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024.0
        if n < 1024 or unit == "TiB":
            return "%.1f %s" % (n, unit)
    return "%d B" % n


def _too_big(size, limits, exact=True):
    return "%s %s, more than the %s the auditor reads (raise [files] max_size_mb if it is right)" % (
        "is" if exact else "is at least",
        size_text(size),
        size_text(limits.max_bytes),
    )


def _not_regular(mode):
    """What the file is, when it is not a regular file; else None."""
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    for test, what in kinds:
        if test(mode):
            return "is %s, not a regular file" % what
    if not stat.S_ISREG(mode):
        return "is not a regular file"
    return None


def _os_problem(exc):
    if exc.errno == errno.ENOENT:
        return "no such file"
    if exc.errno == errno.ELOOP:
        return "is a symlink loop (too many levels of symbolic links)"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "not readable (permission denied)"
    if exc.errno == errno.ENOTDIR:
        return "no such file (a part of the path is not a directory)"
    if exc.errno == errno.ENAMETOOLONG:
        return "the path is too long"
    return "cannot be read: %s" % (exc.strerror or exc,)


def check_path(path, limits=DEFAULT_LIMITS):
    """The file's size, after checking that ``path`` is a regular file within the cap."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise FileProblem(path, _os_problem(exc)) from None
    except ValueError:  # a NUL byte in the path
        raise FileProblem(path, "not a valid path") from None
    why = _not_regular(st.st_mode)
    if why:
        raise FileProblem(path, why)
    if st.st_size > limits.max_bytes:
        raise FileProblem(path, _too_big(st.st_size, limits))
    return st.st_size


def read_bytes(path, limits=DEFAULT_LIMITS):
    """The whole file, or FileProblem (not a regular file, too large, unreadable, too slow)."""
    check_path(path, limits)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise FileProblem(path, _os_problem(exc)) from None
    try:
        st = os.fstat(fd)
        why = _not_regular(st.st_mode)
        if why:  # replaced between the stat and the open
            raise FileProblem(path, why)
        if st.st_size > limits.max_bytes:
            raise FileProblem(path, _too_big(st.st_size, limits))
    except BaseException:
        os.close(fd)
        raise
    return _read_fd(path, fd, limits)


def _read_fd(path, fd, limits):
    """Read ``fd`` (then close it) in a thread, so that a read the kernel never completes
    (a hung network mount) costs the caller ``limits.timeout`` seconds, not forever."""
    state = {"chunks": [], "size": 0, "error": None, "stop": False}

    def reader():
        try:
            while not state["stop"]:
                chunk = os.read(fd, CHUNK)
                if not chunk:
                    break
                state["chunks"].append(chunk)
                state["size"] += len(chunk)
                if state["size"] > limits.max_bytes:
                    state["error"] = _too_big(state["size"], limits, exact=False)
                    break
        except OSError as exc:
            state["error"] = _os_problem(exc)
        finally:
            os.close(fd)

    thread = threading.Thread(target=reader, name="read-file", daemon=True)
    thread.start()
    thread.join(limits.timeout)
    if thread.is_alive():
        state["stop"] = True
        raise FileProblem(
            path,
            "not read within %g s (a hung network filesystem or device? [files] read_timeout)"
            % limits.timeout,
        )
    if state["error"]:
        raise FileProblem(path, state["error"])
    return b"".join(state["chunks"])


# -- .npz ------------------------------------------------------------------------------------------
def check_array(path, name, array):
    """FileProblem unless ``array`` holds numbers the auditor can compute with."""
    dtype = array.dtype
    if dtype.fields is not None or dtype.kind not in NUMERIC_KINDS:
        if dtype.kind in "US":
            what = "text (dtype %s)" % dtype
        elif dtype.kind == "c":
            what = "complex numbers (dtype %s)" % dtype
        else:
            what = "dtype %s" % dtype
        raise FileProblem(
            path, "array %r holds %s; the auditor compares bool, integer and float arrays" % (name, what)
        )


def _member_header(member, data, limits, path):
    """The (shape, dtype) an .npy member declares, checked against the cap and the member's
    own size before numpy allocates the array."""
    import numpy as np

    fmt = np.lib.format
    try:
        version = fmt.read_magic(data)
        if version == (1, 0):
            shape, _fortran, dtype = fmt.read_array_header_1_0(data)
        elif version == (2, 0):
            shape, _fortran, dtype = fmt.read_array_header_2_0(data)
        else:
            raise ValueError("npy format version %s" % (version,))
    except Exception as exc:  # numpy raises ValueError, or its own format errors
        raise FileProblem(
            path, "member %r is not a readable .npy array (%s)" % (member.filename, exc)
        ) from None
    count = 1
    for d in shape:
        count *= int(d)
    if dtype.hasobject:
        raise FileProblem(path, "array %r holds Python objects (pickles are never loaded)" % _key(member))
    nbytes = count * dtype.itemsize
    if nbytes > limits.max_bytes:
        raise FileProblem(path, "array %r declares %s: %s" % (_key(member), shape, _too_big(nbytes, limits)))
    if nbytes > member.file_size:
        raise FileProblem(
            path,
            "array %r declares shape %s of %s (%s) but holds %s: the file is damaged"
            % (_key(member), list(shape), dtype, size_text(nbytes), size_text(member.file_size)),
        )
    return shape, dtype


def _key(member):
    name = member.filename
    return name[:-4] if name.endswith(".npy") else name


def read_npz(path, limits=DEFAULT_LIMITS, numeric=True):
    """An ``.npz`` file's arrays by name; with ``numeric``, each checked by ``check_array``
    (``numeric=False`` leaves the check to the caller: a golden's ``meta`` is text)."""
    import numpy as np

    data = read_bytes(path, limits)
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as exc:
        raise FileProblem(path, "not a readable .npz (%s: %s)" % (type(exc).__name__, exc)) from None
    if len(members) > MAX_ARRAYS:
        raise FileProblem(
            path, "holds %d members, more than the %d an .npz here may" % (len(members), MAX_ARRAYS)
        )
    total = sum(m.file_size for m in members)
    if total > limits.max_bytes:
        raise FileProblem(path, "unpacks to " + _too_big(total, limits))
    arrays = {}
    try:
        for member in members:
            if not member.filename.endswith(".npy"):
                raise FileProblem(path, "member %r is not an .npy array" % member.filename)
            with archive.open(member) as f:
                head = io.BytesIO(f.read(65536 + 16))  # magic and header (at most 64 KiB)
            _member_header(member, head, limits, path)
            with archive.open(member) as f:
                arrays[_key(member)] = np.lib.format.read_array(io.BytesIO(f.read()), allow_pickle=False)
    except FileProblem:
        raise
    except Exception as exc:  # numpy and zipfile raise ValueError, OSError, BadZipFile, EOFError...
        raise FileProblem(path, "not a readable .npz (%s: %s)" % (type(exc).__name__, exc)) from None
    if numeric:
        for name, array in arrays.items():
            check_array(path, name, array)
    return arrays
