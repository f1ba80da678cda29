"""Temporary directories that name their owner, so that nothing is left behind for long.

A cycle's staging directory (``auditor-cycle-*``), each stack worker's work directory
(``auditor-<stack>-*``) and the directory of a process's ssh control sockets
(``auditor-ssh-*``, under ``socket_root()``) hold an owner file: host, pid and the pid's
start time. Normal exits, exceptions and signals remove them; a SIGKILL (or an ``os._exit``)
cannot. The next auditor that starts a cycle reaps every such directory whose owner process
is gone, after killing any process still running inside it (a worker stuck in native code
does not notice that its parent died; an ssh master connection runs in its socket
directory).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

OWNER_FILE = ".auditor-owner"
PREFIX = "auditor-"
SOCKET_ROOT_MAX = 48
"""Longest temporary directory that still leaves room for a unix socket path (108 bytes, ssh
adds a 17-character suffix while it binds) below ``<root>/auditor-ssh-XXXXXXXX/<12 chars>``."""


def socket_root() -> str:
    """Where directories of unix sockets go: the temporary directory when its path is short
    enough for one, else /tmp."""
    root = tempfile.gettempdir()
    return root if len(root) <= SOCKET_ROOT_MAX else "/tmp"


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (tells a reused pid apart)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (IndexError, ValueError):
        return None


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner() -> dict[str, object]:
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "start": start_time(pid)}


def owner_alive(info: dict[str, object]) -> bool:
    """Whether the owner may still be running. Another host's process cannot be checked: it
    counts as alive (the directory is left to its own host)."""
    if info.get("host") != socket.gethostname():
        return True
    pid = info.get("pid")
    if not isinstance(pid, int) or not pid_alive(pid):
        return False
    started = info.get("start")
    return started is None or start_time(pid) in (None, started)


def make(prefix: str, root: str | None = None) -> Path:
    """A new private directory ``<root>/<prefix>XXXX`` holding the owner file."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
    (path / OWNER_FILE).write_text(json.dumps(owner()))
    return path


@contextlib.contextmanager
def owned(prefix: str, root: str | None = None) -> Iterator[Path]:
    """``make`` as a context manager that removes the directory on every way out."""
    path = make(prefix, root)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _read_owner(path: Path) -> dict[str, object] | None:
    try:
        info = json.loads((path / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def processes_in(path: Path) -> list[int]:
    """Pids whose working directory is ``path`` or inside it (a worker runs in its work dir)."""
    found = []
    target = str(path.resolve())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if cwd == target or cwd.startswith(target + "/"):
            found.append(int(entry.name))
    return found


def processes_marked(name: str, value: str) -> list[int]:
    """Pids of this user's processes whose environment holds ``name=value`` (what a worker
    started inherits: auditor.worker.fingerprint.WORKER_MARK), wherever they run now."""
    needle = f"{name}={value}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone, or another user's
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def orphans(root: str | None = None) -> list[Path]:
    """This host's owned temporary directories whose owner process is gone."""
    base = Path(root or tempfile.gettempdir())
    out = []
    try:
        entries = list(base.iterdir())
    except OSError:
        return []
    for path in entries:
        if not path.name.startswith(PREFIX) or not path.is_dir() or path.is_symlink():
            continue
        info = _read_owner(path)
        if info is not None and not owner_alive(info):
            out.append(path)
    return out


def reap(root: str | None = None) -> list[Path]:
    """Kill the processes left running in orphaned directories, then remove the directories.
    Without ``root``: the temporary directory and ``socket_root()``. Returns what was removed."""
    roots = [root] if root is not None else list(dict.fromkeys([tempfile.gettempdir(), socket_root()]))
    removed = []
    for path in [p for r in roots for p in orphans(r)]:
        for pid in processes_in(path):
            with contextlib.suppress(OSError):
                if os.getpgid(pid) == pid:
                    os.killpg(pid, signal.SIGKILL)  # a worker leads its own process group
                else:
                    os.kill(pid, signal.SIGKILL)
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            removed.append(path)
    return removed


__all__ = [
    "OWNER_FILE",
    "make",
    "orphans",
    "owned",
    "owner_alive",
    "pid_alive",
    "processes_in",
    "processes_marked",
    "reap",
    "socket_root",
]
