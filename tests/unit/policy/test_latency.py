"""Latency at several batch sizes and regressions against a stack's own history (no stacks)."""

from __future__ import annotations

import copy
import statistics

import pytest

from auditor.config.load import parse
from auditor.config.tables import ConfigError, LatencyConfig
from auditor.history.store import Store
from auditor.policy import latency
from auditor.results import CONSISTENT, CycleResult, Latency, ProbeResult, StackReport

CFG = LatencyConfig(
    regression_factor=1.5,
    regression_window=4,
    regression_min_runs=3,
    regression_spread=0.0,
    regression_sides=("train", "infer"),
    regression_confirm=1,
)
"""The factor alone, on both sides, one run deciding: what the tests of the window and the
history follow."""


def lat(p50: float, batch: int = 1) -> Latency:
    return Latency(batch, 10, p50, p50 * 1.1, p50 * 1.2, p50)


def test_extra_batches():
    assert latency.extra_batches([1, 256], 256, {"batch": 256}) == [1]
    assert latency.extra_batches([1, 1024, 1], 256, {"batch": 256}) == [1, 1024]
    assert latency.extra_batches([1, 256], 256, {"seed": 0}) == []  # no batch parameter
    assert latency.batch_params({"batch": 256, "seed": 3}, 1) == {"batch": 1, "seed": 3}
    assert latency.batch_model("ms20/ppo-fp32-abc", 1) == "ms20/ppo-fp32-abc@b1"


@pytest.mark.parametrize(
    ("p50", "previous"),
    [(150.0, [100.0, 100.0, 100.0]), (151.0, [100.0, 90.0, 110.0]), (300.0, [100.0, 100.0]), (10.0, [])],
)
def test_judge_against_the_rolling_median(p50, previous):
    median = statistics.median(previous) if previous else None
    expected = (
        median if len(previous) >= CFG.regression_min_runs and p50 > CFG.regression_factor * median else None
    )
    assert latency.judge(p50, previous, CFG) == expected


def test_judge_uses_the_window_only():
    previous = [100.0, 100.0, 100.0, 100.0, 1000.0, 1000.0]  # newest first; the old ones are out
    assert latency.judge(160.0, previous, CFG) == 100.0


def test_a_p50_that_jumps_between_processes_is_no_regression():
    """MindSpore 2.10 PyNative on a 2-core box: p50 4, 8, 12 or 16 ms from process to process.
    Twice the median is within that spread; a stable serving side's jump is not."""
    cfg = LatencyConfig(regression_window=10)
    pynative = [4000.0, 8000.0, 12000.0, 16000.0, 8000.0, 4000.0, 8000.0, 12000.0]
    assert LatencyConfig().regression_spread == 3.0
    assert latency.judge(16000.0, pynative, cfg) is None
    assert (
        latency.judge(16000.0, pynative, LatencyConfig(regression_window=10, regression_spread=0)) == 8000.0
    )
    graph = [200.0, 205.0, 198.0, 202.0, 201.0]
    assert latency.judge(450.0, graph, cfg) == 201.0
    assert latency.judge(290.0, graph, cfg) is None  # under 1.5× the median
    assert latency.spread([200.0]) == 0.0 and latency.spread([1.0, 2.0, 3.0]) == pytest.approx(1.4826)


# The ratios p50 / median of its last three runs of the 55 serving-side series of the shipped
# config's fourth daemon cycle, measured on this 2-core machine under a load average of 20
# (six other test suites running): every series moved, by 0.2× to 2.3×.
BUSY = [0.21, 0.23, 0.27, 0.46, 0.5, 0.52, 0.53, 0.53, 0.57, 0.59, 0.59, 0.59, 0.63, 0.65, 0.65, 0.66,
        0.66, 0.68, 0.69, 0.7, 0.7, 0.7, 0.71, 0.74, 0.78, 0.83, 0.83, 0.84, 0.86, 0.86, 0.88, 0.91,
        0.91, 0.94, 0.98, 1.02, 1.02, 1.08, 1.09, 1.09, 1.13, 1.21, 1.32, 1.33, 1.37, 1.41, 1.42, 1.44,
        1.6, 1.66, 1.78, 1.87, 1.89, 2.21, 2.27]  # fmt: skip


