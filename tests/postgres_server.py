"""A throw-away PostgreSQL server for the tests: ``initdb`` into a temporary directory, a free
port on 127.0.0.1, the unix socket in that directory, stopped and removed at the end.

PostgreSQL refuses to run as root, so when the tests run as root the server runs as the
unprivileged system user ``auditor-test`` (created if missing) through ``runuser``. The
server binaries come from the distribution's postgresql package (scripts/setup installs it);
they are found on PATH or under /usr/lib/postgresql/<version>/bin."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

USER = "auditor-test"


class Unavailable(Exception):
    """No PostgreSQL server can be started here; the message says why."""


def bindir() -> Path:
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent  # /usr/local/bin/initdb may be a link into the real bindir
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0,
    )
    if not versions:
        raise Unavailable(
            "PostgreSQL server binaries (initdb, pg_ctl) not found on PATH or in /usr/lib/postgresql/*/bin: "
            "run scripts/setup (it installs the postgresql package)"
        )
    return Path(versions[-1]).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_user() -> list[str]:
    """The argv prefix that runs a command as an unprivileged user (nothing when not root)."""
    if os.geteuid() != 0:
        return []
    try:
        import pwd

        pwd.getpwnam(USER)
    except KeyError:
        done = subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER],
            capture_output=True,
            text=True,
        )
        if done.returncode not in (0, 9):  # 9: created meanwhile by another test process
            raise Unavailable(
                f"cannot create the system user {USER} to run PostgreSQL: {done.stderr.strip()}"
            ) from None
    return ["runuser", "-u", USER, "--"]


@dataclass
class Server:
    """A running server; ``url(db)`` is a plain ``postgresql://`` URL as a user writes it."""

    datadir: Path
    port: int
    user: str
    prefix: list[str]
    bin: Path
    options: str = ""
    """pg_ctl's -o at start: the same port and socket directory when it is started again."""

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    def sql(self, statement: str, database: str = "postgres") -> list[tuple]:
        """Run one statement (autocommit) as the server's superuser; its rows, if any."""
        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=self.port, user=self.user, dbname=database, autocommit=True
        ) as conn:
            cur = conn.execute(statement)
            return cur.fetchall() if cur.description else []

    def create_database(self, name: str) -> str:
        self.sql(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def halt(self) -> None:
        """Stop the server and keep its data (``resume`` starts it again): an outage. Fast
        mode: the open connections are cut, as when a server goes down under its clients."""
        done = self._ctl("-m", "fast", "-w", "stop")
        if done.returncode != 0:
            raise Unavailable(f"pg_ctl stop failed: {(done.stderr or done.stdout).strip()}")

    def resume(self) -> None:
        """Start a halted server again, on the same port, with the same data."""
        done = self._ctl(
            "-o", self.options, "-l", str(self.datadir.parent / "server.log"), "-w", "-t", "120", "start"
        )
        if done.returncode != 0:
            raise Unavailable(f"pg_ctl start failed: {(done.stderr or done.stdout).strip()}")

    def _ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.prefix, str(self.bin / "pg_ctl"), "-D", str(self.datadir), *args],
            capture_output=True,
            text=True,
            timeout=180,
        )

    def stop(self) -> None:
        subprocess.run(
            [
                *self.prefix,
                str(self.bin / "pg_ctl"),
                "-D",
                str(self.datadir),
                "-m",
                "immediate",
                "-w",
                "stop",
            ],
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(self.datadir.parent, ignore_errors=True)


def start() -> Server:
    """initdb, start on a free port, wait until it accepts connections."""
    bin_ = bindir()
    prefix = _as_user()
    # Not under pytest's tmp_path: that is private to root (0700), the server user must reach it.
    top = Path(tempfile.mkdtemp(prefix="auditor-pg-"))
    datadir = top / "data"
    datadir.mkdir()
    if prefix:
        os.chmod(top, 0o755)
        shutil.chown(top, USER)
        shutil.chown(datadir, USER)
    user = USER if prefix else (os.environ.get("USER") or "postgres")
    done = subprocess.run(
        [
            *prefix,
            str(bin_ / "initdb"),
            "-D",
            str(datadir),
            "-U",
            user,
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-sync",
            "--locale=C",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    if done.returncode != 0:
        shutil.rmtree(top, ignore_errors=True)
        raise Unavailable(f"initdb failed: {(done.stderr or done.stdout).strip()[-800:]}")
    port = _free_port()
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {top} -c fsync=off -c max_connections=50"
    done = subprocess.run(
        [
            *prefix,
            str(bin_ / "pg_ctl"),
            "-D",
            str(datadir),
            "-o",
            options,
            "-l",
            str(top / "server.log"),
            "-w",
            "-t",
            "120",
            "start",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    if done.returncode != 0:
        log = (top / "server.log").read_text(errors="replace")[-800:] if (top / "server.log").exists() else ""
        shutil.rmtree(top, ignore_errors=True)
        raise Unavailable(f"pg_ctl start failed: {(done.stderr or done.stdout).strip()} {log}")
    return Server(datadir, port, user, prefix, bin_, options)
