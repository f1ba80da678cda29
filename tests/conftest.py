"""Shared fixtures. Tests that need the real reference stacks use the ``stacks`` fixture:
without the stacks they are skipped, or fail when AUDITOR_REQUIRE_STACKS=1 (as in `make test`
and CI, where scripts/install-stacks has just run)."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import tempfile
import threading
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from auditor.common.paths import stacks_dir
from auditor.common.tempdirs import socket_root
from auditor.history.store import Store
from auditor.stacks.warm import WARM_DIR_ENV, WarmPool
from tests import postgres_server
from tests.cli import REPO, auditor
from tests.requires import made_unavailable, need, probe, require

DEFAULT_CONFIG = REPO / "auditor.toml"
STACK_NAMES = ("ms210", "ms20", "lite20", "ort")


def stack_python(name: str) -> Path:
    return stacks_dir() / name / "bin" / "python"


@pytest.fixture(scope="session")
def stacks() -> Path:
    def missing() -> str | None:
        absent = [n for n in STACK_NAMES if not stack_python(n).exists()]
        if absent:
            where = f"{', '.join(absent)} in {stacks_dir()}"
            return f"reference stacks missing ({where}): run scripts/install-stacks"
        return None

    require("stacks", missing)
    return stacks_dir()


@pytest.fixture(scope="session")
def default_doc() -> dict:
    """The shipped auditor.toml, parsed, for tests to copy and modify."""
    return tomllib.loads(DEFAULT_CONFIG.read_text())


@pytest.fixture
def doc(default_doc: dict) -> dict:
    return copy.deepcopy(default_doc)


@dataclass
class WarmStacks:
    """The session's zygotes (``warm_stacks``): the pool, and the thread that starts them."""

    pool: WarmPool
    starting: threading.Thread

    def ready(self, timeout: float = 300) -> dict[str, int]:
        """Wait until they are started; the workers each has forked so far, by stack."""
        self.starting.join(timeout)
        return {s: z.forks for z in self.pool.zygotes() for s in z.stacks}


@pytest.fixture(scope="session", autouse=True)
def warm_stacks() -> WarmStacks | None:
    """One zygote per reference stack for this test process (auditor.stacks.warm), named to
    every auditor it runs, in this process or as a command, by AUDITOR_ZYGOTES: each imports
    its framework once for the whole run instead of once per cycle or command. Started in the
    background; an auditor that asks before they are ready starts its own, as it would anyway.
    A test that counts the workers under an auditor's process (they are this process's
    zygotes' children here) runs that auditor with ``own_zygotes``."""
    if (
        any(not stack_python(n).exists() for n in STACK_NAMES)
        or os.environ.get(WARM_DIR_ENV)
        or made_unavailable("stacks")
    ):
        yield None
        return
    from auditor.cli.context import Context
    from auditor.extend.manager import Plugins

    directory = Path(tempfile.mkdtemp(prefix="auditor-zygotes-", dir=socket_root()))
    pool = WarmPool("daemon", directory=directory)
    stacks = Plugins(entry_points=False).reach(Context(str(DEFAULT_CONFIG), None).config(), warm=pool)
    local = [n for n, s in stacks.config.stacks.items() if s.host == "local"]
    starting = threading.Thread(target=stacks.prepare_warm, args=(local,), name="warm-stacks", daemon=True)
    starting.start()
    os.environ[WARM_DIR_ENV] = str(directory)
    yield WarmStacks(pool, starting)
    os.environ.pop(WARM_DIR_ENV, None)
    pool.close()
    shutil.rmtree(directory, ignore_errors=True)


OWN_ZYGOTES = {WARM_DIR_ENV: None}
"""``env=`` of a command whose workers must be its own descendants (tests/cli.py)."""


@pytest.fixture
def own_zygotes(monkeypatch) -> None:
    """Auditors of this test (in this process) start their own zygotes, so that their workers
    descend from them (not from the session's, ``warm_stacks``)."""
    monkeypatch.delenv(WARM_DIR_ENV, raising=False)


def worker_pids(parent: int | None = None, zygotes: bool = False) -> list[int]:
    """Live stack-worker processes, cold or forked from a zygote (optionally only descendants
    of ``parent``: a daemon's workers are its cycle process's children), read from /proc.
    ``zygotes``: the zygotes instead (auditor.worker.zygote)."""
    ppids: dict[int, int] = {}
    workers = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            stat = (entry / "stat").read_text()
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        ppids[int(entry.name)] = int(ppid)
        if state == "Z":
            continue
        if zygotes:
            if b"auditor.worker.zygote" in cmdline and comm == "auditor-zygote":
                workers.append(int(entry.name))
        elif b"auditor.worker.main" in cmdline or (
            b"auditor.worker.zygote" in cmdline and comm == "auditor-worker"
        ):
            workers.append(int(entry.name))

    def descends(pid: int) -> bool:
        while pid in ppids and pid > 1:
            pid = ppids[pid]
            if pid == parent:
                return True
        return False

    return [p for p in workers if parent is None or descends(p)]


