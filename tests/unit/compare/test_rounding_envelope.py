"""ppo_policy's rounding envelope of logp (its rounding(params)) against an independent oracle:
the cell's formula evaluated op by op in fp16 with numpy, next to the probe's float64 reference.
Where the tanh head is ill-conditioned (actions near ±1), a correct fp16 evaluation differs by
more than 4 fp16 ULPs of logp; the envelope covers it, and nothing else gets wider."""

from __future__ import annotations

import math

import numpy as np
import pytest

from auditor.compare.outputs import Tolerance, compare_output
from auditor.config.thresholds import ProbeConfig
from auditor.extend.manager import Plugins
from auditor.policy.subject import ProbeJob, from_probe
from auditor.policy.verdict import comparator_checks, envelopes_of

PLUGINS = Plugins(entry_points=False)
SPEC = PLUGINS.probes()["ppo_policy"]
H = np.float16


def _ulp(v: np.ndarray) -> np.ndarray:
    return np.abs(np.spacing(np.abs(np.asarray(v, np.float64)).astype(H))).astype(np.float64)


def fp16_cell_logp(params: dict, ref: dict, actions: np.ndarray) -> np.ndarray:
    """The cell's logp, every operation rounded to fp16 as the exported graph computes it."""
    eps = float(params["eps"])
    mean, std = ref["mean"].astype(H), ref["std"].astype(H)
    log_std = np.log(std.astype(np.float64)).astype(H)
    one, half, two = H(1), H(0.5), H(2)
    if params["head"] == "tanh":
        a = np.clip(actions.astype(H), H(-1 + eps), H(1 - eps))
        u = (half * (np.log(one + a) - np.log(one - a))).astype(H)
        softplus = (np.maximum(-two * u, H(0)) + np.log(one + np.exp(-np.abs(-two * u)))).astype(H)
        log_det = (two * (H(math.log(2)) - u - softplus)).astype(H)
    else:
        u, log_det = actions.astype(H), H(0)
    z = ((u - mean) / std).astype(H)
    per_dim = (-half * z * z - log_std - H(0.5 * math.log(2 * math.pi)) - log_det).astype(H)
    return per_dim.astype(np.float64).sum(axis=-1)


def _case(variant: str, seed: int):
    params = SPEC.variant_params(variant, {"seed": seed})
    module = __import__(SPEC.module, fromlist=["reference"])
    inputs = module.make_inputs(params)
    ref = module.reference(params, module.make_weights(params), inputs)
    return params, ref, fp16_cell_logp(params, ref, inputs[1]), SPEC.rounding(params)["logp"]


@pytest.mark.faults
@pytest.mark.parametrize("variant", ["tanh-fp16", "fp16"])
def test_an_fp16_evaluation_stays_within_the_envelope(variant):
    beyond_ulps = 0
    for seed in range(8):
        _, ref, lp16, envelope = _case(variant, seed)
        diff = np.abs(lp16 - ref["logp"])
        ulps = np.maximum(0.01, 4 * _ulp(ref["logp"]))  # logp_diff's limits without the envelope
        assert np.all(diff <= np.maximum(ulps, envelope)), (seed, np.max(diff / np.maximum(ulps, envelope)))
        beyond_ulps += int(np.count_nonzero(diff > ulps))
    if variant == "tanh-fp16":
        assert beyond_ulps > 0  # the envelope, not the ULP rule, is what admits them


def test_the_envelope_is_wide_only_where_the_formula_is_ill_conditioned():
    params, ref, _, envelope = _case("tanh-fp16", 0)
    actions = np.abs(SPEC.make_inputs(params)[1][:, 0].astype(np.float64))
    assert np.all(envelope[actions < 0.9] < 0.01)  # ordinary actions: below logp_diff's max_abs
    assert envelope[actions >= 0.999].min() > 0.02  # at the clipped edges: several fp16 ULPs
    # fp32: the same formula, rounding 2**13 times finer
    fp32 = SPEC.rounding(SPEC.variant_params("tanh-fp32", {"seed": 0}))["logp"]
    assert fp32.max() < 1e-4


def test_compare_output_passes_an_element_within_its_envelope_only():
    train = np.array([-5.0, -0.4, -0.4, np.nan])
    infer = np.array([-5.03, -0.43, -0.4, 0.0])
    envelope = np.array([0.05, 0.001, 0.001, 1e9])
    tight = Tolerance(1e-3, 1e-3)
    c = compare_output("logp", train, infer, tight, envelope)
    assert c.failing == 2 and not c.passed  # -0.43 is beyond its envelope; NaN vs 0 always fails
    assert compare_output("logp", train[:3], infer[:3], tight).failing == 2  # without: both fail
    assert compare_output("logp", train, infer, tight, envelope[:2]).failing == 3  # a wrong shape: ignored


@pytest.mark.faults
def test_the_envelope_belongs_to_the_probes_own_inputs_only():
    job = ProbeJob(SPEC, SPEC.variant_params("tanh-fp16", {}), "tanh-fp16")
    cfg = ProbeConfig("ppo_policy", Tolerance())
    subject = from_probe(job, cfg)
    own = SPEC.make_inputs(job.params)
    assert set(envelopes_of(subject, None)) == {"logp"} and set(envelopes_of(subject, own)) == {"logp"}
    other = [x.copy() for x in own]
    other[1][0] = 0
    assert envelopes_of(subject, other) == {}
    # the logp_diff comparator gets it only with the probe's own inputs
    _, ref, lp16, envelope = _case("tanh-fp16", 0)
    train = {"mean": ref["mean"], "std": ref["std"], "logp": ref["logp"], "action": ref["action"]}
    worst = int(np.argmax(np.abs(lp16 - ref["logp"]) - np.maximum(0.01, 4 * _ulp(ref["logp"]))))
    infer = dict(train, logp=ref["logp"].copy())
    infer["logp"][worst] += 0.9 * envelope[worst]
    for inputs, passes in ((own, True), (other, False)):
        envelopes = envelopes_of(subject, inputs)
        found = comparator_checks(subject, PLUGINS.comparators(), train, infer, envelopes)
        assert {c.metric: c for c in found}["logp_diff_max"].passed == passes
