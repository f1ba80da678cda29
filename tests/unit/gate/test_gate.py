"""The deployment gate's verdict logic without stacks: OK only on today's load and run; an
unreachable stack and --no-load never OK (what is stored or measured is named, not trusted);
the newest stored result of the same file, runtime and host keeping it from OK; and the
history query that finds a file's stored results."""

from __future__ import annotations

from dataclasses import asdict, replace
from datetime import datetime
from pathlib import Path

import pytest

from auditor.config.tables import StackConfig
from auditor.extend.manager import Plugins
from auditor.gate.preflight import (
    ERROR,
    INCOMPATIBLE,
    OK,
    UNCHECKED,
    UNSUPPORTED,
    WARNING,
    CheckReport,
    LoadCheck,
    StackVerdict,
    _Probe,
    _verdict,
    _Worst,
    served_here,
)
from auditor.history.queries import ServedResult, served_results
from auditor.history.store import Store
from auditor.results import Artifact, CycleResult, ProbeResult, StackReport
from auditor.rules.operator_support import coverage
from auditor.worker.mindir import MindIRInfo

LITE = StackConfig("lite20", "infer", "mindspore-lite", "/p", "cpu")
HELLO = {"runtime_package": "mindspore-lite", "runtime_version": "2.0.0"}
PLAIN = {"model_version": "2.0.0", "op_types": ["MatMul", "BiasAdd", "Tanh", "Load"]}
NORM = {"model_version": "2.0.0", "op_types": ["MatMul", "LayerNorm"]}
RAN = LoadCheck(True, "ran", [{"index": 0, "shape": [8, 4], "dtype": "float32", "finite": True}], 0.1)


def cov(info: dict = PLAIN):  # noqa: ANN201
    return coverage(
        Plugins(entry_points=False).runtimes()["mindspore-lite"].operator_tables, *HELLO.values(), "cpu", info
    )


def served(status: str, message: str = "", version: str = "2.0.0") -> ServedResult:
    return ServedResult(
        7,
        datetime(2026, 12, 1, 12, 0),
        "lite20",
        "local",
        "cpu",
        "mindspore-lite",
        "mindspore-lite",
        version,
        "policy:golden->lite20",
        status,
        message,
    )


def verdict(p: _Probe, info: dict = PLAIN, history: list | None = None, load: bool = True, before=None):  # noqa: ANN001, ANN201
    return _verdict(LITE, "f->lite20", p, [], history or [], cov(info), before or {}, load)


def reached(load: LoadCheck | None = None) -> _Probe:
    return _Probe(fingerprint={"runtime": dict(HELLO)}, hello=dict(HELLO), load=load)


def unreachable(fingerprint: bool = True) -> _Probe:
    p = _Probe(error="stack lite20: start failed: interpreter not found")
    if fingerprint:
        p.fingerprint, p.last_seen = {"runtime": dict(HELLO)}, "run 7 on 2026-12-01 12:00"
    return p


def test_a_load_and_run_is_evidence() -> None:
    v = verdict(reached(RAN))
    assert v.status == OK and "loaded and ran one seeded batch" in v.reason
    assert (
        v.evidence
        and "loaded the file and ran one seeded batch on mindspore-lite 2.0.0 (cpu)" in v.evidence[0]
    )


def test_no_load_is_never_ok_even_with_every_other_evidence() -> None:
    v = verdict(reached(), history=[served("consistent")], load=False)
    assert v.status == UNCHECKED and "not loaded (--no-load)" in v.reason
    assert any("an audit loaded and ran this very file" in e for e in v.evidence)
    assert any("covers every operator" in e for e in v.evidence)
    assert "whether the runtime loads and runs the file" in v.unknown[0]


