"""Per-side checks (auditor.policy.invariants) and input classes (auditor.compare.input_classes):
the auditor's own logic on arrays written here. The same checks run on the real stacks in
tests/stacks/test_side_checks_stacks.py."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from auditor.compare import input_classes
from auditor.config.thresholds import ProbeConfig
from auditor.extend.probe_spec import ProbeSpec
from auditor.policy import invariants, verdict
from auditor.policy.alone import Alone
from auditor.policy.invariants import Invariant, SideRun
from auditor.policy.side import Side
from auditor.policy.subject import ProbeJob, from_probe

PPO = ProbeSpec.from_module("probes.ppo_policy")
NORMALIZER = ProbeSpec.from_module("probes.obs_normalizer")
NAMES = ["mean", "std", "logp", "action"]


def _ppo_outputs(batch: int, std: float = 0.6) -> list[np.ndarray]:
    mean = np.linspace(-1, 1, batch, dtype=np.float32)[:, None]
    return [mean, np.full((batch, 1), std, np.float32), np.zeros(batch, np.float32), np.tanh(mean) * 2]


def _obs(batch: int) -> list[np.ndarray]:
    return [np.zeros((batch, 3), np.float32), np.zeros((batch, 1), np.float32)]


def _check(runs, declared, names=NAMES, inputs=PPO.inputs, **kw):
    return invariants.check_side("lite20", "ppo_policy", "fp16", declared, names, list(inputs), 0, runs, **kw)


def test_a_zero_std_is_a_finding_naming_stack_output_class_input_and_value():
    declared = invariants.declared(PPO, PPO.variant_params("fp16", {}))
    good = SideRun("random", _obs(8), _ppo_outputs(8))
    bad = SideRun("sweep", _obs(8), _ppo_outputs(8, std=0.0))
    assert _check([good], declared) == []
    (f,) = _check([good, bad], declared)
    assert f.kind == "invariant" and f.subject == "lite20" and f.severity == "error"
    assert f.details["output"] == "std" and f.details["check"] == "positive"
    assert f.details["input_class"] == "sweep" and f.details["index"] == 0 and f.details["value"] == 0.0
    assert f.details["input"]["obs"] == [0.0, 0.0, 0.0] and f.details["by_class"] == {"sweep": 8}
    assert (
        "lite20 computed std = 0 for input 0 of the sweep inputs" in f.message and "must be > 0" in f.message
    )
    # Its cause is the probe's output and check; the place is the stack and the variant.
    assert f.cause == "ppo_policy/invariant/std/positive" and f.place == ("lite20", "fp16")
    assert f.summary == "ppo_policy's std is not > 0"


def test_an_element_breaking_several_checks_counts_for_the_first_declared():
    """Lite 2.0's fp16 std comes out 0, -6.3e-5 or NaN from one process to the next: NaN breaks
    "positive" and "finite" alike, and must still be one finding."""
    declared = invariants.declared(PPO, PPO.variant_params("fp16", {}))
    (f,) = _check([SideRun("random", _obs(8), _ppo_outputs(8, std=np.nan))], declared)
    assert f.details["check"] == "positive" and f.details["value"] == "nan"


def test_rows_with_non_finite_inputs_are_not_held_to_invariants():
    inv = invariants.Declared((Invariant("logp", "finite"),))
    inputs = _obs(4)
    inputs[0][2, 1] = np.nan
    outputs = _ppo_outputs(4)
    outputs[2][2] = np.nan  # NaN in, NaN out: not an invariant violation (a hazard question)
    assert _check([SideRun("nan-inf", inputs, outputs)], inv) == []
    outputs[2][1] = np.inf
    (f,) = _check([SideRun("random", inputs, outputs)], inv)
    assert f.details["index"] == 1 and f.details["value"] == "inf"


def test_within_and_class_limited_invariants():
    inv = invariants.Declared((Invariant("action", "within", -2.0, 2.0, ("random",)),))
    outputs = _ppo_outputs(4)
    outputs[3][0] = 2.5
    assert _check([SideRun("magnitude", _obs(4), outputs)], inv) == []
    (f,) = _check([SideRun("random", _obs(4), outputs)], inv)
    assert "must be within [-2, 2]" in f.message and f.details["value"] == 2.5
    assert f.summary == "ppo_policy's action leaves [-2, 2]"
    with pytest.raises(ValueError, match="low <= high"):
        Invariant("action", "within", 1.0, -1.0)
    with pytest.raises(ValueError, match="unknown check"):
        Invariant("action", "bounded")


def test_a_value_just_past_a_bound_is_not_printed_as_the_bound():
    """#54: a tanh at 1.0000001192092896 (float32's next after 1) broke [-1, 1] and the message
    said "= 1"; seven digits stay for values that read apart from the bounds."""
    inv = invariants.Declared((Invariant("action", "within", -1.0, 1.0),))
    outputs = _ppo_outputs(4)
    outputs[3][:] = 0.5
    outputs[3][2] = np.nextafter(np.float32(1), np.float32(2))
    (f,) = _check([SideRun("random", _obs(4), outputs)], inv)
    assert "lite20 computed action = 1.0000001192092896 for input 2" in f.message, f.message
    outputs[3][2] = 1.25
    (f,) = _check([SideRun("random", _obs(4), outputs)], inv)
    assert "lite20 computed action = 1.25 for input 2" in f.message, f.message


def test_a_softmax_must_be_non_negative_and_sum_to_one_within_a_few_ulps():
    inv = Invariant("p", "softmax")
    p = np.full((3, 4), 0.25, np.float32)
    assert not inv.broken(p).any()
    p[1] = [0.25, 0.25, 0.25, 0.2500001]  # one ULP off: rounding
    p[2] = [0.5, 0.5, 0.25, -0.25]  # sums to 1, a negative probability
    assert inv.broken(p).tolist() == [[False] * 4, [False] * 4, [False, False, False, True]]
    p[0] = [0.3, 0.3, 0.3, 0.3]
    assert inv.broken(p)[0].all()
    half = np.full((1, 4), 0.25, np.float16)
    half[0, 0] = 0.2502  # within 4 fp16 ULPs per element
    assert not inv.broken(half).any()


def test_the_mathematics_excuses_what_it_computes_itself():
    """An exp that underflows to 0 in the output's dtype is what a correct runtime returns."""
    inv = invariants.Declared(
        (Invariant("std", "positive"),),
        reference=lambda params, weights, inputs: {"std": np.full((4, 1), 1e-60)},
    )
    outputs = _ppo_outputs(4, std=0.0)
    run = SideRun("random", _obs(4), outputs, {"std": np.full((4, 1), 1e-60)})
    assert _check([run], inv) == []
    run = SideRun("random", _obs(4), outputs, {"std": np.full((4, 1), 1e-3)})
    (f,) = _check([run], inv)
    assert f.details["count"] == 4


