"""What the auditor's child processes are started with."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from auditor.common.child_process import own_package_env


def test_a_child_finds_this_auditor_from_any_working_directory(tmp_path: Path) -> None:
    env = own_package_env()
    root = Path(env["PYTHONPATH"].split(os.pathsep)[0])
    assert (root / "auditor" / "__init__.py").is_file()
    # A child started elsewhere, with site-packages out of the way, imports this very package.
    found = subprocess.run(
        [sys.executable, "-S", "-c", "import auditor.common.child_process as m; print(m.__file__)"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert found.returncode == 0, found.stderr
    assert Path(found.stdout.strip()) == Path(sys.modules[own_package_env.__module__].__file__).resolve()