def test_a_busy_box_that_moves_every_series_trips_no_regression():
    import math

    cfg = LatencyConfig()
    window = [1522.0, 1490.0, 1560.0]  # a series steady over its last three runs
    busy = latency.HostNoise.of([math.log(r) for r in BUSY])
    assert latency.judge(1522.0 * 2.27, window, cfg) == 1522.0  # alone, its own spread is tiny
    assert latency.judge(1522.0 * 2.27, window, cfg, busy) is None  # its host moved as much
    quiet = latency.HostNoise.of([math.log(r) for r in (0.98, 1.01, 1.0, 1.02, 0.99, 1.0, 3.0)])
    assert latency.judge(1522.0 * 3.0, window, cfg, quiet) == 1522.0  # one series slower than its host
    slow = latency.HostNoise.of([math.log(r) for r in (1.9, 2.0, 2.1, 2.0, 1.95, 2.05)])
    assert slow.shift > 0.6
    assert latency.judge(1522.0 * 2.0, window, cfg, slow) is None  # the whole host twice as slow
    assert latency.HostNoise.of([0.1, 0.2]) == latency.HostNoise(series=2)  # too few series to tell


# -- history in the database ------------------------------------------------------------------


@pytest.fixture
def store(history_db):
    s = Store.open(f"sqlite:///{history_db}")
    yield s
    s.close()


def _result(train_p50: float, infer_p50: float, train="tr", infer="inf", b1=True) -> ProbeResult:
    return ProbeResult(
        f"{train}->{infer}",
        train,
        infer,
        "ppo_policy",
        "2",
        "fp32",
        CONSISTENT,
        "ok",
        train_latency=lat(train_p50 * 10, 256),
        infer_latency=lat(infer_p50 * 10, 256),
        train_latencies=(lat(train_p50),) if b1 else (),
        infer_latencies=(lat(infer_p50),) if b1 else (),
    )


def _run(store: Store, results, abort=False) -> int:
    stacks = {
        n: StackReport(n, role, "mindspore", "/py", "cpu", "local", {"runtime": "x"})
        for n, role in (("tr", "train"), ("tr2", "train"), ("inf", "infer"))
    }
    run_id = store.begin_run("t.toml")
    if abort:
        store.abort_run(run_id, "test")
    else:
        store.finish_run(run_id, CycleResult(1.0, 2.0, "t.toml", stacks, list(results), []), {})
    return run_id


def test_history_is_one_value_per_complete_run_newest_first(store):
    for p in (100.0, 110.0, 120.0):
        # Two pairs share the train stack: its latency appears twice per run, counted once.
        _run(store, [_result(p, p / 2), _result(p, 999.0, infer="inf", train="tr2")])
    _run(store, [_result(5000.0, 5000.0)], abort=True)
    series = latency.Series("local", "tr", "train", "ppo_policy", "fp32", 1)
    assert latency.history(store.engine, series, 10) == [120.0, 110.0, 100.0]
    assert latency.history(store.engine, series, 2) == [120.0, 110.0]
    big = latency.Series("local", "tr", "train", "ppo_policy", "fp32", 256)
    assert latency.history(store.engine, big, 10) == [1200.0, 1100.0, 1000.0]
    infer = latency.Series("local", "inf", "infer", "ppo_policy", "fp32", 1, source="tr")
    assert latency.history(store.engine, infer, 10) == [60.0, 55.0, 50.0]
    other = latency.Series("local", "inf", "infer", "ppo_policy", "fp32", 1, source="tr2")
    assert latency.history(store.engine, other, 10) == [999.0] * 3
    assert (
        latency.history(store.engine, latency.Series("elsewhere", "tr", "train", "ppo_policy", "fp32", 1), 10)
        == []
    )


def test_regressions_follow_the_numbers(store):
    previous = [100.0, 104.0, 96.0, 300.0]
    for p in previous:
        _run(store, [_result(p, p)])
    now = [_result(160.0, 140.0), _result(160.0, 200.0, train="tr2")]
    found = latency.regressions(now, store.engine, CFG, {"tr": "local", "tr2": "local", "inf": "local"})
    window = list(reversed(previous))[: CFG.regression_window]
    median = statistics.median(window)
    expected = set()
    for r in now:
        for series, value in latency.series_of(r, {}):
            past = latency.history(store.engine, series, CFG.regression_window)
            if len(
                past
            ) >= CFG.regression_min_runs and value.p50_us > CFG.regression_factor * statistics.median(past):
                expected.add(series)
    assert {(f.details["side"], f.details["batch"], f.details["source"]) for f in found} == {
        (s.side, s.batch, s.source) for s in expected
    }
    assert expected, "the numbers above must produce at least one regression"
    train_b1 = next(f for f in found if f.key == "tr/ppo_policy/fp32/b1/train/latency-regression")
    assert train_b1.details["median_us"] == median and train_b1.details["runs"] == 4
    assert "1.5× the median" not in train_b1.message and "limit 1.5×" in train_b1.message
    # tr2 has no history: never judged.
    assert not any(f.key.startswith("tr2/") or "/tr2/" in f.key for f in found)


