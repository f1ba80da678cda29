"""The daemon idles without numpy or SQLAlchemy (#36): its children read the config and the
database. This catches a module the daemon imports that pulls either in, in seconds, before
the stacks test that reads the idle daemon's memory map does (tests/stacks/test_daemon_stacks.py)."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
import auditor.daemon.main
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("numpy", "sqlalchemy", "pluggy"))
print(",".join(heavy))
"""


def test_the_daemon_module_imports_neither_numpy_sqlalchemy_nor_pluggy() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"the daemon imports {done.stdout.strip()}"
