"""How the auditor runs a worker on a stack's host: the argv that starts it there, one
shared ssh connection per host, and what a failed connection means in words a person can
act on.

ssh is always run with ``BatchMode=yes`` (never waits for a password or a host-key
question), a ``ConnectTimeout``, and connection sharing: the first worker for a host opens
a master connection (``ssh -M -N -f``) whose socket lives in a private directory (mode
0700) of this process; every later worker for that host is a session on it. Masters are
closed at the end of a cycle (``close_all``), and by themselves after ``PERSIST`` seconds
of idleness if the auditor dies. The directory (``auditor-ssh-*``) names its owner
(auditor.common.tempdirs) and is removed by ``shutdown`` (at exit, and by the daemon's cycle
child before its ``os._exit``); one left by a killed process is reaped, with the master
running in it, by the next cycle.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import re
import shlex
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from auditor.common import tempdirs
from auditor.config.tables import HostConfig

PERSIST = 60
SERVER_ALIVE = 5
"""Seconds between keep-alives: a dead connection is noticed within 3 of them."""


class HostError(Exception):
    """A host could not be reached (or its interpreter could not be run); ``message`` says
    which host, what went wrong and what to do."""


def options_file(host: HostConfig, control: str) -> str | None:
    """The host's own ssh options (its identity file, ``options``: a ``SetEnv`` may carry a
    token) written to a file beside its control socket, in the private directory (0700, the
    file 0600), for ``ssh -F``: a process's command line is readable by every user of the
    machine, the file is not. The user's and the system's ssh configs are included after them,
    as ssh reads them without ``-F`` (the options first: they win, as ``-o`` does). None when
    the control socket's directory is not there (nothing to write into)."""
    directory = os.path.dirname(control)
    if not os.path.isdir(directory):
        return None
    path = control + ".conf"
    lines = [f"# the auditor's options for host {host.name}, kept off ssh's command line"]
    if host.identity_file:
        lines += [f'IdentityFile "{host.identity_file}"', "IdentitiesOnly yes"]
    lines += list(host.options)
    lines += ["Include ~/.ssh/config", "Include /etc/ssh/ssh_config"]
    text = "\n".join(lines) + "\n"
    with contextlib.suppress(OSError), open(path) as f:
        if f.read() == text:
            return path
    scratch = f"{path}.{os.getpid()}.{threading.get_ident()}"  # each writer its own, renamed over
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(scratch, path)
    return path


def base_ssh(host: HostConfig, control: str | None) -> list[str]:
    """ssh and its options for ``host``, up to (not including) the destination."""
    argv = [
        "ssh",
        "-T",
        "-o",
        "BatchMode=yes",
        "-o",
        f"ConnectTimeout={max(1, round(host.connect_timeout))}",
        "-o",
        f"ServerAliveInterval={SERVER_ALIVE}",
        "-o",
        "ServerAliveCountMax=3",
        "-o",
        "LogLevel=ERROR",
    ]
    config = options_file(host, control) if control else None
    if control:
        argv += ["-o", f"ControlPath={control}"]
    if host.port:
        argv += ["-p", str(host.port)]
    if config is not None:
        return [*argv, "-F", config]
    if host.identity_file:
        argv += ["-i", host.identity_file, "-o", "IdentitiesOnly=yes"]
    for option in host.options:
        argv += ["-o", option]
    return argv


def remote_argv(host: HostConfig | None, words: Sequence[str], control: str | None = None) -> list[str]:
    """The local argv that runs ``words`` on ``host`` (None: this machine) with stdin and
    stdout attached. ssh hands its command to the remote user's shell, so it is quoted."""
    if host is None:
        return list(words)
    if host.ssh:
        return [
            *base_ssh(host, control),
            "-o",
            "ControlMaster=no",
            host.ssh,
            "--",
            shlex.join(words),
        ]
    return [*host.command, *words]


