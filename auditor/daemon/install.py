"""What the service's user needs before the unit can start, checked as that user.

A unit that runs as ``auditor`` starts only if that user can execute the auditor (the venv
and the interpreter it points at), read the config, run every local stack's interpreter,
read the model files and plugin folders the config names and the ssh keys of its hosts, and
write the history database; the hardening drop-in takes more away (``PrivateTmp`` hides
/tmp and /var/tmp, ``ProtectHome`` and ``ProtectSystem`` make /home, /root and the system
read-only). ``auditor service install`` checks each of these by running the check as the user
(``runuser``), the way the unit will, and refuses with the list of what is missing; the one
thing it sets up itself is the service user (a system user, as systemd's ``User=`` needs).

The paths are the config's as the unit reads it: the unit's environment (``XDG_STATE_HOME``
= /var/lib) puts the default database in the unit's ``StateDirectory``, which systemd
creates for the user.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from auditor.config.tables import Config
from auditor.daemon.unit import UnitOptions
from auditor.db import url as db_url

STATE_DIR = Path("/var/lib/auditor")
"""The unit's ``StateDirectory=auditor``: made by systemd for the service user."""
UNIT_ENV = {"XDG_STATE_HOME": "/var/lib", "XDG_CACHE_HOME": "/var/cache", "PYTHONUNBUFFERED": "1"}
"""The unit's ``Environment=`` (auditor.daemon.unit.unit_text), with systemd's %S and %C."""
HIDDEN_BY_PRIVATE_TMP = ("/tmp", "/var/tmp")
READ_ONLY_HOMES = ("/home", "/root", "/run/user")


@dataclass
class ServiceNeeds:
    """Every path the unit's user must reach, from the config the unit reads."""

    config: str
    exec_path: str
    interpreters: dict[str, str] = field(default_factory=dict)
    """Local stack -> its interpreter."""
    readable: dict[str, str] = field(default_factory=dict)
    """Path -> what it is (a model file, a golden, a plugin folder, an ssh key...)."""
    folders: dict[str, str] = field(default_factory=dict)
    """Folder that must be listable -> what it holds (watched model globs)."""
    database: Path | None = None
    """The SQLite file the unit writes (None: a server database)."""


def needs(options: UnitOptions, config: Config, default_db: bool) -> ServiceNeeds:
    """What the unit's user must reach for ``config``; ``default_db``: the config names no
    database, so the unit's is the default one in its state directory."""
    out = ServiceNeeds(options.config, options.exec_path)
    for name, stack in config.stacks.items():
        if config.fleet.is_remote(name):
            continue
        if stack.host == "local":
            out.interpreters[name] = stack.python
            for pattern in stack.models:
                folder = str(Path(pattern).parent) if glob.has_magic(pattern) else pattern
                (out.folders if glob.has_magic(pattern) else out.readable)[folder] = f"stacks.{name}.models"
    for name, host in config.hosts.items():
        if host.identity_file:
            out.readable[host.identity_file] = f"hosts.{name}.identity_file (ssh runs as the service user)"
        for option in host.options:
            key, _, value = option.replace("=", " ", 1).partition(" ")
            if key.lower() in ("userknownhostsfile", "identityfile", "certificatefile"):
                for path in value.split():
                    out.readable[os.path.expanduser(path)] = f"hosts.{name}.options {key}"
    for name, model in config.models.items():
        out.readable[model.path] = f"models.{name}.path"
        if model.golden:
            out.readable[model.golden] = f"models.{name}.golden"
        for spec in model.inputs:
            if spec.npz:
                out.readable[spec.npz] = f"models.{name}.inputs ({spec.name})"
    for folder in config.plugin_dirs:
        out.folders[folder] = "[plugins] dirs"
    if default_db:
        out.database = STATE_DIR / "history.db"
    else:
        parsed = db_url.parse(config.db_url)
        if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
            out.database = Path(parsed.database).expanduser()
    return out


@contextlib.contextmanager
def unit_environment(user: str) -> Iterator[None]:
    """The environment the unit's process has, for reading its config as it will: ``$VAR``,
    ``${XDG_CACHE_HOME:-...}`` and ``~`` in the config expand to the unit's values (the
    stacks of the shipped config are then in /var/cache/auditor/stacks), not the installer's."""
    saved = dict(os.environ)
    try:
        home = pwd.getpwnam(user).pw_dir
    except KeyError:
        home = str(STATE_DIR)
    os.environ.clear()
    os.environ.update({"PATH": saved.get("PATH", "/usr/bin:/bin"), "HOME": home, "USER": user, **UNIT_ENV})
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def user_exists(user: str) -> bool:
    try:
        pwd.getpwnam(user)
    except KeyError:
        return False
    return True


def create_user(user: str) -> str | None:
    """Create the service's system user (home: the state directory, no login shell); why not, or None."""
    shell = "/usr/sbin/nologin" if os.path.exists("/usr/sbin/nologin") else "/bin/false"
    argv = ["useradd", "--system", "--home-dir", str(STATE_DIR), "--no-create-home", "--shell", shell, user]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except OSError as exc:
        return f"cannot run useradd: {exc}"
    if done.returncode not in (0, 9):  # 9: it exists (made meanwhile)
        return f"useradd {user} failed: {(done.stderr or done.stdout).strip()}"
    return None


