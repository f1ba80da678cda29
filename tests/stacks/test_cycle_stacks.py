"""Audit cycles through the real reference stacks (MindSpore 2.10, 2.0 and Lite 2.0)."""

from __future__ import annotations

import json
import os
import shutil
import tomllib
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from auditor.alerts.engine import AlertEngine
from auditor.cli.context import Context
from auditor.compare.outputs import METRIC_NAMES
from auditor.cycle.cycle import Cycle
from auditor.db import schema as m
from auditor.extend.manager import Plugins, builtin_probes
from auditor.history.store import Store
from auditor.results import CONSISTENT, ERROR, INCOMPATIBLE
from tests.cli import auditor
from tests.configs import FP32_POLICY, build, probes_with
from tests.conftest import DEFAULT_CONFIG, OWN_ZYGOTES, DefaultRun, worker_pids

pytestmark = pytest.mark.stacks


@pytest.fixture(scope="module")
def shipped(default_run: DefaultRun):
    """The session's default cycle (tests/conftest.py), with the PPO policy's fp32 result per pair."""
    fp32 = ("ppo_policy", "fp32")
    by_pair = {r["pair"]: r for r in default_run.doc["results"] if (r["probe"], r["variant"]) == fp32}
    return default_run.proc, default_run.doc, by_pair, default_run.db


def test_default_cycle_covers_every_pair_and_exits_1(shipped):
    proc, doc, by_pair, _ = shipped
    assert set(by_pair) == {"ms210->ms210-graph", "ms210->lite20", "ms20->lite20", "ms20->ms210-graph"}
    # ms210 -> lite20 can never load, so the cycle as a whole must not say "consistent"; and
    # lite20's fp16 outputs break the policy's invariants (std = 0), which are errors: the
    # outcome is the worst of everything the report holds, with the count of every status.
    assert doc["statuses"][INCOMPATIBLE] >= 1 and doc["statuses"][ERROR] >= 1
    assert doc["outcome"] == ERROR
    assert proc.returncode == 1 == doc["exit_code"]


def test_same_version_graph_pair_is_consistent_and_bitwise_equal(shipped):
    _, doc, by_pair, _ = shipped
    r = by_pair["ms210->ms210-graph"]
    assert r["status"] == CONSISTENT
    assert [o["output"] for o in r["outputs"]] == ["mean", "std", "logp", "action"]
    for o in r["outputs"]:
        # PyNative and GraphCell of one version were bitwise equal for fp32 MLPs (FACTS.md).
        assert o["passed"] and o["metrics"]["bitwise_equal"] == 1.0
        assert o["metrics"]["max_abs"] == 0.0 and o["metrics"]["cosine"] == 1.0
        assert o["total"] == 256
    assert r["train_latency"]["p50_us"] > 0 and r["infer_latency"]["p50_us"] > 0
    assert r["train_latency"]["samples"] == 50 and r["train_latency"]["batch"] == 256
    assert doc["stacks"]["ms210"]["fingerprint"]["runtime"]["runtime_version"] == "2.10.0"
    assert doc["stacks"]["ms210-graph"]["fingerprint"]["runtime"]["python"].startswith("3.11.")
    assert doc["stacks"]["ms210"]["fingerprint"]["packages"]["framework"]["mindspore"] == "2.10.0"


