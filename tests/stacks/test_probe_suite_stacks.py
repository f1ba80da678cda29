"""The probe suite on the real stacks: latency at several batch sizes, closed/open-loop
rollouts, golden baselines, latency regressions, and a deliberately perturbed MindIR that
must be caught and localized to the layer whose weight was changed.

Two cycles share one history database: a clean one (it sets the goldens), then one whose
infer side loads MindIRs with one weight of layer fc1 changed in the file's bytes. The
expected findings are computed from the numbers each cycle reports, never assumed.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from auditor.cycle.cycle import Cycle
from auditor.extend.manager import Plugins
from auditor.history.store import Store
from auditor.results import CONSISTENT, DRIFT
from tests.cli import auditor
from tests.configs import DAEMON_SECTIONS, build

pytestmark = pytest.mark.stacks

PAIRS = ["ms210->ms210-graph", "ms20->lite20"]
PERTURBED_LAYER = "fc1"


def _config(doc: dict, db: str):
    plugins = Plugins(entry_points=False)
    return build(
        doc,
        plugins.probes(),
        pairs=[
            {"train": "ms210", "infer": "ms210-graph", "probes": ["ppo_policy"]},
            {"train": "ms20", "infer": "lite20", "probes": ["ppo_policy"]},
        ],
        probe_tables={"ppo_policy": {"params": {"batch": 256, "seed": 0}, "variants": ["fp32"]}},
        storage={"url": db},
        latency={
            "warmup": 2,
            "iterations": 20,
            "batches": [1, 256],
            # Judge every series against the previous run alone, at a factor just above 1, so that
            # the second cycle's findings follow from the two cycles' numbers.
            "regression_factor": 1.01,
            "regression_window": 1,
            "regression_min_runs": 1,
            "regression_confirm": 1,
        },
        # return_atol between the returns' differences seen across MindSpore versions (1e-5..1e-3),
        # so the comparison can go either way; the test computes which.
        rollout={"seeds": [0, 1], "steps": 200, "action_atol": 1e-5, "return_atol": 1e-4},
        drop=DAEMON_SECTIONS,
    ), plugins


def _perturb(weight: np.ndarray):
    """A tamper hook: add 0.5 to one element of ``weight`` where its bytes sit in the MindIR."""
    raw = weight.tobytes()
    changed = weight.copy()
    changed.flat[7] += np.float32(0.5)

    def tamper(data: bytes) -> bytes:
        at = data.find(raw)
        assert at >= 0 and data.find(raw, at + 1) < 0, "the weight's bytes must occur exactly once"
        return data[:at] + changed.tobytes() + data[at + len(raw) :]

    return tamper


@pytest.fixture(scope="module")
def cycles(stacks, tmp_path_factory, default_doc):
    db = f"sqlite:///{tmp_path_factory.mktemp('suite') / 'history.db'}"
    config, plugins = _config(default_doc, db)
    store = Store.open(db)
    probes = plugins.probes()
    out = []
    spec = probes["ppo_policy"]
    weights = spec.make_weights(spec.variant_params("fp32", config.probe("ppo_policy").params))
    for tamper in (None, _perturb(weights[f"{PERTURBED_LAYER}.weight"])):
        cycle = Cycle(config, probes, plugins.runtimes(), history=store, tamper=tamper)
        run_id = store.begin_run("<test>")
        result = cycle.run()
        store.finish_run(run_id, result, cycle.artifacts)
        result.run_id = run_id
        out.append(result)
    yield config, store, out
    store.close()


def _by_pair(result):
    return {r.pair: r for r in result.results}


def test_latency_at_every_configured_batch(cycles):
    config, _, (clean, _) = cycles
    for r in clean.results:
        assert r.train_latency.batch == r.infer_latency.batch == 256
        assert [lat.batch for lat in r.train_latencies] == [1] == [lat.batch for lat in r.infer_latencies]
        for lat in (r.train_latency, r.infer_latency, *r.train_latencies, *r.infer_latencies):
            assert lat.samples == config.latency.iterations
            assert 0 < lat.p50_us <= lat.p90_us <= lat.p99_us and lat.mean_us > 0
            assert lat.throughput == pytest.approx(lat.batch / (lat.p50_us / 1e6))


def test_clean_cycle_rollouts_and_their_findings_follow_the_numbers(cycles):
    config, _, (clean, _) = cycles
    assert {r.status for r in clean.results} == {CONSISTENT}
    assert [r.pair for r in clean.rollouts] == PAIRS
    rc = config.rollout
    for ro in clean.rollouts:
        assert ro.env == "Pendulum-v1" and [e.seed for e in ro.episodes] == list(rc.seeds)
        for e in ro.episodes:
            assert e.steps == 200 == len(e.action_diff) == len(e.open_action_diff) == len(e.obs_diff)
            first = next((i + 1 for i, d in enumerate(e.action_diff) if d > rc.action_atol), None)
            assert e.first_exceed == first
            assert all(0 <= d <= 4.0 for d in e.action_diff)  # clipped to Pendulum's [-2, 2]
            assert math.isfinite(e.train_return) and e.train_return < 0
        drift = any(e.first_exceed is not None or abs(e.return_diff) > rc.return_atol for e in ro.episodes)
        assert ro.status == (DRIFT if drift else CONSISTENT)
        key = f"{ro.pair}/ppo_policy/fp32/rollout/rollout-divergence"
        assert (key in {f.key for f in clean.findings}) == drift
    same_version = clean.rollouts[0]
    # GraphCell over MindSpore 2.10's own export computes what PyNative 2.10 computes.
    assert all(d == 0.0 for e in same_version.episodes for d in e.action_diff)


def test_clean_cycle_sets_goldens_for_both_sides_of_each_pair(cycles):
    _, store, (clean, _) = cycles
    from auditor.history import baselines as baseline

    for r in clean.results:
        assert {(c.side, c.stack, c.source, c.status) for c in r.baseline} == {
            ("train", r.train, "", "new"),
            ("infer", r.infer, r.train, "new"),
        }
    rows = baseline.show(store.engine)
    assert {(g["stack"], g["source"]) for g in rows} == {
        ("ms210", ""),
        ("ms210-graph", "ms210"),
        ("ms20", ""),
        ("lite20", "ms20"),
    }
    assert all(g["run_id"] == clean.run_id for g in rows)


def test_perturbed_artifact_is_caught_and_localized_to_the_changed_layer(cycles):
    config, _, (_, tampered) = cycles
    r = _by_pair(tampered)["ms210->ms210-graph"]
    assert r.status == DRIFT
    loc = r.localization
    assert loc is not None and loc.error is None
    assert loc.layer == PERTURBED_LAYER and f"layer {PERTURBED_LAYER}" in loc.message
    by_layer = {d.layer: d for d in loc.layers}
    assert by_layer["fc0"].passed and by_layer["fc0"].max_abs == 0.0  # before the change: identical
    assert not by_layer[PERTURBED_LAYER].passed
    # On every pair, the named layer is the first one whose numbers exceed the tolerance.
    tol = config.probe("ppo_policy").tolerance_for("fc0", "fp32", "float32")
    for res in tampered.results:
        layers = res.localization.layers
        assert [d.layer for d in layers] == ["fc0", "fc1", "mean", "std", "logp", "action"]
        first = next(d.layer for d in layers if not d.passed)
        assert res.localization.layer == first
        for d in layers[:2]:
            assert d.passed == (d.failing == 0)
            if d.max_abs <= tol.atol:  # every element within atol: the layer cannot fail
                assert d.passed


def test_baseline_drift_is_reported_for_the_side_that_moved_only(cycles):
    _, _, (clean, tampered) = cycles
    keys = {f.key: f for f in tampered.findings if f.kind == "baseline-drift"}
    for r in tampered.results:
        train, infer = r.baseline
        assert train.status == "equal" and train.golden_run == clean.run_id  # the train side did not move
        assert infer.status == "drift" and infer.max_abs > 0.0 and infer.metric_changes
        key = f"{r.infer}/ppo_policy/fp32/baseline-drift/{r.train}"
        assert keys[key].severity == "warning"
        assert not any(k.startswith(f"{r.train}/") for k in keys)


def test_latency_regressions_follow_the_two_runs_numbers(cycles):
    config, _, (clean, tampered) = cycles
    factor = config.latency.regression_factor

    def series(result):
        out = {}
        for r in result.results:
            for lat in (r.train_latency, *r.train_latencies):
                out[f"{r.train}/ppo_policy/fp32/b{lat.batch}/train/latency-regression"] = lat.p50_us
            for lat in (r.infer_latency, *r.infer_latencies):
                out[f"{r.infer}/ppo_policy/fp32/b{lat.batch}/infer/{r.train}/latency-regression"] = lat.p50_us
        return out

    before, after = series(clean), series(tampered)
    over = {k for k in after if after[k] > factor * before[k]}
    found = {f.key: f for f in tampered.findings if f.kind == "latency-regression"}
    # A series is flagged only above the factor of its one earlier run; one above it may still
    # be left alone when the whole host moved as much (auditor.policy.latency: the host's shift),
    # which a shared, loaded machine does between two runs.
    assert set(found) <= over
    for key, f in found.items():
        assert f.details["p50_us"] == after[key] and f.details["median_us"] == before[key]
        assert f.details["runs"] == 1 and f.severity == "warning"


def test_report_shows_the_suite(cycles):
    from auditor.report.text import render_json, render_text

    _, _, (_, tampered) = cycles
    text = render_text(tampered, verbose=True)
    assert f"localization: first divergent: layer {PERTURBED_LAYER}" in text
    assert "rollout Pendulum-v1 · ppo_policy [fp32] · 2 episodes" in text
    assert "batch 1: train" in text and "baseline ms210-graph (ms210 export): DRIFT" in text
    import json

    doc = json.loads(render_json(tampered))
    assert [len(e["action_diff"]) for e in doc["rollouts"][0]["episodes"]] == [200, 200]
    assert doc["rollouts"][0]["summary"]["closed-loop"]["steps"] == 400


def test_the_baseline_command_shows_and_resets_the_goldens_real_cycles_kept(cycles, tmp_path):
    """`auditor baseline` as a command (#38: end to end, on real parts), on a copy of the
    history two real cycles wrote: it lists the goldens the clean run kept, each side of each
    pair; a reset of one stack forgets that stack's alone and says how many."""
    import sqlite3

    from auditor.history import baselines as baseline

    _, store, (clean, _) = cycles
    db = tmp_path / "history.db"
    with sqlite3.connect(store.engine.url.database) as source, sqlite3.connect(db) as copy:
        source.backup(copy)  # WAL included (a file copy would miss what is not checkpointed)
    shown = auditor("--db", str(db), "baseline", "show", "--json")
    assert shown.returncode == 0, shown.stderr
    rows = json.loads(shown.stdout)
    assert {(g["stack"], g["source"], g["probe"], g["variant"], g["run_id"]) for g in rows} == {
        (stack, source, "ppo_policy", "fp32", clean.run_id)
        for stack, source in (("ms210", ""), ("ms210-graph", "ms210"), ("ms20", ""), ("lite20", "ms20"))
    }
    text = auditor("--db", str(db), "baseline", "show", "--stack", "lite20").stdout
    assert "lite20" in text and "ms210-graph" not in text
    done = auditor("--db", str(db), "baseline", "reset", "--stack", "lite20")
    assert done.returncode == 0 and "reset 1 golden baseline" in done.stdout, done.stdout + done.stderr
    left = Store(f"sqlite:///{db}")
    try:
        assert {g["stack"] for g in baseline.show(left.engine)} == {"ms210", "ms210-graph", "ms20"}
    finally:
        left.close()
