"""Version drift through real cycles: a stack pointed at another Ascend install between two
runs gives exactly one drift finding, listing what changed field by field."""

from __future__ import annotations

import pytest

from auditor.cycle.cycle import Cycle
from auditor.extend.manager import Plugins
from auditor.history.store import Store
from auditor.report.text import render_json, render_text
from tests.ascend_trees import build_tree
from tests.configs import FP32_POLICY, build

pytestmark = pytest.mark.stacks


def config_on(default_doc: dict, tree) -> object:
    stacks = default_doc["stacks"]
    return build(
        default_doc,
        source="test",
        stacks={"ms20": {**stacks["ms20"], **tree.stack_options()}, "lite20": stacks["lite20"]},
        pairs=[{"train": "ms20", "infer": "lite20", "probes": ["ppo_policy"]}],
        variants=FP32_POLICY,
        latency={"warmup": 1, "iterations": 3},
    )


def test_pointing_a_stack_at_another_install_is_one_drift_finding(stacks, default_doc, tmp_path):
    plugins = Plugins(entry_points=False)
    store = Store.open(f"sqlite:///{tmp_path / 'h.db'}")
    trees = {name: build_tree(tmp_path, name) for name in ("consistent-8.2", "cann-8.5")}

    def cycle(tree: str):
        run_id = store.begin_run("test")
        c = Cycle(plugins=plugins, history=store, **_args(config_on(default_doc, trees[tree]), plugins))
        result = c.run()
        store.finish_run(run_id, result, c.artifacts)
        result.run_id = run_id
        return result

    first = cycle("consistent-8.2")
    assert [f for f in first.findings if f.kind == "version-drift"] == []
    assert first.stacks["ms20"].fingerprint["cann"]["compiler_version"] == "8.2.0.0.201"
    # MindSpore 2.0 lists CANN 6.11/6.3 only: a warning on this CPU stack, from the real checker file.
    (cann_rule,) = [f for f in first.findings if f.kind == "mindspore-cann"]
    assert cann_rule.severity == "warning" and "MindSpore 2.0.0 supports CANN 6.11, 6.3" in cann_rule.message

    second = cycle("cann-8.5")
    drift = [f for f in second.findings if f.kind == "version-drift"]
    assert len(drift) == 1
    f = drift[0]
    assert (f.subject, f.key, f.severity) == ("ms20", "ms20/version-drift", "warning")
    assert f.details["previous_run"] == first.run_id
    said = [c["words"] for c in f.details["changes"]]
    assert said[:5] == [
        "CANN compiler 8.2.0.0.201 -> 8.5.0.2.220",
        "CANN 8.2.RC1 -> 8.5.0",
        "CANN toolkit 8.2.RC1 -> 8.5.0",
        "CANN layout ascend-toolkit -> cann",
        "CANN root " + f"{trees['consistent-8.2'].ascend_root} -> {trees['cann-8.5'].ascend_root}",
    ]
    assert "driver 25.0.rc1.1 -> 25.3.rc1" in said and "firmware 7.7.0.1.231 -> 7.8.0.2.212" in said
    assert "OS openEuler 22.03 (LTS-SP4) -> Ubuntu 22.04.4 LTS" in said
    # the CANN MindSpore would load changed (a CANN change); the Python side did not
    assert "CANN MindSpore would load ascend-toolkit/latest -> cann" in said
    python_side = [c["words"] for c in f.details["changes"] if not c["path"].startswith("cann.")]
    assert not any("mindspore" in w or "numpy" in w for w in python_side)
    assert "ms20 changed since run" in render_text(second) and "    driver 25.0.rc1.1 -> 25.3.rc1" in (
        render_text(second, verbose=True).replace("      ", "    ")
    )
    assert '"kind": "version-drift"' in render_json(second)

    third = cycle("cann-8.5")
    assert [f for f in third.findings if f.kind == "version-drift"] == []


def _args(config, plugins: Plugins) -> dict:
    return {"config": config, "probes": plugins.probes(), "runtimes": plugins.runtimes()}
