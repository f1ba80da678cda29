"""The Prometheus endpoint: served on loopback from the daemon's own registry, and its text
parsed back with prometheus_client's parser."""

from __future__ import annotations

import math
import urllib.request

import numpy as np
import pytest
from auditor.plugins import default_comparators as dc
from prometheus_client.parser import text_string_to_metric_families

import auditor
from auditor.compare.outputs import Tolerance, compare_output
from auditor.exposition.families import PPO_METRICS, stack_versions, summarize
from auditor.exposition.prometheus import MetricsExporter
from auditor.results import STATUS_ORDER, CycleResult, Finding, Latency, ProbeResult, StackReport


def result() -> CycleResult:
    train = np.array([0.5, 1.0, -2.0], dtype=np.float32)
    infer = train + np.float32(1e-3)
    mean = compare_output("mean", train, infer, Tolerance(1e-5, 1e-5))
    std = compare_output("std", np.array([np.inf]), np.array([1.0]), Tolerance())
    stacks = {
        "ms20": StackReport(
            "ms20",
            "train",
            "mindspore",
            "/s/ms20/bin/python",
            "cpu",
            "local",
            {
                "framework": {"mindspore": {"version": "2.0.0"}, "mindspore_lite": None},
                "cann": {"version": "8.2.RC1"},
                "driver": {"version": "25.0.rc1.1"},
            },
        ),
        "lite20": StackReport(
            "lite20",
            "infer",
            "mindspore-lite",
            "/s/lite20/bin/python",
            "cpu",
            "local",
            {"runtime": "mindspore-lite", "runtime_package": "mindspore-lite", "runtime_version": "2.0.0"},
        ),
    }
    results = [
        ProbeResult(
            pair="ms20->lite20",
            train="ms20",
            infer="lite20",
            probe="ppo_policy",
            probe_version="1",
            variant="fp32",
            status="drift",
            message="mean drifted",
            outputs=(mean, std),
            train_latency=Latency(8, 50, 700.0, 900.0, 1200.0, 750.0),
            infer_latency=Latency(8, 50, 40.0, 55.0, 80.0, 45.0),
            checks=tuple(
                dc.importance_ratios(
                    {"mean": np.full((8, 1), 0.1), "std": np.full((8, 1), 0.6)},
                    {"mean": np.zeros((8, 1)), "std": np.full((8, 1), 0.6)},
                    {"kind": "gaussian"},
                )
            ),
        )
    ]
    return CycleResult(1000.0, 1004.5, "a.toml", stacks, results, [], run_id=12)


def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(fam, **labels) -> list:
    return [s for s in fam.samples if all(s.labels.get(k) == v for k, v in labels.items())]


def test_exposition_parses_and_holds_the_last_cycle():
    exp = MetricsExporter()
    exp.record_cycle(summarize(result()))
    exp.record_alerts({"warning": 2, "critical": 1})
    fams = families(exp.render().decode())

    div = fams["auditor_divergence"]
    assert div.type == "gauge"
    (max_abs,) = samples(
        div, pair="ms20->lite20", probe="ppo_policy", variant="fp32", output="mean", metric="max_abs"
    )
    assert max_abs.value == pytest.approx(1e-3, rel=1e-3)
    (std_abs,) = samples(div, output="std", metric="max_abs")
    assert math.isinf(std_abs.value)  # non-finite values survive the round trip

    status = {s.labels["auditor_probe_status"]: s.value for s in fams["auditor_probe_status"].samples}
    assert status == {s: float(s == "drift") for s in STATUS_ORDER}
    assert {"consistent", "drift", "incompatible", "error"} <= set(status)

    # the importance ratios, every metric of the comparator and nothing else
    ppo = {s.labels["metric"]: s.value for s in fams["auditor_ppo_ratio"].samples}
    assert set(ppo) == {c.metric for c in result().results[0].checks}
    # every name but the chosen trainer's share of the training side's draws (none chosen here)
    assert set(PPO_METRICS) - set(ppo) == {"train_drawn_removed_share"}
    assert 0.9 < ppo["ess"] < 1.0 and ppo["ppo_clip_share"] > 0 and ppo["kl_behaviour"] > 0

    lat = fams["auditor_latency_seconds"]
    got = {(s.labels["stack"], s.labels["quantile"]): s.value for s in lat.samples}
    assert got[("ms20", "0.5")] == pytest.approx(700e-6)
    assert got[("lite20", "0.99")] == pytest.approx(80e-6)
    assert len(got) == 6

    alerts = {s.labels["severity"]: s.value for s in fams["auditor_open_alerts"].samples}
    assert alerts == {"info": 0, "warning": 2, "error": 0, "critical": 1}

    assert fams["auditor_last_run_timestamp_seconds"].samples[0].value == 1004.5
    assert fams["auditor_last_run_duration_seconds"].samples[0].value == 4.5
    assert fams["auditor_last_run_id"].samples[0].value == 12
    outcome = {
        s.labels["auditor_last_run_outcome"]: s.value for s in fams["auditor_last_run_outcome"].samples
    }
    assert outcome["drift"] == 1 and sum(outcome.values()) == 1
    runs = {
        s.labels["status"]: s.value for s in fams["auditor_runs"].samples if s.name == "auditor_runs_total"
    }
    assert runs == {"complete": 1, "aborted": 0}

    # the text format has no info type: an info metric is a gauge named *_info, value 1
    info = {s.labels["stack"]: s.labels for s in fams["auditor_stack_info"].samples}
    assert {s.value for s in fams["auditor_stack_info"].samples} == {1.0}
    assert info["ms20"] == {
        "stack": "ms20",
        "role": "train",
        "runtime": "mindspore",
        "host": "local",
        "runtime_package": "",  # this fingerprint has no runtime section
        "runtime_version": "",
        "mindspore": "2.0.0",
        "mindspore_lite": "",
        "cann": "8.2.RC1",
        "driver": "25.0.rc1.1",
    }
    assert info["lite20"]["mindspore_lite"] == "2.0.0" and info["lite20"]["cann"] == ""
    assert (info["lite20"]["runtime_package"], info["lite20"]["runtime_version"]) == (
        "mindspore-lite",
        "2.0.0",
    )


