"""A user's own policies, exported IN THE TEST by the real ms20 and ms210 stacks:
tests/model_fixtures/user_policy.py (LayerNorm, a discrete and a continuous head, 11
observations), and the package tests/model_fixtures/mypolicy (seven policies built by a factory,
with the checkpoints training saved)."""

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


POLICIES = REPO / "tests" / "model_fixtures" / "mypolicy" / "export.py"


def export_policies(stack: str, out: Path, kinds: tuple[str, ...] = (), seed: int = 0) -> list[Path]:
    """Export mypolicy's policies (all, or ``kinds``) with ``stack``'s MindSpore into ``out``:
    KIND.mindir and its checkpoint KIND.ckpt each."""
    out.mkdir(parents=True, exist_ok=True)
    argv = [str(stack_python(stack)), str(POLICIES), str(out), "--seed", str(seed)]
    if kinds:
        argv += ["--kinds", ",".join(kinds)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return sorted(out.glob("*.mindir"))
