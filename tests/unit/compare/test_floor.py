"""The noise floor of the importance-ratio checks (auditor.compare.floor): what rounding to the
serving dtype and a rerun alone read, and a limit lifted by it, never by an invalid sample."""

from __future__ import annotations

import numpy as np
import pytest
from auditor.plugins import default_comparators as dc

from auditor.compare import floor

GAUSS = {"kind": "gaussian", "mean": "mean", "std": "std"}


def _by(checks: list) -> dict:
    return {c.metric: c for c in checks}


def _policy(states: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.RandomState(seed)
    return {
        "mean": rng.uniform(-2.0, 2.0, (states, 2)).astype(np.float32),
        "std": rng.uniform(0.05, 0.3, (states, 2)).astype(np.float32),
    }


def test_rounding_moves_each_element_by_at_most_half_an_ulp_of_the_dtype():
    x = {"mean": np.array([1.0, -3.0, 1e-3, np.inf, np.nan]), "other": np.array([5.0])}
    out = floor.rounded(x, ["mean"], np.dtype(np.float16), seed=1)
    ulp16 = np.array([2.0**-10, 2.0**-9, 2.0**-20, 0, 0])  # fp16 spacing at 1, 3, 1e-3
    moved = np.abs(out["mean"][:3] - x["mean"][:3])
    assert (moved <= 0.5 * ulp16[:3]).all() and (moved > 0).all()
    assert out["mean"][3] == np.inf and np.isnan(out["mean"][4]) and out["other"] is x["other"]


def test_an_fp16_serving_side_that_only_rounds_passes_a_tight_trainer_band_by_its_floor():
    """A serving side computing the policy in fp16 (its outputs the fp32 ones rounded) moves w
    past verl's ±0.1% geometric band on some samples: noise. The floor measures that noise on
    the same states, and the check passes; the same side with its std 2% too large does not."""
    train = _policy(256)
    rounded16 = {k: v.astype(np.float16) for k, v in train.items()}
    options = {**GAUSS, "trainer": "verl_geo_rs"}
    c = _by(dc.importance_ratios(train, rounded16, options))
    share = c["verl_geo_rs_share"]
    assert share.value > 0.0  # rounding alone leaves the band: at the limit 0 alone it would page
    assert share.passed and share.limit > share.value
    assert c["floor_kl_k3"].value > 0 and c["floor_rerun"].value == 0.0
    wider = {"mean": rounded16["mean"], "std": (train["std"] * 1.02).astype(np.float16)}
    c = _by(dc.importance_ratios(train, wider, options))
    assert not c["verl_geo_rs_share"].passed


def test_a_rerun_that_differs_is_a_floor_too():
    train = _policy(128)
    infer = {k: v.copy() for k, v in train.items()}
    noisy = {f"{k}{floor.RERUN}": v * np.float32(1 + 3e-4) for k, v in train.items()}
    c = _by(dc.importance_ratios(train, {**infer, **noisy}, {**GAUSS, "trainer": "verl_geo_rs"}))
    assert c["floor_rerun"].value == 1.0
    same = _by(dc.importance_ratios(train, infer, {**GAUSS, "trainer": "verl_geo_rs"}))
    assert c["floor_kl_k3"].value > same["floor_kl_k3"].value
    assert c["verl_geo_rs_share"].limit > same["verl_geo_rs_share"].limit


def test_an_invalid_serving_side_never_lifts_the_floor():
    """fp16's std not positive (the demo's Lite case): every sample invalid, and the floor stays
    finite and small, so the checks still fail."""
    train = _policy(64)
    broken = {"mean": train["mean"], "std": np.zeros_like(train["std"])}
    rerun = {f"{k}{floor.RERUN}": v for k, v in broken.items()}
    c = _by(dc.importance_ratios(train, {**broken, **rerun}, dict(GAUSS)))
    assert c["ppo_clip_share"].value == 1.0 and not c["ppo_clip_share"].passed
    assert not c["ess"].passed and c["floor_ess"].value == pytest.approx(1.0, abs=1e-3)
    assert np.isfinite(c["floor_kl_k3"].value)


def test_the_allowance_is_the_floor_and_three_standard_errors():
    assert floor.allowance(0.0, 1024) == 0.0  # no noise seen: none allowed
    assert floor.allowance(0.1, 1000) == pytest.approx(0.1 + 3 * np.sqrt(2 * 0.1 * 0.9 / 1000))
