"""NPU telemetry judged against ``[telemetry]`` thresholds (auditor.cycle.telemetry): one finding
per series at the highest level reached, the worst value since the previous run counted,
NPUs whose views failed named, hosts without NPUs left alone."""

from __future__ import annotations

from datetime import datetime

from auditor.config.tables import LimitTable, TelemetryConfig
from auditor.cycle.telemetry import KIND, UNAVAILABLE, findings, from_document, samplers
from auditor.results import ChipTelemetry, HostTelemetry, NpuTelemetry


def host(
    temp: float = 40.0, health: float = 0.0, ecc: float = 0.0, errors: tuple[str, ...] = ()
) -> HostTelemetry:
    chip = ChipTelemetry(
        "0", {"temperature_c": temp, "health": health, "ecc_hbm_double_bit": ecc, "power_w": 300}
    )
    return HostTelemetry(
        "box", "lite20", 0.0, True, npus=(NpuTelemetry(3, (chip,)), NpuTelemetry(4, errors=errors))
    )


def test_quiet_devices_have_no_findings() -> None:
    assert findings([host()], TelemetryConfig()) == []


def test_default_limits_each_series_once_at_its_highest_level() -> None:
    found = findings([host(temp=91.0, health=2.0, ecc=2.0)], TelemetryConfig())
    by_metric = {f.details["metric"]: f for f in found}
    assert set(by_metric) == {"temperature_c", "health", "ecc_hbm_double_bit"}
    assert by_metric["health"].severity == "error"  # Alarm: above warning, below critical
    assert by_metric["health"].message == ("host box NPU 3: health Alarm, at or above the error limit Alarm")
    temp = by_metric["temperature_c"]
    assert temp.kind == KIND and temp.severity == "warning" and temp.subject == "box"
    assert temp.key == "box/npu3/chip0/temperature_c/npu-telemetry"
    assert "chip temperature 91 °C, at or above the warning limit 85 °C" in temp.message
    assert by_metric["ecc_hbm_double_bit"].severity == "error"


def test_configured_limits_replace_the_defaults_of_their_metric() -> None:
    cfg = TelemetryConfig(
        thresholds={"temperature_c": LimitTable(critical=90.0), "power_w": LimitTable(warning=250.0)}
    )
    found = {f.details["metric"]: f.severity for f in findings([host(temp=88.0, health=1.0)], cfg)}
    assert found == {"power_w": "warning", "health": "warning"}  # 88 °C: below the only limit now
    hot = {f.details["metric"]: f.severity for f in findings([host(temp=95.0)], cfg)}
    assert hot["temperature_c"] == "critical"


def test_the_worst_value_since_the_previous_run_counts() -> None:
    spike = datetime(2026, 3, 1, 12, 34, 56)
    worst = {("box", 3, "0", "temperature_c"): (97.0, spike), ("box", 3, "0", "power_w"): (10.0, spike)}
    (f,) = findings([host(temp=60.0)], TelemetryConfig(), worst)
    assert f.details["value"] == 97.0
    assert "97 °C (at 2026-03-01 12:34:56 UTC; now 60 °C)" in f.message


def test_failed_views_and_failed_hosts_are_findings_hosts_without_npus_are_not() -> None:
    (f,) = findings(
        [host(errors=("`npu-smi info -t power -i 4`: exit status 187: ret is -8005",))], TelemetryConfig()
    )
    assert f.kind == UNAVAILABLE and f.key == "box/npu/telemetry-unavailable"  # one per host, its NPUs named
    assert "1 telemetry view(s) failed on NPU 4" in f.message and "-8005" in f.message
    none = HostTelemetry("cpu-box", "ms20", 0.0, False, "npu-smi: not found on PATH")
    broken = HostTelemetry("sick", "ms20", 0.0, False, "`npu-smi info -l`: exit status 187", failed=True)
    (f,) = findings([none, broken], TelemetryConfig())
    assert f.key == "sick/telemetry-unavailable" and "no threshold checked" in f.message


def test_document_and_sampler_choice() -> None:
    doc = {
        "available": True,
        "npus": [{"npu": 0, "chips": [{"chip": "0", "values": {"power_w": 1.5, "bogus": 3}}], "errors": []}],
        "calls": 6,
        "seconds": 0.25,
    }
    sample = from_document("h", "s", doc, 12.0)
    assert sample.points() == [(0, "0", "power_w", 1.5)] and sample.calls == 6
    failed = from_document("h", "s", {"error": "boom"}, 12.0)
    assert failed.failed and not failed.available and "boom" in (failed.reason or "")

    class Stack:
        def __init__(self, host: str) -> None:
            self.host = host

    class Config:
        stacks = {"b": Stack("h1"), "a": Stack("h1"), "c": Stack("h2")}

    assert samplers(Config(), ["c", "b", "a"]) == {"h1": "a", "h2": "c"}  # type: ignore[arg-type]
