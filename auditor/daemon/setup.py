"""What the daemon runs with, worked out in a short-lived child so that the daemon itself stays
light between cycles: reading the config needs every plugin (probe modules, comparators: numpy),
and checking the history database needs SQLAlchemy (and Alembic when it must be migrated).

``load_setup`` runs ``python -m auditor.cli.daemon_setup`` (the auditor's own interpreter, the
config path and ``--db`` on stdin: a database URL may hold a password) at start and at each
SIGHUP. The child loads the plugins and the config as every command does, migrates the history
database when it is behind, reads the open alerts, builds the alert sinks once (a sink that
cannot be built is a problem now, not at the first cycle) and answers with a ``DaemonSetup``:
the parsed config and what the daemon needs of the plugins and of the database, as plain data;
or with what is wrong, as the command line would say it.
"""

from __future__ import annotations

import pickle
import struct
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import BinaryIO

from auditor.common.child_process import own_package_env
from auditor.config.tables import Config

MODULE = "auditor.cli.daemon_setup"
TIMEOUT = 3600.0
"""Seconds the child may take: a migration of a large PostgreSQL history, or another auditor
holding the migration lock."""
_HEAD = struct.Struct(">Q")


@dataclass(frozen=True)
class RuntimeInfo:
    """What the daemon needs of a runtime plugin: the worker class its zygote imports, and why
    its workers must start cold ("" when they need not)."""

    worker_class: str
    cold: str = ""


@dataclass(frozen=True)
class DaemonSetup:
    config: Config
    db_url: str
    display_url: str
    """The database URL as shown (its password hidden)."""
    auditor_id: str
    plugin_dirs: list[str]
    runtimes: Mapping[str, RuntimeInfo]
    open_alerts: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    """Plugin problems, said as the command line says them (each a line)."""


@dataclass(frozen=True)
class SetupFailure:
    """Why the daemon cannot run with this config or database: its lines, as the command line
    says them ("auditor: ..." first), and the exit status (2: config or usage; 1: the database)."""

    lines: tuple[str, ...]
    code: int
    warnings: tuple[str, ...] = ()
    source: str = ""
    """A config that is not usable: its file, and its problems (``errors``), each with its key."""
    errors: tuple[str, ...] = ()


class SetupError(Exception):
    def __init__(self, failure: SetupFailure):
        self.failure = failure
        super().__init__("; ".join(failure.lines))


def write_frame(stream: BinaryIO, obj: object) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEAD.pack(len(data)) + data)
    stream.flush()


def load_setup(
    config_path: str | None, db: str | None, python: str = sys.executable, timeout: float = TIMEOUT
) -> DaemonSetup:
    """The daemon's setup from a child process; raises SetupError with what is wrong."""
    request = pickle.dumps({"config_path": config_path, "db": db})
    try:
        done = subprocess.run(
            [python, "-m", MODULE],
            input=_HEAD.pack(len(request)) + request,
            capture_output=True,
            timeout=timeout,
            env=own_package_env(),  # the child imports this auditor, not another installed one
        )
    except subprocess.TimeoutExpired:
        raise SetupError(SetupFailure((f"reading the config took longer than {timeout:g} s",), 1)) from None
    except OSError as exc:
        raise SetupError(SetupFailure((f"cannot run {python}: {exc}",), 1)) from None
    data = done.stdout
    if len(data) >= _HEAD.size:
        (n,) = _HEAD.unpack(data[: _HEAD.size])
        if len(data) >= _HEAD.size + n:
            reply = pickle.loads(data[_HEAD.size : _HEAD.size + n])  # our own child: trusted
            if isinstance(reply, DaemonSetup):
                return reply
            if isinstance(reply, SetupFailure):
                raise SetupError(reply)
    # No reply: it stopped the way a command does (no config file: exit 2), or it crashed.
    said = (done.stderr.decode("utf-8", "replace").strip().splitlines() or ["no message"])[-1]
    if done.returncode == 2 and said.startswith("auditor: "):
        raise SetupError(SetupFailure((said,), 2))
    raise SetupError(
        SetupFailure((f"auditor: reading the config failed (exit status {done.returncode}): {said}",), 1)
    )
