"""What a valid config asks for that cannot work: ``auditor config check`` beyond the schema
(borgmatic's ``config validate`` is the model). A config can be right key by key and still
leave an audit with nothing to stand on: an interpreter that is not there, a model file
that is not there or is not a MindIR, a watched glob that matches nothing, a reference
stack that cannot serve the model, a database that cannot be opened, a plugin that did not
import. Each is a ``Problem`` with the key path it comes from; the check creates nothing
(an SQLite file that does not exist yet is only looked for, never made).

Without options the checks need no stack process: paths, files and the plugins. ``hosts``
starts every stack's worker through ``Reach`` (this machine's and other hosts' alike: the
interpreter, the worker code, the runtime import), reads each stack's watched models in its
worker where they are served, and runs the rules of ``auditor check`` on every model against
its reference and serving stacks. ``connect`` opens the database and checks it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from auditor.compare.golden import GoldenError, read_golden
from auditor.config.tables import Config, StackConfig
from auditor.config.user_models import TrainNetwork
from auditor.db import health as db_health
from auditor.db import url as db_url
from auditor.extend.manager import Plugins, one_line
from auditor.fingerprint.collect import collect as fingerprint
from auditor.gate.preflight import ERROR, INCOMPATIBLE, UNSUPPORTED, preflight
from auditor.history.store import Store, StoreError, sqlite_directory_problem
from auditor.plugins.collectors import models as watched_models
from auditor.policy.model_file import (
    ModelInputError,
    check_golden_inputs,
    model_inputs,
    other_formats,
    read_model,
)
from auditor.stacks.hosts import LOCAL
from auditor.stacks.session import reach
from auditor.stacks.worker import WorkerError

MODELS_COLLECTOR = watched_models.__name__


@dataclass(frozen=True)
class Problem:
    """Something the config asks for that cannot work, at the key it comes from."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass
class Readiness:
    problems: list[Problem] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    """What these options did not look at (a stack on another host without ``hosts``)."""
    stacks: dict[str, str] = field(default_factory=dict)
    """Stack -> what its worker said when it started (with ``hosts``)."""
    database: str = ""
    """What was found of the history database."""
    watched: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    """Stack -> its watched model files as its worker (or this machine) read them: path -> entry."""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, path: str, message: str) -> None:
        problem = Problem(path, message)
        if problem not in self.problems:
            self.problems.append(problem)


def check(
    config: Config, plugins: Plugins, url: str, hosts: bool = False, connect: bool = False
) -> Readiness:
    """Every problem of ``config`` (with its history database at ``url``) that the schema
    cannot see."""
    started = time.monotonic()
    out = Readiness()
    for problem in plugins.problems:
        out.add("plugins", one_line(problem))
    if hosts:
        _workers(config, plugins, out)
    else:
        _interpreters(config, out)
        _watched_here(config, out)
    _models(config, plugins, out)
    if hosts:
        _servable(config, plugins, out)
    _database(url, connect, out)
    out.seconds = time.monotonic() - started
    return out


# -- stacks ----------------------------------------------------------------------------------------


def _checked_stacks(config: Config) -> dict[str, StackConfig]:
    """The stacks this auditor runs (a ``source = "db"`` stack has no interpreter here)."""
    return {n: s for n, s in config.stacks.items() if not config.fleet.is_remote(n)}


def interpreter_problem(python: str) -> str | None:
    """Why ``python`` (a path on this machine) cannot be a stack's interpreter, or None."""
    path = Path(python)
    if not path.is_absolute():
        return f"{python}: not an absolute path (write the interpreter's full path)"
    if not path.exists():
        return f"{python}: no such file (run scripts/install-stacks, or fix the path)"
    if not path.is_file():
        return f"{python}: not a file"
    if not os.access(path, os.X_OK):
        return f"{python}: not executable"
    return None


def _interpreters(config: Config, out: Readiness) -> None:
    for name, stack in _checked_stacks(config).items():
        if stack.host != LOCAL:
            out.unchecked.append(
                f"stack {name}: its interpreter on host {stack.host} (config check --hosts starts it there)"
            )
            continue
        problem = interpreter_problem(stack.python)
        if problem is not None:
            out.add(f"stacks.{name}.python", problem)


def _watched_here(config: Config, out: Readiness) -> None:
    """Watched model files of this machine's stacks, read the way the stack's worker reads them."""
    for name, stack in _checked_stacks(config).items():
        if not stack.models:
            continue
        if stack.host != LOCAL:
            out.unchecked.append(
                f"stack {name}: its watched models on host {stack.host} (--hosts reads them)"
            )
            continue
        _watch_problems(name, watched_models.collect({"models": list(stack.models)}), out)


def _watch_problems(stack: str, section: Mapping[str, Any], out: Readiness) -> None:
    if "error" in section:
        out.add(f"stacks.{stack}.models", f"could not be read: {section['error']}")
        return
    files = section.get("files") or {}
    out.watched[stack] = {str(path): dict(entry) for path, entry in files.items() if isinstance(entry, dict)}
    for what, why in (section.get("unknown") or {}).items():
        out.add(f"stacks.{stack}.models", f"{what}: {why}")
    for path, entry in (section.get("files") or {}).items():
        if isinstance(entry, dict) and entry.get("readable") is False:
            out.add(
                f"stacks.{stack}.models", f"{path}: not a MindIR the auditor can read: {entry.get('reason')}"
            )