def test_ms210_to_lite20_is_an_incompatibility_naming_both_mindir_versions(shipped):
    proc, doc, by_pair, _ = shipped
    r = by_pair["ms210->lite20"]
    assert r["status"] == INCOMPATIBLE
    assert "MindIR version 3" in r["message"] and "at most version 1" in r["message"]
    assert (
        "MindSpore 2.10.0" in r["message"]
        and "lite20" in r["message"]
        and "mindspore-lite 2.0.0" in r["message"]
    )
    assert r["artifact"]["info"]["mind_ir_version"] == 3
    assert r["artifact"]["info"]["model_version"] == "2.10.0"
    assert r["outputs"] == [] and r["infer_latency"] is None
    # The MindIR rule knows Lite 2.0's limit, so the load is not even attempted (the fallback
    # that reads Lite's native rejection is tested in test_rules_stacks.py).
    assert "the load was not attempted" in r["message"]
    # Reported once for the pair, not once per probe variant; the only critical finding.
    critical = [(f["kind"], f["key"]) for f in doc["findings"] if f["severity"] == "critical"]
    assert critical == [("incompatible", "ms210->lite20/mindir-version")]
    blocked = [x for x in doc["results"] if x["pair"] == "ms210->lite20"]
    assert blocked and all(x["status"] == INCOMPATIBLE and x["message"] == r["message"] for x in blocked)


def test_ms20_to_lite20_loads_with_measured_nonzero_divergence(shipped):
    _, doc, by_pair, _ = shipped
    r = by_pair["ms20->lite20"]
    assert r["status"] == CONSISTENT
    mean = next(o for o in r["outputs"] if o["output"] == "mean")["metrics"]
    # Lite's kernels are not bit-identical to MindSpore 2.0 PyNative, but stay far below 1e-5.
    assert 0 < mean["max_abs"] < 1e-5
    assert mean["bitwise_equal"] == 0.0 and mean["cosine"] > 0.999999
    assert r["artifact"]["info"]["mind_ir_version"] == 1
    assert r["train_latency"]["p50_us"] > 0 and r["infer_latency"]["p50_us"] > 0
    assert r["infer_latency"]["p90_us"] >= r["infer_latency"]["p50_us"]


def test_text_report_fits_a_screen_and_names_each_cause_once(shipped):
    """The compact report of the real failing default cycle: within 50 lines of at most 132
    columns, a pair with one cause in one line, every finding cause listed once and referred
    to by number; beyond the 50, one line per drift cause `auditor fix` can address (its
    command), no more."""
    proc, doc, _, _ = shipped
    assert proc.returncode == 1, proc.stderr
    out = proc.stdout
    lines = out.rstrip().splitlines()
    fixes = [
        line for line in lines if line.strip().startswith(("to fix: auditor fix ", "fixed export: fix "))
    ]
    fixable = {
        f["cause"]
        for f in doc["findings"]
        if f["kind"] == "drift" and "auditor fix" in f["details"].get("action", "")
    }
    assert 1 <= len(fixes) <= len(fixable), out  # the demo's fp16 drift names its fix
    assert len(lines) - len(fixes) <= 50 and max(len(line) for line in lines) <= 132, out
    for line in ("ms210 → ms210-graph", "ms20 → lite20", "Findings", "Outcome: ERROR ("):
        assert line in out
    assert "INCOMPATIBLE: 8 probe variants [1]" in out  # one line for the pair, the cause once
    assert " ".join(out.split()).count("cannot load the MindIR exported by ms210 (MindSpore 2.10.0)") == 1
    causes = [line.split("]")[0].strip() + "]" for line in lines if line.startswith("  [")]
    assert (
        causes
        == [f"[{n}]" for n in range(1, len(causes) + 1)]
        == [f"[{c['ref']}]" for c in doc["report"]["causes"]]
    )
    keys = [f["key"] for f in doc["findings"]]
    assert len(keys) == len(set(keys))  # one finding per cause
    outcome = lines[-1]
    assert " incompatible, " in outcome and " error); exit status 1" in outcome