def test_a_consequence_is_reported_by_its_cause_only():
    """A zero std makes logp -inf: the std is the finding; logp's breakage in the same rows is
    its consequence. The action, not computed from the std, still speaks for itself."""
    declared = invariants.declared(PPO, PPO.variant_params("fp16", {}))
    outputs = _ppo_outputs(8, std=0.0)
    outputs[2][:] = -np.inf
    outputs[3][5] = 3.0  # action out of ±2 in a row where the std is broken too
    found = _check([SideRun("random", _obs(8), outputs)], declared)
    assert sorted((f.details["output"], f.details["check"]) for f in found) == [
        ("action", "within"),
        ("std", "positive"),
    ]
    # On rows of non-finite observations too, where the reference holds the std to > 0: the
    # -inf of logp there is the std's consequence, not a NaN/Inf hazard of its own.
    params = PPO.variant_params("fp16", {"batch": 6})
    inputs = _nan_inf_batch()
    inputs[0][0, 0] = 0.5
    ref = invariants.reference_outputs(declared, params, PPO.make_weights(params), inputs)
    outputs = _ppo_outputs(6, std=0.0)
    outputs[2][1:3] = -np.inf
    found = _check([SideRun("nan-inf", inputs, outputs, ref)], declared)
    assert [(f.kind, f.details["output"]) for f in found] == [("invariant", "std")]
    assert found[0].details["by_class"] == {"nan-inf": 6}


