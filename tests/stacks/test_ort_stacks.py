"""ONNX Runtime as an infer stack, end to end on the real runtime: ms20 and ms210 export ONNX
because the pair's infer runtime loads it, the ort stack loads and runs it, and the same
comparisons, findings and history apply; what onnxruntime refuses is a result in its own
words (notes/converter_onnx B1-B4 measured what is asserted here)."""

from __future__ import annotations

import re
import tomllib

import numpy as np
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from auditor.cycle.cycle import Cycle
from auditor.db import schema as m
from auditor.extend.manager import Plugins
from auditor.history.store import Store
from auditor.results import CONSISTENT, DRIFT, ERROR, INCOMPATIBLE, UNSUPPORTED
from auditor.stacks.worker import WorkerError
from tests import docs
from tests.configs import FP32_POLICY, build

pytestmark = pytest.mark.stacks

PLUGINS = Plugins(entry_points=False)
PROBES = PLUGINS.probes()
RUNTIMES = PLUGINS.runtimes()
TRAIN = ("ms20", "ms210")
SUITE = ["ppo_policy", "action_sampler", "obs_normalizer"]


def _page_block() -> dict:
    """The "ONNX Runtime" block of docs/own-policy.md, which a user adds to auditor.toml: the
    tests run it."""
    section = docs.section("docs/own-policy.md", "ONNX Runtime")
    (block,) = re.findall(r"```toml\n(.*?)```", section, re.S)
    return tomllib.loads(block)


PAGE = _page_block()
ORT = PAGE["stacks"]["ort"]


def _config(default_doc, probes, train=TRAIN, batches=(), variants=None):
    return build(
        default_doc,
        PROBES,
        source="test",
        runtimes=RUNTIMES,
        stacks={**default_doc["stacks"], "ort": ORT},
        pairs=[{**PAGE["pairs"][0], "train": t, "probes": list(probes)} for t in train],
        latency={"warmup": 1, "iterations": 5, "batches": list(batches)},
        rollout={"enabled": False},
        variants=variants,
    )


@pytest.fixture(scope="module")
def run(stacks, default_doc, tmp_path_factory):
    config = _config(default_doc, SUITE, batches=[1])
    cycle = Cycle(config, PROBES, RUNTIMES)
    result = cycle.run()
    store = Store.open(f"sqlite:///{tmp_path_factory.mktemp('db') / 'h.db'}")
    run_id = store.begin_run("test")
    store.finish_run(run_id, result, cycle.artifacts)
    return result, store, run_id, cycle.artifacts


def _by(result):
    return {(r.train, r.probe, r.variant): r for r in result.results}


def test_the_page_block_is_the_pair_these_tests_run():
    assert ORT["runtime"] == "ort" and ORT["role"] == "infer"
    (pair,) = PAGE["pairs"]
    assert (pair["train"], pair["infer"], pair["probes"]) == ("ms20", "ort", SUITE)


def test_both_mindspore_releases_export_onnx_that_ort_runs(run):
    result, _, _, _ = run
    assert result.stacks["ort"].fingerprint["runtime"]["runtime_package"] == "onnxruntime"
    by = _by(result)
    for train in TRAIN:
        for variant in ("fp32", "tanh-fp32"):
            r = by[(train, "ppo_policy", variant)]
            assert r.status == CONSISTENT, r.message
            # the artifact is the ONNX file, read without the onnx package
            a = r.artifact
            assert a.kind == "onnx" and a.info["readable"] and a.info["producer_name"] == "MindSpore"
            assert (a.info["ir_version"], a.info["opset_import"]) == (4, [{"domain": "", "version": 11}])
            assert {"Gemm", "Tanh", "Exp"} <= set(a.info["op_types"])
            # one export per batch size: onnxruntime refuses any batch but the export's
            assert [lat.batch for lat in r.infer_latencies] == [1] and r.infer_latencies[0].p50_us > 0
        assert by[(train, "action_sampler", "reparam")].status == CONSISTENT


