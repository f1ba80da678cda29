"""The text report: short for what is fine, complete for what is not."""

from __future__ import annotations

import numpy as np

from auditor.compare.outputs import MetricCheck, Tolerance, compare_output
from auditor.report.text import render_text
from auditor.results import CONSISTENT, DRIFT, INCOMPATIBLE, CycleResult, ProbeResult, StackReport

REASON = "lite20 cannot load the MindIR exported by ms210: the file has MindIR version 3"


def _result(variant: str, status: str, message: str, infer_value: float = 1.0) -> ProbeResult:
    out = compare_output("mean", np.ones(4, np.float32), np.full(4, infer_value, np.float32), Tolerance())
    outputs = (out,) if status != INCOMPATIBLE else ()
    checks = (MetricCheck("kl_max", 0.0, True, 1e-4),) if status != INCOMPATIBLE else ()
    return ProbeResult(
        "tr->inf", "tr", "inf", "ppo_policy", "1", variant, status, message, outputs=outputs, checks=checks
    )


def _cycle(*results: ProbeResult) -> CycleResult:
    stacks = {
        n: StackReport(n, r, "mindspore", "/p", "cpu", "local", None)
        for n, r in (("tr", "train"), ("inf", "infer"))
    }
    return CycleResult(0.0, 1.0, "test.toml", stacks, list(results), [])


def test_consistent_results_take_a_summary_line_and_failures_their_tables() -> None:
    text = render_text(
        _cycle(_result("fp32", CONSISTENT, "ok"), _result("fp16", DRIFT, "mean: 4/4 out", 2.0))
    )
    fp32 = text.split("ppo_policy [fp32]")[1].split("ppo_policy [fp16]")[0]
    assert "1 output bitwise equal; 1 checks ok" in fp32 and "max abs" not in fp32
    fp16 = text.split("ppo_policy [fp16]")[1]
    assert "max abs" in fp16 and "FAIL 4/4" in fp16 and "kl_max" in fp16 and "mean: 4/4 out" in fp16
    verbose = render_text(_cycle(_result("fp32", CONSISTENT, "ok")), verbose=True)
    assert "max abs" in verbose and "kl_max" in verbose


def test_a_reason_shared_by_blocked_variants_is_said_once() -> None:
    results = [_result(v, INCOMPATIBLE, REASON) for v in ("fp32", "fp16", "tanh-fp32")]
    text = render_text(_cycle(*results))
    assert text.count(REASON) == 1
    assert all(f"ppo_policy [{v}]  INCOMPATIBLE" in text for v in ("fp32", "fp16", "tanh-fp32"))
    assert render_text(_cycle(*results), verbose=True).count(REASON) == 3


def test_check_limits_show_their_direction() -> None:
    checks = (
        MetricCheck("kl_max", 2e-4, False, 1e-4, None, "", "<="),  # declared: at most
        MetricCheck("agreement", 0.5, False, 0.9),  # inferred: failed below its limit, so at least
        MetricCheck("sign_rate", 1.0, True, 0.75),  # inferred: passed above, so at least
        MetricCheck("rerun_max_abs", 0.0, True, 0.0, None, "", "<="),
        MetricCheck("info_only", 3.0, True),
    )
    r = ProbeResult("tr->inf", "tr", "inf", "ppo_policy", "1", "fp32", DRIFT, "differs", checks=checks)
    lines = {line.split()[0]: line for line in render_text(_cycle(r)).splitlines() if line.strip()}
    assert "≤ 0.0001" in lines["kl_max"] and "FAIL" in lines["kl_max"]
    assert "≥ 0.9" in lines["agreement"] and "≥ 0.75" in lines["sign_rate"]
    assert "≤ 0" in lines["rerun_max_abs"]
    assert "≤" not in lines["info_only"] and "≥" not in lines["info_only"]
    assert [c.bound() for c in checks] == ["<=", ">=", ">=", "<=", ""]


def test_a_worker_failure_is_said_in_the_report_and_the_outcome():
    import time

    from auditor.report.text import render_text
    from auditor.results import CycleResult, StackReport

    problem = (
        "worker process 7 of stack ms20 ended (killed by SIGKILL) "
        "during or after its 'build' request; restarted"
    )
    stack = StackReport("ms20", "train", "mindspore", "p", "cpu", "local", {"runtime": {}}, None, (problem,))
    now = time.time()
    text = render_text(CycleResult(now, now, "t.toml", {"ms20": stack}, [], []))
    assert "WORKER FAILED" in text and f"ms20: {problem}" in text
    assert "Outcome: ERROR (1 error); exit status 1" in text
