"""The deployed-model watch without the stacks: the collector's section, the kinds of change,
and the rules on deployed files."""

from __future__ import annotations

from pathlib import Path

from auditor.plugins.collectors import models as collector

from auditor.config.tables import StackConfig
from auditor.extend.manager import Plugins
from auditor.rules.deployed import deployed_rule_findings, model_drift, without_models
from tests.unit.worker.test_mindir import PRIMS, model, policy_graph


def test_collector_reads_the_watched_files(tmp_path: Path) -> None:
    (tmp_path / "a.mindir").write_bytes(model(policy_graph(), PRIMS, version="2.0.0", mind_ir_version=1))
    (tmp_path / "junk.mindir").write_bytes(b"\x07junk")
    section = collector.collect(
        {
            "models": [
                str(tmp_path / "*.mindir"),
                str(tmp_path / "none-*.mindir"),
                str(tmp_path / "gone.mindir"),
            ]
        }
    )
    a = section["files"][str(tmp_path / "a.mindir")]
    assert a["readable"] and a["model_version"] == "2.0.0" and a["mind_ir_version"] == 1
    assert a["op_types"] == ["Constant", "Load", "MatMul", "Tanh"]
    assert a["inputs"] == [{"name": "obs", "shape": [-1, 3], "dtype": "float32"}] and len(a["sha256"]) == 64
    junk = section["files"][str(tmp_path / "junk.mindir")]
    assert not junk["readable"] and "not a MindIR" in junk["reason"]
    assert section["unknown"] == {
        str(tmp_path / "none-*.mindir"): "no file matches",
        str(tmp_path / "gone.mindir"): f"{tmp_path / 'gone.mindir'}: no such file",
    }
    assert collector.collect({}) == {"patterns": [], "files": {}, "unknown": {}}


def entry(**kw: object) -> dict:
    base = {
        "sha256": "a" * 64,
        "size": 10,
        "readable": True,
        "model_version": "2.0.0",
        "mind_ir_version": 1,
        "producer_name": "MindSpore",
        "producer_version": "2.0.0",
        "ir_version": "0.1.1",
        "op_types": ["MatMul"],
        "inputs": [{"name": "obs", "shape": [8, 11], "dtype": "float32"}],
        "parameter_elements": 100,
    }
    return {**base, **kw}


def doc(**files: dict) -> dict:
    return {
        "host": {"hostname": "h"},
        "models": {"patterns": ["/srv/*.mindir"], "files": files, "unknown": {}},
    }


def test_each_kind_of_change_is_named() -> None:
    before = doc(**{"/srv/p.mindir": entry()})
    cases = {
        "retrained": entry(sha256="b" * 64),
        "re-exported": entry(sha256="b" * 64, model_version="2.10.0", mind_ir_version=3),
        "graph": entry(sha256="b" * 64, op_types=["MatMul", "StandardNormal"]),
        "unreadable": {"sha256": "c" * 64, "size": 3, "readable": False, "reason": "not a MindIR"},
    }
    for change, after in cases.items():
        (f,) = model_drift("lite20", before, doc(**{"/srv/p.mindir": after}), 7)
        assert f.details["change"] == change and f.key == "lite20/model-drift//srv/p.mindir"
        assert f.message.startswith("deployed model /srv/p.mindir on lite20 changed since run 7: ")
    (f,) = model_drift("lite20", before, doc(), 7)
    assert f.details["change"] == "removed" and f.severity == "warning"
    (f,) = model_drift("lite20", doc(), before, 7)
    assert f.details["change"] == "added" and f.severity == "info"
    assert model_drift("lite20", before, before, 7) == []
    assert model_drift("lite20", {"host": {}}, before, 7) == []  # the watch just started
    assert without_models(before) == {"host": {"hostname": "h"}}


def test_rules_run_on_each_deployed_file() -> None:
    stacks = {"lite20": StackConfig("lite20", "infer", "mindspore-lite", "/p")}
    fp = {"runtime": {"runtime_package": "mindspore-lite", "runtime_version": "2.0.0"}}
    files = {
        "/srv/ok.mindir": entry(),
        "/srv/new.mindir": entry(model_version="2.10.0", mind_ir_version=3),
        "/srv/noise.mindir": entry(op_types=["StandardNormal"]),
    }
    fps = {"lite20": {**fp, **doc(**files)}}
    plugins = Plugins(entry_points=False)
    limits = {"lite20": {"StandardNormal": "no CPU kernel"}}
    found = deployed_rule_findings(stacks, fps, plugins.rules().values(), {}, limits, plugins.runtimes())
    by_kind = {f.kind: f for f in found}
    assert set(by_kind) == {"incompatible", "unsupported"}
    assert list(by_kind["incompatible"].details["facts"]["not_loaded"]) == ["/srv/new.mindir [deployed]"]
    assert by_kind["unsupported"].details["facts"]["used_by"] == {
        "StandardNormal": ["/srv/noise.mindir [deployed]"]
    }


def test_the_text_report_shows_model_drift() -> None:
    from auditor.report.text import render_text
    from auditor.results import CycleResult, StackReport

    (f,) = model_drift("lite20", doc(**{"/srv/p.mindir": entry()}), doc(), 3)
    stack = StackReport("lite20", "infer", "mindspore-lite", "/p", "cpu", "local", {})
    text = render_text(CycleResult(0.0, 1.0, "c.toml", {"lite20": stack}, [], [f]))
    assert "deployed model /srv/p.mindir on lite20 changed since run 3: removed" in text
    assert "re-record its golden" in text
