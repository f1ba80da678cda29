"""The auditor tunes glibc's malloc at start (auditor.common.memory), except what the
environment sets; the figures behind it come from bench/fleet.py."""

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


def test_malloc_is_tuned_except_what_the_environment_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in (
        "MALLOC_ARENA_MAX",
        "MALLOC_MMAP_THRESHOLD_",
        "MALLOC_TRIM_THRESHOLD_",
        "GLIBC_TUNABLES",
    ):
        monkeypatch.delenv(variable, raising=False)
    assert memory.tune_malloc() is GLIBC  # mallopt is glibc's; elsewhere nothing to tune
    calls: list[tuple[int, int]] = []

    class Libc:
        @staticmethod
        def mallopt(param: int, value: int) -> int:
            calls.append((param, value))
            return 1

    monkeypatch.setattr(memory.ctypes, "CDLL", lambda _name: Libc)
    assert memory.tune_malloc() is True
    assert calls == [
        (memory.M_ARENA_MAX, 2),
        (memory.M_MMAP_THRESHOLD, 64 * 1024),
        (memory.M_TRIM_THRESHOLD, 128 * 1024),
    ]
    calls.clear()
    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")  # glibc read these at start: left to it
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=1048576")
    assert memory.tune_malloc() is True and calls == [(memory.M_TRIM_THRESHOLD, 128 * 1024)]
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "0")
    calls.clear()
    assert memory.tune_malloc() is False and calls == []


def test_the_entry_points_cap_them_before_anything_else() -> None:
    """Both processes that run cycles (the command, the daemon's cycle child, started cold or
    forked) call it first."""
    for entry_point in (cycle_child.main, cycle_child.forked):  # both go through serve
        assert "serve(" in ast.unparse(ast.parse(textwrap.dedent(inspect.getsource(entry_point))))
    for function in (entry.main, cycle_child.serve):
        body = ast.parse(textwrap.dedent(inspect.getsource(function))).body[0].body
        first = next(s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)))
        assert ast.unparse(first) == "tune_malloc()", function
