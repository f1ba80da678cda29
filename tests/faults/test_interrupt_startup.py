"""Ctrl-C while the auditor is still starting (importing click, SQLAlchemy, Alembic and the
plugins, reading the config, opening the database) ends it with status 130 and one line,
never a Python traceback from the middle of an import.

Each case delivers a real SIGINT at a named point of start-up: the moment a given module is
first imported (a meta-path hook sends it), then runs the real entry point. The interpreter's
own initialisation (site, before any auditor code runs) is Python's, not the auditor's.
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from tests.conftest import REPO

HOOK = """
import os, signal, sys
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, Interrupt())
sys.argv = ["auditor"] + {args!r}
from auditor.entry import main
main()
"""

# In the order start-up meets them: the CLI's own imports, the plugins, the config, the
# database, the cycle's modules.
MODULES = (
    "click",
    "auditor.config.load",
    "pluggy",
    "auditor.plugins.default_probes",
    "sqlalchemy.orm",
    "alembic.command",
    "auditor.cycle.cycle",
)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a background job would start with it ignored


@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cfg")
    python = tmp / "python"
    python.write_text("#!/bin/sh\nexit 1\n")
    python.chmod(0o755)
    path = tmp / "auditor.toml"
    path.write_text(
        f'[stacks.t]\nrole = "train"\nruntime = "mindspore"\npython = "{python}"\n'
        f'[stacks.i]\nrole = "infer"\nruntime = "mindspore-lite"\npython = "{python}"\n'
        '[[pairs]]\ntrain = "t"\ninfer = "i"\nprobes = ["ppo_policy"]\n'
    )
    return path


@pytest.mark.parametrize("module", MODULES)
def test_sigint_during_start_up_exits_130_without_a_traceback(cfg, tmp_path, module):
    args = ["--config", str(cfg), "--db", str(tmp_path / "h.db"), "audit"]
    proc = subprocess.run(
        [sys.executable, "-c", HOOK.format(module=module, args=args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_default_sigint,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 130, (proc.returncode, proc.stderr)
    assert proc.stderr.strip().splitlines()[-1].startswith("auditor: "), proc.stderr
