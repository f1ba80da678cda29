"""Shared fixtures. Tests that need the real reference stacks use the ``stacks`` fixture:
without the stacks they are skipped, or fail when AUDITOR_REQUIRE_STACKS=1 (as in `make test`
and CI, where scripts/install-stacks has just run)."""

from __future__ import annotations

import copy
import os
import tomllib
from pathlib import Path

import pytest

from auditor.paths import stacks_dir

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = REPO / "auditor.toml"
STACK_NAMES = ("ms210", "ms20", "lite20")


def stack_python(name: str) -> Path:
    return stacks_dir() / name / "bin" / "python"


@pytest.fixture(scope="session")
def stacks() -> Path:
    missing = [n for n in STACK_NAMES if not stack_python(n).exists()]
    if missing:
        message = (
            f"reference stacks missing ({', '.join(missing)} in {stacks_dir()}): run scripts/install-stacks"
        )
        if os.environ.get("AUDITOR_REQUIRE_STACKS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return stacks_dir()


@pytest.fixture(scope="session")
def default_doc() -> dict:
    """The shipped auditor.toml, parsed, for tests to copy and modify."""
    return tomllib.loads(DEFAULT_CONFIG.read_text())


@pytest.fixture
def doc(default_doc: dict) -> dict:
    return copy.deepcopy(default_doc)


def worker_pids(parent: int | None = None) -> list[int]:
    """Live stack-worker processes (optionally only children of ``parent``), read from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if b"auditor.worker.main" in cmdline and state != "Z" and (parent is None or int(ppid) == parent):
            found.append(int(entry.name))
    return found
