"""The text report: short for what is fine, complete for what is not."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np

from auditor.compare.outputs import MetricCheck, Tolerance, compare_output
from auditor.cycle import causes
from auditor.report.summary import summarize
from auditor.report.text import outcome_line, render_json, render_text, status_counts
from auditor.results import (
    CONSISTENT,
    DRIFT,
    INCOMPATIBLE,
    STATUS_ORDER,
    CycleResult,
    Finding,
    ProbeResult,
    StackReport,
)
from tests.report_fixtures import MINDIR, STANDARD_NORMAL, failing_cycle, passing_cycle, probe_result

REASON = "lite20 cannot load the MindIR exported by ms210: the file has MindIR version 3"


def _result(variant: str, status: str, message: str, infer_value: float = 1.0) -> ProbeResult:
    out = compare_output("mean", np.ones(4, np.float32), np.full(4, infer_value, np.float32), Tolerance())
    outputs = (out,) if status != INCOMPATIBLE else ()
    checks = (MetricCheck("kl_max", 0.0, True, 1e-4),) if status != INCOMPATIBLE else ()
    return ProbeResult(
        "tr->inf", "tr", "inf", "ppo_policy", "1", variant, status, message, outputs=outputs, checks=checks
    )


def _cycle(*results: ProbeResult, findings: list[Finding] | None = None) -> CycleResult:
    stacks = {
        n: StackReport(n, r, "mindspore", "/p", "cpu", "local", None)
        for n, r in (("tr", "train"), ("inf", "infer"))
    }
    return CycleResult(0.0, 1.0, "test.toml", stacks, list(results), findings or [])


def test_consistent_results_take_one_line_and_failures_one_line_per_failing_output() -> None:
    text = render_text(
        _cycle(_result("fp32", CONSISTENT, "ok"), _result("fp16", DRIFT, "mean: 4/4 out", 2.0))
    )
    fp32 = text.split("ppo_policy [fp32]")[1].split("ppo_policy [fp16]")[0]
    assert "consistent" in fp32 and "bitwise equal, 1 check ok" in fp32 and "max abs" not in fp32
    fp16 = text.split("ppo_policy [fp16]")[1].split("Outcome")[0]
    assert "DRIFT" in fp16 and "1 of 1 output out of tolerance" in fp16
    assert "      mean  4/4 out (100%)  max abs 1  max rel 1  would pass at atol 1 or rtol 1\n" in fp16
    assert "kl_max" not in fp16  # a check that passed is in --verbose only
    verbose = render_text(_cycle(_result("fp32", CONSISTENT, "ok")), verbose=True)
    assert "max abs" in verbose and "kl_max" in verbose


def test_a_reason_shared_by_blocked_variants_is_said_once() -> None:
    results = [_result(v, INCOMPATIBLE, REASON) for v in ("fp32", "fp16", "tanh-fp32")]
    finding = Finding(INCOMPATIBLE, "critical", "tr->inf", "tr->inf/mindir", REASON, {"rule": "mindir"})
    text = render_text(_cycle(*results, findings=[finding]))
    assert text.count(REASON) == 1
    assert "tr → inf  INCOMPATIBLE: 3 probe variants [1]" in text and "[1] ✗ critical" in text
    assert render_text(_cycle(*results), verbose=True).count(REASON) == 3


def test_variants_a_rule_blocked_point_at_it_whatever_their_own_message_adds() -> None:
    """A blocked result's message says more than the rule's finding (the remedy, that the
    load was not attempted): the rule's ``blocks`` name it, so the pair still folds to one line."""
    said = REASON + "; the load was not attempted; remedy: export with an older MindSpore"
    results = [_result(v, INCOMPATIBLE, said) for v in ("fp32", "fp16")]
    finding = Finding(
        INCOMPATIBLE,
        "critical",
        "tr->inf",
        "tr->inf/mindir",
        REASON,
        {"rule": "mindir", "blocks": [{"pair": "tr->inf"}]},
    )
    text = render_text(_cycle(*results, findings=[finding]))
    assert "tr → inf  INCOMPATIBLE: 2 probe variants [1]" in text and text.count(REASON) == 1
    other = Finding(
        INCOMPATIBLE,
        "critical",
        "x->y",
        "x->y/mindir",
        REASON,
        {"rule": "mindir", "blocks": [{"pair": "x->y"}]},
    )
    assert "INCOMPATIBLE: 2 probe variants [1]" not in render_text(_cycle(*results, findings=[other]))


