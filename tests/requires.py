"""The one way a test gives up for want of a real part (the reference stacks, an OpenSSH
server, PostgreSQL, a private mount namespace, Python 3.7, headless Chromium, systemd-analyze,
Prometheus and Alertmanager):
``need(part, reason)``. Without the part it skips, saying why; under the flag that requires the
part (``AUDITOR_REQUIRE_STACKS=1``, ``AUDITOR_REQUIRE_POSTGRES=1``: `make test` and CI set both)
it fails instead, so a test that needs a real part can never vanish from a green run.

``AUDITOR_TEST_UNAVAILABLE=part,part`` (``all``) makes parts unavailable whatever the machine
has: tests/unit/test_requires.py runs the suite's tests that need each part that way, with and
without the flags, and proves that they fail rather than skip. No test calls ``pytest.skip``
anywhere else (the same test reads every file of tests/ to keep it so).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

STACKS, POSTGRES = "AUDITOR_REQUIRE_STACKS", "AUDITOR_REQUIRE_POSTGRES"
PARTS = {
    "stacks": STACKS,
    "sshd": STACKS,
    "namespace": STACKS,
    "python3.7": STACKS,
    "chromium": STACKS,
    "systemd-analyze": STACKS,
    "pyenv": STACKS,
    "prometheus": STACKS,
    "alertmanager": STACKS,
    "no-system-python3.7": STACKS,
    "postgres": POSTGRES,
}
"""Each real part a test may need, and the flag that requires it."""
UNAVAILABLE = "AUDITOR_TEST_UNAVAILABLE"


def made_unavailable(part: str) -> bool:
    """Whether ``part`` is made unavailable for this run (``AUDITOR_TEST_UNAVAILABLE``)."""
    parts = {p.strip() for p in os.environ.get(UNAVAILABLE, "").split(",")}
    return part in parts or "all" in parts


def probe(part: str, check: Callable[[], str | None]) -> str | None:
    """Why ``part`` is not available here (``check()``, unless it was made unavailable), or None."""
    if part not in PARTS:
        raise ValueError(f"unknown part {part!r} (known: {', '.join(PARTS)})")
    if made_unavailable(part):
        return f"{part} made unavailable ({UNAVAILABLE})"
    return check()


def need(part: str, reason: str | None) -> None:
    """Go on when ``reason`` is None; else skip saying it, or fail under the part's flag."""
    if part not in PARTS:
        raise ValueError(f"unknown part {part!r} (known: {', '.join(PARTS)})")
    if reason is None:
        return
    flag = PARTS[part]
    if os.environ.get(flag) == "1":
        pytest.fail(f"{part} is required ({flag}=1): {reason}", pytrace=False)
    pytest.skip(f"{part}: {reason}")


def require(part: str, check: Callable[[], str | None]) -> None:
    """``need(part, probe(part, check))``: the usual way in."""
    need(part, probe(part, check))
