"""The auditor's command line in a subprocess, one way for every test that runs it as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
"""The checkout (tests/conftest.py imports this module, so it cannot import conftest)."""
PYTHON_M_AUDITOR = (sys.executable, "-m", "auditor")


def auditor_argv(*args: str) -> list[str]:
    """``python -m auditor ARGS`` with this interpreter, for tests that start it with Popen."""
    return [*PYTHON_M_AUDITOR, *args]


def auditor(
    *args: str,
    env: Mapping[str, str | None] | None = None,
    cwd: Path | None = REPO,
    timeout: float = 600,
    input: str | None = None,
    program: Sequence[str] = PYTHON_M_AUDITOR,
) -> subprocess.CompletedProcess[str]:
    """Run ``program ARGS`` (``python -m auditor`` unless a test needs another entry) with text
    output captured, in this environment updated by ``env`` (a None value unsets a variable),
    and stdin closed unless ``input`` is given, so that nothing can wait on a terminal."""
    merged = {k: v for k, v in {**os.environ, **(env or {})}.items() if v is not None}
    stdin = {"input": input} if input is not None else {"stdin": subprocess.DEVNULL}
    return subprocess.run(
        [*program, *args], capture_output=True, text=True, cwd=cwd, env=merged, timeout=timeout, **stdin
    )