def test_onnx_runtimes_tanh_leaves_its_range_and_the_cycle_says_error(run):
    """docs/own-policy.md (#54: the page did not say it): ONNX Runtime's Tanh returns 1 + 1 ulp
    for some inputs, so the probe's hidden layer fc0 leaves [-1, 1] on ort, an error finding,
    and the cycle's outcome is not consistent though the fp32 outputs are."""
    result, _, _, _ = run
    found = [f for f in result.findings if f.kind == "invariant" and "layer fc0 leaves [-1, 1]" in f.message]
    assert found and all(f.severity == "error" for f in found), [f.message for f in result.findings]
    assert any(re.search(r" on [^(]*\bort\b", f.message) for f in found), [f.message for f in found]
    assert result.outcome == ERROR


@pytest.mark.faults
def test_the_fp16_tanh_policy_is_consistent_within_its_rounding_and_in_ppo_terms(run):
    """ONNX Runtime's fp16 tanh-squashed logp differs by several fp16 ULPs near actions of ±1,
    beyond 4 ULPs of the value but within the probe's rounding envelope there (the formula is
    ill-conditioned at the clipped edges), so the variant is consistent; and on actions drawn
    from its own policy, scored by both models in their graphs, no ratio leaves PPO's clip
    range and the ESS stays 1 to 4 decimals; the ratios did move (fp16 rounding), so the
    figures are measured, not defaults."""
    result, _, _, _ = run
    for train in TRAIN:
        r = _by(result)[(train, "ppo_policy", "tanh-fp16")]
        assert r.status == CONSISTENT, r.message
        logp = next(k for k in r.checks if k.metric == "logp_diff_max")
        if logp.value > 0.0156:  # beyond 4 fp16 ULPs at |logp| in [4, 8): the envelope admitted it
            assert logp.limit > logp.value and logp.passed
        c = {k.metric: k for k in r.checks if k.output is None}
        assert "1024 samples, from the models' own log-probabilities" in c["ratio_mean"].message
        assert c["ppo_clip_share"].value == 0.0 and c["ppo_clip_share"].passed
        assert c["tis_share"].value == 0.0 and c["ess"].value > 0.9999 and c["ess"].passed
        assert 1.0 < c["ratio_max"].value < 1.05 and c["ratio_max"].value != 1.0
        assert 0.0 < c["kl_behaviour"].value < 1e-6
        fp32 = {k.metric: k for k in _by(result)[(train, "ppo_policy", "tanh-fp32")].checks}
        assert fp32["ratio_max"].value < 1.0001  # fp32: far closer than fp16


def test_an_operator_the_exporter_cannot_write_is_unsupported_in_its_words(run):
    result, _, _, _ = run
    for train in TRAIN:
        r = _by(result)[(train, "action_sampler", "seeded-normal")]
        assert r.status == UNSUPPORTED and r.artifact is None
        assert r.message == (
            f"unsupported operator: StandardNormal ({train} cannot export this variant to ONNX: Can not "
            "find key StandardNormal in convert map. Exporting StandardNormal operator is not yet supported.)"
        )
        assert any(f.kind == UNSUPPORTED and f.subject == f"{train}->ort" for f in result.findings)


def test_onnxruntime_propagates_nan_through_the_clip_where_mindspore_masks_it(run):
    """ONNX Max/Min return NaN for a NaN operand, MindSpore's CPU kernels the other operand:
    the normalizer's NaN rows come back NaN from ort and -10 from MindSpore (B2)."""
    result, _, _, _ = run
    for train in TRAIN:
        r = _by(result)[(train, "obs_normalizer", "fp32")]
        assert r.status == DRIFT
        (out,) = r.outputs
        assert out.metrics["nan_inf_mismatch"] == 96  # the 96 elements of the NaN rows, all of them
        assert (out.failing, out.total) == (96, 576)  # and no other element is out of tolerance