def test_one_slow_run_is_no_regression_until_the_next_confirms_it(store):
    """[latency] regression_confirm (default 2): a p50 above the limit once, between runs at
    the usual speed, is one sample of a shared machine; the same step in two runs in a row is a
    regression, said with both runs' evidence."""
    cfg = LatencyConfig()
    assert cfg.regression_confirm == 2
    for p in (100.0, 102.0, 98.0, 101.0):
        _run(store, [_result(p, p)])
    assert latency.regressions([_result(400.0, 400.0)], store.engine, cfg, {}) == []  # a spike
    _run(store, [_result(400.0, 400.0)])
    _run(store, [_result(100.0, 100.0)])  # back to normal: the spike confirms nothing later
    assert latency.regressions([_result(400.0, 400.0)], store.engine, cfg, {}) == []
    _run(store, [_result(400.0, 400.0)])  # a step: slow, and slow again
    found = latency.regressions([_result(410.0, 410.0)], store.engine, cfg, {})
    assert found and {f.details["side"] for f in found} == {"infer"}
    assert all(f.details["confirm"] == 2 and "2 runs in a row" in f.message for f in found)
    window = [400.0, 100.0, 400.0, 101.0, 98.0, 102.0, 100.0]  # newest first, the spike among them
    assert {f.details["median_us"] for f in found if f.details["batch"] == 1} == {statistics.median(window)}


def test_only_the_serving_side_is_judged_by_default(store):
    for p in (100.0, 100.0, 100.0):
        _run(store, [_result(p, p)])
    cfg = LatencyConfig(regression_confirm=1)
    found = latency.regressions([_result(1000.0, 1000.0)], store.engine, cfg, {})
    assert found and {f.details["side"] for f in found} == {"infer"}


def test_no_judgement_before_min_runs(store):
    for p in (100.0, 100.0):
        _run(store, [_result(p, p)])
    assert latency.regressions([_result(1000.0, 1000.0)], store.engine, CFG, {}) == []


# -- config -------------------------------------------------------------------------------------


def test_latency_config_defaults_and_errors(default_doc):
    doc = copy.deepcopy(default_doc)
    assert parse(doc, "<t>").latency == LatencyConfig()
    doc["latency"] = {
        "batches": [0, 2, "x"],
        "regression_factor": 1.0,
        "regression_window": 2,
        "regression_min_runs": 5,
    }
    with pytest.raises(ConfigError) as exc:
        parse(doc, "<t>")
    assert exc.value.errors == [
        "latency.batches[0]: must be a whole number from 1 to 65536, not 0",
        "latency.batches[2]: must be a whole number from 1 to 65536, not string 'x'",
        "latency.regression_factor: must be a finite number greater than 1 and at most 1000, not 1.0",
        "latency.regression_min_runs: must be at most regression_window (2), not 5",
    ]
    doc["latency"] = {"batches": [512, 1, 512]}
    assert parse(doc, "<t>").latency.batches == (1, 512)


# -- throughput ---------------------------------------------------------------------------------


def test_throughput_per_batch_and_the_saturation_batch():
    lats = [lat(100.0, 256), lat(10.0, 1), lat(12.0, 8), lat(40.0, 64), lat(99.0, 256), None, lat(80.0, 128)]
    served = latency.throughput(lats)
    assert [t.batch for t in served] == [1, 8, 64, 128, 256]  # the first latency of a batch counts
    rates = {t.batch: t.samples_per_s for t in served}
    assert rates[256] == pytest.approx(256 / 100e-6) and rates[1] == pytest.approx(1 / 10e-6)
    # 64: 1.6M/s, 128: 1.6M/s, 256: 2.56M/s -> 90% of the peak is first reached at 256
    assert latency.saturation_batch(served, 0.9) == 256
    assert latency.saturation_batch(served, 0.6) == 64
    assert latency.saturation_batch(served[:1], 0.9) is None  # one batch: nothing to saturate


