"""The example plugin from examples/, installed with pip (scripts/setup does it, as a user
would), runs through the real stacks next to broken plugins, which are reported and cost only
their own results."""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
from pathlib import Path

import numpy as np
import pytest

from tests.cli import auditor
from tests.conftest import DEFAULT_CONFIG, REPO

pytestmark = pytest.mark.stacks
INSTALLED = (str(REPO / ".venv" / "bin" / "auditor"),)  # the script pip installed, as a user runs it
BROKEN = REPO / "tests" / "plugin_fixtures" / "broken"


def test_the_installed_example_is_listed(stacks: Path) -> None:
    proc = auditor("--config", str(DEFAULT_CONFIG), "plugins", "--json", program=INSTALLED)
    assert proc.returncode == 0, proc.stderr
    [example] = [p for p in json.loads(proc.stdout) if p["name"] == "discrete_policy"]
    assert example["source"] == "entry point (auditor-discrete-policy)"
    assert example["version"] == "0.1.0" and example["error"] is None
    assert example["hooks"] == ["auditor_comparators", "auditor_probes"]


@pytest.fixture(scope="module")
def audit(stacks: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, dict]:
    tmp = tmp_path_factory.mktemp("example")
    plugins = tmp / "plugins"
    shutil.copytree(BROKEN, plugins)
    (plugins / "syntax_error.py").write_text("def oops(:\n    pass\n")
    doc = tomllib.loads(DEFAULT_CONFIG.read_text())
    lines = [
        f'[plugins]\ndirs = ["{plugins}"]\n[storage]\nurl = "sqlite:///{tmp / "h.db"}"\n',
        "[rollout]\nenabled = false\n",
    ]
    for name, stack in doc["stacks"].items():
        lines.append(f"[stacks.{name}]\n" + "".join(f'{k} = "{v}"\n' for k, v in stack.items()))
    for train, infer in (("ms20", "lite20"), ("ms210", "ms210-graph")):
        lines.append(
            f'[[pairs]]\ntrain = "{train}"\ninfer = "{infer}"\n'
            'probes = ["discrete_policy", "build_raises", "inputs_raise"]\n'
        )
    lines.append(
        "[probes.discrete_policy]\nparams = { batch = 64 }\n"
        "[probes.discrete_policy.comparators.probability_difference]\nmax_probability_difference = 1e-6\n"
    )
    config = tmp / "auditor.toml"
    config.write_text("".join(lines))
    proc = auditor("--config", str(config), "audit", "--json", program=INSTALLED)
    assert proc.stdout.startswith("{"), proc.stderr
    return proc, json.loads(proc.stdout)


def test_broken_plugins_are_reported_on_stderr(audit) -> None:
    proc, _ = audit
    assert proc.returncode == 1  # the raising probes are errors
    assert "warning: plugin syntax_error" in proc.stderr and "SyntaxError" in proc.stderr
    assert "plugin misspelled_hook" in proc.stderr and "unknown hook(s): auditor_probe" in proc.stderr


def test_the_example_probe_ran_with_its_comparators_on_both_pairs(audit) -> None:
    _, result = audit
    example = [r for r in result["results"] if r["probe"] == "discrete_policy"]
    assert sorted(r["pair"] for r in example) == ["ms20->lite20", "ms210->ms210-graph"]
    for r in example:
        assert [o["output"] for o in r["outputs"]] == ["logits", "probs"]
        checks = {c["metric"]: c for c in r["checks"]}
        assert {"argmax_agreement", "prob_diff_max", "prob_diff_mean"} <= set(checks)
        assert 0.0 <= checks["argmax_agreement"]["value"] <= 1.0
        # The verdict follows the numbers: drift exactly when an output or a check failed.
        failed = [o for o in r["outputs"] if not o["passed"]] + [c for c in r["checks"] if not c["passed"]]
        assert (r["status"] == "drift") == bool(failed), r["message"]
        assert checks["prob_diff_max"]["passed"] == (checks["prob_diff_max"]["value"] <= 1e-6)
        assert checks["prob_diff_max"]["limit"] == 1e-6  # the config's option reached the comparator
    same_version = next(r for r in example if r["pair"] == "ms210->ms210-graph")
    assert same_version["status"] == "consistent"
    assert {c["metric"]: c["value"] for c in same_version["checks"]}["prob_diff_max"] == 0.0


def test_the_example_metrics_match_a_recomputation(audit) -> None:
    """The stored maximum probability difference is what the two sides' probs give."""
    _, result = audit
    r = next(r for r in result["results"] if r["probe"] == "discrete_policy" and r["pair"] == "ms20->lite20")
    probs = next(o for o in r["outputs"] if o["output"] == "probs")
    check = next(c for c in r["checks"] if c["metric"] == "prob_diff_max")
    assert np.isclose(check["value"], probs["metrics"]["max_abs"], rtol=0, atol=1e-12)


def test_raising_probes_cost_only_their_own_results(audit) -> None:
    _, result = audit
    for pair in ("ms20->lite20", "ms210->ms210-graph"):
        by_probe = {r["probe"]: r for r in result["results"] if r["pair"] == pair}
        assert by_probe["build_raises"]["status"] == "error"
        assert "this policy cannot be built (plugin bug)" in by_probe["build_raises"]["message"]
        assert by_probe["inputs_raise"]["status"] == "error"
        assert "inputs_raise" in by_probe["inputs_raise"]["message"]
        assert "KeyError" in by_probe["inputs_raise"]["message"]
        assert by_probe["discrete_policy"]["status"] in ("consistent", "drift")
    assert result["run_id"] is not None