def _as_user(user: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as ``user`` in the unit's environment."""
    env = ["env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin", *(f"{k}={v}" for k, v in UNIT_ENV.items())]
    prefix = ["runuser", "-u", user, "--"] if shutil.which("runuser") else ["setpriv", "--reuid", user,
              "--regid", user, "--init-groups", "--"]  # fmt: skip
    return subprocess.run([*prefix, *env, *argv], capture_output=True, text=True, timeout=120, cwd="/")


def _test(user: str, flags: str, path: str) -> bool:
    """``test FLAGS PATH`` as the user (``-r``, ``-x``, ``-w``; several as ``-r -a -x``)."""
    words = []
    for flag in flags.split():
        words += ["-a", flag, path] if words else [flag, path]
    return _as_user(user, ["test", *words]).returncode == 0


def _denied(path: str) -> str:
    """Why a path is out of reach, as far as owners and modes show: the first folder that
    others cannot enter on the way to it, to what its links point at, or to the interpreter
    its ``#!`` line names (a venv's scripts and python point into the Python they were made
    with)."""
    seen: set[str] = set()
    todo = [path]
    while todo:
        current = todo.pop(0)
        if current in seen:
            continue
        seen.add(current)
        p = Path(current)
        for part in [*reversed(p.parents), p]:
            try:
                st = part.stat()
            except OSError:
                return f"{part} does not exist"
            if part.is_dir() and not st.st_mode & 0o001 and part != p:
                return f"{part} is mode {st.st_mode & 0o777:o} (owner {_owner(st.st_uid)})"
        todo.append(os.path.realpath(current))
        todo += _shebang(current)
    return "permission denied"


def _shebang(path: str) -> list[str]:
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:
        return []
    if not head.startswith(b"#!"):
        return []
    words = head[2:].split(b"\n", 1)[0].decode(errors="replace").split()
    return words[:1] if words and words[0].startswith("/") else []


def _owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _under(path: str | Path, tops: Iterable[str]) -> str | None:
    resolved = str(Path(path).resolve()) if Path(path).exists() else str(path)
    for top in tops:
        if resolved == top or resolved.startswith(top + "/") or str(path).startswith(top + "/"):
            return top
    return None


def check(need: ServiceNeeds, user: str, hardening: bool) -> list[str]:
    """Everything the unit's user cannot do, each with what to do; [] when the unit can start.
    Runs the checks as ``user`` (root is needed)."""
    problems: list[str] = []
    done = _as_user(user, [need.exec_path, "--version"])
    if done.returncode != 0:
        problems.append(
            f"run the auditor {need.exec_path}: {_tail(done)} ({_denied(need.exec_path)}); install the "
            "auditor where the user can execute it, interpreter included (e.g. python3.11 -m venv "
            "/opt/auditor && /opt/auditor/bin/pip install auditor), and pass --exec"
        )
    if not _test(user, "-r", need.config):
        problems.append(
            f"read the config {need.config} ({_denied(need.config)}); e.g. chgrp {user} {need.config} "
            f"&& chmod g+r {need.config}"
        )
    by_python: dict[str, list[str]] = {}
    for stack, python in need.interpreters.items():
        by_python.setdefault(python, []).append(stack)
    for python, stacks in by_python.items():
        done = _as_user(user, [python, "-c", "import numpy"])
        if done.returncode != 0:
            problems.append(
                f"run the interpreter {python} of stack {', '.join(stacks)}: {_tail(done)} "
                f"({_denied(python)}); install the "
                "stacks where the user can read them, interpreters included (docs/service.md: "
                "AUDITOR_STACKS_DIR=/var/cache/auditor/stacks scripts/install-stacks)"
            )
    for path, what in need.readable.items():
        if not _test(user, "-r", path):
            problems.append(f"read {path} ({what}): {_denied(path)}")
    for folder, what in need.folders.items():
        if not _test(user, "-r -x", folder):
            problems.append(f"list the folder {folder} ({what}): {_denied(folder)}")
    if need.database is not None and not _under(need.database, [str(STATE_DIR)]):
        target = need.database if need.database.exists() else need.database.parent
        while not target.exists() and target != target.parent:
            target = target.parent
        if not _test(user, "-w", str(target)) or (
            need.database.exists() and not _test(user, "-w", str(need.database.parent))
        ):
            problems.append(
                f"write the history database {need.database} ({_denied(str(target))}); keep it in the "
                f"unit's state directory ([storage] url empty: {STATE_DIR}/history.db), or give the user "
                "that folder"
            )
    if hardening:
        problems += _hidden_by_hardening(need)
    return problems


def _hidden_by_hardening(need: ServiceNeeds) -> list[str]:
    out = []
    paths = {
        need.exec_path: "the auditor",
        need.config: "the config",
        **{p: f"stack {s}'s interpreter" for s, p in need.interpreters.items()},
        **need.readable,
        **need.folders,
    }
    for path, what in paths.items():
        if _under(path, HIDDEN_BY_PRIVATE_TMP):
            out.append(
                f"{path} ({what}) is under {_under(path, HIDDEN_BY_PRIVATE_TMP)}, which the hardening "
                "drop-in's PrivateTmp=yes hides from the service: move it, or install --no-hardening"
            )
    db = need.database
    if db is not None and not _under(db, [str(STATE_DIR)]):
        top = _under(db, (*HIDDEN_BY_PRIVATE_TMP, *READ_ONLY_HOMES))
        why = (
            f"is under {top}, which the hardening drop-in hides or makes read-only"
            if top
            else "is outside the unit's state directory, which ProtectSystem=strict makes read-only"
        )
        out.append(
            f"the history database {db} {why}: keep it in {STATE_DIR} ([storage] url empty), or add "
            f"ReadWritePaths={db.parent} to the drop-in"
        )
    return out


def _tail(done: subprocess.CompletedProcess[str]) -> str:
    lines = (done.stderr or done.stdout or "").strip().splitlines()
    return lines[-1] if lines else f"exit status {done.returncode}"


__all__ = ["ServiceNeeds", "check", "create_user", "needs", "unit_environment", "user_exists"]