def test_a_variant_stopped_by_a_cause_of_several_pairs_points_at_it() -> None:
    """One finding for a runtime's missing kernel on every pair (auditor.cycle.causes): each
    blocked variant's line names it by number, its own message kept in the finding's places."""
    own = "unsupported operator: StandardNormal: inf cannot run the MindIR exported by tr"
    other = "unsupported operator: StandardNormal: inf cannot run the MindIR exported by tr2"
    places = [("tr->inf", own), ("tr2->inf", other)]
    (finding,) = causes.group(
        Finding(
            "unsupported",
            "warning",
            pair,
            f"{pair}/operator-support",
            message,
            {"rule": "operator-support"},
            cause="inf/operator-support/StandardNormal",
            summary="unsupported operator: StandardNormal: inf cannot run it",
            place=(pair, ""),
        )
        for pair, message in places
    )
    text = render_text(_cycle(_result("seeded", "unsupported", own), findings=[finding]))
    assert "ppo_policy [seeded]" in text and own not in text and "[1] ! warning" in text
    assert "unsupported operator: StandardNormal: inf cannot run it on tr->inf, tr2->inf" in text


def test_check_limits_show_their_direction() -> None:
    checks = (
        MetricCheck("kl_max", 2e-4, False, 1e-4, None, "", "<="),  # declared: at most
        MetricCheck("agreement", 0.5, False, 0.9),  # inferred: failed below its limit, so at least
        MetricCheck("sign_rate", 1.0, True, 0.75),  # inferred: passed above, so at least
        MetricCheck("rerun_max_abs", 0.0, True, 0.0, None, "", "<="),
        MetricCheck("info_only", 3.0, True),
    )
    r = ProbeResult("tr->inf", "tr", "inf", "ppo_policy", "1", "fp32", DRIFT, "differs", checks=checks)
    text = render_text(_cycle(r), verbose=True)
    lines = {line.split()[0]: line for line in text.splitlines() if line.strip()}
    assert "≤ 0.0001" in lines["kl_max"] and "FAIL" in lines["kl_max"]
    assert "≥ 0.9" in lines["agreement"] and "≥ 0.75" in lines["sign_rate"]
    assert "≤ 0" in lines["rerun_max_abs"]
    assert "≤" not in lines["info_only"] and "≥" not in lines["info_only"]
    assert [c.bound() for c in checks] == ["<=", ">=", ">=", "<=", ""]


def test_a_worker_failure_is_said_in_the_report_and_the_outcome():
    import time

    problem = (
        "worker process 7 of stack ms20 ended (killed by SIGKILL) "
        "during or after its 'build' request; restarted"
    )
    stack = StackReport("ms20", "train", "mindspore", "p", "cpu", "local", {"runtime": {}}, None, (problem,))
    now = time.time()
    text = render_text(CycleResult(now, now, "t.toml", {"ms20": stack}, [], []))
    assert "WORKER FAILED" in text and problem in " ".join(text.split())  # its stack's line, wrapped
    assert (
        "Outcome: ERROR (0 consistent, 0 unchecked, 0 drift, 0 unsupported, 0 incompatible, 1 error); "
        "exit status 1"
    ) in text
    verbose = render_text(CycleResult(now, now, "t.toml", {"ms20": stack}, [], []), verbose=True)
    assert "WORKER FAILED" in verbose


# -- snapshots: the compact report of the shipped config's cycle, failing and passing ------------

SNAPSHOTS = Path(__file__).parent / "snapshots"


