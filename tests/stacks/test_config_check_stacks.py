"""`auditor config check --hosts` on the real stacks: what only starting a stack can show (an
interpreter that runs but has no framework, a serving stack that cannot load a model's file)
fails the check with the key that names it; the same config without --hosts does not start
anything and says nothing of them."""

from __future__ import annotations

import subprocess

import pytest

from tests.cli import auditor
from tests.conftest import REPO
from tests.user_models import export_user_policy

pytestmark = pytest.mark.stacks


def config_check(config, *options: str) -> subprocess.CompletedProcess[str]:
    done = auditor("--config", str(config), "config", "check", *options)
    assert "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
    return done


def test_an_interpreter_without_its_framework_fails_only_with_hosts(stacks, tmp_path):
    text = (REPO / "auditor.toml").read_text()
    config = tmp_path / "auditor.toml"
    # ms20's python is lite20's: it runs, it is executable, and it has no mindspore
    assert "/ms20/bin/python" in text
    config.write_text(text.replace("/ms20/bin/python", "/lite20/bin/python", 1))
    plain = config_check(config)
    assert plain.returncode == 0, plain.stdout + plain.stderr  # it exists and is executable
    started = config_check(config, "--hosts")
    said = started.stdout + started.stderr
    assert started.returncode == 1, said
    assert "stacks.ms20" in said and "mindspore" in said.lower(), said
    assert "stacks.lite20" not in said and "stacks.ms210" not in said, said


def test_a_stack_that_cannot_serve_the_model_fails_with_hosts(stacks, tmp_path):
    policy = export_user_policy("ms210", tmp_path / "policy.mindir")  # MindIR too new for Lite 2.0
    text = (REPO / "auditor.toml").read_text()
    config = tmp_path / "auditor.toml"
    config.write_text(
        text + f'\n[models.policy]\npath = "{policy}"\nstacks = ["lite20"]\nreference = "ms210-graph"\n'
    )
    assert config_check(config).returncode == 0  # nothing started: nothing known of lite20
    started = config_check(config, "--hosts")
    said = started.stdout + started.stderr
    assert started.returncode == 1, said
    assert "models.policy.stacks" in said and f"stack lite20 cannot serve {policy}" in said, said
    assert "models.policy.reference" not in said  # ms210-graph loads its own release's file
