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


def test_another_graph_is_an_error_by_default_and_the_stack_may_say_otherwise() -> None:
    before = doc(**{"/srv/p.mindir": entry(parameter_dtypes=["float32"])})
    fp16 = entry(
        sha256="b" * 64,
        op_types=["Cast", "MatMul"],
        inputs=[{"name": "obs", "shape": [8, 11], "dtype": "float16"}],
        parameter_dtypes=["float16"],
    )
    (f,) = model_drift("lite20", before, doc(**{"/srv/p.mindir": fp16}), 7)
    assert (f.details["change"], f.severity) == ("graph", "error")
    assert "operators +Cast; inputs obs[8, 11] float32 -> obs[8, 11] float16; weights float32 -> float16" in (
        f.message
    )
    (f,) = model_drift("lite20", before, doc(**{"/srv/p.mindir": fp16}), 7, {"graph": "warning"})
    assert f.severity == "warning"
    # only the weights' dtype changed: another graph too
    halved = entry(sha256="c" * 64, parameter_dtypes=["float16"])
    (f,) = model_drift("lite20", before, doc(**{"/srv/p.mindir": halved}), 7)
    assert (f.details["change"], f.severity) == (
        "graph",
        "error",
    ) and "weights float32 -> float16" in f.message
    # defaults per kind, and the stack's own
    retrained = doc(**{"/srv/p.mindir": entry(sha256="d" * 64, parameter_dtypes=["float32"])})
    assert [x.severity for x in model_drift("lite20", before, retrained, 7)] == ["warning"]
    assert [x.severity for x in model_drift("lite20", before, retrained, 7, {"retrained": "info"})] == [
        "info"
    ]
    assert [x.severity for x in model_drift("lite20", before, doc(), 7, {"removed": "critical"})] == [
        "critical"
    ]


def test_a_re_export_that_changes_the_graph_takes_the_more_severe_kind() -> None:
    before = doc(**{"/srv/p.mindir": entry()})
    after = doc(
        **{"/srv/p.mindir": entry(sha256="b" * 64, model_version="2.10.0", op_types=["MatMul", "Add"])}
    )
    (f,) = model_drift("lite20", before, after, 7)
    assert f.details["changes"] == ["re-exported", "graph"] and f.details["change"] == "re-exported"
    assert f.severity == "error" and "another graph too: operators +Add" in f.message
    (f,) = model_drift("lite20", before, after, 7, {"graph": "info"})
    assert f.severity == "warning"  # re-exported's default is then the more severe


def test_the_same_file_read_by_a_newer_collector_is_no_change() -> None:
    """An entry with more fields (parameter_dtypes) but the same content is the same deployment."""
    before = doc(**{"/srv/p.mindir": entry()})
    after = doc(**{"/srv/p.mindir": entry(parameter_dtypes=["float32"])})
    assert model_drift("lite20", before, after, 7) == []


def test_model_drift_severity_is_validated_per_stack() -> None:
    import tomllib

    from auditor.config.load import parse
    from auditor.config.tables import ConfigError
    from tests.conftest import REPO

    document = tomllib.loads((REPO / "auditor.toml").read_text())
    document["stacks"]["lite20"]["model_drift_severity"] = {"grpah": "error", "retrained": "fatal"}
    try:
        parse(document, "auditor.toml")
    except ConfigError as exc:
        problems = exc.errors
    else:
        raise AssertionError("a misspelt change kind and an unknown severity were accepted")
    assert any(p.startswith("stacks.lite20.model_drift_severity.grpah") and "graph" in p for p in problems)
    assert (
        "stacks.lite20.model_drift_severity.retrained: must be one of info, warning, error, critical, "
        in ("\n".join(problems))
    )
    document["stacks"]["lite20"]["model_drift_severity"] = {"graph": "critical"}
    config = parse(document, "auditor.toml")
    assert config.stacks["lite20"].model_drift_severity == {"graph": "critical"}
    assert config.stacks["ms20"].model_drift_severity == {}


def test_an_error_finding_makes_the_exit_status_1() -> None:
    from auditor.report.text import render_text
    from auditor.results import CycleResult, StackReport

    stack = StackReport("lite20", "infer", "mindspore-lite", "/p", "cpu", "local", {})
    graph = entry(sha256="b" * 64, op_types=["MatMul", "Cast"])
    (f,) = model_drift("lite20", doc(**{"/srv/p.mindir": entry()}), doc(**{"/srv/p.mindir": graph}), 3)
    result = CycleResult(0.0, 1.0, "c.toml", {"lite20": stack}, [], [f])
    # the outcome is the worst of everything the run holds: this finding is an error
    assert result.outcome == "error" and result.failing_findings == [f] and result.exit_code == 1
    assert (
        "Outcome: ERROR (0 consistent, 0 unchecked, 0 drift, 0 unsupported, 0 incompatible, 1 error); "
        "exit status 1"
    ) in render_text(result)
    (w,) = model_drift("lite20", doc(**{"/srv/p.mindir": entry()}), doc(), 3)
    assert CycleResult(0.0, 1.0, "c.toml", {"lite20": stack}, [], [w]).exit_code == 0