def test_the_shipped_alert_policy_pages_only_the_compatibility_causes(shipped, tmp_path):
    """The shipped [alerts] on the real default cycle's findings, seen in two runs in a row
    (as the daemon's first cycles see them): one alert per compatibility cause, the critical
    one at once, the warnings from the second run on; the built-in probes' drift, invariants
    and NaN masking are recorded and page no one."""
    _, doc, _, db = shipped
    copy = tmp_path / "h.db"
    shutil.copyfile(db, copy)
    config = Context(str(DEFAULT_CONFIG), None).load_config()
    store = Store.open(f"sqlite:///{copy}")
    alerts = AlertEngine(store.engine, config.alerts, {}, builtin_probes=Plugins().builtin_probes())
    opened = [[(e.event, e.key, e.severity) for e in alerts.evaluate(doc["run_id"])] for _ in range(3)]
    assert opened == [
        [("opened", "ms210->lite20/mindir-version", "critical")],
        [
            ("opened", "ms210->lite20/pairing-version", "warning"),
            ("opened", "ms20->ms210-graph/pairing-version", "warning"),
            ("opened", "lite20/operator-support/StandardNormal", "warning"),
        ],
        [],
    ]
    kinds = {f["kind"] for f in doc["findings"]}
    assert {"invariant", "nan-hazard", "drift"} <= kinds  # there, in the report, not paged


def test_run_is_stored_complete_in_long_format(shipped):
    _, doc, _, db = shipped
    store = Store.open(f"sqlite:///{db}")
    with Session(store.engine) as s:
        run = s.get(m.Run, doc["run_id"])
        assert run.status == "complete" and run.outcome == doc["outcome"] == ERROR
        # One row per probe result (rollouts add rows of their own), and per result one metric
        # row per output and element-wise metric plus one per comparator check, and the serving
        # side's throughput per batch timed (and the saturation batch of a sweep).
        rows = {(r.pair, r.probe, r.variant): r for r in s.scalars(select(m.ProbeResultRow))}
        for r in doc["results"]:
            row = rows[(r["pair"], r["probe"], r["variant"])]
            stored = s.scalar(
                select(func.count()).select_from(m.MetricRow).where(m.MetricRow.set_id == row.metric_set_id)
            )
            saturation = r["saturation_batch"] is not None  # (the throughput: derived from latencies)
            assert stored == len(r["outputs"]) * len(METRIC_NAMES) + len(r["checks"]) + saturation
        lite = s.scalars(
            select(m.MetricRow)
            .join(m.ProbeResultRow, m.ProbeResultRow.metric_set_id == m.MetricRow.set_id)
            .where(
                m.ProbeResultRow.pair == "ms20->lite20",
                m.ProbeResultRow.probe == "ppo_policy",
                m.ProbeResultRow.variant == "fp32",
                m.MetricRow.output == "mean",
                m.MetricRow.name == "max_abs",
            )
        ).one()
        assert lite.value > 0
        assert s.scalar(select(func.count()).select_from(m.Fingerprint)) == 4
        # Exports of 2.10 and 2.0 (one per probe variant), content-addressed, bytes kept.
        artifacts = s.scalars(select(m.Artifact)).all()
        assert sorted({a.info["mind_ir_version"] for a in artifacts if a.kind == "mindir"}) == [1, 3]
        assert len({a.sha256 for a in artifacts}) == len(artifacts)
        assert all(a.data and len(a.data) == a.size for a in artifacts)


def _config(doc: dict, pairs: list[dict], extra_probes: dict | None = None, **worker):
    return build(
        doc,
        probes_with("faulty"),
        source="test",
        pairs=pairs,
        worker=worker,
        probe_tables={**doc.get("probes", {}), **(extra_probes or {})},
        variants=FP32_POLICY,
    )


def test_missing_interpreter_is_an_error_for_its_pair_only(stacks, doc, tmp_path):
    doc["stacks"]["ghost"] = {"role": "train", "runtime": "mindspore", "python": str(tmp_path / "no/python")}
    config = _config(
        doc,
        [
            {"train": "ghost", "infer": "lite20", "probes": ["ppo_policy"]},
            {"train": "ms20", "infer": "lite20", "probes": ["ppo_policy"]},
        ],
    )
    result = Cycle(config, builtin_probes()).run()
    ghost, ok = result.results
    assert ghost.status == ERROR and str(tmp_path / "no/python") in ghost.message
    assert "stacks.ghost.python" in ghost.message
    assert ok.status == CONSISTENT and ok.outputs
    assert result.stacks["ghost"].error and result.stacks["ghost"].fingerprint is None
    assert result.exit_code == 1


