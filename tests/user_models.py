"""A user's own policy (tests/model_fixtures/user_policy.py: LayerNorm, a discrete and a
continuous head, 11 observations), exported IN THE TEST by the real ms20 and ms210 stacks."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import REPO, stack_python

SCRIPT = REPO / "tests" / "model_fixtures" / "user_policy.py"


def export_user_policy(
    stack: str, out: Path, seed: int = 0, noise: bool = False, batch: int = 8, fp16: bool = False
) -> Path:
    """Export the policy with ``stack``'s MindSpore to ``out`` (a .mindir path)."""
    argv = [str(stack_python(stack)), str(SCRIPT), str(out), "--seed", str(seed), "--batch", str(batch)]
    if noise:
        argv.append("--noise")
    if fp16:
        argv.append("--fp16")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert out.is_file(), f"{stack} wrote no {out}"
    return out
