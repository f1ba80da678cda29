"""Probe variants and how the cycle judges a variant (no stacks needed): declaration, selection,
jobs and their keys, comparators and fresh-process reruns in the verdict, and the
"unsupported operator" status."""

from __future__ import annotations

import types

import numpy as np
import pytest

from auditor.compare.outputs import MetricCheck
from auditor.config.load import parse
from auditor.cycle.cycle import Cycle
from auditor.cycle.probes import ProbeAudit
from auditor.extend.manager import Plugins, builtin_probes
from auditor.extend.probe_spec import ProbeSpec
from auditor.policy.side import Side
from auditor.policy.subject import ProbeJob
from auditor.results import CONSISTENT, DRIFT, ERROR, UNSUPPORTED
from auditor.runtime import MINDIR, ArtifactFormat, RuntimeSpec
from auditor.stacks.failures import unsupported_operator
from auditor.stacks.worker import WorkerError

PROBES = builtin_probes()

# What MindSpore Lite 2.0 logs when it has no kernel for a seeded random op (measured).
LITE_NO_KERNEL = (
    "[ERROR] ME(11062,7f3bf8612b80,python):2026-12-02-12:07:00.891.703 "
    "[mindspore/lite/src/litert/scheduler.cc:1508] ScheduleSubGraphToKernels] schedule node "
    "return nullptr, name: Default/StandardNormal-op12, type: RandomStandardNormal\n"
    "[ERROR] ME(...) [mindspore/lite/src/litert/lite_session.cc:601] CompileGraph] Schedule kernels failed\n"
)


def _module(**attrs) -> types.ModuleType:
    mod = types.ModuleType("fake_probe")
    base = dict(
        NAME="fake",
        VERSION="1",
        INPUTS=("x",),
        OUTPUTS=("y",),
        DEFAULT_PARAMS={"dtype": "float32", "batch": 4, "k": 1},
        make_weights=lambda p: {},
        make_inputs=lambda p: [np.zeros((4, 1), np.float32)],
        build_cell=lambda p, w: None,
    )
    base.update(attrs)
    for k, v in base.items():
        setattr(mod, k, v)
    return mod


def test_probe_without_variants_has_one_named_after_its_dtype():
    assert list(ProbeSpec.from_module(_module()).variants) == ["fp32"]
    assert list(ProbeSpec.from_module(_module(DEFAULT_PARAMS={"k": 1})).variants) == ["default"]
    assert list(ProbeSpec.from_module("probe_fixtures.faulty").variants) == ["fp32"]


def test_declared_variants_keep_their_order_and_params():
    spec = PROBES["ppo_policy"]
    assert list(spec.variants) == ["fp32", "fp16", "tanh-fp32", "tanh-fp16"]
    assert spec.variant_params("tanh-fp16", {"batch": 8}) == {
        **spec.default_params,
        "batch": 8,
        "dtype": "float16",
        "head": "tanh",
        "eps": 1e-3,
    }
    assert spec.comparators == (
        "gaussian_kl",
        "logp_diff",
        "action_agreement",
        "finite_where_train_finite",
        "importance_ratios",
    )
    assert PROBES["action_sampler"].rerun == {"seeded-normal", "seeded-uniform"}
    assert PROBES["obs_normalizer"].rerun == frozenset()


def test_bad_declarations_are_refused_with_the_reason():
    with pytest.raises(TypeError, match=r"VARIANTS\['a'\] sets unknown parameter\(s\) nope"):
        ProbeSpec.from_module(_module(VARIANTS={"a": {"nope": 1}}))
    with pytest.raises(TypeError, match="RERUN_IN_FRESH_PROCESS names unknown variant"):
        ProbeSpec.from_module(_module(VARIANTS={"a": {"k": 2}}, RERUN_IN_FRESH_PROCESS=("b",)))
    with pytest.raises(ValueError, match="has no variant 'x'"):
        PROBES["ppo_policy"].variant_params("x", {})
    with pytest.raises(ValueError, match=r"has no variant\(s\) x"):
        PROBES["ppo_policy"].select_variants(("x",))


