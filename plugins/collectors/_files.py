"""What every collector needs: bounded, suspicious reads of small text files, the
``key=value`` and ``[a,b],[c]`` formats of Ascend's files, and commands run with a deadline.

Runs inside stacks: Python 3.7, standard library only. Host files are written by installers
and people, so every read assumes the worst: a file may be missing, unreadable, a FIFO,
empty, huge, binary or garbled. Each of those becomes an ``Unreadable`` whose message names
the file and the problem; collectors put it in their section's ``"unknown"`` and move on.
"""

import contextlib
import os
import re
import selectors
import shutil
import signal
import stat
import subprocess
import time

MAX_BYTES = 256 * 1024
BOM = b"\xef\xbb\xbf"
# A text file may hold a few odd characters; more than this share of control characters
# (other than tab/newline/CR/FF/VT) means it is not the text we expect.
CONTROL_SHARE = 0.05

_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_GROUP = re.compile(r"\[([^\[\]]*)\]")


class Unreadable(Exception):
    """A value could not be determined; the message says which file or command and why."""


class TimedOut(Unreadable):
    """A command missed its deadline (and was killed)."""


def under(root, relative):
    """``relative`` (an absolute-looking path such as ``etc/os-release``) below ``root``."""
    return os.path.join(root or "/", relative.lstrip("/"))


def system_path(context, relative):
    """A host file such as ``/etc/ascend_install.info`` below the stack's ``system_root``."""
    return under(context.get("system_root") or "/", relative)


def ascend_path(context, *parts):
    return os.path.join(context.get("ascend_root") or "/usr/local/Ascend", *parts)


def describe_bytes(data):
    """Why ``data`` is not readable text, or None when it is."""
    if not data.strip():
        return "empty"
    if b"\x00" in data:
        return "binary content (NUL bytes)"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return "garbled (not UTF-8 text at byte %d)" % exc.start
    if len(_CONTROL.findall(text)) > CONTROL_SHARE * len(text):
        return "garbled (control characters)"
    return None


