"""Per-side checks (auditor.cycle.invariants) and input classes (auditor.compare.input_classes): the auditor's
own logic on arrays written here. The same checks run on the real stacks in
tests/stacks/test_side_checks_stacks.py."""

from __future__ import annotations

import numpy as np
import pytest

from auditor.compare import input_classes
from auditor.config.tables import Config, PairConfig
from auditor.config.thresholds import ProbeConfig
from auditor.cycle import invariants
from auditor.cycle.invariants import Invariant, SideRun
from auditor.cycle.state import CycleState
from auditor.cycle.suite import ProbeSuite
from auditor.extend.probe_spec import ProbeSpec
from auditor.stacks.session import Reach

PPO = ProbeSpec.from_module("probes.ppo_policy")
NORMALIZER = ProbeSpec.from_module("probes.obs_normalizer")
NAMES = ["mean", "std", "logp", "action"]


def _ppo_outputs(batch: int, std: float = 0.6) -> list[np.ndarray]:
    mean = np.linspace(-1, 1, batch, dtype=np.float32)[:, None]
    return [mean, np.full((batch, 1), std, np.float32), np.zeros(batch, np.float32), np.tanh(mean) * 2]


def _obs(batch: int) -> list[np.ndarray]:
    return [np.zeros((batch, 3), np.float32), np.zeros((batch, 1), np.float32)]


def test_a_zero_std_is_a_finding_naming_stack_output_class_input_and_value():
    declared, _ = invariants.declared(PPO, PPO.variant_params("fp16", {}))
    good = SideRun("random", _obs(8), _ppo_outputs(8))
    bad = SideRun("sweep", _obs(8), _ppo_outputs(8, std=0.0))
    assert (
        invariants.check_invariants("lite20", "ppo_policy", "fp16", declared, NAMES, PPO.inputs, [good]) == []
    )
    (f,) = invariants.check_invariants(
        "lite20", "ppo_policy", "fp16", declared, NAMES, PPO.inputs, [good, bad]
    )
    assert f.kind == "invariant" and f.subject == "lite20" and f.severity == "error"
    assert f.details["output"] == "std" and f.details["check"] == "positive"
    assert f.details["input_class"] == "sweep" and f.details["index"] == 0 and f.details["value"] == 0.0
    assert f.details["input"]["obs"] == [0.0, 0.0, 0.0] and f.details["by_class"] == {"sweep": 8}
    assert (
        "lite20 computed std = 0 for input 0 of the sweep inputs" in f.message and "must be > 0" in f.message
    )


def test_rows_with_non_finite_inputs_are_not_held_to_invariants():
    inv = [Invariant("logp", "finite")]
    inputs = _obs(4)
    inputs[0][2, 1] = np.nan
    outputs = _ppo_outputs(4)
    outputs[2][2] = np.nan  # NaN in, NaN out: not an invariant violation (a hazard question)
    assert (
        invariants.check_invariants(
            "s", "p", "v", inv, NAMES, PPO.inputs, [SideRun("nan-inf", inputs, outputs)]
        )
        == []
    )
    outputs[2][1] = np.inf
    (f,) = invariants.check_invariants(
        "s", "p", "v", inv, NAMES, PPO.inputs, [SideRun("random", inputs, outputs)]
    )
    assert f.details["index"] == 1 and f.details["value"] == "inf"


def test_within_and_class_limited_invariants():
    inv = [Invariant("action", "within", -2.0, 2.0, ("random",))]
    outputs = _ppo_outputs(4)
    outputs[3][0] = 2.5
    assert (
        invariants.check_invariants(
            "s", "p", "v", inv, NAMES, PPO.inputs, [SideRun("magnitude", _obs(4), outputs)]
        )
        == []
    )
    (f,) = invariants.check_invariants(
        "s", "p", "v", inv, NAMES, PPO.inputs, [SideRun("random", _obs(4), outputs)]
    )
    assert "must be within [-2, 2]" in f.message and f.details["value"] == 2.5
    with pytest.raises(ValueError, match="low <= high"):
        Invariant("action", "within", 1.0, -1.0)
    with pytest.raises(ValueError, match="unknown check"):
        Invariant("action", "bounded")


def test_nan_mapped_to_finite_is_a_hazard_rowwise_and_elementwise_with_a_relaxable_share():
    inputs = _obs(6)
    inputs[0][[0, 1, 2], 0] = [np.nan, np.inf, -np.inf]
    outputs = _ppo_outputs(6)
    outputs[0][0] = np.nan  # the NaN row propagates in mean ...
    outputs[2][0] = np.nan
    outputs[3][0] = np.nan
    runs = [SideRun("nan-inf", inputs, outputs)]
    f = invariants.check_hazards(
        "ms20", "ppo_policy", "fp32", ("mean", "logp", "action"), NAMES, ["obs"], 0, runs
    )
    assert f is not None and f.kind == "nan-hazard" and f.subject == "ms20"
    assert (
        f.details["hazards"] == 9
        and f.details["finite"] == 6
        and f.details["by_kind"]["NaN"] == {"values": 3, "finite": 0}
    )
    assert f.details["input_class"] == "nan-inf" and f.details["index"] == 1
    assert (
        invariants.check_hazards("ms20", "p", "v", ("mean", "logp", "action"), NAMES, ["obs"], 0, runs, 0.7)
        is None
    )
    # Element-wise (an output shaped like the input): only the non-finite elements count.
    x = np.array([[np.nan, 1.0], [np.inf, 2.0]], np.float32)
    y = np.array([[10.0, 0.5], [np.inf, 1.0]], np.float32)
    f = invariants.check_hazards(
        "s", "norm", "fp32", ("normalized",), ["normalized"], ["obs"], 0, [SideRun("random", [x], [y])]
    )
    assert f.details["hazards"] == 2 and f.details["finite"] == 1 and f.details["value"] == 10.0