def test_worker_dying_mid_request_fails_its_pair_and_the_rest_completes(stacks, doc):
    config = _config(
        doc,
        [
            {"train": "ms20", "infer": "lite20", "probes": ["faulty"]},
            {"train": "ms20", "infer": "ms210-graph", "probes": ["ppo_policy"]},
        ],
        {"faulty": {"params": {"mode": "crash"}}},
    )
    cycle = Cycle(config, probes_with("faulty"))
    result = cycle.run()
    crashed, ok = result.results
    assert crashed.status == ERROR
    assert "worker died during the request (killed by SIGKILL)" in crashed.message
    assert "train side" in crashed.message
    # The ms20 worker was restarted for the next probe, which completed normally.
    assert ok.status == CONSISTENT and len(ok.outputs) == 4


def test_hanging_worker_is_killed_at_its_deadline(stacks, doc):
    config = _config(
        doc,
        [
            {"train": "ms20", "infer": "lite20", "probes": ["faulty"]},
            {"train": "ms210", "infer": "ms210-graph", "probes": ["ppo_policy"]},
        ],
        {"faulty": {"params": {"mode": "hang"}}},
        request_timeout=8,
    )
    result = Cycle(config, probes_with("faulty")).run()
    hung, ok = result.results
    assert hung.status == ERROR and "no answer within 8 s; worker process group killed" in hung.message
    assert ok.status == CONSISTENT, ok.message
    # No worker of the cycle is left behind (the hung one was killed with its process group).
    assert worker_pids(parent=os.getpid()) == []


def test_runtime_exception_carries_the_worker_traceback(stacks, doc):
    config = _config(
        doc,
        [{"train": "ms20", "infer": "lite20", "probes": ["faulty"]}],
        {"faulty": {"params": {"mode": "raise"}}},
    )
    (r,) = Cycle(config, probes_with("faulty")).run().results
    assert r.status == ERROR and "faulty probe refuses to build" in r.message


