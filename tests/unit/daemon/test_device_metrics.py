"""What the daemon does with NPU telemetry and throughput, without stacks: the [telemetry]
interval job scheduled, changed and removed on reload; a host without NPUs said once in the
log; the gauges of the latest sample per host and of the serving side's throughput."""

from __future__ import annotations

import logging
from dataclasses import replace

from auditor.config.load import parse
from auditor.config.tables import TelemetryConfig
from auditor.daemon.main import TELEMETRY_JOB_ID, Daemon
from auditor.exposition.families import summarize
from auditor.exposition.prometheus import MetricsExporter
from auditor.results import (
    CONSISTENT,
    ChipTelemetry,
    CycleResult,
    HostTelemetry,
    Latency,
    NpuTelemetry,
    ProbeResult,
    Throughput,
)
from tests.unit.daemon.test_daemon import minimal, setup_of


def _daemon(config, tmp_path) -> Daemon:
    return Daemon(setup_of(config, tmp_path), lambda: setup_of(config, tmp_path))


def test_the_telemetry_job_follows_the_config(tmp_path):
    config = parse(minimal(telemetry={"interval": "45s"}, daemon={"state_dir": str(tmp_path)}))
    daemon = _daemon(config, tmp_path)
    daemon._start_scheduler()
    try:
        job = daemon._scheduler.get_job(TELEMETRY_JOB_ID)
        assert job is not None and job.trigger.interval.total_seconds() == 45 and job.args == ("telemetry",)
        daemon._schedule_telemetry(
            daemon._scheduler, replace(config, telemetry=TelemetryConfig(interval=120.0))
        )
        assert daemon._scheduler.get_job(TELEMETRY_JOB_ID).trigger.interval.total_seconds() == 120
        daemon._schedule_telemetry(
            daemon._scheduler, replace(config, telemetry=TelemetryConfig(enabled=False))
        )
        assert daemon._scheduler.get_job(TELEMETRY_JOB_ID) is None
    finally:
        daemon._scheduler.shutdown(wait=False)
    plain = _daemon(parse(minimal(daemon={"state_dir": str(tmp_path)})), tmp_path)
    plain._start_scheduler()
    try:
        assert plain._scheduler.get_job(TELEMETRY_JOB_ID) is None  # interval 0: cycles sample alone
    finally:
        plain._scheduler.shutdown(wait=False)


def test_a_host_without_npus_is_said_once_until_it_changes(tmp_path, caplog):
    daemon = _daemon(parse(minimal(daemon={"state_dir": str(tmp_path)})), tmp_path)
    caplog.set_level(logging.INFO, logger="auditor.daemon")
    none = HostTelemetry("edge", "lite20", 1.0, False, "npu-smi: not found on PATH")
    sick = HostTelemetry("box", "lite20", 1.0, False, "`npu-smi info -l`: exit status 187", failed=True)
    for _ in range(3):
        daemon._say_telemetry([none, sick])
    well = HostTelemetry("box", "lite20", 2.0, True, npus=(NpuTelemetry(0),))
    daemon._say_telemetry([none, well])
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert said == [
        ("INFO", "host edge: no NPUs (npu-smi: not found on PATH): no telemetry recorded"),
        ("WARNING", "host box: NPU telemetry not read: `npu-smi info -l`: exit status 187"),
        ("INFO", "host box: NPU telemetry of 1 NPU(s) read through lite20"),
    ]


def test_gauges_of_the_latest_sample_per_host_and_of_throughput():
    exporter = MetricsExporter()
    old = HostTelemetry(
        "box", "s", 1.0, True, npus=(NpuTelemetry(0, (ChipTelemetry("0", {"power_w": 50.0}),)),)
    )
    new = HostTelemetry(
        "box",
        "s",
        2.0,
        True,
        npus=(
            NpuTelemetry(0, (ChipTelemetry("0", {"power_w": 75.5}), ChipTelemetry("mcu", {"power_w": 16.9}))),
            NpuTelemetry(1, errors=("`npu-smi info -t power -i 1`: exit status 187",)),
        ),
    )
    exporter.record_telemetry([old])
    exporter.record_telemetry([new, HostTelemetry("edge", "s", 2.0, False, "no npu-smi")])
    lat = Latency(256, 10, 100.0, 110.0, 120.0, 100.0)
    result = ProbeResult(
        "tr->inf",
        "tr",
        "inf",
        "p",
        "1",
        "fp32",
        CONSISTENT,
        "ok",
        infer_latency=lat,
        throughput=(Throughput(256, 2.56e6),),
        saturation_batch=64,
    )
    exporter.record_cycle(summarize(CycleResult(1.0, 2.0, "c", {}, [result], [])))
    text = exporter.render().decode()
    assert 'auditor_npu_power_watts{chip="0",host="box",npu="0"} 75.5' in text  # the newest sample
    assert 'auditor_npu_power_watts{chip="mcu",host="box",npu="0"} 16.9' in text
    assert 'auditor_npu_telemetry_up{host="box",npu="1"} 0.0' in text
    assert 'auditor_npu_telemetry_timestamp_seconds{host="box"} 2.0' in text
    assert 'host="edge"' not in text  # no NPUs: no series
    labels = 'batch="256",pair="tr->inf",probe="p",stack="inf",variant="fp32"'
    assert f"auditor_throughput_samples_per_second{{{labels}}} 2.56e+06" in text
    assert 'auditor_saturation_batch{pair="tr->inf",probe="p",stack="inf",variant="fp32"} 64.0' in text
