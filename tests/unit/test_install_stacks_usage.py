"""#54: scripts/install-stacks --help said "unknown stack '--help'"; an option it does not know
is named as an option. Neither touches the stacks folder."""

from __future__ import annotations

import os
import subprocess

from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "install-stacks"


def run(tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "AUDITOR_STACKS_DIR": str(tmp_path / "stacks")}
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60)


def test_help_prints_what_it_installs_and_its_usage(tmp_path) -> None:
    for flag in ("--help", "-h"):
        done = run(tmp_path, flag)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("Installs the reference stacks the default auditor.toml points at:")
        assert (
            "usage: scripts/install-stacks [STACK...]" in done.stdout and "--which-python X.Y" in done.stdout
        )
        assert "#" not in done.stdout and "set -euo" not in done.stdout
    assert not (tmp_path / "stacks").exists()


def test_an_unknown_option_is_named_as_an_option(tmp_path) -> None:
    done = run(tmp_path, "--bogus")
    assert done.returncode == 1
    assert "unknown option '--bogus' (scripts/install-stacks --help)" in done.stderr
    assert "unknown stack" not in done.stderr and not (tmp_path / "stacks").exists()


def test_from_a_folder_that_is_not_there_and_link_without_from_are_refused(tmp_path) -> None:
    done = run(tmp_path, "--from", str(tmp_path / "nowhere"), "lite20")
    assert done.returncode == 1 and f"--from {tmp_path / 'nowhere'}: no such folder" in done.stderr
    done = run(tmp_path, "--link", "lite20")
    assert done.returncode == 1 and "--link needs --from DIR" in done.stderr
    assert not (tmp_path / "stacks").exists()
