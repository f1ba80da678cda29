"""Thresholds per probe, variant, output and dtype, and comparator options, in auditor.toml:
precedence, built-in dtype defaults, and every mistake reported with its key path."""

from __future__ import annotations

import pytest

from auditor.compare.outputs import Tolerance
from auditor.config.load import parse
from auditor.config.tables import ConfigError
from auditor.config.thresholds import DTYPE_TOLERANCES
from auditor.extend.manager import builtin_probes
from tests.conftest import DEFAULT_CONFIG

PROBES = builtin_probes()
KNOWN = {n: p.default_params for n, p in PROBES.items()}
VARIANTS = {n: p.variants for n, p in PROBES.items()}


def doc(**probes) -> dict:
    return {
        "stacks": {
            "tr": {"role": "train", "runtime": "mindspore", "python": "/opt/tr/bin/python"},
            "inf": {"role": "infer", "runtime": "mindspore-lite", "python": "/opt/inf/bin/python"},
        },
        "pairs": [{"train": "tr", "infer": "inf", "probes": ["ppo_policy"]}],
        "probes": probes,
    }


def probe(**settings):
    return parse(doc(ppo_policy=settings), known_probes=KNOWN, probe_variants=VARIANTS).probe("ppo_policy")


def errors(**probes) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        parse(doc(**probes), known_probes=KNOWN, probe_variants=VARIANTS)
    return dict(e.split(": ", 1) for e in info.value.errors)


def test_precedence_from_probe_to_variant_output():
    p = probe(
        atol=1e-5,
        rtol=2e-5,
        outputs={"mean": {"atol": 3e-5}},
        dtype={"float16": {"atol": 1e-2, "outputs": {"logp": {"rtol": 5e-2}}}},
        variant={"tanh-fp16": {"rtol": 7e-3, "outputs": {"logp": {"atol": 0.1}}}},
    )
    # fp32 variants: probe level, then outputs.O
    assert p.tolerance_for("std", "fp32", "float32") == Tolerance(1e-5, 2e-5)
    assert p.tolerance_for("mean", "fp32", "float32") == Tolerance(3e-5, 2e-5)
    # fp16: dtype.float16 sets atol, the built-in float16 default fills rtol (not the probe's)
    assert p.tolerance_for("std", "fp16", "float16") == Tolerance(1e-2, DTYPE_TOLERANCES["float16"]["rtol"])
    # dtype.D beats outputs.O; dtype.D.outputs.O beats dtype.D
    assert p.tolerance_for("mean", "fp16", "float16") == Tolerance(1e-2, 1e-3)
    assert p.tolerance_for("logp", "fp16", "float16") == Tolerance(1e-2, 5e-2)
    # variant.V beats dtype.D.outputs.O; variant.V.outputs.O beats variant.V
    assert p.tolerance_for("std", "tanh-fp16", "float16") == Tolerance(1e-2, 7e-3)
    assert p.tolerance_for("logp", "tanh-fp16", "float16") == Tolerance(0.1, 7e-3)


def test_builtin_fp16_default_applies_unless_configured():
    p = probe(atol=1e-6, rtol=1e-6)
    assert p.tolerance_for("mean", "fp16", "float16") == Tolerance(1e-3, 1e-3)
    assert p.tolerance_for("mean", "fp32", "float32") == Tolerance(1e-6, 1e-6)
    # without variant or dtype: the old behaviour, probe level and outputs
    assert p.tolerance_for("mean") == Tolerance(1e-6, 1e-6)


def test_fp16_default_passes_one_ulp_everywhere():
    """rtol 1e-3 covers one fp16 ULP of any normal value: spacing / value <= 2**-10."""
    import numpy as np

    values = np.float16(2.0) ** np.arange(-14, 15, dtype=np.float16)
    spacing = np.spacing(values).astype(np.float64)
    assert np.max(spacing / values.astype(np.float64)) <= DTYPE_TOLERANCES["float16"]["rtol"]


def test_comparator_options_merge_by_scope():
    p = probe(
        comparators={"logp_diff": {"max_abs": 0.01, "max_mean": 0.001}},
        dtype={"float16": {"comparators": {"logp_diff": {"max_abs": 0.05}}}},
        variant={"tanh-fp16": {"comparators": {"logp_diff": {"max_mean": 0.004}}}},
    )
    assert p.comparator_options("logp_diff", "fp32", "float32") == {"max_abs": 0.01, "max_mean": 0.001}
    assert p.comparator_options("logp_diff", "fp16", "float16") == {"max_abs": 0.05, "max_mean": 0.001}
    assert p.comparator_options("logp_diff", "tanh-fp16", "float16") == {"max_abs": 0.05, "max_mean": 0.004}
    assert p.comparator_options("gaussian_kl", "fp32", "float32") == {}


