"""Operator tables: what scripts/operator_sweep.py makes of its cases (attribution, merging a
partial sweep) and what auditor.runtime.operator_table reads back, without the stacks."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from auditor.extend.manager import Plugins
from auditor.runtime.operator_table import TableError, read_tables, table_for, tables_from
from tests.conftest import REPO


@pytest.fixture(scope="module")
def sweep():  # noqa: ANN201 - the script as a module
    spec = importlib.util.spec_from_file_location("operator_sweep", REPO / "scripts" / "operator_sweep.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["operator_sweep"] = module
    spec.loader.exec_module(module)
    return module


def rec(status: str, ops: list[str], **kw: object) -> dict:
    return {"status": status, "ops": ops, "plumbing": ["Load"], **kw}


def test_failures_are_attributed_to_what_the_runtime_named_else_to_what_is_not_proven(sweep) -> None:  # noqa: ANN001
    records = {
        "Dense": rec("ok", ["MatMul", "BiasAdd"]),
        "SiLU": rec("load-fails", ["SiLU"], phase="load", operator="SiLU", kind="operator", message="m"),
        "DenseSiLU": rec("ok", ["MatMul", "BiasAdd", "SiLU"]),
        "Norm": rec("wrong-output", ["LayerNorm"], max_abs=1.9, message="rows 2-3"),
        "TopK": rec("load-fails", ["TopK"], phase="load", operator="TopK", kind="graph", message="tuple"),
        "TopKUnpacked": rec("ok", ["TopK"]),
        "Identity": rec("load-fails", ["MatMul"], phase="load", message="meta_graph is invalid"),
    }
    ops, combinations = sweep.attribute(records)
    assert ops["SiLU"]["status"] == "ok" and ops["SiLU"]["fails_in"][0]["case"] == "SiLU"  # runs after Dense
    assert ops["LayerNorm"] == {
        "status": "wrong-output",
        "phase": "",
        "message": "rows 2-3",
        "cases": ["Norm"],
        "attribution": "the only operator of the case not proven by another case",
        "max_abs": 1.9,
    }
    assert ops["TopK"]["status"] == "ok" and "kind" not in ops["TopK"]  # failed only as a tuple output
    assert ops["Load"]["note"] == "graph plumbing node"
    assert list(combinations) == ["Identity"] and combinations["Identity"]["operators"] == ["MatMul"]
    assert any(f["case"] == "Identity" for f in ops["MatMul"]["fails_in"])


def test_a_partial_sweep_replaces_its_cases_and_keeps_the_others(sweep, tmp_path: Path) -> None:  # noqa: ANN001
    def table(produced: str, cases: dict) -> dict:
        return sweep.derive(
            {
                "runtime_version": "2.0.0",
                "target": "cpu",
                "exported_by": "2.0.0",
                "produced": produced,
                "cases": cases,
            }
        )

    full = table(
        "full 2026-12-01", {"A": rec("ok", ["Tanh"]), "B": rec("load-fails", ["Mish"], phase="load")}
    )
    sweep.write_tables(tmp_path, {"mindspore-lite": [full]})
    again = table("ci 2026-12-04", {"B": rec("ok", ["Mish"])})
    (path,) = sweep.write_tables(tmp_path, {"mindspore-lite": [again]})
    (t,) = json.loads(path.read_text())["tables"]
    assert t["case_status"] == {"A": "ok", "B": "ok"} and t["operators"]["Mish"]["status"] == "ok"
    assert t["produced"] == "full 2026-12-01; cases B again by ci 2026-12-04"
    assert sweep.compare_tables(tmp_path, {"mindspore-lite": [again]}) == []
    changed = table("ci", {"A": rec("load-fails", ["Tanh"], phase="load")})
    assert sweep.compare_tables(tmp_path, {"mindspore-lite": [changed]}) == [
        "mindspore-lite 2.0.0/cpu/2.0.0: case A: shipped ok, fresh load-fails"
    ]
    (read,) = read_tables(path)
    assert read.runtime == "mindspore-lite" and read.operators["Tanh"].works


def test_tables_are_written_where_each_runtime_package_keeps_its_own(sweep, tmp_path: Path) -> None:  # noqa: ANN001
    """`--write plugins/runtimes` updates lite/mindspore-lite.json in place; a runtime without
    a table yet gets one in the folder itself."""
    (tmp_path / "lite").mkdir()
    (tmp_path / "lite" / "mindspore-lite.json").write_text('{"runtime": "mindspore-lite", "tables": []}')
    assert sweep.table_path(tmp_path, "mindspore-lite") == tmp_path / "lite" / "mindspore-lite.json"
    assert sweep.table_path(tmp_path, "onnxruntime") == tmp_path / "onnxruntime.json"
    repo = Path(__file__).resolve().parents[3] / "plugins" / "runtimes"
    assert sweep.table_path(repo, "mindspore-graph") == repo / "mindspore" / "mindspore-graph.json"


def test_the_shipped_tables_read_and_say_how_they_were_made() -> None:
    runtimes = Plugins(entry_points=False).runtimes()
    lite = runtimes["mindspore-lite"].operator_tables
    graph = runtimes["mindspore-graph"].operator_tables
    assert [(t.runtime_version, t.exported_by) for t in lite] == [("2.0.0", "2.0.0")]
    assert {(t.runtime_version, t.exported_by) for t in graph} == {
        ("2.0.0", "2.0.0"),
        ("2.10.0", "2.0.0"),
        ("2.10.0", "2.10.0"),
    }
    for t in (*lite, *graph):
        assert (
            "scripts/operator_sweep.py" in t.produced and "GLOG_v=2" in t.produced and len(t.operators) > 100
        )
    assert table_for(lite, "2.0.0", "cpu", "2.0.1") is lite[0]  # a patch release of the exporter
    assert (
        table_for(lite, "2.0.0", "cpu", "2.2.11") is None
        and table_for(lite, "2.0.0", "ascend", "2.0.0") is None
    )
    assert runtimes["mindspore"].operator_tables == ()


@pytest.mark.parametrize(
    ("document", "words"),
    [
        ({"tables": []}, "not an operator table"),
        ({"runtime": "x", "tables": [{"runtime_version": "1"}]}, "tables[0]: missing or malformed field"),
        (
            {
                "runtime": "x",
                "tables": [
                    {
                        "runtime_version": "1",
                        "target": "cpu",
                        "exported_by": "1",
                        "produced": "p",
                        "operators": {"A": {"status": "fine"}},
                    }
                ],
            },
            "tables[0].operators.A: status is one of ok, wrong-output",
        ),
    ],
)
def test_a_damaged_table_is_named(document: dict, words: str, tmp_path: Path) -> None:
    with pytest.raises(TableError) as err:
        tables_from(document, "x.json")
    assert words in str(err.value) and str(err.value).startswith("x.json")
    bad = tmp_path / "t.json"
    bad.write_text("{")
    with pytest.raises(TableError, match="not JSON"):
        read_tables(bad)