# -- what went wrong ---------------------------------------------------------------------------
_SSH_FAILURES: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(r"REMOTE HOST IDENTIFICATION HAS CHANGED|Host key for .* has changed", re.I),
        "its host key CHANGED since it was recorded in known_hosts (a reinstalled host, or someone "
        "in the middle): check the new key with the host's owner, then remove the old one with "
        "ssh-keygen -R",
    ),
    (
        re.compile(r"Host key verification failed|No .* host key is known", re.I),
        "its host key is not known (BatchMode cannot ask): check the key's fingerprint with the "
        "host's owner and add it to known_hosts (ssh-keyscan), or point options = "
        '["UserKnownHostsFile=..."] at a file that has it',
    ),
    (
        re.compile(r"Permission denied|Too many authentication failures", re.I),
        "authentication failed: the key (identity_file, or the agent's) is not accepted for this "
        "user; add its public half to the user's ~/.ssh/authorized_keys there",
    ),
    (
        re.compile(r"Connection refused", re.I),
        "the connection was refused: nothing listens on that port; is sshd running there, and is port right?",
    ),
    (
        re.compile(r"timed out|Connection timeout", re.I),
        "no answer before ConnectTimeout: the host is down, unreachable or firewalled "
        "(or raise connect_timeout)",
    ),
    (
        re.compile(r"Could not resolve hostname|Name or service not known", re.I),
        "its name does not resolve: check the ssh value (or an alias in ~/.ssh/config)",
    ),
    (
        re.compile(r"No route to host|Network is unreachable", re.I),
        "there is no route to it: check the address and the network",
    ),
    (
        re.compile(r"Connection closed|Connection reset|Broken pipe|closed by remote host|lost", re.I),
        "the connection was dropped: the host, its sshd or the network went away",
    ),
]


def explain(
    host: HostConfig | None, status: int | None, stderr: str, python: str = "", connected: bool = False
) -> str | None:
    """A message for a connection or launch that ended with ``status``, or None when the
    status is not a transport failure (the worker itself exited). 255 is ssh's own failure;
    126/127 is the host's shell or ``env`` failing to run the interpreter. ``connected``:
    the worker had answered before (a 255 then is a dropped connection)."""
    where = host.describe() if host is not None else "this machine"
    tail = _tail(stderr)
    if status in (126, 127) and ("python" in stderr or "No such file" in stderr or "not found" in stderr):
        what = "not executable" if status == 126 else "not found"
        return (
            f"{where}: the interpreter {python or '?'} is {what} there "
            f"(set the stack's python to a path on that host){tail}"
        )
    if host is None or status is None:
        return None
    if host.ssh and status == 255:
        for pattern, meaning in _SSH_FAILURES:
            if pattern.search(stderr):
                return f"{where}: {meaning}{tail}"
        if connected:
            return (
                f"{where}: the connection was lost (ssh exit status 255): the host, its sshd or the "
                f"network went away; the worker there ends when it notices{tail}"
            )
        return f"{where}: ssh failed (exit status 255){tail}"
    if not host.ssh and status not in (0, 1) and stderr.strip() and "Traceback" not in stderr:
        said = [line.strip() for line in stderr.strip().splitlines() if line.strip()][-1]
        return f"{where}: the command prefix failed (exit status {status}: {said}){tail}"
    return None


def _tail(stderr: str, lines: int = 6) -> str:
    text = [line for line in stderr.strip().splitlines() if line.strip()][-lines:]
    return ("\n  ssh said:\n" + "\n".join("    " + line for line in text)) if text else ""


# -- shared connections ----------------------------------------------------------------------------
@dataclass
class _Master:
    control: str
    error: str | None = None


