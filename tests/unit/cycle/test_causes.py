"""One finding per cause (auditor.cycle.causes): the merge of findings that share a cause, on
findings written here. The default cycle's grouping on the real stacks is in
tests/stacks/test_side_checks_stacks.py."""

from __future__ import annotations

from auditor.compare.outputs import MetricCheck, OutputComparison
from auditor.cycle import causes
from auditor.cycle.cycle import drift_cause
from auditor.results import DRIFT, Finding, ProbeResult


def _masked(stack: str, variant: str, severity: str = "warning") -> Finding:
    return Finding(
        "nan-hazard",
        severity,
        stack,
        f"{stack}/obs_normalizer/{variant}/nan-hazard/nan-masked/normalized",
        f"NaN masked to -10 by obs_normalizer (normalized) on {stack} [{variant}]: ...",
        {"probe": "obs_normalizer", "variant": variant, "output": "normalized"},
        cause="obs_normalizer/nan-hazard/nan-masked/normalized",
        summary="NaN masked to -10 by obs_normalizer (normalized)",
        place=(stack, variant),
        example=f"{stack} gave normalized = -10 for input 48 of the random inputs [{variant}]",
    )


def test_one_cause_on_every_stack_and_variant_is_one_finding_that_says_where():
    found = [_masked(s, v) for s in ("ms210", "ms210-graph", "ms20", "lite20") for v in ("fp32", "fp16")]
    other = Finding("train-infer-pairing", "info", "ms20->ms210-graph", "ms20->ms210-graph/pairing", "...")
    (masked, kept) = causes.group([*found[:3], other, *found[3:]])
    assert kept is other  # a finding without a cause stays as it is, in its place
    assert masked.key == "obs_normalizer/nan-hazard/nan-masked/normalized"  # the alert follows the cause
    assert masked.message.startswith(
        "NaN masked to -10 by obs_normalizer (normalized) on ms210, ms210-graph, ms20, lite20 (fp32, fp16); "
        "e.g. ms210 gave normalized = -10"
    )
    assert masked.subject == "obs_normalizer" and masked.severity == "warning"
    assert [(w["subject"], w["variant"]) for w in masked.details["where"]] == [
        (s, v) for s in ("ms210", "ms210-graph", "ms20", "lite20") for v in ("fp32", "fp16")
    ]
    assert masked.details["where"][0]["message"] == found[0].message


def test_places_that_differ_in_variants_are_listed_apart_and_the_worst_severity_wins():
    found = [_masked("ms20", "fp32"), _masked("ms20", "fp16", "error"), _masked("lite20", "fp16")]
    (f,) = causes.group(found)
    assert " on ms20 (fp32, fp16) and lite20 (fp16); e.g. " in f.message and f.severity == "error"
    (single,) = causes.group([_masked("lite20", "fp16")])
    assert single.key == "obs_normalizer/nan-hazard/nan-masked/normalized" and single.subject == "lite20"
    assert single.message.startswith("NaN masked to -10 by obs_normalizer (normalized) on lite20 (fp16)")
    assert causes.where([("ms210->lite20", ""), ("ms20->lite20", "")]) == "ms210->lite20, ms20->lite20"


def test_variants_drifting_in_the_same_outputs_share_a_cause():
    def result(variant: str, failing: tuple[str, ...]) -> ProbeResult:
        outputs = tuple(
            OutputComparison(o, o not in failing, {}, 0 if o not in failing else 4, 4, None)
            for o in ("mean", "std")
        )
        checks = (MetricCheck("class_failing", 4.0, "std" not in failing, 0.0, "std@sweep", ""),)
        return ProbeResult(
            "ms20->lite20",
            "ms20",
            "lite20",
            "ppo_policy",
            "2",
            variant,
            DRIFT,
            "std: 4/4",
            outputs,
            checks=checks,
        )

    a, b, c = (
        drift_cause(result(v, f))
        for v, f in (("fp16", ("std",)), ("tanh-fp16", ("std",)), ("fp32", ("mean",)))
    )
    assert a["cause"] == b["cause"] == "ms20->lite20/ppo_policy/drift/std" != c["cause"]
    assert a["summary"] == "ppo_policy drifts in std" and a["place"] == ("ms20->lite20", "fp16")


def test_a_rule_cause_of_several_pairs_blocks_every_pairs_results():
    """Lite 2.0 lacks StandardNormal for ms210's and ms20's exports: one finding, and each
    pair's blocked result still points at it (the report folds it to the finding's number)."""

    def rule(pair: str) -> Finding:
        blocks = [{"pair": pair, "probe": "action_sampler", "variant": "seeded-normal"}]
        return Finding(
            "unsupported",
            "warning",
            pair,
            f"{pair}/operator-support",
            f"{pair}: no StandardNormal",
            {"rule": "operator-support", "blocks": blocks},
            cause="lite20/operator-support/StandardNormal",
            summary="no StandardNormal",
            place=(pair, ""),
        )

    (merged,) = causes.group([rule("ms210->lite20"), rule("ms20->lite20"), rule("ms20->lite20")])
    assert [b["pair"] for b in merged.details["blocks"]] == ["ms210->lite20", "ms20->lite20"]


def test_findings_about_one_host_each_that_say_the_same_are_one_cause():
    from auditor.results import Finding

    tree = "/usr/local/Ascend/ascend-toolkit/latest"
    cann = [
        Finding(
            "runtime-cann",
            "warning",
            f"lite20@infer-{i:02d}",
            f"lite20@infer-{i:02d}/runtime-cann",
            f"lite20@infer-{i:02d}: CANN 8.0.RC2 under {tree} is not the one lite20@infer-{i:02d} loads",
        )
        for i in range(1, 13)
    ]
    npu = [
        Finding(
            "telemetry-unavailable",
            "warning",
            h,
            f"{h}/npu/x",
            f"host {h}: 8 view(s) failed on NPU 0: ret -8005",
        )
        for h in ("infer-01", "infer-02")
    ]
    other = Finding("runtime-cann", "warning", "lite20@infer-05", "k", "lite20@infer-05: something else")
    merged = causes.group([*cann, *npu, other])
    assert len(merged) == 3, [f.message for f in merged]
    first, second, third = merged
    assert (
        first.message.startswith("lite20 on infer-[01:12]: CANN 8.0.RC2 under") and "{host}" in first.message
    )
    assert len(first.details["where"]) == 12 and first.severity == "warning"
    assert second.message == "infer-[01:02]: 8 view(s) failed on NPU 0: ret -8005"
    assert third is other  # said of one host only: as it was
