"""How hard the property tests (tests/test_fuzz_*.py) try: a few dozen examples per surface by
default, small enough for CI; AUDITOR_FUZZ_EXAMPLES=1000 (or more) for a soak."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings


def examples(default: int) -> int:
    value = os.environ.get("AUDITOR_FUZZ_EXAMPLES", "")
    return int(value) if value.isdigit() and int(value) > 0 else default


def fuzz_settings(default: int) -> settings:
    """No deadline (the machine is shared), no database of past failures left in the tree."""
    return settings(
        max_examples=examples(default),
        deadline=None,
        database=None,
        derandomize=os.environ.get("AUDITOR_FUZZ_RANDOM") != "1",
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
        ],
    )