@pytest.mark.faults
def test_an_unreachable_stack_is_never_ok_and_says_what_is_known() -> None:
    stored = verdict(
        unreachable(), {"model_version": "2.0.0", "op_types": ["NoSuchOp", "Add"]}, [served("consistent")]
    )
    assert stored.status == UNCHECKED and "not reached now, so not known to run this file" in stored.reason
    assert "known: an audit loaded and ran this very file" in stored.reason
    assert any("could not be reached" in u for u in stored.unknown)
    measured = verdict(unreachable())
    assert measured.status == UNCHECKED and "covers every operator" in measured.reason
    nothing = verdict(unreachable(), {"model_version": "2.0.0", "op_types": ["NoSuchOp"]})
    assert nothing.status == UNCHECKED and "known:" not in nothing.reason
    # Add hung in one of the sweep's graphs: without this file's own result, a warning.
    uneven = verdict(unreachable(), {"model_version": "2.0.0", "op_types": ["Add", "MatMul"]})
    assert uneven.status == WARNING and "may fail on this file" in uneven.reason and "Add" in uneven.reason
    # Another runtime release's result is no evidence for this one (the caller filters by identity).
    gone = verdict(unreachable(fingerprint=False), history=[served("consistent")])
    assert gone.status == ERROR and "interpreter not found" in gone.reason


@pytest.mark.faults
def test_the_newest_stored_result_decides() -> None:
    fixed = served("consistent")
    old = replace(served("error", "golden file /x/g.npz not found"), started_at=datetime(2026, 11, 1, 12, 0))
    v = verdict(reached(RAN), history=[fixed, old])
    assert v.status == OK and "golden" not in v.reason
    broke = verdict(reached(RAN), history=[old, fixed])
    assert broke.status == WARNING and "golden file /x/g.npz not found" in broke.reason


@pytest.mark.faults
def test_stored_results_count_only_for_the_same_runtime_host_and_conversion() -> None:
    here = served("consistent")
    elsewhere = replace(served("unsupported", "SiLU"), host="infer2")
    newer_release = served("incompatible", "too new", version="2.1.0")
    converted = replace(served("error", "conversion"), converted=True)
    stored = [elsewhere, newer_release, converted, here]
    kept = served_here(stored, LITE, "mindspore-lite", "2.0.0", converted=False)
    assert kept == [here]
    assert served_here(stored, LITE, "mindspore-lite", "2.0.0", converted=True) == [converted]
    remote = StackConfig("lite20", "infer", "mindspore-lite", "/p", "cpu", host="infer2")
    assert served_here(stored, remote, "mindspore-lite", "2.0.0", converted=False) == [elsewhere]
    assert served_here(stored, LITE, None, None, converted=False) == []


@pytest.mark.faults
def test_two_causes_of_the_same_weight_are_both_named() -> None:
    learned = {
        "SiLU": "a load on mindspore-lite 2.0.0 (cpu) failed: Unsupported primitive SiLU",
        "Erf": "a load on mindspore-lite 2.0.0 (cpu) failed: Unsupported primitive Erf",
    }
    both = verdict(unreachable(), {"model_version": "2.0.0", "op_types": ["SiLU", "Erf"]}, before=learned)
    assert both.status == WARNING and "SiLU" in both.reason and "Erf" in both.reason
    w = _Worst()
    w.add(UNSUPPORTED, "it cannot run SiLU", "replace SiLU")
    w.add(UNSUPPORTED, "it cannot run Erf", "replace Erf")
    w.add(WARNING, "a lesser cause")
    assert w.status == UNSUPPORTED and "SiLU" in w.reason and "Erf" in w.reason
    assert "replace SiLU" in w.remedy and "replace Erf" in w.remedy and "lesser" not in w.reason
    w.add(ERROR, "worse")
    assert (w.status, w.reason, w.remedy) == (ERROR, "worse", "")


def test_a_stored_failure_of_the_file_keeps_it_from_ok() -> None:
    message = "lite20 fails to load it: it cannot load operator SiLU"
    v = verdict(reached(), history=[served("unsupported", message)], load=False)
    assert v.status == "unsupported" and "stored UNSUPPORTED" in v.reason and "SiLU" in v.reason
    again = verdict(reached(RAN), history=[served("incompatible", "too new")])
    assert again.status == WARNING and "today's load and run worked" in again.reason
    drift = verdict(reached(RAN), history=[served("drift", "mean: 3/16 out of tolerance")])
    assert drift.status == WARNING and "found drift" in drift.reason