def _snapshot(name: str, text: str) -> None:
    """``text`` must equal the stored snapshot; AUDITOR_UPDATE_SNAPSHOTS=1 rewrites it (review the
    diff before committing it)."""
    path = SNAPSHOTS / name
    if os.environ.get("AUDITOR_UPDATE_SNAPSHOTS") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    expected = path.read_text(encoding="utf-8")
    assert text == expected, f"{path} differs (AUDITOR_UPDATE_SNAPSHOTS=1 rewrites it)"


def test_snapshot_of_a_failing_default_cycle_fits_a_screen_and_names_each_cause_once() -> None:
    result = failing_cycle()
    text = render_text(result)
    _snapshot("failing_cycle.txt", text)
    lines = text.splitlines()
    assert len(lines) <= 50 and max(len(line) for line in lines) <= 160
    for cause in (MINDIR, STANDARD_NORMAL):  # wrapped to the width, in two lines: its start, once
        assert " ".join(text.split()).count(cause[:120]) == 1
    # a variant failing as one above it is a line, not its outputs again; the consistent ones one line
    assert (
        "ppo_policy [tanh-fp16]          DRIFT        the same outputs as ppo_policy [fp16]: std, logp"
        in text
    )
    assert (
        "  the others                      consistent   5 probe variants (5 bitwise equal) and the rollout"
        in text
    )
    assert "ms210 → lite20" in text and "INCOMPATIBLE: 8 probe variants [1]" in text
    # the worst of everything the report holds: lite20's broken invariant (std = 0) is an error;
    # each blocked variant counts once (its rule finding is not counted again); rollouts count too
    outcome = "Outcome: ERROR (23 consistent, 0 unchecked, 3 drift, 1 unsupported, 8 incompatible, 1 error)"
    assert lines[-1].startswith(outcome)
    # every finding the cycle produced that is a cause of its own (not a result's) is listed,
    # once, by the start of what it says: checked against the cycle, not against the snapshot
    flat = " ".join(text.split())
    causes = {
        (f.summary or f.message)[:60] for f in result.findings if f.severity in ("critical", "error", "info")
    }
    causes |= {(f.summary or f.message)[:60] for f in result.findings if f.kind == "unsupported"}
    assert len(causes) == 4
    for cause in causes:
        assert flat.count(" ".join(cause.split())) == 1, cause


def test_snapshot_of_a_passing_cycle_is_a_line_per_pair() -> None:
    result = passing_cycle()
    text = render_text(result)
    _snapshot("passing_cycle.txt", text)
    # Checked apart from the snapshot, from the cycle itself: one line per pair with its variant
    # and bitwise counts, no failure, the outcome counting every result and rollout.
    lines = text.splitlines()
    assert "DRIFT" not in text and "Findings" not in text and "Not checked" not in text
    pairs = sorted({r.pair for r in result.results})
    for pair in pairs:
        variants = [r for r in result.results if r.pair == pair]
        bitwise = [r for r in variants if all(o.metrics.get("bitwise_equal") == 1.0 for o in r.outputs)]
        train, infer = pair.split("->")
        [line] = [line for line in lines if line.startswith(f"{train} → {infer} ")]
        assert line.endswith(
            f"consistent: {len(variants)} probe variants ({len(bitwise)} bitwise equal) and the rollout"
        )
    parts = len(result.results) + len(result.rollouts)
    assert lines[-1] == (
        f"Outcome: CONSISTENT ({parts} consistent, 0 unchecked, 0 drift, 0 unsupported, 0 incompatible, "
        "0 error); exit status 0"
    )
    assert len(lines) == 2 + 2 + len(pairs) + 2  # title, stacks, a line per pair, the outcome


