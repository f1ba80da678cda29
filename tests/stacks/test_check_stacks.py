"""`auditor check` on the real stacks, with a user-style policy exported in the test by ms20
and ms210: loaded and run where it can be (OK only then, and only when nothing measured or
warned of speaks against it), incompatible (ms210's MindIR version 3 on Lite 2.0), an operator
Lite 2.0 has no CPU kernel for, learned and then known without a load, and a corrupt file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from auditor.cli.main import cli
from tests.conftest import DEFAULT_CONFIG
from tests.user_models import export_user_policy

pytestmark = pytest.mark.stacks


@pytest.fixture(scope="module")
def models(stacks: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("user-models")
    return {
        "ms20": export_user_policy("ms20", d / "ms20.mindir"),
        "ms210": export_user_policy("ms210", d / "ms210.mindir"),
        "noise": export_user_policy("ms20", d / "ms20-noise.mindir", noise=True),
    }


def check(tmp_path: Path, *args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(
        cli, ["--config", str(DEFAULT_CONFIG), "--db", str(tmp_path / "h.db"), "check", "--json", *args]
    )
    return result.exit_code, json.loads(result.stdout)


def verdicts(doc: dict) -> dict[str, dict]:
    return {v["stack"]: v for v in doc["verdicts"]}


def test_a_model_that_loads_everywhere_is_ok_only_where_nothing_speaks_against_it(
    models: dict[str, Path], tmp_path: Path
) -> None:
    """The ms20 policy loads and runs on both infer stacks, but Lite 2.0 is measured to compute
    LayerNorm wrongly (rows past the first thread's share), and MindSpore 2.10 warns that a 2.0
    file is another release's: warnings, with the load as evidence, never OK."""
    code, doc = check(tmp_path, "--model", str(models["ms20"]))
    v = verdicts(doc)
    assert code == 1, doc
    assert set(v) == {"lite20", "ms210-graph"}  # the config's infer stacks by default
    assert doc["model"]["mind_ir_version"] == 1 and "LayerNorm" in doc["model"]["op_types"]
    for s in v.values():  # the load really happened: two heads, 4 logits and 2 means
        assert s["load"]["ok"] and [o["shape"] for o in s["load"]["outputs"]] == [[8, 4], [8, 2]]
        assert s["status"] == "warning" and "loaded the file and ran one seeded batch" in s["evidence"][0]
    assert "LayerNorm differently" in v["lite20"]["reason"] and "max abs difference" in v["lite20"]["reason"]
    assert "another release" in v["ms210-graph"]["reason"]
    assert any("Cross-major" in line for line in v["ms210-graph"]["load"]["log_lines"])
    assert not (tmp_path / "h.db").exists()  # a check never creates the history


def test_ok_rests_on_the_load(models: dict[str, Path], tmp_path: Path) -> None:
    code, doc = check(tmp_path, "--model", str(models["ms210"]), "--stack", "ms210-graph")
    (v,) = doc["verdicts"]
    assert code == 0 and v["status"] == "ok" and v["load"]["ok"]
    code, doc = check(tmp_path, "--model", str(models["ms210"]), "--stack", "ms210-graph", "--no-load")
    (v,) = doc["verdicts"]
    assert code == 1 and v["status"] == "unchecked" and v["load"] is None
    assert "not loaded (--no-load)" in v["reason"] and any(
        "covers every operator" in e for e in v["evidence"]
    )


def test_ms210_export_is_incompatible_with_lite20(models: dict[str, Path], tmp_path: Path) -> None:
    code, doc = check(
        tmp_path, "--model", str(models["ms210"]), "--stack", "lite20", "--stack", "ms210-graph"
    )
    v = verdicts(doc)
    assert code == 1
    assert v["ms210-graph"]["status"] == "ok"
    lite = v["lite20"]
    assert lite["status"] == "incompatible" and lite["runtime_version"] == "2.0.0"
    assert "MindIR version 3" in lite["reason"] and "at most version 1" in lite["reason"]
    assert "export with a MindSpore release" in lite["remedy"]
    assert lite["load"]["attempted"] is False  # the rule knew: the load would fail


def test_ms210_export_really_fails_to_load_on_lite20(models: dict[str, Path], tmp_path: Path) -> None:
    """What the rule predicts is what the runtime does: with no known limit for Lite 2.0 the
    load is attempted, fails with the runtime's own message, and the verdict says so."""
    from auditor.extend.manager import Plugins
    from auditor.gate.preflight import preflight
    from tests.unit.gate.test_check import config_for

    plugins = Plugins(entry_points=False)

    cfg = config_for(DEFAULT_CONFIG)
    rules = [r for n, r in plugins.rules().items() if n != "mindir-version"]
    report = preflight(
        cfg,
        str(models["ms210"]),
        ["lite20"],
        plugins.fingerprint_collectors(),
        rules,
        plugins.runtimes(),
        load=True,
    )
    (v,) = report.verdicts
    assert v.status == "incompatible" and v.load is not None and v.load.attempted and not v.load.ok
    assert [(m.package, m.version, m.max_mind_ir_version) for m in report.learned_maxima] == [
        ("mindspore-lite", "2.0.0", 1)
    ]


def test_unsupported_operator(models: dict[str, Path], tmp_path: Path) -> None:
    code, doc = check(tmp_path, "--model", str(models["noise"]))
    v = verdicts(doc)
    assert code == 1
    # MindSpore 2.10 runs it (a 2.0 file: a warning, not OK); Lite 2.0 has no kernel for StandardNormal.
    assert v["ms210-graph"]["status"] == "warning" and v["ms210-graph"]["load"]["ok"]
    lite = v["lite20"]
    assert lite["status"] == "unsupported" and "StandardNormal" in lite["reason"]
    assert lite["load"]["attempted"] is False  # the rule knew; no request hung or failed


def test_unsupported_operator_learned_from_a_real_load(models: dict[str, Path], tmp_path: Path) -> None:
    """Without the runtime plugin's table, the load on Lite 2.0 fails, and the node it names
    is the MindIR operator, learned for the next check."""
    import dataclasses

    from auditor.extend.manager import Plugins
    from auditor.gate.preflight import preflight
    from tests.unit.gate.test_check import config_for

    plugins = Plugins(entry_points=False)
    runtimes = {
        n: dataclasses.replace(r, unsupported_operators={}, operator_tables=())
        for n, r in plugins.runtimes().items()
    }
    cfg = config_for(DEFAULT_CONFIG)
    args = (
        cfg,
        str(models["noise"]),
        ["lite20"],
        plugins.fingerprint_collectors(),
        list(plugins.rules().values()),
    )
    report = preflight(*args, runtimes, load=True)
    (v,) = report.verdicts
    assert v.status == "unsupported" and v.load is not None and v.load.attempted and not v.load.ok
    assert "it cannot load operator StandardNormal" in v.reason and "replace StandardNormal" in v.remedy
    assert any("schedule node return nullptr" in line for line in v.load.log_lines)
    (learned,) = report.learned_operators
    assert (learned.package, learned.version, learned.target, learned.operator) == (
        "mindspore-lite",
        "2.0.0",
        "cpu",
        "StandardNormal",
    )
    # Without a load, what that load said is known (not more: an operator may fail in one
    # graph and run in another).
    again = preflight(*args, runtimes, learned_operators=report.learned_operators, load=False)
    (v,) = again.verdicts
    assert (
        v.status == "warning"
        and "a load on mindspore-lite 2.0.0" in v.reason
        and "StandardNormal" in v.reason
    )


def test_corrupt_file_is_an_input_error(models: dict[str, Path], tmp_path: Path) -> None:
    cut = tmp_path / "cut.mindir"
    cut.write_bytes(models["ms20"].read_bytes()[:3000])
    code, doc = check(tmp_path, "--model", str(cut))
    assert code == 2 and str(cut) in doc["error"] and "not a MindIR" in doc["error"]


SILU_ALONE = """
import sys, numpy as np, mindspore as ms
from mindspore import nn
ms.export(nn.SiLU(), ms.Tensor(np.zeros((4, 8), np.float32)), file_name=sys.argv[1], file_format="MINDIR")
"""


def test_a_quiet_runtime_is_asked_again_at_the_verbose_level_to_name_the_operator(
    stacks: Path, tmp_path: Path
) -> None:
    """Lite 2.0 names the operator it has no primitive for only in a WARNING line; a stack whose
    environment silences warnings (GLOG_v=3) fails with "Common error code" alone, so the failing
    load is made once more in a fresh worker at GLOG_v=2, which names it."""
    import subprocess

    from tests.conftest import stack_python

    proc = subprocess.run(
        [str(stack_python("ms20")), "-c", SILU_ALONE, str(tmp_path / "silu")],
        capture_output=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    config = tmp_path / "auditor.toml"
    text = DEFAULT_CONFIG.read_text()
    lite = '[stacks.lite20]\nrole = "infer"\n'
    assert lite in text
    config.write_text(text.replace(lite, lite + 'env = { GLOG_v = "3" }\n'))
    result = CliRunner().invoke(
        cli,
        [
            "--config",
            str(config),
            "check",
            "--json",
            "--model",
            str(tmp_path / "silu.mindir"),
            "--stack",
            "lite20",
        ],
    )
    (v,) = json.loads(result.stdout)["verdicts"]
    assert result.exit_code == 1 and v["status"] == "unsupported", v
    assert "it cannot load operator SiLU" in v["reason"] and "replace SiLU" in v["remedy"]
    assert any("Unsupported primitive type in Create: SiLU" in line for line in v["load"]["log_lines"])
