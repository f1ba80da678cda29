"""scripts/install-stacks: finds its interpreters, never assumes a path."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.requires import require

SCRIPT = REPO / "scripts" / "install-stacks"


def _run(tmp_path: Path, *args: str, path: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": path, "HOME": str(tmp_path), "AUDITOR_STACKS_DIR": str(tmp_path / "stacks")}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60)


def test_missing_python_37_is_named_with_what_to_install(tmp_path):
    def system_python() -> str | None:
        if any(Path(d, "python3.7").exists() for d in ("/usr/bin", "/usr/local/bin")):
            return "this machine has a system python3.7: install-stacks would find it on any PATH"
        return None

    require("no-system-python3.7", system_python)
    # A PATH without pyenv or any python3.7: the script must stop and say what to install.
    proc = _run(tmp_path, "ms20", path="/usr/bin:/bin")
    assert proc.returncode == 1
    assert "ms20 needs Python 3.7" in proc.stderr
    assert "pyenv install 3.7" in proc.stderr
    assert not (tmp_path / "stacks" / "ms20").exists()


def test_python_37_is_found_through_pyenv_when_not_on_path(tmp_path):
    def no_pyenv_37() -> str | None:
        if shutil.which("pyenv") is None:
            return "no pyenv on this machine"
        root = subprocess.run(["pyenv", "root"], capture_output=True, text=True).stdout.strip()
        if not any(p.name.startswith("3.7.") for p in Path(root, "versions").iterdir()):
            return "pyenv has no 3.7"
        return None

    require("pyenv", no_pyenv_37)
    pyenv = shutil.which("pyenv")
    assert pyenv is not None
    root = subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "pyenv").symlink_to(pyenv)
    # No python3.7 on this PATH (no shims): only `pyenv root`/versions can provide it.
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(tmp_path), "PYENV_ROOT": root}
    proc = subprocess.run(
        ["bash", str(SCRIPT), "--which-python", "3.7"], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    found = proc.stdout.strip()
    assert found.startswith(f"{root}/versions/3.7.") and found.endswith("/bin/python3.7")
    version = subprocess.run(
        [found, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True
    ).stdout.strip()
    assert version == "(3, 7)"


def test_present_stacks_are_reused_quickly(stacks):
    env = {**os.environ, "AUDITOR_STACKS_DIR": str(stacks)}
    proc = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for name in ("ms210", "ms20", "lite20", "ort"):
        assert f"{name}: " in proc.stderr and "present in" in proc.stderr
    assert "installing" not in proc.stderr
    # A stacks folder only its owner reaches (under /root here) keeps the Pythons it was made
    # with: copying one is for a folder other users reach (docs/service.md).
    if not os.stat(stacks).st_mode & 0o001 or not os.stat(Path.home()).st_mode & 0o001:
        assert "copying the Python" not in proc.stderr and "now uses" not in proc.stderr


@pytest.mark.faults
def test_shared_python_refuses_a_folder_other_users_cannot_reach(tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    env = {**os.environ, "AUDITOR_STACKS_DIR": str(private / "stacks")}
    (private / "stacks").mkdir()
    proc = subprocess.run(
        ["bash", str(SCRIPT), "--shared-python", "3.11"], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == 1 and proc.stdout == ""
    assert f"{private / 'stacks'} cannot be reached by other users" in proc.stderr


def test_stacks_installed_elsewhere_are_linked_not_downloaded(stacks, tmp_path):
    """#54 point 2: a service's stacks from the ones already in the installing user's cache
    (--from, --link): no download, the venv's own paths point at its new folder, the source is
    left as it was, and the copy imports its runtime at the right version."""
    source = stacks / "lite20"
    env = {**os.environ, "HOME": str(tmp_path), "AUDITOR_STACKS_DIR": str(tmp_path / "stacks")}
    before = (source / "pyvenv.cfg").read_text(), (source / "bin" / "pip").read_text()
    done = subprocess.run(
        ["bash", str(SCRIPT), "--from", str(stacks), "--link", "lite20"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    target = tmp_path / "stacks" / "lite20"
    assert f"lite20: hard-linking {source.resolve()} to {target}" in done.stderr, done.stderr
    assert "installing mindspore-lite" not in done.stderr
    said = subprocess.run(
        [
            str(target / "bin" / "python"),
            "-c",
            "import mindspore_lite, sys; print(mindspore_lite.__version__, sys.prefix)",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert said.stdout.split() == ["2.0.0", str(target)], said.stderr
    assert (target / "bin" / "pip").read_text().splitlines()[0] == f"#!{target}/bin/python3.7"
    assert ((source / "pyvenv.cfg").read_text(), (source / "bin" / "pip").read_text()) == before
    package = next((target / "lib").glob("python3.7/site-packages/mindspore_lite/__init__.py"))
    original = next((source / "lib").glob("python3.7/site-packages/mindspore_lite/__init__.py"))
    assert package.stat().st_ino == original.stat().st_ino  # linked, not copied