def test_rerun_true_means_every_variant():
    spec = ProbeSpec.from_module(
        _module(VARIANTS={"a": {"k": 2}, "b": {"k": 3}}, RERUN_IN_FRESH_PROCESS=True)
    )
    assert spec.rerun == {"a", "b"}


def _config(probes: dict, pairs_probes=("ppo_policy",)) -> object:
    return parse(
        {
            "stacks": {
                "tr": {"role": "train", "runtime": "mindspore", "python": "/nonexistent/python"},
                "inf": {"role": "infer", "runtime": "mindspore-lite", "python": "/nonexistent/python"},
            },
            "pairs": [{"train": "tr", "infer": "inf", "probes": list(pairs_probes)}],
            "probes": probes,
        },
        "test",
    )


def test_cycle_makes_one_job_per_selected_variant_with_distinct_keys():
    cycle = Cycle(
        _config({"ppo_policy": {"variants": ["tanh-fp16", "fp32"], "params": {"batch": 8}}}), PROBES
    )
    jobs = cycle._jobs("ppo_policy")
    assert [j.variant for j in jobs] == ["fp32", "tanh-fp16"]
    assert [j.dtype for j in jobs] == ["float32", "float16"]
    assert all(j.batch == 8 for j in jobs)
    assert len({j.key for j in jobs}) == 2 and all(j.key.startswith(f"ppo_policy-{j.variant}-") for j in jobs)
    all_jobs = Cycle(_config({}), PROBES)._jobs("ppo_policy")
    assert [j.variant for j in all_jobs] == list(PROBES["ppo_policy"].variants)


def test_probe_job_without_variant_is_named_after_its_dtype():
    spec = PROBES["ppo_policy"]
    assert ProbeJob(spec, spec.params({"dtype": "float16"})).variant == "fp16"


def test_unsupported_operator_is_read_from_the_runtime_log():
    lite = Plugins(entry_points=False).runtimes()["mindspore-lite"]

    def operator(spec, err):  # noqa: ANN001, ANN202
        return unsupported_operator(err, spec)

    err = WorkerError(
        "lite20", "load", "error", "build_from_file failed! Error is Common error code.", LITE_NO_KERNEL
    )
    # The node's name carries the operator as the MindIR names it (Lite's type is RandomStandardNormal).
    assert operator(lite, err) == "StandardNormal"
    assert operator(None, err) is None  # Lite's own words: only its package knows them
    said = WorkerError("x", "load", "error", "Unsupported operator: Foo.Bar in graph")
    assert operator(None, said) == operator(lite, said) == "Foo.Bar"  # the generic words: any runtime
    assert operator(lite, WorkerError("x", "load", "error", "Common error code.")) is None
    # a crash or timeout is never an unsupported operator, whatever the log says
    assert operator(lite, WorkerError("x", "load", "crash", "died", LITE_NO_KERNEL)) is None


# -- the verdict of one variant, from made-up outputs ---------------------------------------------


def _verdict(cycle: Cycle, pair, job: ProbeJob, train: Side, infer: Side):
    """One variant's verdict on the pair's infer side, as the cycle's pipeline gives it."""
    audit = ProbeAudit(job, cycle.subject(job), pair.train, train, [pair], cycle.state, cycle.runtimes, True)
    return audit.judge(pair.infer, infer, cycle.comparators, cycle.compat.diagnose)


def _result(cycle: Cycle, job: ProbeJob, train: list, infer: list, **extra):
    pair = cycle.config.pairs[0]
    t = Side(outputs=train, rerun=extra.get("train_rerun"))
    i = Side(outputs=infer, error=extra.get("infer_error"), rerun=extra.get("infer_rerun"))
    return _verdict(cycle, pair, job, t, i)


def _ppo_outputs(params, shift: float = 0.0, logp_shift: float = 0.0):
    batch = int(params["batch"])
    mean = np.linspace(-0.1, 0.1, batch, dtype=np.float32).reshape(-1, 1)
    std = np.full((batch, 1), 0.6, np.float32)
    logp = np.linspace(-3, -1, batch).astype(np.float32)
    action = mean.copy()
    return [mean + shift, std, logp + logp_shift, action + shift]


