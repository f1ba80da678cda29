"""``auditor fingerprint`` without the real stacks: usage errors, a stack whose interpreter is
missing, the summary's rendering; and the stack options it relies on (system_root, npu_smi,
npu_smi_timeout)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from auditor.plugins.default_collectors import COLLECTORS
from click.testing import CliRunner

from auditor.cli.fingerprint import render
from auditor.cli.main import cli
from auditor.config.load import parse
from auditor.config.tables import ConfigError, StackConfig
from auditor.fingerprint.collect import deadline_for, errors, unknowns
from auditor.worker import fingerprint as runner
from tests.ascend_trees import build_tree


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def toml_key(key: str) -> str:
    return key if key.replace("-", "").replace("_", "").isalnum() else json.dumps(key)


def to_toml(doc: dict[str, Any]) -> str:
    """A parsed config document written back as TOML: sections and their sub-tables
    (``[stacks.ms20]``) as tables, ``[[pairs]]`` as arrays of tables, deeper values inline."""
    out: list[str] = []
    for name, section in doc.items():
        if isinstance(section, list):
            for item in section:
                out.append(f"[[{toml_key(name)}]]")
                out += [f"{toml_key(k)} = {toml_value(v)}" for k, v in item.items()]
            continue
        out.append(f"[{toml_key(name)}]")
        out += [f"{toml_key(k)} = {toml_value(v)}" for k, v in section.items() if not isinstance(v, dict)]
        for k, v in section.items():
            if isinstance(v, dict):
                out.append(f"[{toml_key(name)}.{toml_key(k)}]")
                out += [f"{toml_key(kk)} = {toml_value(vv)}" for kk, vv in v.items()]
    return "\n".join(out) + "\n"


def write_config(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "auditor.toml"
    text = to_toml(doc)
    assert tomllib.loads(text) == doc  # the writer lost nothing
    path.write_text(text)
    return path


# -- config ------------------------------------------------------------------------------------
def test_the_stack_fingerprint_options_default_and_expand(doc: dict, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_ROOT", "/srv/container")
    config = parse(doc)
    assert config.stacks["ms20"].system_root == "/"
    assert config.stacks["ms20"].npu_smi == "npu-smi"
    assert config.stacks["ms20"].npu_smi_timeout == 10.0
    doc["stacks"]["ms20"].update(system_root="${FAKE_ROOT}/", npu_smi="~/bin/npu-smi", npu_smi_timeout=3)
    stack = parse(doc).stacks["ms20"]
    assert stack.system_root == "/srv/container/"
    assert stack.npu_smi == str(Path.home() / "bin" / "npu-smi")
    assert stack.npu_smi_timeout == 3.0 and isinstance(stack.npu_smi_timeout, float)


SECONDS_UP_TO_1H = (
    'must be a duration greater than 0s and at most 1h (seconds, or a string like "90s", "15m", "1h30m"), '
)


def test_bad_stack_fingerprint_options_are_all_reported(doc: dict) -> None:
    doc["stacks"]["ms20"].update(system_root="relative/root", npu_smi="", npu_smi_timeout=0)
    doc["stacks"]["lite20"].update(system_root=5, npu_smi_timeout="10", npu_smi_tiemout=1)
    doc["stacks"]["ms210"].update(npu_smi_timeout=float("inf"))
    with pytest.raises(ConfigError) as info:
        parse(doc)
    assert set(info.value.errors) == {
        "stacks.ms20.system_root: must be an absolute path, not 'relative/root'",
        "stacks.ms20.npu_smi: must be a command name or path, not an empty string",
        "stacks.ms20.npu_smi_timeout: " + SECONDS_UP_TO_1H + "not 0",
        "stacks.lite20.system_root: must be an absolute path, not integer 5",
        "stacks.lite20.npu_smi_timeout: " + SECONDS_UP_TO_1H + "not '10'",
        "stacks.lite20.npu_smi_tiemout: unknown key (expected one of: ascend_root, convert, device, env, "
        "group, host, max_publication_age, model_drift_severity, models, npu_smi, npu_smi_timeout, publish, "
        "python, role, runtime, source, system_root)",
        "stacks.ms210.npu_smi_timeout: " + SECONDS_UP_TO_1H + "not inf",
    }


def test_the_request_deadline_leaves_room_for_every_npu_smi_timeout() -> None:
    stack = StackConfig("s", "train", "mindspore", "/x", npu_smi_timeout=60.0)
    assert deadline_for(stack, 120.0) == 3 * 60.0 + 30.0
    assert deadline_for(StackConfig("s", "train", "mindspore", "/x"), 120.0) == 120.0


# -- the command without stacks ----------------------------------------------------------------
def test_an_unknown_stack_name_is_a_usage_error(tmp_path: Path, doc: dict) -> None:
    result = CliRunner().invoke(
        cli, ["--config", str(write_config(tmp_path, doc)), "fingerprint", "ms20", "nope"]
    )
    assert result.exit_code == 2
    assert (
        "no stack named 'nope'" in result.output
        and "configured: ms210, ms210-graph, ms20, lite20" in result.output
    )


def test_a_stack_without_its_interpreter_is_reported_and_exit_is_1(tmp_path: Path, doc: dict) -> None:
    for name, stack in doc["stacks"].items():
        stack["python"] = str(tmp_path / f"missing-{name}" / "python")
    config = write_config(tmp_path, doc)
    result = CliRunner().invoke(cli, ["--config", str(config), "fingerprint", "ms20", "lite20"])
    assert result.exit_code == 1
    out = result.output
    assert out.count("NOT COLLECTED") == 2 and "ms210" not in out
    assert f"interpreter not found or not executable: {tmp_path}/missing-ms20/python" in out
    assert "(stacks.lite20.python; run scripts/install-stacks?)" in out
    result = CliRunner().invoke(cli, ["--config", str(config), "fingerprint", "--json", "lite20"])
    assert result.exit_code == 1
    assert list(json.loads(result.output)) == ["lite20"]
    assert "interpreter not found" in json.loads(result.output)["lite20"]["error"]


def test_the_summary_shows_versions_unknowns_and_errors(tmp_path: Path) -> None:
    tree = build_tree(tmp_path, "driver-firmware-mismatch")
    context = tree.context()
    environ = dict(context.pop("environ"), HCCL_DETERMINISTIC="true", MS_TOKEN="t0ps3cret")
    doc = runner.collect(COLLECTORS + ["auditor.plugins.collectors.no_such"], context, environ)["fingerprint"]
    doc["runtime"] = {
        "runtime": "mindspore",
        "runtime_package": "mindspore",
        "runtime_version": "2.0.0",
        "numpy": "1.21.6",
        "python": "3.7.16",
        "executable": "/x/python",
    }
    text = render(StackConfig("ms20", "train", "mindspore", "/x/python"), doc)
    lines = text.splitlines()
    assert lines[0] == "ms20  (train, mindspore, /x/python)"
    assert "  CANN         8.2.RC1  [ascend-toolkit]  compiler 8.2.0.0.201  V100R001C22SPC001B231" in lines
    assert "  driver       25.0.rc1.1  V100R001C21SPC002B220  firmware 7.0.0..7.7.99" in lines
    assert "  firmware     6.3.0.1.241  driver 22.0..22.0., 23.0.rc1..23.0.rc1." in lines
    assert (
        "  npu-smi      2 NPU(s)  driver 25.0.rc1.1  0/0 910B3 Warning, 1/0 910B3 Alarm  "
        "board firmware 6.3.0.1.241  compatibility NOK"
    ) in lines
    assert (
        "  MindSpore    not installed" in lines
        and "  runtime      mindspore  (mindspore 2.0.0)  numpy 1.21.6" in lines
    )
    env_line = next(line for line in lines if line.startswith("  environment"))
    assert (
        "HCCL_DETERMINISTIC=true" in env_line
        and "MS_TOKEN=<redacted>" in env_line
        and "t0ps3cret" not in text
    )
    assert "  collector errors:" in lines
    assert any(
        line.startswith("    no_such: auditor.plugins.collectors.no_such: cannot import") for line in lines
    )
    assert "  unknown:" in lines
    assert f"    cann.nnae: {tree.ascend_root}/nnae/latest: missing" in lines
    assert errors(doc) == {"no_such": doc["no_such"]["error"]}
    assert set(unknowns(doc)) == {"packages", "framework", "cann"}


def test_an_empty_host_summary_groups_fields_with_one_reason(tmp_path: Path) -> None:
    tree = build_tree(tmp_path, "empty")
    context = tree.context()
    environ = context.pop("environ")
    doc = runner.collect(COLLECTORS, context, environ)["fingerprint"]
    text = render(StackConfig("lite20", "infer", "mindspore-lite", "/y/python"), doc)
    driver_file = tree.ascend_root / "driver" / "version.info"
    expected = (
        "    driver.version, innerversion, ascendhal_version, compatible_version, compatible_version_fw, "
        f"package_version: {driver_file}: missing"
    )
    assert expected in text.splitlines()
    assert "  CANN         ?  compiler ?" in text
    assert "  npu-smi      not available" in text


def test_the_summary_lists_the_watched_model_files() -> None:
    """#54: the served model files a stack watches were in --json only."""
    stack = StackConfig("lite20", "infer", "mindspore-lite", "/s/lite20/bin/python")
    doc = {
        "models": {
            "patterns": ["/srv/models/*.mindir"],
            "files": {
                "/srv/models/actor.mindir": {
                    "size": 2_500_000,
                    "sha256": "ab12cd34ef56" + "0" * 52,
                    "readable": True,
                    "producer_name": "MindSpore",
                    "producer_version": "2.0.0",
                    "mind_ir_version": 1,
                },
                "/srv/models/broken.mindir": {
                    "size": 12,
                    "sha256": "ff" * 32,
                    "readable": False,
                    "reason": "truncated",
                },
            },
            "unknown": {},
        }
    }
    lines = render(stack, doc).splitlines()
    [first] = [i for i, line in enumerate(lines) if line.startswith("  models ")]
    assert lines[first] == (
        "  models       /srv/models/actor.mindir  sha256 ab12cd34ef56  2.5 MB  MindIR 1  by MindSpore 2.0.0"
    )
    assert lines[first + 1] == (
        "               /srv/models/broken.mindir  sha256 ffffffffffff  0.0 MB  "
        "not a readable MindIR (truncated)"
    )
    assert not any(line.startswith("  models ") for line in render(stack, {}).splitlines())