def test_what_the_table_measured_computing_differently_is_a_warning_after_a_load() -> None:
    v = verdict(reached(RAN), NORM)
    assert v.status == WARNING and "LayerNorm differently" in v.reason and "max abs difference" in v.reason
    assert "audit the model's outputs against a reference" in v.remedy


def test_non_finite_outputs_and_earlier_failures_are_warnings() -> None:
    nan = LoadCheck(True, "ran", [{"index": 0, "shape": [8], "dtype": "float32", "finite": False}], 0.1)
    assert verdict(reached(nan)).status == WARNING
    learned = {"SiLU": "a load on mindspore-lite 2.0.0 (cpu) failed: Unsupported primitive"}
    v = verdict(reached(), load=False, before=learned)
    assert v.status == WARNING and "failed at its operators before" in v.reason
    assert verdict(reached(RAN), before=learned).status == OK  # today's load decides


def test_a_blocked_load_is_the_finding_and_a_failed_one_the_diagnosis() -> None:
    from auditor.plugins.runtimes.lite.spec import LITE

    from auditor.stacks.failures import diagnose
    from auditor.stacks.worker import WorkerError

    p = reached(LoadCheck(False, "x", phase="load"))
    p.diagnosis = diagnose(
        WorkerError(
            "lite20",
            "load",
            "error",
            "Common error code.",
            "maximum mind ir version: 1, please install the latest version to support the mind ir version: 3",
        ),
        LITE,
        "2.0.0",
        {"model_version": "2.10.0", "mind_ir_version": 3},
    )
    v = verdict(p, {"model_version": "2.10.0", "op_types": ["MatMul"]})
    assert (
        v.status == INCOMPATIBLE
        and "MindIR version 3" in v.reason
        and "export it with MindSpore 2.0.x" in v.remedy
    )
    assert v.unknown == []  # the load decided: nothing the table could add


def test_the_exit_status_is_0_only_when_every_stack_is_ok() -> None:
    info = MindIRInfo("0" * 64, 1, True)
    ok = StackVerdict("a", "r", "1", OK, "")
    assert CheckReport("f", info, [ok], [], 0.0).exit_code == 0
    assert CheckReport("f", info, [ok, StackVerdict("b", "r", "1", UNCHECKED, "")], [], 0.0).exit_code == 1
    assert CheckReport("f", info, [], [], 0.0).exit_code == 1  # nothing checked is not an all-clear


def test_the_history_finds_a_files_results_with_each_stacks_runtime(history_db: Path) -> None:
    store = Store.open(f"sqlite:///{history_db}")
    doc = {"runtime": {"runtime_package": "mindspore-lite", "runtime_version": "2.0.0"}}
    stacks = {
        "ms20": StackReport("ms20", "train", "mindspore", "/p", "cpu", "local", {"runtime": {}}),
        "lite20": StackReport("lite20", "infer", "mindspore-lite", "/p", "cpu", "local", doc),
    }
    artifact = Artifact("a" * 64, "mindir", 10, {"model_version": "2.0.0"})
    base = dict(
        train="ms20", infer="lite20", probe="policy", probe_version="aaaa", variant="model", artifact=artifact
    )
    results = [ProbeResult(pair="policy:golden->lite20", status="unsupported", message="no SiLU", **base)]
    run_id = store.begin_run("test")
    store.finish_run(run_id, CycleResult(0.0, 1.0, "test", stacks, results, []), {})
    with store.engine.connect() as conn:
        (r,) = served_results(conn, "a" * 64)
        assert (r.stack, r.status, r.message, r.run_id) == ("lite20", "unsupported", "no SiLU", run_id)
        assert (r.runtime_package, r.runtime_version, r.device) == ("mindspore-lite", "2.0.0", "cpu")
        assert served_results(conn, "b" * 64) == []
    store.close()
    assert asdict(r)["pair"] == "policy:golden->lite20"