def test_a_serving_side_regression_says_the_throughput_once(store):
    for p in (100.0, 100.0, 100.0):
        _run(store, [_result(p, p)])
    found = latency.regressions([_result(100.0, 200.0)], store.engine, CFG, {})
    infer = [f for f in found if f.details["side"] == "infer"]
    assert {f.details["batch"] for f in infer} == {1, 256} and not [
        f for f in found if f.details["side"] == "train"
    ]
    b1 = next(f for f in infer if f.details["batch"] == 1)
    assert b1.details["throughput"] == pytest.approx(1 / 200e-6)
    assert b1.details["median_throughput"] == pytest.approx(1 / 100e-6)
    assert "throughput 5,000 samples/s, down from 10,000" in b1.message
    assert len({f.key for f in found}) == len(
        found
    )  # one finding per series: latency and throughput together


def test_throughput_is_stored_and_trended(store):
    from auditor.history.filters import Filters
    from auditor.history.queries import trend

    for p in (100.0, 50.0):
        r = _result(p, p)
        served = latency.throughput([r.infer_latency, *r.infer_latencies])
        _run(store, [ProbeResult(**{**r.__dict__, "throughput": served, "saturation_batch": 256})])
    with store.engine.connect() as conn:
        series = {s.output: [p[2] for p in s.points] for s in trend(conn, "throughput", Filters())}
        saturation = trend(conn, "saturation_batch", Filters())
    assert series == {
        "b1": [pytest.approx(1e4), pytest.approx(2e4)],
        "b256": [pytest.approx(256 / 1e-3), pytest.approx(256 / 5e-4)],
    }
    assert [p[2] for p in saturation[0].points] == [256.0, 256.0]


def test_sweep_config(default_doc):
    doc = copy.deepcopy(default_doc)
    doc["latency"] = {"sweep": [64, 1, 8, 64], "saturation": 0.8}
    cfg = parse(doc, "<t>").latency
    assert cfg.sweep == (1, 8, 64) and cfg.saturation == 0.8
    doc["latency"] = {"saturation": 1.5}
    with pytest.raises(ConfigError) as exc:
        parse(doc, "<t>")
    assert exc.value.errors == [
        "latency.saturation: must be a finite number greater than 0 and at most 1, not 1.5"
    ]


def test_a_member_is_judged_against_its_peers_this_cycle_too(store):
    """Four members of one group on one machine: each slower than its history. All slower
    together is the box (no finding); one far slower than its peers is that member."""
    members = [f"inf@h{i}" for i in range(1, 5)]
    hosts = {m: m.split("@")[1] for m in members} | {"tr": "local"}
    for p in (100.0, 102.0, 98.0):
        run_id = store.begin_run("t.toml")
        stacks = {
            n: StackReport(n, "infer", "mindspore-lite", "/py", "cpu", hosts[n], {"runtime": "x"})
            for n in members
        }
        stacks["tr"] = StackReport("tr", "train", "mindspore", "/py", "cpu", "local", {"runtime": "x"})
        results = [_result(p, p, infer=m) for m in members]
        store.finish_run(run_id, CycleResult(1.0, 2.0, "t.toml", stacks, results, []), {})
    cfg = LatencyConfig(regression_confirm=1)  # this cycle's peers, not the next run, decide here
    together = [_result(100.0, 240.0 + i, infer=m) for i, m in enumerate(members)]  # all 2.4x: the box
    assert latency.regressions(together, store.engine, cfg, hosts) == []
    alone = [_result(100.0, 100.0 + i, infer=m) for i, m in enumerate(members[:3])]
    alone.append(_result(100.0, 400.0, infer=members[3]))  # one member 4x its history and its peers
    found = latency.regressions(alone, store.engine, cfg, hosts)
    assert {f.subject for f in found} == {members[3]}
    (b1,) = [f for f in found if f.details["batch"] == 1]
    assert b1.details["peers"] == 3 and "the median 101 µs of its 3 peers this cycle" in b1.message
    # too few peers: its own history alone decides, as for any stack
    assert latency.against_peers(400.0, [100.0], LatencyConfig(), latency.HostNoise()) is None