def _nan_inf_batch(n=6):
    inputs = _obs(n)
    inputs[0][[0, 1, 2], 0] = [np.nan, np.inf, -np.inf]
    return inputs


def test_nan_turned_finite_is_a_hazard_whatever_the_reference_says():
    graph = {"logp": ("mean",), "action": ("mean",)}
    declared = invariants.Declared(propagates=("mean", "logp", "action"), computed_from=graph)
    inputs = _nan_inf_batch()
    outputs = _ppo_outputs(6)  # every row finite: the NaN row and the two Inf rows
    finite_ref = {n: np.asarray(o, np.float64) for n, o in zip(NAMES, outputs, strict=True)}
    (f,) = _check([SideRun("nan-inf", inputs, outputs, finite_ref)], declared)
    assert f.kind == "nan-hazard" and f.details["hazard"] == "nan-masked" and f.details["output"] == "mean"
    assert f.details["index"] == 0 and f.details["input"] == {"obs": ["nan", 0.0, 0.0]}
    assert f.summary == "NaN masked to -1 by ppo_policy (mean)" and f.place == ("lite20", "fp16")
    assert f.cause == "ppo_policy/nan-hazard/nan-masked/mean"
    # logp and action of the NaN row are finite because the mean is: its consequences.
    assert f.details["count"] == 1 and f.details["share"] == pytest.approx(1 / 9)
    alone = _check(
        [SideRun("nan-inf", inputs, outputs, finite_ref)], invariants.Declared(propagates=tuple(graph))
    )
    assert sorted(f.details["output"] for f in alone) == ["action", "logp"]


def test_inf_turned_finite_is_arithmetic_where_the_reference_is_finite_too():
    """A tanh-headed policy given ±Inf saturates to ±1: float64 numpy computes it too."""
    declared = invariants.Declared(propagates=("mean", "logp", "action"))
    inputs = _nan_inf_batch()
    inputs[0][0, 0] = 0.5  # no NaN: only the Inf rows
    outputs = _ppo_outputs(6)
    finite_ref = {n: np.asarray(o, np.float64) for n, o in zip(NAMES, outputs, strict=True)}
    assert _check([SideRun("nan-inf", inputs, outputs, finite_ref)], declared) == []
    # Where the mathematics keeps the Inf, a finite value is masking.
    masked_ref = dict(finite_ref, action=np.where(np.arange(6)[:, None] == 1, np.inf, finite_ref["action"]))
    (f,) = _check([SideRun("nan-inf", inputs, outputs, masked_ref)], declared)
    assert f.details["hazard"] == "inf-masked" and f.details["output"] == "action" and f.details["index"] == 1
    # And NaN/Inf where the mathematics is finite is a finding too.
    broken = [o.copy() for o in outputs]
    broken[0][2] = np.nan
    (f,) = _check([SideRun("nan-inf", inputs, broken, finite_ref)], declared)
    assert f.details["hazard"] == "non-finite" and f.details["output"] == "mean" and f.details["index"] == 2
    # Without a reference nobody can tell: finite out of Inf in is a hazard, as it says.
    (f,) = _check(
        [SideRun("nan-inf", inputs, [o for o in outputs])], invariants.Declared(propagates=("mean",))
    )
    assert f.details["hazard"] == "inf-finite" and "no float64 reference" in f.summary


