"""The auditor caps glibc's malloc arenas at start (auditor.common.memory), unless the
environment says otherwise; the figures behind it come from bench/fleet.py."""

from __future__ import annotations

import ast
import inspect
import platform
import textwrap

import pytest

from auditor import entry
from auditor.common import memory
from auditor.daemon import cycle_child

GLIBC = platform.libc_ver()[0] == "glibc"


def test_arenas_are_capped_unless_the_environment_says_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert memory.limit_arenas() is GLIBC  # mallopt is glibc's; elsewhere nothing to tune
    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    assert memory.limit_arenas() is False  # glibc read the variable at start: left to it


def test_the_entry_points_cap_them_before_anything_else() -> None:
    """Both processes that run cycles (the command, the daemon's cycle child) call it first."""
    for function in (entry.main, cycle_child.main):
        body = ast.parse(textwrap.dedent(inspect.getsource(function))).body[0].body
        first = next(s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)))
        assert ast.unparse(first) == "limit_arenas()", function
