"""``auditor fingerprint`` on the shipped config and the real stacks, against an empty
fixture Ascend root (what this machine has: no CANN, no driver, no npu-smi)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from auditor.cli.main import cli
from tests.ascend_trees import build_tree
from tests.unit.fingerprint.test_fingerprint_cli import write_config

pytestmark = pytest.mark.stacks


@pytest.fixture
def config(stacks, tmp_path: Path, doc: dict) -> tuple[Path, Path]:
    tree = build_tree(tmp_path, "empty")
    for stack in doc["stacks"].values():
        stack.update(tree.stack_options(timeout=2.0))
    return write_config(tmp_path, doc), tree.ascend_root


def test_fingerprint_every_configured_stack(config) -> None:
    path, root = config
    result = CliRunner().invoke(cli, ["--config", str(path), "fingerprint"])
    assert result.exit_code == 0, result.output
    out = result.output
    blocks = {block.splitlines()[0].split()[0]: block for block in out.strip().split("\n\n")}
    assert list(blocks) == ["ms210", "ms210-graph", "ms20", "lite20"]
    assert "  MindSpore    2.0.0  commit " in blocks["ms20"] and "supports CANN 6.11, 6.3" in blocks["ms20"]
    assert "supports CANN 8.2, 8.3, 8.5, 9.0, 9.1" in blocks["ms210"]
    assert "  runtime      mindspore-graph  (mindspore 2.10.0)" in blocks["ms210-graph"]
    assert "  Lite         2.0.0  commit " in blocks["lite20"]
    assert "  MindSpore    not installed" in blocks["lite20"]
    assert f"none of MindSpore's AscendEnvChecker paths exists ({root}/nnae/latest/compiler" in blocks["ms20"]
    assert "$ASCEND_HOME_PATH is not set in the stack's environment" in blocks["ms210"]
    assert "MindSpore Lite names no CANN path or variable" in blocks["lite20"]
    for name, block in blocks.items():
        # nothing installed: each runtime says what it looked for, in its own way
        framework = "MindSpore Lite" if name == "lite20" else "MindSpore"
        assert f"  CANN         none found for {framework}" in block
        assert "compiler ?" not in block
        assert f"compatible_version_fw, package_version: {root}/driver/version.info: missing" in block
        assert "    npu_smi.resolved, tool_version," in block


def test_fingerprint_json_of_named_stacks(config) -> None:
    path, root = config
    result = CliRunner().invoke(cli, ["--config", str(path), "fingerprint", "--json", "lite20", "ms20"])
    assert result.exit_code == 0, result.output
    docs = json.loads(result.output)
    assert list(docs) == ["lite20", "ms20"]
    assert docs["ms20"]["packages"]["all"]["mindspore"] == "2.0.0"
    assert docs["lite20"]["packages"]["all"]["mindspore-lite"] == "2.0.0"
    assert docs["ms20"]["cann"]["root"] == str(root)
    assert docs["ms20"]["runtime"]["runtime_version"] == "2.0.0"


def test_a_missing_interpreter_does_not_hide_the_other_stacks(stacks, tmp_path: Path, doc: dict) -> None:
    doc["stacks"]["ms210"]["python"] = str(tmp_path / "gone" / "python")
    result = CliRunner().invoke(
        cli, ["--config", str(write_config(tmp_path, doc)), "fingerprint", "ms210", "lite20"]
    )
    assert result.exit_code == 1
    ms210, lite20 = result.output.strip().split("\n\n")
    assert "NOT COLLECTED: stack ms210: start failed: interpreter not found or not executable" in ms210
    assert "  Lite         2.0.0" in lite20