def test_an_aborted_run_keeps_the_last_measurements():
    exp = MetricsExporter()
    exp.record_cycle(summarize(result()))
    exp.record_aborted(13, 2000.0, 2001.0)
    fams = families(exp.render().decode())
    assert samples(fams["auditor_divergence"], output="mean", metric="max_abs")
    outcome = {
        s.labels["auditor_last_run_outcome"]: s.value for s in fams["auditor_last_run_outcome"].samples
    }
    assert outcome["aborted"] == 1 and outcome["drift"] == 0
    assert fams["auditor_last_run_id"].samples[0].value == 13


def test_before_any_cycle_only_what_is_known_is_exposed():
    fams = families(MetricsExporter().render().decode())
    assert "auditor_last_run_timestamp_seconds" not in fams
    assert fams["auditor_divergence"].samples == []
    assert [s.labels for s in fams["auditor_build_info"].samples] == [{"version": auditor.__version__}]
    # our own registry: no process_/python_ collectors of the global one
    assert not any(n.startswith(("process_", "python_")) for n in fams)


def test_served_on_loopback_port_zero():
    exp = MetricsExporter()
    exp.record_cycle(summarize(result()))
    host, port = exp.serve("127.0.0.1", 0)
    try:
        assert host == "127.0.0.1" and port > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            fams = families(r.read().decode())
        assert "auditor_divergence" in fams and "auditor_open_alerts" in fams
    finally:
        exp.close()


def test_stack_versions_tolerates_missing_sections():
    bare = StackReport("x", "train", "mindspore", "/p", "cpu", "local", None)
    assert stack_versions(bare) == {
        "runtime_package": "",
        "runtime_version": "",
        "mindspore": "",
        "mindspore_lite": "",
        "cann": "",
        "driver": "",
    }
    odd = StackReport("x", "train", "mindspore", "/p", "cpu", "local", {"framework": "garbled", "cann": None})
    assert stack_versions(odd)["cann"] == ""


def test_findings_and_ppo_limits_are_exposed() -> None:
    cycle = result()
    cycle.findings.extend(
        [
            Finding("out-of-line", "warning", "infer-07", "a", "infer-07 computes ppo_policy differently"),
            Finding("out-of-line", "warning", "infer-07", "b", "infer-07 computes sampler differently"),
            Finding("npu-telemetry", "error", "infer-02", "c", "NPU 6 at 91 °C"),
        ]
    )
    exp = MetricsExporter()
    exp.record_cycle(summarize(cycle))
    fams = families(exp.render().decode())
    found = {
        (s.labels["kind"], s.labels["severity"], s.labels["subject"]): s.value
        for s in fams["auditor_findings"].samples
    }
    assert found == {("out-of-line", "warning", "infer-07"): 2.0, ("npu-telemetry", "error", "infer-02"): 1.0}
    # the importance_ratios comparator's default limits (plugins/default_comparators.py, [ppo])
    limits = {s.labels["metric"]: s.value for s in fams["auditor_ppo_limit"].samples}
    assert limits == {
        "ppo_clip_share": 0.0,
        "tis_share": 0.0,
        "ess": 0.9995,
        "train_drawn_ppo_clip_share": 0.0,
    }


def test_the_daemon_says_its_start_schedule_and_last_complete_cycle() -> None:
    exp = MetricsExporter()
    fams = families(exp.render().decode())
    assert (
        "auditor_last_complete_run_timestamp_seconds" not in fams
        and "auditor_schedule_interval_seconds" not in fams
    )
    assert abs(fams["auditor_start_timestamp_seconds"].samples[0].value - exp.started_at) < 1e-6
    exp.record_schedule(600.0)
    exp.record_cycle(summarize(result()))
    exp.record_aborted(13, 2000.0, 2003.0)  # an aborted run is not a complete one
    fams = families(exp.render().decode())
    assert fams["auditor_schedule_interval_seconds"].samples[0].value == 600.0
    assert fams["auditor_last_complete_run_timestamp_seconds"].samples[0].value == 1004.5
    assert fams["auditor_last_run_timestamp_seconds"].samples[0].value == 2003.0


def test_the_textfile_holds_the_cycle_without_the_daemons_counters(tmp_path) -> None:
    exp = MetricsExporter(daemon=False)
    exp.record_cycle(summarize(result()))
    target = tmp_path / "auditor.prom"
    target.write_text("old content\n")
    exp.write_textfile(target)
    assert [p.name for p in tmp_path.iterdir()] == ["auditor.prom"]  # renamed onto it, nothing left
    fams = families(target.read_text())
    assert "auditor_runs" not in fams and "auditor_start_timestamp_seconds" not in fams
    status = {s.labels["auditor_probe_status"]: s.value for s in fams["auditor_probe_status"].samples}
    assert status["drift"] == 1.0
