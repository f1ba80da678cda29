"""No test asserts how long something took (#38): these machines are shared and noisy, so speed
goals live in bench/, which prints figures. Tests count calls, requests and deadlines reached
instead. This reads every test file and fails on an ``assert`` that compares a clock reading,
anything computed from one, or a duration a result reports (``seconds``, ``took``...)."""

from __future__ import annotations

import ast

from tests.cli import REPO

CLOCKS = {"monotonic", "time", "perf_counter", "process_time", "monotonic_ns", "perf_counter_ns", "time_ns"}
DURATIONS = {"seconds", "elapsed", "took", "duration", "wall", "wall_s", "cpu_seconds"}


def _clock_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in CLOCKS
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "time"
    )


def _duration(node: ast.AST) -> bool:
    """A duration someone reported: ``x.seconds``, ``doc["seconds"]``, a name ``elapsed``."""
    if isinstance(node, ast.Attribute) and node.attr in DURATIONS:
        return True
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return node.slice.value in DURATIONS
    return isinstance(node, ast.Name) and node.id in DURATIONS


def _timed(node: ast.AST, names: set[str]) -> bool:
    return any(
        _clock_call(n) or _duration(n) or (isinstance(n, ast.Name) and n.id in names) for n in ast.walk(node)
    )


def clock_asserts(source: str) -> list[int]:
    """Lines of asserts that compare a clock, a value made from one, or a reported duration."""
    tree = ast.parse(source)
    found = []
    for scope in ast.walk(tree):
        if not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        names: set[str] = set()
        for node in ast.walk(scope):  # names bound to a clock reading, or to arithmetic on one
            if isinstance(node, ast.Assign) and _timed(node.value, names):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        for node in ast.walk(scope):
            if isinstance(node, ast.Assert):
                for compare in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
                    if not any(
                        isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn | ast.Is) for op in compare.ops
                    ) and _timed(compare, names):
                        found.append(node.lineno)
    return sorted(set(found))


def test_no_test_asserts_a_duration():
    offenders = [
        f"{path.relative_to(REPO)}:{line}"
        for path in sorted((REPO / "tests").rglob("*.py"))
        for line in clock_asserts(path.read_text())
    ]
    assert offenders == [], "speed goals belong in bench/: count calls, requests or deadlines instead"


def test_the_scan_finds_what_it_is_for():
    assert clock_asserts(
        "import time\ndef t():\n    s = time.monotonic()\n    f()\n    assert time.monotonic() - s < 5\n"
    )
    assert clock_asserts("def t():\n    took = f()\n    assert 0.9 <= took < 5\n")
    assert clock_asserts("def t(doc):\n    assert doc['seconds'] < 10\n")
    derived = "import time\ndef t():\n    t0 = time.perf_counter()\n    x = time.perf_counter() - t0\n"
    assert clock_asserts(derived + "    assert x < 1\n")
    assert not clock_asserts("def t(calls):\n    assert len(calls) <= 3\n")
    assert not clock_asserts("def t(r):\n    assert r.seconds == 0 and r.count > 2\n")