def test_builtin_probes_declare_invariants_of_their_own_outputs():
    for module in ("probes.ppo_policy", "probes.action_sampler", "probes.obs_normalizer"):
        spec = ProbeSpec.from_module(module)
        for variant in spec.variants:
            declared, propagates = invariants.declared(spec, spec.variant_params(variant, {}))
            assert declared and propagates and {i.output for i in declared} <= set(spec.outputs)


def test_input_classes_reach_the_hard_regions_and_stay_in_the_dtype():
    for variant in ("fp32", "fp16"):
        params = NORMALIZER.variant_params(variant, {})
        batches = {b.name: b for b in input_classes.class_batches(NORMALIZER, params)}
        assert list(batches) == list(input_classes.CLASSES)
        template = NORMALIZER.make_inputs(params)[0]
        for b in batches.values():
            assert b.inputs[0].shape == template.shape and b.inputs[0].dtype == template.dtype
        mag = batches["magnitude"].inputs[0].astype(np.float64)
        assert np.isfinite(mag).all() and np.abs(mag).max() >= 1e4 and 0 < np.abs(mag[mag != 0]).min() <= 1e-3
        edge = batches["fp16-edge"].inputs[0].astype(np.float64)
        assert np.abs(edge).max() == 65504.0 and np.isfinite(edge).all()
        sweep = batches["sweep"].inputs[0].astype(np.float64)
        assert sweep.min() == -input_classes.SWEEP and sweep.max() == input_classes.SWEEP
        assert batches["nan-inf"].hazard_rows.all() and not batches["sweep"].hazard_rows.any()


def test_the_ppo_sweep_drives_first_layer_units_through_saturation():
    params = PPO.variant_params("fp32", {})
    (sweep,) = [b for b in input_classes.class_batches(PPO, params) if b.name == "sweep"]
    w = PPO.make_weights(params)
    pre = sweep.inputs[0].astype(np.float64) @ w["fc0.weight"].T.astype(np.float64) + w["fc0.bias"]
    units = np.arange(pre.shape[0]) % pre.shape[1]
    driven = pre[np.arange(pre.shape[0]), units]
    assert np.allclose(driven, np.linspace(-12, 12, pre.shape[0]), atol=1e-4)
    assert (np.abs(driven) > 3).sum() > 100 and (np.abs(driven) < 1).sum() > 15  # saturated and transition
    assert sweep.inputs[1].min() == -1.0 and sweep.inputs[1].max() == 1.0 or params["head"] == "gaussian"


class _Outcome:
    def __init__(self, classes):
        self.classes = classes


class _Job:
    rerun = False
    spec = PPO
    variant, dtype = "fp32", "float32"


def _suite(*probes: ProbeConfig) -> ProbeSuite:
    """A probe suite on the state of a cycle whose config holds only these probes' settings."""
    config = Config("<test>", "sqlite://", {}, (), {p.name: p for p in probes})
    return ProbeSuite(CycleState(config, Reach(config)))


def test_the_pair_is_compared_per_class_and_a_failure_names_the_class():
    suite = _suite()
    x = np.linspace(-1, 1, 8, dtype=np.float32)[:, None]
    batch = input_classes.ClassBatch("sweep", [x], np.zeros(8, bool))
    same = {"sweep": (batch, [x]), "nan-inf": (batch, [x])}
    moved = x.copy()
    moved[5] += 0.01
    nan = x.copy()
    nan[2] = np.nan
    other = {"sweep": (batch, [moved]), "nan-inf": (batch, [nan])}
    checks = suite.class_checks(_Job(), ["mean"], _Outcome(same), _Outcome(other))
    by = {(c.output, c.metric): c for c in checks}
    assert not by[("mean@sweep", "class_failing")].passed and by[("mean@sweep", "class_failing")].value == 1.0
    assert "1/8 elements out of tolerance" in by[("mean@sweep", "class_failing")].message
    # Extreme classes: recorded, judged on each side alone.
    assert (
        by[("mean@nan-inf", "class_nan_inf_mismatch")].value == 1.0
        and by[("mean@nan-inf", "class_nan_inf_mismatch")].passed
    )
    assert all(c.passed for c in suite.class_checks(_Job(), ["mean"], _Outcome(same), _Outcome(same)))
    job = _Job()
    job.rerun = True  # seeded random ops: their state moves on with every call
    assert suite.class_checks(job, ["mean"], _Outcome(same), _Outcome(other)) == []


def test_a_side_is_checked_even_when_its_partner_cannot_run():
    from types import SimpleNamespace

    suite = _suite()
    params = PPO.variant_params("fp16", {"batch": 8})
    job = SimpleNamespace(spec=PPO, params=params, variant="fp16", dtype="float16", key="ppo_policy/fp16")
    trained = {"ms20": {job.key: SimpleNamespace(outputs=_ppo_outputs(8, std=0.0), classes={})}}
    inferred = {"lite20": {("ms20->lite20", job.key): SimpleNamespace(outputs=None, classes={})}}
    found = suite.side_findings([(PairConfig("ms20", "lite20", ("ppo_policy",)), job)], trained, inferred)
    assert [(f.kind, f.subject, f.details["output"]) for f in found] == [("invariant", "ms20", "std")]
    # Turned off per probe like a comparator's options.
    suite = _suite(ProbeConfig("ppo_policy", comparators={"invariants": {"enabled": False}}))
    assert (
        suite.side_findings([(PairConfig("ms20", "lite20", ("ppo_policy",)), job)], trained, inferred) == []
    )