def _workers(config: Config, plugins: Plugins, out: Readiness) -> None:
    """Start every stack's worker through Reach, on its host; read watched models there."""
    stacks = _checked_stacks(config)
    to_reach = reach(config, plugins.runtimes(), (), [MODELS_COLLECTOR])

    def one(name: str) -> None:
        stack = stacks[name]
        try:
            with to_reach.worker(name) as worker:
                hello = worker.start()
                out.stacks[name] = (
                    f"Python {hello.get('python')}, {hello.get('runtime_package')} "
                    f"{hello.get('runtime_version')}"
                    + ("" if stack.host == LOCAL else f", on host {stack.host}")
                )
                if stack.models:
                    document = fingerprint(worker, stack, [MODELS_COLLECTOR], secrets=config.secrets)
                    _watch_problems(name, document.get("models") or {}, out)
        except WorkerError as exc:
            out.add(f"stacks.{name}", exc.describe())

    size, tasks = to_reach.parallel({n: (lambda n=n: one(n)) for n in stacks}, release=True)
    with to_reach, ThreadPoolExecutor(max_workers=max(1, size), thread_name_prefix="config-check") as pool:
        for future in [pool.submit(task) for task in tasks.values()]:
            future.result()


# -- models ----------------------------------------------------------------------------------------


def _models(config: Config, plugins: Plugins, out: Readiness) -> None:
    """Each ``[models.NAME]``: its file, its inputs against the file, its golden."""
    for name, model in config.models.items():
        where = f"models.{name}"
        _training(where, model.train, out)
        golden = None
        if model.golden:
            try:
                golden = read_golden(model.golden)
            except GoldenError as exc:
                out.add(f"{where}.golden", str(exc))
        try:
            _data, info = read_model(model.path, others=other_formats(plugins.runtimes()))
        except ModelInputError as exc:
            out.add(f"{where}.path", str(exc))
            continue
        try:
            model_inputs(model, info)
        except ModelInputError as exc:
            out.add(f"{where}.inputs", str(exc))
        if golden is not None:
            try:
                check_golden_inputs(model, info, golden)
            except ModelInputError as exc:
                out.add(f"{where}.golden", f"does not fit the model: {exc}")
            stale = golden.another_file(name, info.sha256)
            if stale:
                out.add(f"{where}.golden", stale)


def _training(where: str, train: TrainNetwork | None, out: Readiness) -> None:
    """What a model's training network needs that can be seen before a stack starts: its
    checkpoint file, and its package in ``train.path`` (audit would fail on either, later)."""
    if train is None:
        return
    if train.checkpoint:
        path = Path(train.checkpoint)
        if not path.exists():
            out.add(f"{where}.train.checkpoint", f"{path}: no such file")
        elif not path.is_file():
            out.add(f"{where}.train.checkpoint", f"{path}: not a file")
    missing = train.missing()
    if missing is not None:
        out.add(f"{where}.train.path", missing)


def _servable(config: Config, plugins: Plugins, out: Readiness) -> None:
    """The rules of ``auditor check`` on every model file against its reference and serving
    stacks: a stack that cannot load it (its MindIR version, an operator it cannot run, a
    load that fails) is a problem at the key that names the stack."""
    rules = list(plugins.rules().values())
    collectors = plugins.fingerprint_collectors()
    runtimes = plugins.runtimes()
    for name, model in config.models.items():
        if any(p.path.startswith(f"models.{name}.path") for p in out.problems):
            continue
        stacks = [s for s in (model.reference, *model.stacks) if s and s in _checked_stacks(config)]
        try:
            report = preflight(config, model.path, stacks, collectors, rules, runtimes, load=True)
        except ModelInputError as exc:
            out.add(f"models.{name}.path", str(exc))
            continue
        for verdict in report.verdicts:
            if verdict.status not in (INCOMPATIBLE, UNSUPPORTED, ERROR):
                continue
            key = "reference" if verdict.stack == model.reference else "stacks"
            load = verdict.load
            failed = load is not None and load.attempted and not load.ok
            said = verdict.reason + (f"; load: {load.message.splitlines()[0]}" if failed else "")
            out.add(
                f"models.{name}.{key}",
                f"stack {verdict.stack} cannot serve {model.path}: {verdict.status}: {said}",
            )


# -- the database ----------------------------------------------------------------------------------


def _database(url: str, connect: bool, out: Readiness) -> None:
    try:
        parsed = db_url.parse(url)
    except ValueError as exc:
        out.add("storage.url", str(exc))
        return
    shown = db_url.redact(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        path = Path(parsed.database).expanduser()
        if not path.exists():
            problem = _creatable(path) or sqlite_directory_problem(path)
            if problem is not None:
                out.add("storage.url", problem)
            else:
                made = _missing_directories(path)
                also = f" and the director{'ies' if len(made) > 1 else 'y'} {', '.join(made)}" if made else ""
                out.database = f"{shown} (not there yet: the first audit creates it{also})"
            return
        if not path.is_file():
            out.add("storage.url", f"{path}: not a file")
            return
    if not connect:
        out.database = f"{shown} (not opened: --connect opens it)"
        return
    try:
        store = Store(url, create=False)
    except StoreError as exc:
        out.add("storage.url", str(exc))
        return
    try:
        health = db_health.check(store.engine)
    finally:
        store.close()
    if not health.ok:
        out.add("storage.url", f"{shown}: {health.summary()}")
    else:
        out.database = f"{shown} (opened: ok)"


def _missing_directories(path: Path) -> list[str]:
    """The directories the first audit would create for an SQLite file at ``path``, outermost
    first: said by the check, so that a typo in the path is seen before it makes them."""
    missing = []
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        missing.append(str(parent))
        parent = parent.parent
    return missing[::-1]


def _creatable(path: Path) -> str | None:
    """Why an SQLite file at ``path`` could not be created by the first audit, or None (the
    nearest directory that exists must be a directory this user can write)."""
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return f"{path}: cannot be created, {parent} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{path}: cannot be created, {parent} is not writable by this user"
    return None


__all__ = ["Problem", "Readiness", "check", "interpreter_problem"]