def test_hazards_are_element_wise_for_an_output_shaped_like_the_input_and_relaxable():
    x = np.array([[np.nan, 1.0], [np.inf, 2.0], [np.nan, 3.0]], np.float32)
    y = np.array([[-10.0, 0.5], [10.0, 1.0], [-10.0, 1.5]], np.float32)
    ref = {"normalized": np.array([[np.nan, 0.5], [10.0, 1.0], [np.nan, 1.5]])}
    declared = invariants.Declared(propagates=("normalized",))
    run = SideRun("random", [x], [y], ref)
    (f,) = invariants.check_side("s", "norm", "fp32", declared, ["normalized"], ["obs"], 0, [run])
    assert f.details["count"] == 2 and f.details["hazards"] == 3 and f.details["value"] == -10.0
    assert f.summary == "NaN masked to -10 by norm (normalized)"
    relaxed = invariants.check_side("s", "norm", "fp32", declared, ["normalized"], ["obs"], 0, [run], 0.7)
    assert relaxed == []


def _ppo_side(stack, input_class, inputs, runtime, only=None):
    """The fp32 PPO policy's side checks where the runtime computes ``runtime(reference)`` of
    every output and layer (of ``only``, else the reference itself)."""
    params = PPO.variant_params("fp32", {"batch": inputs[0].shape[0]})
    declared = invariants.declared(PPO, params)
    assert declared.layers == ("fc0", "fc1") and declared.checks_layers
    ref = invariants.reference_outputs(declared, params, PPO.make_weights(params), inputs)
    names = list(PPO.outputs) + list(declared.layers)
    outputs = [(runtime(ref[n]) if only in (None, n) else ref[n]).astype(np.float32) for n in names]
    run = SideRun(input_class, inputs, outputs, ref)
    return invariants.check_side(stack, "ppo_policy", "fp32", declared, names, list(PPO.inputs), 0, [run])


def test_a_nan_masked_in_a_layer_explains_every_output_computed_from_it():
    """MindSpore Lite 2.0's Tanh turns NaN into -1 in the first layer: one finding, at fc0."""
    found = _ppo_side(
        "lite20", "nan-inf", _nan_inf_batch(), lambda ref: np.where(np.isfinite(ref), ref, -1.0)
    )
    assert [(f.details["output"], f.details["hazard"]) for f in found] == [("fc0", "nan-masked")]
    assert found[0].summary == "NaN masked to -1 by ppo_policy (layer fc0)"


def test_a_hidden_layer_out_of_its_range_is_found():
    """MindSpore 2.10's fp32 Tanh returns up to 1.0000098 for pre-activations near 5."""

    def overshoot(ref):
        out = ref.copy()
        out[3, 7] = 1.0000097
        return out

    (f,) = _ppo_side(
        "ms210", "random", PPO.make_inputs(PPO.variant_params("fp32", {"batch": 8})), overshoot, "fc0"
    )
    assert (
        f.details["output"] == "fc0"
        and f.details["layer"]
        and (f.details["index"], f.details["element"]) == (3, 7)
    )
    assert (
        f.summary == "ppo_policy's layer fc0 leaves [-1, 1]" and "computed layer fc0 = 1.00001" in f.message
    )


def test_builtin_probes_declare_invariants_of_their_own_outputs_and_a_reference():
    for module in ("probes.ppo_policy", "probes.action_sampler", "probes.obs_normalizer"):
        spec = ProbeSpec.from_module(module)
        for variant in spec.variants:
            params = spec.variant_params(variant, {})
            declared = invariants.declared(spec, params)
            assert declared.invariants and declared.propagates
            assert {i.output for i in declared.invariants} <= set(spec.outputs) | set(declared.layers)
            inputs = spec.make_inputs(params)
            ref = invariants.reference_outputs(declared, params, spec.make_weights(params), inputs)
            assert ref is not None and set(ref) <= set(spec.outputs) | set(declared.layers)
            for name, value in ref.items():
                assert value.dtype == np.float64 and value.shape[0] == inputs[0].shape[0], (module, name)
    # The PPO reference is the cell's arithmetic: the tanh head's action is bounded and logp finite.
    params = PPO.variant_params("tanh-fp32", {})
    ref = invariants.reference_outputs(
        invariants.declared(PPO, params), params, PPO.make_weights(params), PPO.make_inputs(params)
    )
    assert np.abs(ref["action"]).max() <= 2.0 and np.isfinite(ref["logp"]).all()
    assert np.allclose(ref["std"], np.exp(-0.5)) and ref["fc1"].shape == (params["batch"], 64)