def read_bytes(path, limit=MAX_BYTES, truncate=False):
    """At most ``limit`` bytes of a regular file; larger files are refused unless ``truncate``."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise Unreadable("%s: missing" % path) from None
    except PermissionError:
        raise Unreadable("%s: permission denied" % path) from None
    except OSError as exc:
        raise Unreadable("%s: cannot read (%s)" % (path, exc.strerror or exc)) from None
    if not stat.S_ISREG(info.st_mode):
        # A FIFO or device would block or never end: never open one.
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise Unreadable("%s: %s" % (path, kind))
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except PermissionError:
        raise Unreadable("%s: permission denied" % path) from None
    except OSError as exc:
        raise Unreadable("%s: cannot read (%s)" % (path, exc.strerror or exc)) from None
    if len(data) > limit:
        if not truncate:
            raise Unreadable("%s: larger than %d KiB, not read" % (path, limit // 1024))
        data = data[:limit]
    return data


def read_text(path, limit=MAX_BYTES, truncate=False):
    """The text of a small text file, or Unreadable naming the file and the problem."""
    data = read_bytes(path, limit, truncate)
    if truncate and len(data) == limit:
        # A cut may split a multi-byte character: drop the partial last line.
        data = data[: data.rfind(b"\n") + 1] or data
    if data.startswith(BOM):
        data = data[len(BOM) :]  # written by Windows tools: the first key would be lost
    problem = describe_bytes(data)
    if problem:
        raise Unreadable("%s: %s" % (path, problem))
    return data.decode("utf-8")


def parse_kv(text):
    """``key=value`` lines (no spaces around ``=`` in Ascend's files, but tolerated) as a dict.

    Comment (``#``) and blank lines are skipped; surrounding double or single quotes are
    removed from values. A text with no such line raises ValueError.
    """
    values = {}
    for line in text.lstrip("\ufeff").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not _KEY.match(key):
            continue
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        values[key] = value
    if not values:
        raise ValueError("no key=value lines")
    return values


def read_kv(path, limit=MAX_BYTES):
    """parse_kv() of a file, or Unreadable naming the file."""
    text = read_text(path, limit)
    try:
        return parse_kv(text)
    except ValueError as exc:
        raise Unreadable("%s: garbled (%s)" % (path, exc)) from None


def parse_groups(value):
    """``[a,b],[c]`` -> ``[["a", "b"], ["c"]]``; items stay strings exactly as written.

    Trailing dots are meaningful in Ascend's ranges (``[24.1,24.1.]`` means 24.1.*), so
    nothing but surrounding spaces is removed. Raises ValueError for anything else.
    """
    value = value.strip()
    if not value:
        return []
    rest = _GROUP.sub("", value)
    if rest.replace(",", "").strip() or not _GROUP.search(value):
        raise ValueError("not a [a,b],[c] list: %r" % (value[:80],))
    return [[item.strip() for item in group.split(",") if item.strip()] for group in _GROUP.findall(value)]


def parse_codes(value):
    """A ``compatible_version`` list: ``[V100R001C15],[V100R001C18,V100R001C20]`` ->
    ``["V100R001C15", "V100R001C18,V100R001C20"]`` (a range is kept as ``"A,B"``)."""
    return [",".join(group) for group in parse_groups(value)]


def field(values, key, path, unknown, name=None, convert=None):
    """``values[key]`` (converted), or None with the reason recorded under ``name`` in ``unknown``."""
    name = name or key
    if key not in values:
        unknown[name] = "%s: no %s= line" % (path, key)
        return None
    if convert is None:
        return values[key]
    try:
        return convert(values[key])
    except ValueError as exc:
        unknown[name] = "%s: %s: %s" % (path, key, exc)
        return None


class CommandResult(object):
    """A finished command: exit status and its output as bytes (check before decoding)."""

    def __init__(self, argv, returncode, stdout, stderr, seconds):
        self.argv, self.returncode = argv, returncode
        self.stdout, self.stderr, self.seconds = stdout, stderr, seconds

    @property
    def command(self):
        return " ".join(self.argv)

    def text(self):
        return self.stdout.decode("utf-8", "replace")

    def error_tail(self, chars=200):
        """The last words of stderr (or stdout) for a reason a person will read."""
        text = (self.stderr or self.stdout).decode("utf-8", "replace").strip()
        return " ".join(text[-chars:].split())


def find_executable(name, environ):
    """A command's path: as given when it contains a slash, else looked up on ``environ``'s PATH."""
    if os.sep in name:
        return name if os.path.isfile(name) else None
    return shutil.which(name, path=environ.get("PATH", os.defpath))


def run_command(argv, timeout, environ=None, limit=MAX_BYTES):
    """Run ``argv`` in its own process group; return a CommandResult or raise Unreadable.

    At the deadline, or when it has written more than ``limit`` bytes, the whole process
    group is killed (a sick ``npu-smi`` hangs in the driver and may have children holding
    the pipes), and the reason says so.
    """
    command = " ".join(argv)
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=environ,
            start_new_session=True,
            close_fds=True,
        )
    except FileNotFoundError:
        raise Unreadable("%s: not found" % argv[0]) from None
    except PermissionError:
        raise Unreadable("%s: permission denied (not executable?)" % argv[0]) from None
    except OSError as exc:
        raise Unreadable("%s: cannot run (%s)" % (argv[0], exc.strerror or exc)) from None
    deadline = started + timeout
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    chunks = {out_fd: [], err_fd: []}
    total = 0
    problem = None
    selector = selectors.DefaultSelector()
    try:
        for pipe in (proc.stdout, proc.stderr):
            selector.register(pipe, selectors.EVENT_READ)
        while selector.get_map() and problem is None:
            left = deadline - time.monotonic()
            if left <= 0:
                problem = "timed out after %g s" % timeout
                break
            for key, _ in selector.select(left):
                data = os.read(key.fd, 65536)
                if not data:
                    selector.unregister(key.fileobj)
                    continue
                chunks[key.fd].append(data)
                total += len(data)
                if total > limit:
                    problem = "wrote more than %d KiB" % (limit // 1024)
                    break
        if problem is None:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                problem = "timed out after %g s" % timeout
    finally:
        selector.close()
        if problem is not None or proc.poll() is None:
            _kill_group(proc)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    if problem is not None:
        error = TimedOut if problem.startswith("timed out") else Unreadable
        raise error("`%s`: %s; process group killed" % (command, problem))
    return CommandResult(
        argv, proc.returncode, b"".join(chunks[out_fd]), b"".join(chunks[err_fd]), time.monotonic() - started
    )


def _kill_group(proc):
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
