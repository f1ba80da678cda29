"""Golden baselines (no stacks): canonical output bytes, the comparison against a golden,
recording the first accepted result in the run's transaction, and `auditor baseline`."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from auditor.cli.baseline import BASELINE_COLUMNS
from auditor.cli.main import cli
from auditor.compare.outputs import Tolerance, compare_output
from auditor.history.baselines import decode_outputs, load_goldens, reset, show
from auditor.policy import baseline
from auditor.results import CONSISTENT, DRIFT, CycleResult, ProbeResult, StackReport

NAMES = ["mean", "std"]


def tol(_name: str) -> Tolerance:
    return Tolerance(1e-5, 1e-5)


def outputs(shift: float = 0.0) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [(rng.standard_normal((16, 1)) + shift).astype(np.float32), np.full((16, 1), 0.6, np.float32)]


def golden_of(arrays, **kw) -> baseline.Golden:
    blob = baseline.encode_outputs(arrays)
    import hashlib
    from datetime import datetime

    return baseline.Golden(
        "local",
        kw.get("stack", "tr"),
        "ppo_policy",
        "fp32",
        kw.get("source", ""),
        "train",
        kw.get("version", "2"),
        kw.get("inputs", "in"),
        hashlib.sha256(blob).hexdigest(),
        7,
        datetime(2026, 1, 1),
        {"outputs": {}, "metrics": kw.get("metrics", {})},
        arrays,
    )


def _check(golden, arrays, **kw):
    return baseline.check(
        golden,
        side=kw.get("side", "train"),
        stack="tr",
        source=kw.get("source", ""),
        probe_version=kw.get("version", "2"),
        inputs_sha256=kw.get("inputs", "in"),
        names=NAMES,
        outputs=arrays,
        tolerance_for=tol,
        pair_metrics=kw.get("pair_metrics"),
    )


def test_encoding_is_canonical_and_round_trips():
    arrays = [
        np.arange(6, dtype=np.float16).reshape(2, 3),
        np.array(3.5, dtype=np.float64),
        np.zeros((0, 4), np.float32),
        np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4)),
    ]
    blob = baseline.encode_outputs(arrays)
    back = decode_outputs(blob)
    assert [a.dtype for a in back] == [a.dtype for a in arrays]
    assert all(np.array_equal(a, b) and a.shape == b.shape for a, b in zip(arrays, back, strict=True))
    assert baseline.encode_outputs(back) == blob  # C or Fortran order: the same bytes
    with pytest.raises(ValueError, match="more than its header"):
        decode_outputs(blob + b"\0")


def test_new_equal_changed_drift_incomparable():
    base = outputs()
    check, blob = _check(None, base)
    assert check.status == baseline.NEW and decode_outputs(blob)[0].tobytes() == base[0].tobytes()
    golden = golden_of(base)
    assert _check(golden, outputs())[0].status == baseline.EQUAL
    for shift in (2e-6, 1e-3):
        moved = outputs(shift)
        c, _ = _check(golden, moved)
        expected_fail = not compare_output("mean", base[0], moved[0], tol("mean")).passed
        assert c.status == (baseline.DRIFTED if expected_fail else baseline.CHANGED)
        assert c.max_abs == pytest.approx(float(np.max(np.abs(moved[0].astype(float) - base[0]))))
        assert c.golden_run == 7 and "run 7" in c.message
    assert _check(golden, base, version="3")[0].status == baseline.INCOMPARABLE
    c = _check(golden, base, inputs="other")[0]
    assert c.status == baseline.INCOMPARABLE and "other inputs" in c.message


def test_pair_metrics_are_compared_on_the_infer_side():
    golden = golden_of(outputs(), metrics={"mean": {"max_abs": 5e-7, "cosine": 1.0}})
    c, _ = _check(
        golden, outputs(), side="infer", source="x", pair_metrics={"mean": {"max_abs": 6e-7, "cosine": 1.0}}
    )
    assert c.status == baseline.EQUAL and c.metric_changes == {"mean": {"max_abs": [5e-7, 6e-7]}}
    assert "pair metrics moved: mean max_abs 5e-07 -> 6e-07" in c.message


def _result(status: str, checks, pair="tr->inf", probe="ppo_policy", variant="fp32") -> ProbeResult:
    return ProbeResult(pair, "tr", "inf", probe, "2", variant, status, "", baseline=tuple(checks))


def test_findings_once_per_side_with_severity():
    golden = golden_of(outputs())
    changed, _ = _check(golden, outputs(2e-6))
    drifted, _ = baseline.check(
        golden,
        side="infer",
        stack="inf",
        source="tr",
        probe_version="2",
        inputs_sha256="in",
        names=NAMES,
        outputs=outputs(1.0),
        tolerance_for=tol,
    )
    equal, _ = _check(golden, outputs())
    results = [
        _result(CONSISTENT, [changed, drifted]),
        _result(CONSISTENT, [changed, equal], pair="tr->other"),
    ]
    found = list(baseline.findings(results))
    assert [(f.key, f.severity) for f in found] == [
        ("tr/ppo_policy/fp32/baseline-drift", "info"),
        ("inf/ppo_policy/fp32/baseline-drift/tr", "warning"),
    ]
    assert found[1].details["golden_run"] == 7 and found[1].details["side"] == "infer"


# -- the database -------------------------------------------------------------------------------


def _cycle(results) -> CycleResult:
    stacks = {
        n: StackReport(n, role, "mindspore", "/py", "cpu", "local", {"runtime": "x"})
        for n, role in (("tr", "train"), ("inf", "infer"))
    }
    return CycleResult(1.0, 2.0, "t.toml", stacks, results, [])


def _side_checks(goldens, arrays_train, arrays_infer, variant="fp32"):
    blobs, checks = {}, []
    for side, stack, source, arrays in (
        ("train", "tr", "", arrays_train),
        ("infer", "inf", "tr", arrays_infer),
    ):
        c, blob = baseline.check(
            goldens.get(("local", stack, "ppo_policy", variant, source)),
            side=side,
            stack=stack,
            source=source,
            probe_version="2",
            inputs_sha256="in",
            names=NAMES,
            outputs=arrays,
            tolerance_for=tol,
            pair_metrics={"mean": {"max_abs": 0.0}} if side == "infer" else None,
        )
        blobs[c.outputs_sha256] = blob
        checks.append(c)
    return checks, blobs


def _store_run(store, results, blobs) -> int:
    run_id = store.begin_run("t.toml")
    store.finish_run(run_id, _cycle(results), blobs)
    return run_id


def test_first_accepted_result_becomes_golden_and_later_runs_compare(store):
    goldens = load_goldens(store.engine)
    assert goldens == {}
    # Run 1: drift -> nothing kept.
    checks, blobs = _side_checks(goldens, outputs(), outputs(1.0))
    _store_run(store, [_result(DRIFT, checks)], blobs)
    assert load_goldens(store.engine) == {}
    # Run 2: consistent -> both sides kept (one outputs artifact each, content-addressed).
    checks, blobs = _side_checks(goldens, outputs(), outputs())
    run2 = _store_run(
        store, [_result(CONSISTENT, checks), _result(CONSISTENT, checks, variant="fp32")], blobs
    )
    goldens = load_goldens(store.engine)
    assert set(goldens) == {
        ("local", "tr", "ppo_policy", "fp32", ""),
        ("local", "inf", "ppo_policy", "fp32", "tr"),
    }
    g = goldens[("local", "inf", "ppo_policy", "fp32", "tr")]
    assert g.run_id == run2 and g.side == "infer" and g.summary["metrics"] == {"mean": {"max_abs": 0.0}}
    assert all(np.array_equal(a, b) for a, b in zip(g.outputs, outputs(), strict=True))
    # Run 3: the infer side moved, the train side did not; the goldens stay those of run 2.
    checks, blobs = _side_checks(goldens, outputs(), outputs(1e-3))
    assert [c.status for c in checks] == [baseline.EQUAL, baseline.DRIFTED]
    _store_run(store, [_result(CONSISTENT, checks)], blobs)
    assert {k: v.run_id for k, v in load_goldens(store.engine).items()} == {k: run2 for k in goldens}


def test_show_and_reset_with_filters(store):
    checks, blobs = _side_checks({}, outputs(), outputs())
    checks16, blobs16 = _side_checks({}, outputs(0.5), outputs(0.5), variant="fp16")
    _store_run(
        store, [_result(CONSISTENT, checks), _result(CONSISTENT, checks16, variant="fp16")], blobs | blobs16
    )
    rows = show(store.engine)
    assert [(r["stack"], r["variant"], r["source"]) for r in rows] == [
        ("inf", "fp16", "tr"),
        ("inf", "fp32", "tr"),
        ("tr", "fp16", ""),
        ("tr", "fp32", ""),
    ]
    assert [r["stack"] for r in show(store.engine, stack="tr")] == ["tr", "tr"]
    assert reset(store.engine, variant="fp16", stack="inf") == 1
    assert reset(store.engine, probe="other") == 0
    assert len(show(store.engine)) == 3
    assert reset(store.engine) == 3 and show(store.engine) == []


def test_cli_show_and_reset(store, tmp_path):
    checks, blobs = _side_checks({}, outputs(), outputs())
    run_id = _store_run(store, [_result(CONSISTENT, checks)], blobs)
    db = store.url.removeprefix("sqlite:///")
    runner = CliRunner()
    shown = runner.invoke(cli, ["--db", db, "baseline", "show"])
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert lines[0].split() == [
        "stack", "host", "side", "source", "probe", "variant", "run", "auditor", "since", "(UTC)", "outputs"
    ]  # fmt: skip
    assert lines[1].split()[:8] == [
        "inf",
        "local",
        "infer",
        "tr",
        "ppo_policy",
        "fp32",
        str(run_id),
        store.auditor_id,
    ]
    csv_rows = runner.invoke(cli, ["--db", db, "baseline", "show", "--format", "csv", "--auditor", "nobody"])
    assert csv_rows.output.splitlines() == [",".join(BASELINE_COLUMNS)]  # another auditor kept none
    as_json = json.loads(
        runner.invoke(cli, ["--db", db, "baseline", "show", "--json", "--stack", "tr"]).output
    )
    assert [(r["stack"], r["side"], r["run_id"]) for r in as_json] == [("tr", "train", run_id)]
    refused = runner.invoke(cli, ["--db", db, "baseline", "reset"], input="n\n")
    assert refused.exit_code == 1 and len(show(store.engine)) == 2
    done = runner.invoke(cli, ["--db", db, "baseline", "reset", "--stack", "inf"])
    assert done.exit_code == 0 and done.output == "reset 1 golden baseline\n"
    assert (
        runner.invoke(cli, ["--db", db, "baseline", "reset", "--yes"]).output == "reset 1 golden baseline\n"
    )
    empty = runner.invoke(cli, ["--db", db, "baseline", "show"])
    assert "no goldens yet" in empty.output


def test_report_lines():
    golden = golden_of(outputs())
    equal, _ = _check(golden, outputs())
    new, _ = _check(None, outputs())
    drifted, _ = _check(golden, outputs(1.0))
    assert baseline.report_lines([equal, equal]) == ["    baseline: bitwise equal to golden (run 7)"]
    assert baseline.report_lines([new]) == ["    baseline: no golden yet (kept when this result is accepted)"]
    (line,) = baseline.report_lines([equal, drifted])
    assert line.startswith("    baseline tr: DRIFT: out of tolerance against the golden of run 7: mean")