def test_a_probe_that_names_what_it_does_not_have_is_told():
    class Fake:
        name, module, outputs = "ppo_policy", "probes.ppo_policy", ("mean",)

    with pytest.raises(ValueError, match="must name one of its outputs or layers"):
        invariants.declared(Fake, PPO.variant_params("fp32", {}))


def test_input_classes_reach_the_hard_regions_and_stay_in_the_dtype():
    for variant in ("fp32", "fp16"):
        params = NORMALIZER.variant_params(variant, {})
        batches = {b.name: b for b in input_classes.class_batches(NORMALIZER, params)}
        assert list(batches) == [c for c in input_classes.CLASSES if c != input_classes.LAYER_SWEEP]
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


def test_layer_sweeps_drive_each_hidden_layer_through_saturation_solved_from_the_weights():
    params = PPO.variant_params("fp16", {})
    batches = {b.name: b for b in input_classes.class_batches(PPO, params)}
    assert list(batches) == ["sweep", "sweep-fc0", "sweep-fc1", "magnitude", "fp16-edge", "nan-inf"]
    layers = input_classes.hidden_layers(PPO, params)
    rows = params["batch"]
    units = np.arange(rows) % 64
    targets = np.linspace(-12, 12, rows)
    for depth, name in enumerate(("sweep-fc0", "sweep-fc1")):
        x = batches[name].inputs[0]
        assert (
            x.dtype == np.float16 and np.isfinite(x).all() and np.abs(x).max() <= input_classes.SOLVER_LIMIT
        )
        pre = input_classes._forward(layers[: depth + 1], x.astype(np.float64))[0][-1]
        driven = pre[np.arange(rows), units]
        if depth == 0:  # the first layer is affine in the input: every target is met
            assert np.allclose(driven, targets, atol=0.05)
        else:  # the second is reached through 64 saturating tanh from a 3-dim observation
            reach = [driven[units == u].max() - driven[units == u].min() for u in range(64)]
            assert np.median(reach) > 5 and (np.abs(driven) > 3).sum() > 40
            assert np.corrcoef(driven, targets)[0, 1] > 0.9


def _subject(cfg: ProbeConfig | None = None, variant: str = "fp32", batch: int = 8):
    """The ppo_policy variant as a policy under audit, with these probe settings."""
    job = ProbeJob(PPO, PPO.variant_params(variant, {"batch": batch}), variant)
    return from_probe(job, cfg or ProbeConfig("ppo_policy"))


def test_the_pair_is_compared_per_class_and_a_failure_names_the_class():
    x = np.linspace(-1, 1, 8, dtype=np.float32)[:, None]
    same = {"sweep": [x], "nan-inf": [x]}
    moved = x.copy()
    moved[5] += 0.01
    nan = x.copy()
    nan[2] = np.nan
    other = {"sweep": [moved], "nan-inf": [nan]}
    subject = _subject()
    checks = verdict.class_checks(subject, ["mean"], Side(classes=same), Side(classes=other), "lite20")
    by = {(c.output, c.metric): c for c in checks}
    assert not by[("mean@sweep", "class_failing")].passed and by[("mean@sweep", "class_failing")].value == 1.0
    assert "1/8 elements out of tolerance" in by[("mean@sweep", "class_failing")].message
    # Extreme classes: recorded, judged on each side alone.
    assert (
        by[("mean@nan-inf", "class_nan_inf_mismatch")].value == 1.0
        and by[("mean@nan-inf", "class_nan_inf_mismatch")].passed
    )
    assert all(
        c.passed for c in verdict.class_checks(subject, ["mean"], Side(classes=same), Side(classes=same), "x")
    )
    # A class the serving side could not run fails (a runtime that fails on NaN input).
    failed = verdict.class_checks(
        subject, ["mean"], Side(classes=same), Side(class_errors={"nan-inf": "died"}), "x"
    )
    assert [(c.metric, c.output, c.passed) for c in failed] == [("class_run", "@nan-inf", False)]
    # seeded random ops: their state moves on with every call
    drawn = replace(subject, stochastic=True)
    assert verdict.class_checks(drawn, ["mean"], Side(classes=same), Side(classes=other), "x") == []


