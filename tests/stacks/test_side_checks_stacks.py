"""Per-side invariants, input classes and NaN/Inf hazards on the real stacks (issue #13).

A test-only probe (tests/probe_fixtures/wrong_policy.py) computes the same wrong thing on both
stacks of an identical pair (ms210 -> ms210-graph): pair comparison stays consistent, and
only the checks of each side alone can fail, naming the stack and the value. The shipped PPO
policy shows what the reference stacks really do: MindSpore Lite 2.0 computes a negative
standard deviation in the tanh-fp16 variant (its known fp16 defect), which MindSpore 2.0 does
not. The results come back through the history database, the text report and the JSON.
"""

from __future__ import annotations

import copy
import json
import math

import pytest

from auditor.config.load import parse
from auditor.cycle.cycle import Cycle
from auditor.extend.manager import Plugins
from auditor.extend.probe_spec import ProbeSpec
from auditor.history import queries as history
from auditor.history.store import Store
from auditor.report.html import render_report
from auditor.report.text import render_json, render_text
from auditor.results import CONSISTENT

pytestmark = pytest.mark.stacks

STD = math.exp(-0.5)


@pytest.fixture(scope="module")
def run(stacks, tmp_path_factory, default_doc):
    doc = copy.deepcopy(default_doc)
    doc["pairs"] = [
        {"train": "ms210", "infer": "ms210-graph", "probes": ["wrong_policy", "ppo_policy"]},
        {"train": "ms20", "infer": "lite20", "probes": ["ppo_policy"]},
    ]
    doc["probes"] = {
        "ppo_policy": {"params": {"batch": 64, "seed": 0}, "variants": ["fp32", "tanh-fp16"]},
        # A user relaxes the hazard check of one variant.
        "wrong_policy": {"variant": {"ok": {"comparators": {"nan_hazard": {"max_share": 1.0}}}}},
    }
    db = f"sqlite:///{tmp_path_factory.mktemp('side') / 'history.db'}"
    doc["storage"] = {"url": db}
    doc["latency"] = {"warmup": 1, "iterations": 3, "batches": []}
    doc["rollout"] = {"enabled": False}
    for section in ("schedule", "alerts", "prometheus", "daemon"):
        doc.pop(section, None)
    plugins = Plugins(entry_points=False)
    probes = {**plugins.probes(), "wrong_policy": ProbeSpec.from_module("probe_fixtures.wrong_policy")}
    config = parse(
        doc,
        "<test>",
        known_probes={n: p.default_params for n, p in probes.items()},
        probe_variants={n: p.variants for n, p in probes.items()},
    )
    store = Store.open(db)
    cycle = Cycle(config, probes, plugins.runtimes(), history=store)
    run_id = store.begin_run("<test>")
    result = cycle.run()
    store.finish_run(run_id, result, cycle.artifacts)
    result.run_id = run_id
    yield result, store
    store.close()


def _findings(result, kind, probe=None, variant=None):
    return [
        f
        for f in result.findings
        if f.kind == kind
        and (probe is None or f.details.get("probe") == probe)
        and (variant is None or f.details.get("variant") == variant)
    ]


def _result(result, pair, probe, variant):
    (r,) = [r for r in result.results if (r.pair, r.probe, r.variant) == (pair, probe, variant)]
    return r


def test_identical_stacks_compare_consistent_even_when_both_are_wrong(run):
    result, _ = run
    for variant in ("ok", "negative-std", "unbounded", "nan-masked"):
        r = _result(result, "ms210->ms210-graph", "wrong_policy", variant)
        assert r.status == CONSISTENT, (variant, r.message)
        # Compared per input class too, the class in each check's name.
        assert {c.output for c in r.checks} >= {"mean@sweep", "std@sweep", "action@nan-inf"}
    assert _result(result, "ms210->ms210-graph", "ppo_policy", "fp32").status == CONSISTENT


def test_a_wrong_value_computed_by_both_sides_is_a_finding_per_stack(run):
    result, _ = run
    found = _findings(result, "invariant", "wrong_policy", "negative-std")
    assert sorted(f.subject for f in found) == ["ms210", "ms210-graph"]
    for f in found:
        assert f.details["output"] == "std" and f.details["check"] == "positive"
        assert f.details["value"] == pytest.approx(-STD, rel=1e-6)
        assert f.details["input_class"] == "random" and f.details["index"] == 0
        assert f"{f.subject} computed std = -0.60653" in f.message
    (action,) = [
        f for f in _findings(result, "invariant", "wrong_policy", "unbounded") if f.subject == "ms210"
    ]
    assert action.details["output"] == "action" and abs(action.details["value"]) > 2.0
    assert set(action.details["by_class"]) >= {"random", "sweep"}
    assert _findings(result, "invariant", "wrong_policy", "ok") == []


def test_nan_masking_is_a_hazard_and_its_threshold_relaxes(run):
    result, _ = run
    found = _findings(result, "nan-hazard", "wrong_policy", "nan-masked")
    assert sorted(f.subject for f in found) == ["ms210", "ms210-graph"]
    for f in found:
        assert f.details["input_class"] == "nan-inf" and f.details["share"] > 0
        assert "maps NaN/Inf inputs of wrong_policy [nan-masked] to finite outputs" in f.message
    assert _findings(result, "nan-hazard", "wrong_policy", "ok") == []  # relaxed in the config


def test_reference_stacks_raise_only_real_per_side_properties(run):
    """MindSpore Lite 2.0's fp16 defect is a per-side finding on lite20 (std must be > 0); no
    invariant fires on MindSpore 2.0 or 2.10 for the shipped policy."""
    result, _ = run
    found = _findings(result, "invariant", "ppo_policy")
    assert {f.subject for f in found} <= {"lite20"}
    (std,) = [f for f in found if f.details["output"] == "std"]
    assert std.details["variant"] == "tanh-fp16" and not std.details["value"] > 0
    assert "lite20 computed std =" in std.message


def test_results_reach_history_reports_and_json(run):
    result, store = run
    doc = json.loads(render_json(result))
    kinds = {f["kind"] for f in doc["findings"]}
    assert {"invariant", "nan-hazard"} <= kinds
    text = render_text(result, verbose=True)
    assert "Each stack on its own (invariants, NaN/Inf hazards)" in text
    assert "ms210 computed std = -0.60653" in text
    with store.engine.connect() as conn:
        detail = history.run_detail(conn, result.run_id)
    stored = {(f["kind"], f["subject"]) for f in detail.findings}
    assert ("invariant", "ms210-graph") in stored and ("nan-hazard", "ms210") in stored
    r = [x for x in detail.results if x["probe"] == "wrong_policy" and x["variant"] == "ok"][0]
    assert {"mean@sweep", "action@nan-inf"} <= set(r["metrics"])  # per-class checks stored as metrics


def test_the_html_report_lists_the_latest_per_side_findings(run):
    _, store = run
    with store.engine.connect() as conn:
        page, _ = render_report(conn, history.Filters())
    assert "Each stack on its own (invariants, NaN/Inf hazards)" in page
    assert "ms210-graph computed std = -0.60653" in page and "nan-hazard" in page