@pytest.fixture(scope="session")
def postgres() -> postgres_server.Server:
    """A real PostgreSQL server for the session (tests/postgres_server.py). Skipped when none
    can be started here; a failure when AUDITOR_REQUIRE_POSTGRES=1 (`make test`, CI)."""
    need("postgres", probe("postgres", lambda: None))
    try:
        server = postgres_server.start()
    except postgres_server.Unavailable as exc:
        need("postgres", f"no PostgreSQL server: {exc}")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        server.stop()
        need("postgres", "the psycopg driver is not installed: pip install -e '.[test]'")
    yield server
    server.stop()


_databases = iter(range(1, 1_000_000))


@pytest.fixture
def postgres_url(postgres: postgres_server.Server) -> str:
    """A plain ``postgresql://user@127.0.0.1:PORT/db`` URL of a new, empty database."""
    return postgres.create_database(f"t{os.getpid()}_{next(_databases)}")


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request) -> str:
    """Parametrizes a test over both history backends."""
    return request.param


@pytest.fixture
def db_url(backend: str, tmp_path: Path, request) -> str:
    """An empty history database of the test's ``backend``: an SQLite file or a PostgreSQL database."""
    if backend == "postgresql":
        return request.getfixturevalue("postgres_url")
    (tmp_path / "db").mkdir(exist_ok=True)
    return f"sqlite:///{tmp_path / 'db' / 'history.db'}"


@dataclass(frozen=True)
class DefaultRun:
    """`auditor audit` on the shipped config, once for the whole test run: its process (exit
    status, the text report on stdout), the same result as JSON (``--json-file``), the history
    database it was stored in (copy it before writing to it), each side's outputs
    (``--save-outputs``) and the workers the session's zygotes forked for it, by stack."""

    proc: subprocess.CompletedProcess[str]
    doc: dict
    db: Path
    outputs: Path
    forked: dict[str, int]


@pytest.fixture(scope="session")
def default_run(
    stacks: Path, tmp_path_factory: pytest.TempPathFactory, warm_stacks: WarmStacks | None
) -> DefaultRun:
    """One real default cycle shared by every test that only reads its results (a cycle takes
    one to three minutes here; each test running its own made the suite slow)."""
    d = tmp_path_factory.mktemp("default-run")
    db, out, outputs = d / "history.db", d / "run.json", d / "outputs"
    before = warm_stacks.ready() if warm_stacks is not None else {}
    proc = auditor(
        "--config", str(DEFAULT_CONFIG), "--db", str(db), "audit", "--json-file", str(out),
        "--save-outputs", str(outputs), timeout=900,
    )  # fmt: skip
    after = warm_stacks.ready() if warm_stacks is not None else {}
    assert "Traceback" not in proc.stderr, proc.stderr
    assert out.is_file(), proc.stdout[-2000:] + proc.stderr[-2000:]
    forked = {s: n - before.get(s, 0) for s, n in after.items() if n > before.get(s, 0)}
    return DefaultRun(proc, json.loads(out.read_text()), db, outputs, forked)


@pytest.fixture(scope="session")
def history_template(tmp_path_factory) -> Path:
    """An SQLite history migrated to head once per session: tests copy it instead of migrating."""
    path = tmp_path_factory.mktemp("history-template") / "history.db"
    Store.open(f"sqlite:///{path}").close()
    return path


@pytest.fixture
def history_db(history_template: Path, tmp_path: Path) -> Path:
    """An empty, up-to-date SQLite history of the test (a copy of the template, not a fresh file:
    tests of migration itself open a new file instead)."""
    path = tmp_path / "history.db"
    shutil.copyfile(history_template, path)
    return path


@pytest.fixture
def history_url(backend: str, request) -> str:
    """An empty history of the test's ``backend`` for Store.open: a copy of the migrated SQLite
    template, or a new PostgreSQL database (migrated by Store.open)."""
    if backend == "postgresql":
        return request.getfixturevalue("postgres_url")
    return f"sqlite:///{request.getfixturevalue('history_db')}"