@pytest.mark.parametrize("shift", [0.0, 5e-6, 2e-5, 4e-3])
def test_drift_exactly_where_numbers_cross_thresholds(shift):
    cfg = _config({"ppo_policy": {"atol": 1e-5, "rtol": 1e-5, "params": {"batch": 16}}})
    cycle = Cycle(cfg, PROBES)
    job = cycle._jobs("ppo_policy")[0]
    train = _ppo_outputs(job.params)
    r = _result(cycle, job, train, _ppo_outputs(job.params, shift=shift))
    # Expectation from the numbers: the element-wise rule, and each limited check.
    tol = cfg.probe("ppo_policy").tolerance_for("mean", job.variant, job.dtype)
    d = np.abs(train[0].astype(np.float64) - (train[0] + np.float32(shift)).astype(np.float64))
    rel = d / np.abs(train[0].astype(np.float64))
    elementwise_fails = bool(np.any((d > tol.atol) & (rel > tol.rtol)))
    checks_fail = any(c.limit is not None and not c.passed for c in r.checks)
    assert {c.output for c in r.outputs} == {"mean", "std", "logp", "action"}
    assert (r.status == DRIFT) == (elementwise_fails or checks_fail)
    assert r.status in (CONSISTENT, DRIFT)
    for c in r.checks:
        if c.limit is not None:
            assert r.thresholds[c.output or "*"][c.metric] == c.limit
            worse_is_bigger = c.metric not in ("action_agreement", "ks_pvalue", "ess")
            assert c.passed == ((c.value <= c.limit) if worse_is_bigger else (c.value >= c.limit))
            if not c.passed:
                assert c.metric in r.message
    if shift == 4e-3:  # beyond action_agreement's default 1e-3
        assert r.status == DRIFT and "action_agreement" in r.message


def test_comparator_thresholds_come_from_config_scopes():
    loose = {"comparators": {"logp_diff": {"max_abs": 1.0, "max_mean": 1.0, "max_mean_exp": 10.0}}}
    cfg = _config({"ppo_policy": {"params": {"batch": 16}, "rtol": 1.0, "variant": {"fp32": loose}}})
    cycle = Cycle(cfg, PROBES)
    job = cycle._jobs("ppo_policy")[0]
    r = _result(cycle, job, _ppo_outputs(job.params), _ppo_outputs(job.params, logp_shift=0.5))
    logp = {c.metric: c for c in r.checks if c.output == "logp"}
    assert logp["logp_diff_max"].value == pytest.approx(0.5) and logp["logp_diff_max"].limit == 1.0
    assert r.status == CONSISTENT, r.message
    strict = Cycle(_config({"ppo_policy": {"params": {"batch": 16}, "rtol": 1.0}}), PROBES)
    r = _result(strict, job, _ppo_outputs(job.params), _ppo_outputs(job.params, logp_shift=0.5))
    assert r.status == DRIFT and "logp: logp_diff_max 0.5 (limit 0.01)" in r.message


def test_missing_or_failing_comparator_is_an_error_not_drift():
    cfg = _config({"ppo_policy": {"params": {"batch": 16}}})
    job = Cycle(cfg, PROBES)._jobs("ppo_policy")[0]
    none = Cycle(cfg, PROBES, comparators={})
    r = _result(none, job, _ppo_outputs(job.params), _ppo_outputs(job.params))
    assert r.status == ERROR and "uses comparator 'gaussian_kl', which no loaded plugin provides" in r.message
    assert r.outputs  # the element-wise comparison is still reported
    bad = Cycle(
        _config({"ppo_policy": {"params": {"batch": 16}, "comparators": {"gaussian_kl": {"mean": "nope"}}}}),
        PROBES,
    )
    r = _result(bad, job, _ppo_outputs(job.params), _ppo_outputs(job.params))
    assert (
        r.status == ERROR and "comparator gaussian_kl failed" in r.message and "no output 'nope'" in r.message
    )