def test_variant_selection():
    assert probe(variants=["fp32", "tanh-fp32"]).variants == ("fp32", "tanh-fp32")
    assert probe().variants == ()
    spec = PROBES["ppo_policy"]
    assert spec.select_variants(("tanh-fp32", "fp32")) == ("fp32", "tanh-fp32")  # the probe's order
    assert spec.select_variants(()) == tuple(spec.variants)


def test_mistakes_are_reported_with_key_paths():
    found = errors(
        ppo_policy={
            "variants": ["fp32", "fp64", 3],
            "variant": {"bf16": {"atol": 1}, "fp16": {"atol": -1, "tolerance": 1, "outputs": {"mean": 2}}},
            "dtype": {"float8": {}, "float16": {"outputs": {"logp": {"rtol": "x", "atl": 1}}}},
            "comparators": {"logp_diff": 1, "gaussian_kl": {"max_kl": [1]}},
            "params": {"dtype": "float16", "batch": 8},
        },
        action_sampler={"variants": "reparam"},
    )
    assert set(found) == {
        "probes.ppo_policy.variants[1]",
        "probes.ppo_policy.variants[2]",
        "probes.ppo_policy.variant.bf16",
        "probes.ppo_policy.variant.fp16.atol",
        "probes.ppo_policy.variant.fp16.tolerance",
        "probes.ppo_policy.variant.fp16.outputs.mean",
        "probes.ppo_policy.dtype.float8",
        "probes.ppo_policy.dtype.float16.outputs.logp.rtol",
        "probes.ppo_policy.dtype.float16.outputs.logp.atl",
        "probes.ppo_policy.comparators.logp_diff",
        "probes.ppo_policy.comparators.gaussian_kl.max_kl",
        "probes.ppo_policy.params.dtype",
        "probes.action_sampler.variants",
    }
    assert (
        "unknown variant 'fp64' (known: fp32, fp16, tanh-fp32, tanh-fp16)"
        in found["probes.ppo_policy.variants[1]"]
    )
    assert "set by the variant(s) fp32, fp16, tanh-fp32, tanh-fp16" in found["probes.ppo_policy.params.dtype"]
    assert (
        "per-variant thresholds go in [probes.action_sampler.variant.NAME]"
        in found["probes.action_sampler.variants"]
    )
    assert "unknown dtype 'float8'" in found["probes.ppo_policy.dtype.float8"]


def test_variant_names_are_not_checked_without_probe_knowledge():
    cfg = parse(doc(ppo_policy={"variants": ["anything"], "variant": {"x": {"atol": 1}}}))
    assert cfg.probe("ppo_policy").variants == ("anything",)


def test_shipped_config_declares_valid_variants_and_thresholds(monkeypatch, tmp_path):
    from auditor.config.load import load

    monkeypatch.setenv("AUDITOR_STACKS_DIR", str(tmp_path))
    cfg = load(DEFAULT_CONFIG, known_probes=KNOWN, probe_variants=VARIANTS)
    for name in ("ppo_policy", "action_sampler", "obs_normalizer"):
        assert any(name in p.probes for p in cfg.pairs)
    # fp16 variants get the documented fp16 default unless the file says otherwise
    ppo = cfg.probe("ppo_policy")
    fp16 = ppo.tolerance_for("mean", "fp16", "float16")
    # the file's float16 table sets logp alone: mean keeps the documented fp16 default
    assert (fp16.atol, fp16.rtol) == (
        DTYPE_TOLERANCES["float16"]["atol"],
        DTYPE_TOLERANCES["float16"]["rtol"],
    )
    logp = ppo.tolerance_for("logp", "fp16", "float16")
    assert (logp.atol, logp.rtol) == (
        4e-3,
        4e-3,
    )  # the shipped [probes.ppo_policy.dtype.float16.outputs.logp]
    fp32 = ppo.tolerance_for("mean", "fp32", "float32")
    assert (fp32.atol, fp32.rtol) == (1e-5, 1e-5)