def test_the_history_keeps_the_onnx_runs_like_any_other(run):
    result, store, run_id, artifacts = run
    with Session(store.engine) as s:
        rows = s.scalars(select(m.ProbeResultRow).where(m.ProbeResultRow.run_id == run_id)).all()
        assert {(r.pair, r.probe, r.variant, r.status) for r in rows} == {
            (r.pair, r.probe, r.variant, r.status) for r in result.results
        }
        stored = {a.sha256: a for a in s.scalars(select(m.Artifact)).all()}
    onnx = [r.artifact for r in result.results if r.artifact is not None]
    assert onnx and all(
        stored[a.sha256].kind == "onnx" and stored[a.sha256].data == artifacts[a.sha256] for a in onnx
    )


def _onnx_bytes(run) -> bytes:
    result, _, _, artifacts = run
    return artifacts[_by(result)[("ms20", "ppo_policy", "fp32")].artifact.sha256]


def test_the_worker_loads_and_refuses_in_onnxruntimes_words(run, default_doc, tmp_path):
    config = _config(default_doc, ["ppo_policy"], train=("ms20",))
    spec = PROBES["ppo_policy"]
    x = spec.make_inputs(spec.params({}))
    good, garbled = tmp_path / "p.onnx", tmp_path / "garbled.onnx"
    good.write_bytes(_onnx_bytes(run))
    garbled.write_bytes(_onnx_bytes(run)[: len(good.read_bytes()) // 2])
    with PLUGINS.reach(config).worker("ort") as w:
        w.start()
        w.request("load", model="p", path=str(good))
        mean = w.request("run", model="p", inputs=x).result["outputs"][0]
        assert mean.dtype == np.float32 and mean.shape == (256, 1)
        with pytest.raises(WorkerError) as err:
            w.request("run", model="p", inputs=[a.astype(np.float64) for a in x])
        assert "the model takes float32, given float64" in err.value.message
        with pytest.raises(WorkerError) as err:
            w.request("load", model="g", path=str(garbled))
        assert err.value.kind == "error" and "INVALID_PROTOBUF" in err.value.message
        assert RUNTIMES["ort"].explain(err.value.message) is None  # a broken file: an error, not a result


def _tampered_cycle(default_doc, tamper):
    config = _config(default_doc, ["ppo_policy"], train=("ms20",), variants=FP32_POLICY)
    return Cycle(config, PROBES, RUNTIMES, tamper=tamper).run()


def test_a_file_onnxruntime_cannot_read_is_incompatible_and_teaches_its_maximum(stacks, default_doc):
    """ir_version 4 -> 99 (one byte of the varint; B4): onnxruntime 1.32 says its maximum."""

    def newer(data: bytes) -> bytes:
        assert data[:2] == b"\x08\x04"
        return b"\x08\x63" + data[2:]

    result = _tampered_cycle(default_doc, newer)
    (r,) = result.results
    assert r.status == INCOMPATIBLE, r.message
    assert r.message.startswith(
        "ort (onnxruntime 1.32.0, cpu) cannot load the ONNX file: the file has ONNX version 99, the "
        "runtime reads at most version 14"
    )
    assert "remedy: export it with an exporter that writes ONNX version 14 or lower" in r.message
    assert [(x.package, x.version, x.max_mind_ir_version) for x in result.learned_maxima] == [
        ("onnxruntime", "1.32.0", 14)
    ]


def test_an_operator_onnxruntime_has_no_kernel_for_is_unsupported_and_learned(stacks, default_doc):
    """The op type Tanh renamed Tanx (same length, the protobuf stays valid; B4)."""
    result = _tampered_cycle(default_doc, lambda data: data.replace(b"Tanh", b"Tanx"))
    (r,) = result.results
    assert r.status == UNSUPPORTED
    assert r.message.startswith(
        "ort (onnxruntime 1.32.0, cpu) fails to load it: it cannot load operator Tanx"
    )
    assert "remedy: replace Tanx in the network by operators onnxruntime 1.32.0 runs" in r.message
    (learned,) = result.learned_operators
    where = (learned.package, learned.version, learned.target)
    assert where == ("onnxruntime", "1.32.0", "cpu") and learned.operator == "Tanx"
    assert "No Op registered for Tanx with domain_version of 11" in learned.message