def test_a_side_is_checked_even_when_its_partner_cannot_run():
    subject = _subject(variant="fp16")
    found = Alone().findings(subject.key, subject, {"ms20": Side(outputs=_ppo_outputs(8, std=0.0))})
    assert [(f.kind, f.subject, f.details["output"]) for f in found] == [("invariant", "ms20", "std")]
    assert Alone().findings(subject.key, subject, {"lite20": Side()}) == []  # nothing ran: nothing judged
    # Turned off per probe like a comparator's options.
    off = _subject(ProbeConfig("ppo_policy", comparators={"invariants": {"enabled": False}}), "fp16")
    assert Alone().findings(off.key, off, {"ms20": Side(outputs=_ppo_outputs(8, std=0.0))}) == []
    # Each stack is judged once per policy and cycle, however many pairs share it.
    alone = Alone()
    assert alone.findings(subject.key, subject, {"ms20": Side(outputs=_ppo_outputs(8, std=0.0))})
    assert alone.findings(subject.key, subject, {"ms20": Side(outputs=_ppo_outputs(8, std=0.0))}) == []


# -- model probes: the ranges a graph implies ----------------------------------------------------


def test_a_graph_declares_the_range_of_each_output_a_bounded_operator_returns() -> None:
    sources = (("Cast", "Tanh"), ("Softmax",), ("Reshape", "Softmax"), ("BiasAdd",), (), ("Exp",))
    names = ["mean", "probs", "flat", "logits", "value", "std"]
    declared = invariants.from_graph(sources, names)
    assert declared.invariants == (
        Invariant("mean", "within", -1.0, 1.0),
        Invariant("probs", "softmax"),
        Invariant("std", "within", 0.0, float("inf")),  # exp underflows to 0: >= 0, not > 0
    )  # a reshaped softmax may not keep its rows; a linear layer has no range
    assert invariants.from_graph((("Tanh",),), []).invariants == ()  # no name, no output to hold


def test_a_model_side_is_held_to_its_graphs_ranges_and_underflow_is_no_finding() -> None:
    declared = invariants.from_graph((("Tanh",), ("Softmax",), ("Exp",)), ["mean", "probs", "std"])
    x = np.zeros((4, 3), np.float32)
    mean = np.array([[0.5], [1.0], [-1.0], [0.0]], np.float32)
    probs = np.full((4, 2), 0.5, np.float32)
    std = np.array([[0.0], [1e-30], [2.0], [3.0]], np.float32)  # exp(-200) is 0 in float32
    run = SideRun("configured", [x], [mean, probs, std])
    assert (
        invariants.check_side("lite20", "m", "model", declared, ["mean", "probs", "std"], ["obs"], 0, [run])
        == []
    )
    broken = SideRun("configured", [x], [mean + np.float32(0.75), probs * 2, std])
    found = invariants.check_side(
        "lite20", "m", "model", declared, ["mean", "probs", "std"], ["obs"], 0, [broken]
    )
    assert [(f.key, f.details["count"]) for f in found] == [
        ("lite20/m/model/invariant/mean/within", 2),
        ("lite20/m/model/invariant/probs/softmax", 8),
    ]
    assert found[0].details["value"] == 1.25 and found[0].details["input_class"] == "configured"
    assert found[0].place == ("lite20", "model") and found[0].cause == "m/invariant/mean/within"