def test_rerun_in_a_fresh_process_must_repeat_exactly():
    cfg = _config({}, pairs_probes=("action_sampler",))
    cycle = Cycle(cfg, PROBES)
    job = next(j for j in cycle._jobs("action_sampler") if j.variant == "seeded-normal")
    assert job.rerun
    rng = np.random.default_rng(0)
    sample = rng.standard_normal((job.batch, 2)).astype(np.float32)
    out = [sample, sample.copy()]
    same = _result(cycle, job, out, out, train_rerun=[x.copy() for x in out], infer_rerun=out)
    assert same.status == CONSISTENT
    assert {(c.metric, c.value, c.passed) for c in same.checks if "rerun" in c.metric} == {
        ("train_rerun_max_abs", 0.0, True),
        ("infer_rerun_max_abs", 0.0, True),
    }
    moved = [sample + np.float32(1e-3), sample]
    other = _result(cycle, job, out, out, train_rerun=moved, infer_rerun=out)
    assert other.status == DRIFT and "train side gives other numbers in a fresh process" in other.message
    failed = _result(cycle, job, out, out, infer_rerun=WorkerError("inf", "run", "crash", "died"))
    assert failed.status == ERROR and "rerun in a fresh process" in failed.message


def test_unsupported_operator_is_its_own_status():
    cycle = Cycle(_config({}, pairs_probes=("action_sampler",)), PROBES)
    job = next(j for j in cycle._jobs("action_sampler") if j.variant == "seeded-normal")
    err = WorkerError(
        "inf", "load", "error", "build_from_file failed! Error is Common error code.", LITE_NO_KERNEL
    )
    r = _result(cycle, job, [np.zeros((2, 2))] * 2, None, infer_error=err)
    assert r.status == UNSUPPORTED and "fails to load it: it cannot load operator StandardNormal" in r.message
    assert "the runtime's log:" in r.message and "remedy: replace StandardNormal" in r.message
    findings = list(cycle._findings([r], {}))
    assert [(f.kind, f.severity) for f in findings] == [(UNSUPPORTED, "warning")]


def test_checks_are_part_of_the_json_and_the_report():
    from auditor.report.text import render_text
    from auditor.results import CycleResult, StackReport

    cfg = _config({"ppo_policy": {"params": {"batch": 16}}})
    cycle = Cycle(cfg, PROBES)
    job = cycle._jobs("ppo_policy")[0]
    r = _result(cycle, job, _ppo_outputs(job.params), _ppo_outputs(job.params))
    stacks = {
        n: StackReport(n, role, "mindspore", "/p", "cpu", "local", None)
        for n, role in (("tr", "train"), ("inf", "infer"))
    }
    result = CycleResult(0.0, 1.0, "test", stacks, [r], [])
    doc = result.to_json()["results"][0]
    assert {c["metric"] for c in doc["checks"]} >= {"kl_max", "kl_mean", "logp_diff_max", "action_agreement"}
    assert isinstance(doc["checks"][0], dict) and "limit" in doc["checks"][0]
    text = render_text(result, verbose=True)
    assert "min rtol" in text and "kl_max" in text and "exp_abs_logp_diff_mean" in text
    # The default report keeps a consistent result to its status line and a summary.
    compact = render_text(result)
    assert r.status == "consistent" and "kl_max" not in compact
    assert f"bitwise equal, {len(r.checks)} checks ok" in compact


def test_metric_check_type_is_the_hook_api():
    c = MetricCheck("m", 1.0, True)
    assert (c.limit, c.output, c.message) == (None, None, "")