def test_config_error_exits_2_with_every_problem(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(
        '[stacks.a]\nrole = "trainer"\nruntime = "mindspore"\npython = "/x"\n'
        '[[pairs]]\ntrain = "a"\ninfer = "b"\nprobes = ["nope"]\n'
    )
    proc = auditor("--config", str(bad), "--db", str(tmp_path / "h.db"), "audit")
    assert proc.returncode == 2
    assert "stacks.a.role: must be one of train, infer, not 'trainer'" in proc.stderr
    assert "pairs[0].infer: no stack named 'b'" in proc.stderr
    assert "pairs[0].probes[0]: unknown probe 'nope'" in proc.stderr
    assert not (tmp_path / "h.db").exists()


# -- warm and cold (auditor.stacks.warm): in this file, so that the shared default cycle runs once
LITE_FP16_GARBAGE = {
    ("ms20->lite20", "ppo_policy", variant, output)
    for variant in ("fp16", "tanh-fp16")
    for output in ("std", "logp")
}
"""MindSpore Lite 2.0's fp16 ``exp`` of the policy's log-std returns a different garbage in every
process (README: 0, a small negative, or positive values), warm or cold: these outputs are
compared by their verdict (out of tolerance in both runs), not by their bytes."""


def _results(doc: dict) -> dict[tuple[str, str, str], dict]:
    return {(r["pair"], r["probe"], r["variant"]): r for r in doc["results"]}


def _arrays(folder: Path) -> dict[tuple[str, str], np.ndarray]:
    out = {}
    for path in sorted(folder.rglob("*.npz")):
        with np.load(path) as data:
            for name in data.files:
                if name != "meta":  # when it was recorded
                    out[(str(path.relative_to(folder)), name)] = data[name]
    return out


def _garbage(key: tuple[str, str]) -> bool:
    file, name = key
    pair_dir, _, base = file.partition("/")
    probe, variant, side = base.removesuffix(".npz").split(".")
    results = {f"output_{i}": o for i, o in enumerate(("mean", "std", "logp", "action"))}
    pair = pair_dir.replace("__", "->")
    return side == "infer" and (pair, probe, variant, results.get(name)) in LITE_FP16_GARBAGE


def test_the_shipped_cycle_gives_the_same_statuses_and_outputs_warm_and_cold(
    default_run: DefaultRun, tmp_path: Path
) -> None:
    # The shared default run forked its workers from the session's zygotes: warm.
    assert {"ms20", "ms210", "lite20"} <= set(default_run.forked), default_run.forked
    doc = tomllib.loads(DEFAULT_CONFIG.read_text())
    assert doc["worker"]["warm"] == "cycle"
    text = DEFAULT_CONFIG.read_text().replace('\nwarm = "cycle"', '\nwarm = "off"')
    # The timing loops repeat calls whose results no one compares (5 instead of 50: half of a
    # cycle's CPU is MindSpore 2.10's PyNative timing); everything computed and judged is as shipped.
    text = text.replace("\nwarmup = 5 ", "\nwarmup = 1 ").replace("\niterations = 50 ", "\niterations = 5 ")
    assert "\niterations = 5 " in text and "\nwarmup = 1 " in text
    cold_config = tmp_path / "cold.toml"
    cold_config.write_text(text)
    cold_json, cold_outputs = tmp_path / "cold.json", tmp_path / "cold"
    proc = auditor(
        "--config", str(cold_config), "--db", str(tmp_path / "h.db"), "audit", "--json-file",
        str(cold_json), "--save-outputs", str(cold_outputs), env=OWN_ZYGOTES, timeout=900,
    )  # fmt: skip
    assert proc.returncode == default_run.proc.returncode == 1, proc.stderr[-3000:]
    cold, warm = json.loads(cold_json.read_text()), default_run.doc

    # The same verdicts, result by result, rollout by rollout, and the same outcome.
    cold_results, warm_results = _results(cold), _results(warm)
    assert set(cold_results) == set(warm_results) and len(warm_results) >= 30
    assert {k: r["status"] for k, r in cold_results.items()} == {
        k: r["status"] for k, r in warm_results.items()
    }
    for key, r in warm_results.items():
        failing = {o["output"] for o in r["outputs"] if not o["passed"]}
        assert failing == {o["output"] for o in cold_results[key]["outputs"] if not o["passed"]}, key
    assert [(r["pair"], r["probe"], r["status"]) for r in cold["rollouts"]] == [
        (r["pair"], r["probe"], r["status"]) for r in warm["rollouts"]
    ]
    assert cold["outcome"] == warm["outcome"]

    # The same findings and counts, but the one on Lite's fp16 garbage std (unread memory: its
    # sign, and so whether "std is not > 0" holds, changes from run to run, cold or warm).
    def judged(doc: dict) -> tuple[set, dict]:
        garbage = [f for f in doc["findings"] if (f["kind"], f["subject"]) == ("invariant", "lite20")]
        assert all("std" in f["message"] and "fp16" in f["message"] for f in garbage)
        counts = dict(doc["statuses"], error=doc["statuses"].get("error", 0) - len(garbage))
        return {(f["kind"], f["subject"]) for f in doc["findings"] if f not in garbage}, counts

    assert judged(cold) == judged(warm)
    # The same stacks, as their workers described them (packages, runtime, environment, ...).
    assert {n: s["fingerprint_digest"] for n, s in cold["stacks"].items()} == {
        n: s["fingerprint_digest"] for n, s in warm["stacks"].items()
    }

    # Bit for bit the same outputs, on both sides of every pair, but Lite's fp16 garbage.
    cold_arrays, warm_arrays = _arrays(cold_outputs), _arrays(default_run.outputs)
    assert set(cold_arrays) == set(warm_arrays) and len(warm_arrays) > 100
    differ = {k for k in warm_arrays if warm_arrays[k].tobytes() != cold_arrays[k].tobytes()}
    assert {k for k in differ if not _garbage(k)} == set()
    for pair, probe, variant, output in LITE_FP16_GARBAGE:  # out of tolerance in both runs
        for doc_ in (warm_results, cold_results):
            [o] = [o for o in doc_[(pair, probe, variant)]["outputs"] if o["output"] == output]
            assert not o["passed"]


def test_compare_judges_the_saved_outputs_of_the_real_cycle_as_the_cycle_did(default_run: DefaultRun) -> None:
    """`auditor compare` (#38: end to end, on real parts) on the files the shared default cycle
    saved (`audit --save-outputs`), later and without a stack: each variant gets the verdict and
    the failing outputs the cycle gave it; at the tolerance the cycle said would pass, it passes;
    files of other inputs are refused."""
    results = _results(default_run.doc)
    cases = [
        ("ms20->lite20", "ppo_policy", "fp32"),
        ("ms20->lite20", "ppo_policy", "fp16"),
        ("ms210->ms210-graph", "ppo_policy", "fp32"),
        ("ms20->ms210-graph", "action_sampler", "seeded-normal"),
        ("ms20->lite20", "obs_normalizer", "fp32"),
    ]
    for pair, probe, variant in cases:
        folder = default_run.outputs / pair.replace("->", "__")
        a, b = folder / f"{probe}.{variant}.train.npz", folder / f"{probe}.{variant}.infer.npz"
        proc = auditor("--config", str(DEFAULT_CONFIG), "compare", "--json", str(a), str(b))
        cycle = results[(pair, probe, variant)]
        assert proc.returncode == (0 if cycle["status"] == "consistent" else 1), proc.stderr
        said = json.loads(proc.stdout)
        assert said["status"] == cycle["status"], (pair, probe, variant)
        failing = {o["output"] for o in cycle["outputs"] if not o["passed"]}
        assert {o["output"] for o in said["outputs"] if not o["passed"]} == failing
        unstable = (pair, probe, variant) in {(p, pr, v) for p, pr, v, _ in LITE_FP16_GARBAGE}
        for o in said["outputs"]:
            [c] = [c for c in cycle["outputs"] if c["output"] == o["output"]]
            if not unstable:  # the same bytes compared: the same figures
                assert o["metrics"] == c["metrics"], (pair, probe, variant, o["output"])
    # at the tolerance the cycle said would pass, every output of the drifting sampler passes
    drift = results[("ms20->ms210-graph", "action_sampler", "seeded-normal")]
    assert drift["status"] == "drift"
    worst = max(o["metrics"]["min_atol"] for o in drift["outputs"])
    sampler = default_run.outputs / "ms20__ms210-graph" / "action_sampler.seeded-normal"
    loose = auditor(
        "--config", str(DEFAULT_CONFIG), "compare", "--json", "--atol", repr(worst * 1.01), "--rtol", "0",
        f"{sampler}.train.npz", f"{sampler}.infer.npz",
    )  # fmt: skip
    assert [o["passed"] for o in json.loads(loose.stdout)["outputs"]] == [True] * len(drift["outputs"])
    other = default_run.outputs / "ms20__lite20"
    refused = auditor(
        "--config", str(DEFAULT_CONFIG), "compare",
        str(other / "ppo_policy.fp32.train.npz"), str(other / "obs_normalizer.fp32.infer.npz"),
    )  # fmt: skip
    assert refused.returncode == 2 and "was computed from 2 inputs" in refused.stderr