def test_json_carries_the_compact_report_structure() -> None:
    result = failing_cycle()
    doc = json.loads(render_json(result))
    report = doc["report"]
    assert [b["pair"] for b in report["blocks"]] == [b.pair for b in summarize(result).blocks]
    drift = next(
        ln
        for b in report["blocks"]
        if b["pair"] == "ms20->lite20"
        for ln in b["lines"]
        if ln["variant"] == "fp16" and ln["probe"] == "ppo_policy"
    )
    assert [o["output"] for o in drift["outputs"]] == ["std", "logp"]
    assert drift["outputs"][0]["failing"] == 256 and drift["outputs"][0]["min_atol"] > 0.6
    assert report["outcome"]["counts"]["incompatible"] == 8 and report["outcome"]["worst"] == "error"
    assert [c["severity"] for c in report["causes"]][:2] == ["critical", "error"]
    assert doc["results"] and doc["outcome"] == "error"  # the full result is still there


def test_outcome_line_names_every_status() -> None:
    counts = status_counts(failing_cycle())
    assert set(STATUS_ORDER) <= set(counts)
    line = outcome_line("drift", {"consistent": 2, "drift": 1, "error": 0})
    assert line == "Outcome: DRIFT (2 consistent, 1 drift, 0 error)"


def test_a_model_result_names_its_golden_side_and_samples() -> None:
    out = compare_output("logits", np.ones(64, np.float32), np.ones(64, np.float32), Tolerance())
    r = ProbeResult(
        "policy:golden->lite20", "lite20", "lite20", "policy", "abc", "model", CONSISTENT, "ok",
        outputs=(out,), samples=64,
    )  # fmt: skip
    text = render_text(_cycle(r))
    assert "model policy: golden → lite20" in text and "64 samples compared with golden" in text
    assert "train" not in text.split("Outcome")[0].split("model policy")[1]
    assert "p50 golden -" in render_text(_cycle(r), verbose=True)


def test_the_others_line_stands_only_beside_failing_lines() -> None:
    """One consistent variant and its rollout are shown as they are; beside a failure, two or
    more consistent lines are counted in one."""
    cycle = failing_cycle()
    rollout = cycle.rollouts[0]
    fine = probe_result(rollout.pair, "ppo_policy", "fp32")
    bad = _result("fp16", DRIFT, "mean: 4/4 out", 2.0)
    bad = dataclasses.replace(bad, pair=rollout.pair, train=rollout.train, infer=rollout.infer)
    (alone,) = summarize(dataclasses.replace(cycle, results=[fine], rollouts=[rollout], findings=[])).blocks
    assert alone.folded is None and alone.rest is None and len(alone.lines) == 2
    (mixed,) = summarize(
        dataclasses.replace(cycle, results=[fine, bad], rollouts=[rollout], findings=[])
    ).blocks
    assert mixed.rest == "1 probe variant (1 bitwise equal) and the rollout"
    assert "  the others " in render_text(dataclasses.replace(cycle, results=[fine, bad], rollouts=[rollout]))


def test_a_drift_judged_by_a_trainer_preset_reads_in_that_trainers_words_first() -> None:
    """With [ppo] trainer chosen, a drifting policy's line in PPO terms starts with what that
    trainer's correction would do; without one, PPO's own clip share leads."""
    said = (
        "verl (decoupled_geo_rs) would reject 12.5% of the samples: geometric-mean ratio outside "
        "[0.999, 1.001]"
    )
    ppo = (
        MetricCheck("ppo_clip_share", 0.0, True),
        MetricCheck("tis_share", 0.0, True),
        MetricCheck("ess", 0.9999, True),
        MetricCheck("samples", 1024.0, True),
    )
    judged = ProbeResult(
        "tr->inf", "tr", "inf", "ppo_policy", "1", "fp32", DRIFT, said,
        checks=(*ppo, MetricCheck("verl_geo_rs_share", 0.125, False, 0.0, None, said, "<=")),
    )  # fmt: skip
    text = " ".join(render_text(_cycle(judged)).split())  # the line wraps
    assert f"{said}; in PPO terms, the stacks alone clip 0.00% at ε 0.2" in text, text
    plain = dataclasses.replace(
        judged, message="differs", checks=(*ppo, MetricCheck("verl_geo_rs_share", 0.125, True))
    )
    text = " ".join(render_text(_cycle(plain)).split())
    assert "would reject" not in text and "in PPO terms, the stacks alone clip 0.00%" in text