def test_the_infer_runtime_decides_what_the_train_stack_exports():
    """A pair whose infer runtime loads another format gets its own export of each variant (its
    own job, keyed apart; MindIR keys stay as they were, publications are found by them), and
    an operator the exporter cannot write in that format is an unsupported result with the
    exporter's words, not an error."""
    onnx = ArtifactFormat("onnx", "ONNX", ".onnx", lambda data: {"readable": True})
    runtimes = {
        **Plugins(entry_points=False).runtimes(),
        "onnx-rt": RuntimeSpec("onnx-rt", "load", "m:C", loads=onnx),
    }
    config = parse(
        {
            "stacks": {
                "tr": {"role": "train", "runtime": "mindspore", "python": "/nonexistent/python"},
                "inf": {"role": "infer", "runtime": "mindspore-lite", "python": "/nonexistent/python"},
                "ox": {"role": "infer", "runtime": "onnx-rt", "python": "/nonexistent/python"},
            },
            "pairs": [
                {"train": "tr", "infer": "inf", "probes": ["action_sampler"]},
                {"train": "tr", "infer": "ox", "probes": ["action_sampler"]},
            ],
        },
        "test",
        runtimes=runtimes,
    )
    cycle = Cycle(config, PROBES, runtimes=runtimes)
    to_lite, to_onnx = config.pairs
    assert cycle._format(to_lite) is MINDIR and cycle._format(to_onnx) is onnx
    (mindir_job,) = [j for j in cycle._jobs("action_sampler") if j.variant == "seeded-normal"]
    (onnx_job,) = [j for j in cycle._jobs("action_sampler", onnx) if j.variant == "seeded-normal"]
    assert onnx_job.key == f"{mindir_job.key}-onnx" and mindir_job.key.startswith(
        "action_sampler-seeded-normal-"
    )
    said = (
        "RuntimeError: Can not find key StandardNormal in convert map. Exporting StandardNormal "
        "operator is not yet supported."
    )
    outputs = [np.zeros((2, 2), np.float32)] * 2
    export = Side(outputs=outputs, error=WorkerError("tr", "export", "error", said))
    r = _verdict(cycle, to_onnx, onnx_job, export, Side())
    assert r.status == UNSUPPORTED
    assert r.message == (
        "unsupported operator: StandardNormal (tr cannot export this variant to ONNX: Can not find key "
        "StandardNormal in convert map. Exporting StandardNormal operator is not yet supported.)"
    )
    # The same words from another request are not the exporter's verdict: an error.
    built = Side(error=WorkerError("tr", "build", "error", said))
    assert _verdict(cycle, to_onnx, onnx_job, built, Side()).status == ERROR


def test_a_served_model_must_repeat_itself_in_a_fresh_process():
    """[models.NAME]: each serving side runs again in a fresh worker; other numbers there are
    drift naming the output, a rerun that fails is the model's error (auditor.cycle.models)."""
    from auditor.cycle.models import ModelAudit
    from auditor.policy.model_file import ModelPlan
    from auditor.policy.subject import from_model
    from auditor.stacks.worker import WorkerError
    from auditor.worker.mindir import MindIRInfo

    serving = {"role": "infer", "runtime": "mindspore-lite", "python": "/nonexistent/python"}
    pol = {"path": "p.mindir", "golden": "g.npz", "stacks": ["inf"], "output_names": ["a"]}
    config = parse({"stacks": {"inf": serving}, "models": {"pol": pol}}, "test")
    cycle = Cycle(config, PROBES)
    model = config.models["pol"]
    info = MindIRInfo("0" * 64, 0, True)
    plan = ModelPlan(model, b"", info, [np.zeros((4, 3), np.float32)], ("obs",))
    out = [np.arange(4, dtype=np.float32)]
    audit = ModelAudit(plan, from_model(plan), Side(outputs=out), cycle.state, None)

    def verdict(rerun):
        served = Side(outputs=out, rerun=rerun, rerun_words="a cold process")
        return audit.judge("inf", served, cycle.comparators, cycle.compat.diagnose)

    same = verdict([out[0].copy()])
    assert same.status == CONSISTENT
    [check] = [c for c in same.checks if c.metric == "infer_rerun_max_abs"]
    assert check.passed and check.value == 0.0 and check.output == "a"
    moved = out[0].copy()
    moved[2] = np.nextafter(moved[2], np.float32(9))  # one ULP: a process started anew must repeat exactly
    other = verdict([moved])
    assert other.status == DRIFT and other.checks[0].value > 0
    assert "infer side gives other numbers in a cold process" in other.message
    failed = verdict(WorkerError("inf", "run", "crash", "worker died"))
    assert failed.status == ERROR and failed.message.startswith("inf, rerun in a cold process:")