class Connections:
    """The ssh master connection of each host, for this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._host_locks: dict[str, threading.Lock] = {}
        self._masters: dict[str, _Master] = {}
        self._dir: str | None = None

    def _control_dir(self) -> str:
        with self._lock:
            if self._dir is None or not os.path.isdir(self._dir):
                # Short and private: a unix socket path has ~100 bytes, and whoever can reach
                # the socket can run commands as us on the host. It names its owner, so that
                # the next cycle reaps it if this process is killed.
                self._dir = str(tempdirs.make("auditor-ssh-", tempdirs.socket_root()))
                os.chmod(self._dir, 0o700)
            return self._dir

    def _host_lock(self, name: str) -> threading.Lock:
        with self._lock:
            return self._host_locks.setdefault(name, threading.Lock())

    def control_path(self, host: HostConfig) -> str:
        # Short: the name's first letters and a digest of it (names may share a prefix).
        digest = hashlib.sha256(host.name.encode()).hexdigest()[:5]
        name = re.sub(r"[^A-Za-z0-9._-]", "_", host.name)[:6]
        return os.path.join(self._control_dir(), f"{name}-{digest}")

    def ensure(self, host: HostConfig) -> str | None:
        """The control socket of a live master connection to ``host`` (opened if needed), or
        None for command hosts. Raises HostError; a failure is remembered until close_all(),
        so a dead host costs one ConnectTimeout per cycle, not one per stack."""
        if not host.ssh:
            return None
        with self._host_lock(host.name):
            master = self._masters.get(host.name)
            if master is not None:
                if master.error is not None:
                    raise HostError(master.error)
                if self._check(host, master.control):
                    return master.control
            control = self.control_path(host)
            with contextlib.suppress(OSError):
                os.unlink(control)
            error = self._open(host, control)
            self._masters[host.name] = _Master(control, error)
            if error is not None:
                raise HostError(error)
            return control

    def _check(self, host: HostConfig, control: str) -> bool:
        """Whether the master still listens on its socket. A connect is what ``ssh -O check``
        starts with, without a process per worker: the master exits when its connection
        drops (keep-alives, ServerAliveCountMax), and then nothing accepts on the socket."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(5)
            try:
                probe.connect(control)
            except OSError:
                return False
        return True

    def _open(self, host: HostConfig, control: str) -> str | None:
        if shutil.which("ssh") is None:
            return f"{host.describe()}: no ssh client on this machine (install OpenSSH's client)"
        argv = [
            *base_ssh(host, control),
            "-o",
            "ControlMaster=yes",
            "-o",
            f"ControlPersist={PERSIST}",
            "-N",
            "-f",
            host.ssh or "",
        ]
        # -f puts the master in the background once it is connected; it keeps stderr, so
        # stderr goes to a file, not to a pipe whose end would never come. It runs in the
        # socket's directory (ssh -f keeps its working directory): a reaper that finds the
        # directory orphaned finds the master by it.
        with tempfile.TemporaryFile() as err:
            try:
                done = subprocess.run(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                    timeout=host.connect_timeout + 30,
                    start_new_session=True,
                    cwd=os.path.dirname(control),
                )
                status: int | None = done.returncode
            except subprocess.TimeoutExpired:
                status = None
            err.seek(0)
            stderr = err.read().decode("utf-8", "replace")
        if status == 0:
            return None
        where, tail = host.describe(), _tail(stderr)
        if status is None:
            return f"{where}: ssh did not connect within {host.connect_timeout + 30:g} s{tail}"
        return explain(host, status, stderr) or f"{where}: ssh failed (exit status {status}){tail}"

    def close(self, name: str) -> None:
        with self._lock:
            master = self._masters.pop(name, None)
        if master is None or master.error is not None:
            return
        if _terminate(master.control):
            return
        argv = ["ssh", "-o", f"ControlPath={master.control}", "-O", "exit", "-o", "LogLevel=QUIET", "x"]
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=10)

    def close_all(self) -> None:
        """Close every master connection (end of a cycle) and forget remembered failures."""
        with self._lock:
            names = list(self._masters)
        # Every master told to exit at once: a fleet's hosts need not wait for each other.
        closers = [threading.Thread(target=self.close, args=(n,), name=f"ssh-exit-{n}") for n in names]
        for t in closers:
            t.start()
        for t in closers:
            t.join()

    def shutdown(self) -> None:
        self.close_all()
        with self._lock:
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = None


_MUX_HELLO, _MUX_VERSION, _MUX_TERMINATE, _MUX_OK = 0x00000001, 4, 0x10000005, 0x80000001


def _terminate(control: str) -> bool:
    """Tell the master on ``control`` to exit, the way ``ssh -O exit`` does (OpenSSH's
    PROTOCOL.mux: each side says hello, then MUX_C_TERMINATE, answered by MUX_S_OK or, as
    ssh itself accepts, by the master closing the socket as it exits), without starting a
    process. False when that did not work (the caller runs ssh -O exit)."""

    def packet(*words: int) -> bytes:
        body = b"".join(w.to_bytes(4, "big") for w in words)
        return len(body).to_bytes(4, "big") + body

    def read_packet(sock: socket.socket) -> bytes:
        data = b""
        while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
            chunk = sock.recv(4096)
            if not chunk:
                raise ConnectionResetError("the master closed the control connection")
            data += chunk
        size = int.from_bytes(data[:4], "big")
        if len(data) > 4 + size:
            raise ValueError("more than one answer")  # not what a master sends here
        return data[4:]

    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(control)
            sock.sendall(packet(_MUX_HELLO, _MUX_VERSION))
            hello = read_packet(sock)
            if int.from_bytes(hello[:4], "big") != _MUX_HELLO:
                return False
            sock.sendall(packet(_MUX_TERMINATE, 1))
            try:
                reply = read_packet(sock)
            except ConnectionError:
                return True  # it exited without answering
    except (OSError, ValueError):
        return False
    return int.from_bytes(reply[:4], "big") == _MUX_OK


CONNECTIONS = Connections()
atexit.register(CONNECTIONS.shutdown)
