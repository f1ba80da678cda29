"""Everything that runs inside a stack must parse on Python 3.7 (ms20 and lite20 are 3.7).

The interpreter is located the way scripts/install-stacks locates it (PATH, pyenv versions,
/usr/bin), not through a pyenv shim, which fails when 3.7 is not an active pyenv version.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import REPO

STACK_SIDE = [
    "auditor/__init__.py",
    "auditor/mindir.py",
    "auditor/worker/*.py",
    "probes/*.py",
    "tests/probe_fixtures/*.py",
    "tests/model_fixtures/*.py",
    "examples/*/src/*/policy.py",
    "plugins/collectors/*.py",
    "plugins/runtimes/**/*.py",  # a runtime's package, but its spec.py (the auditor's side)
    "scripts/opsweep/*.py",
]


def _python37() -> str:
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "install-stacks"), "--which-python", "3.7"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode != 0:
        pytest.skip("no Python 3.7 on this machine: " + proc.stderr.strip())
    return proc.stdout.strip()


def test_stack_side_code_parses_on_python_37():
    files = sorted(
        {
            str(p)
            for pattern in STACK_SIDE
            for p in REPO.glob(pattern)
            if not (p.name == "spec.py" and "runtimes" in p.parts)
        }
    )
    assert any(f.endswith("worker/main.py") for f in files) and any(
        f.endswith("ppo_policy.py") for f in files
    )
    assert any(f.endswith("runtimes/lite/worker.py") for f in files)
    check = "import ast, sys\nfor f in sys.argv[1:]:\n    ast.parse(open(f).read(), f)\n"
    proc = subprocess.run([_python37(), "-c", check, *files], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_bootstrap_sources_parse_on_python_37():
    """The code given to a stack interpreter with ``-c`` (local and remote) is 3.7 code too."""
    from auditor.worker.bootstrap import SOURCE
    from auditor.worker.remote_boot import LAUNCH
    from auditor.worker.remote_boot import SOURCE as REMOTE

    check = (
        "import ast, sys\nfor i, s in enumerate(sys.stdin.read().split('\\0')):\n    ast.parse(s, str(i))\n"
    )
    sources = "\0".join((SOURCE, REMOTE, LAUNCH))
    python = _python37()
    proc = subprocess.run([python, "-c", check], input=sources, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
