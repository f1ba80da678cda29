"""Real OpenSSH servers on 127.0.0.1 for tests and benches: each a "host" with its own host
key, authorized key, port, and (for the fingerprint) its own Ascend fixture tree and
system_root with its own machine id, so two of them look like two machines.

sshd runs in the foreground (-D), logs to a file (-e), without PAM and with
StrictModes off so that keys in a temporary directory are accepted. It needs root (or the
same user as the client) and the openssh-server package (scripts/setup installs it).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def unavailable() -> str | None:
    """Why sshd cannot be started here, or None."""
    if not os.path.exists(SSHD):
        return "sshd not installed (scripts/setup installs the openssh-server package)"
    if shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        return "OpenSSH client tools (ssh, ssh-keygen) not installed"
    if os.geteuid() != 0:
        return "sshd for tests runs as root (it must switch to the logging-in user)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path: Path, comment: str) -> Path:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    return path


@dataclass
class Sshd:
    """One running sshd: a fake host."""

    name: str
    dir: Path
    port: int
    client_key: Path
    known_hosts: Path
    proc: subprocess.Popen | None = None
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def user(self) -> str:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name

    def host_table(self, **overrides: object) -> dict[str, object]:
        """The ``[hosts.NAME]`` table that reaches this server."""
        table: dict[str, object] = {
            "ssh": f"{self.user}@127.0.0.1",
            "port": self.port,
            "identity_file": str(self.client_key),
            "options": [f"UserKnownHostsFile={self.known_hosts}", "StrictHostKeyChecking=yes"],
            "connect_timeout": 5,
        }
        table.update(overrides)
        return table

    def start(self) -> None:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory
        log = open(self.dir / "sshd.log", "ab")  # noqa: SIM115 - kept by the process
        self.proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(self.dir / "sshd_config")],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd {self.name} exited: {(self.dir / 'sshd.log').read_text()[-2000:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return
            time.sleep(0.05)
        raise RuntimeError(f"sshd {self.name} did not listen on port {self.port}")

    def sshd_pids(self) -> list[int]:
        """The listener and its per-connection sshd processes (not the sessions' commands)."""
        if self.proc is None:
            return []
        found = [self.proc.pid]
        for pid, _ppid, comm in _processes():
            if comm.startswith("sshd") and _descends(pid, self.proc.pid):
                found.append(pid)
        return sorted(set(found))

    def stop(self) -> None:
        """Stop the server and every sshd process it forked (open connections drop)."""
        for pid in self.sshd_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()

    def log(self) -> str:
        return (self.dir / "sshd.log").read_text(errors="replace")


def _processes() -> list[tuple[int, int, str]]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            out.append((int(entry.name), int(fields[1]), comm))
    return out


def _descends(pid: int, ancestor: int) -> bool:
    parents = {p: pp for p, pp, _ in _processes()}
    seen = 0
    while pid in parents and seen < 64:
        if pid == ancestor:
            return True
        pid = parents[pid]
        seen += 1
    return False


def make_sshd(
    base: Path, name: str, client_key: Path | None = None, session_env: dict[str, str] | None = None
) -> Sshd:
    """Write the host's keys and config under ``base/name`` and start its sshd.
    ``session_env``: variables every session gets (sshd's SetEnv), e.g. a TMPDIR of its own,
    so that what the "host" leaves behind can be counted."""
    d = base / name
    d.mkdir(parents=True, exist_ok=True)
    host_key = keygen(d / "host_ed25519", f"host-{name}")
    if client_key is None:
        client_key = keygen(d / "client_ed25519", f"client-{name}")
    (d / "authorized_keys").write_text(Path(f"{client_key}.pub").read_text())
    port = free_port()
    (d / "known_hosts").write_text(
        f"[127.0.0.1]:{port} " + " ".join(Path(f"{host_key}.pub").read_text().split()[:2]) + "\n"
    )
    (d / "sshd_config").write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {host_key}",
                f"PidFile {d / 'sshd.pid'}",
                f"AuthorizedKeysFile {d / 'authorized_keys'}",
                "UsePAM no",
                "StrictModes no",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PubkeyAuthentication yes",
                "PermitRootLogin prohibit-password",
                "PrintMotd no",
                "MaxSessions 64",
                "MaxStartups 64",
                "LogLevel INFO",
                *(f"SetEnv {k}={v}" for k, v in (session_env or {}).items()),
                "",
            ]
        )
    )
    server = Sshd(name, d, port, client_key, d / "known_hosts")
    server.start()
    return server


def machine_id(name: str) -> str:
    return hashlib.md5(name.encode()).hexdigest()  # noqa: S324 - an id, not a secret


def write_machine_id(system_root: Path, name: str) -> None:
    (system_root / "etc").mkdir(parents=True, exist_ok=True)
    (system_root / "etc" / "machine-id").write_text(machine_id(name) + "\n")
