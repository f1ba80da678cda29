"""NPU telemetry end to end through real stack workers: fake npu-smi programs that print
published outputs (tests/npu_fakes.py) for a host of eight Atlas A2 cards (idle ones, a busy
one running hot with ECC errors, one failing with -8005), sampled by cycles, stored,
exported as gauges, plotted, and opening and resolving alerts; the daemon's own sampling
child and ``auditor telemetry`` too."""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path

import pytest

from auditor.alerts.engine import AlertEngine, list_alerts
from auditor.config.tables import AlertsConfig
from auditor.cycle.audit_run import AuditRun
from auditor.daemon.cycle_child import run_telemetry
from auditor.daemon.cycle_process import DONE, TELEMETRY, CycleRequest
from auditor.daemon.main import Daemon
from auditor.exposition.families import summarize
from auditor.exposition.prometheus import MetricsExporter
from auditor.extend.manager import Plugins
from auditor.history import telemetry as th
from auditor.history.filters import Filters
from auditor.history.store import Store
from auditor.report.html import render_report
from auditor.report.text import render_text
from tests.cli import auditor
from tests.configs import build
from tests.conftest import REPO
from tests.npu_fakes import HOSTS, host_910b_8, write_npu_smi
from tests.unit.daemon.test_daemon import setup_of

pytestmark = pytest.mark.stacks


def config(doc: dict, fake: Path, tmp_path: Path) -> object:
    """The shipped config cut to one cheap pair (ms20 -> lite20, obs_normalizer), every stack
    reading the fake npu-smi."""
    return build(
        doc,
        source=str(REPO / "auditor.toml"),
        stacks={name: {**doc["stacks"][name], "npu_smi": str(fake)} for name in ("ms20", "lite20")},
        pairs=[{"train": "ms20", "infer": "lite20", "probes": ["obs_normalizer"]}],
        rollout={"enabled": False},
        latency={"batches": []},
        storage={"url": f"sqlite:///{tmp_path / 'history.db'}"},
    )


def test_cycles_store_export_plot_and_alert(stacks, default_doc, tmp_path: Path) -> None:
    fake = write_npu_smi(tmp_path / "npu-smi", host_910b_8())
    cfg = config(default_doc, fake, tmp_path)
    store = Store.open(cfg.db_url)
    plugins = Plugins(entry_points=False)
    # at once in both directions (the defaults wait two runs each way: [alerts] open_after, resolve_after)
    alerts = AlertEngine(store.engine, AlertsConfig(open_after=1, resolve_after=1))

    result = AuditRun(cfg, plugins, store).run()
    (sample,) = result.telemetry
    assert sample.available and sample.host == "local" and sample.stack == "lite20"  # first by name
    assert [n.npu for n in sample.npus] == list(range(8)) and sample.calls == 1 + 8 * 5
    by_npu = {n.npu: n for n in sample.npus}
    assert by_npu[6].chips[0].values["temperature_c"] == 91.0 and by_npu[7].chips == ()
    keys = {f.key: f for f in result.findings if f.subject == "local"}
    assert keys["local/npu6/chip0/temperature_c/npu-telemetry"].severity == "warning"
    assert keys["local/npu6/chip0/health/npu-telemetry"].severity == "warning"
    assert keys["local/npu6/chip0/ecc_hbm_double_bit/npu-telemetry"].severity == "error"
    unread = keys["local/npu/telemetry-unavailable"]  # one per host, naming its NPUs
    assert "-8005" in unread.message and unread.details["npus"] == [7], unread
    assert not any(f.details.get("npu") in range(6) for f in keys.values())  # the idle cards: nothing
    assert {r.status for r in result.results} == {"consistent"}  # the probes agree
    # an uncorrectable ECC error is an error finding: the run is not clean, and says so in both
    assert result.outcome == "error" and result.exit_code == 1

    text = render_text(result, verbose=True)
    assert "host local: 8 NPU(s) read through lite20" in text and "hottest 91 °C" in text
    assert "views failed on NPU 7" in text and "npu6  312.4 W  91 °C  AI Core 87%" in text

    # stored: one series per NPU, chip and metric; the failing card has none
    with store.engine.connect() as conn:
        series = th.newest(conn, th.TelemetryFilters(metrics=("temperature_c",)), 10)
    assert [(s.npu, [v for _, v in s.points]) for s in series] == [
        (n, [91.0 if n == 6 else 39.0]) for n in range(7)
    ]

    # exported
    exporter = MetricsExporter()
    exporter.record_cycle(summarize(result))
    metrics = exporter.render().decode()
    assert 'auditor_npu_temperature_celsius{chip="0",host="local",npu="6"} 91.0' in metrics
    assert 'auditor_npu_hbm_usage_percent{chip="0",host="local",npu="0"} 5.0' in metrics
    assert 'auditor_npu_telemetry_up{host="local",npu="7"} 0.0' in metrics
    assert 'auditor_npu_health{chip="0",host="local",npu="6"} 1.0' in metrics

    # alerting: opened by the first run
    opened = {e.key for e in alerts.evaluate(result.run_id)}
    assert (
        "local/npu6/chip0/temperature_c/npu-telemetry" in opened
        and "local/npu/telemetry-unavailable" in opened
    )

    # the busy card cools down and the failing one answers again: the next cycle resolves both
    write_npu_smi(fake, host_910b_8(busy=(), failing=()))
    second = AuditRun(cfg, plugins, store).run()
    assert not [f for f in second.findings if f.subject == "local"]
    # volatile values stay out of fingerprints: the devices changed, the fingerprints did not
    for name in ("ms20", "lite20"):
        assert "npu_telemetry" not in result.stacks[name].fingerprint
        assert result.stacks[name].fingerprint_digest == second.stacks[name].fingerprint_digest
    assert not [f for f in second.findings if f.kind == "version-drift"]
    resolved = {e.key for e in alerts.evaluate(second.run_id) if e.event == "resolved"}
    assert {"local/npu6/chip0/temperature_c/npu-telemetry", "local/npu/telemetry-unavailable"} <= resolved
    assert not [a for a in list_alerts(store.engine, open_only=True) if a["subject"] == "local"]

    # plotted, both samples, with the latest values in the table
    with store.engine.connect() as conn:
        page, summary = render_report(conn, Filters(), metric="max_abs")
    assert "NPU telemetry of 1 host(s)" in summary
    assert "<h3>host local</h3>" in page and 'alt="NPU telemetry of host local over time"' in page
    store.close()


def test_daemon_sampling_child_and_host_without_npus(stacks, default_doc, tmp_path: Path, caplog) -> None:
    fake = write_npu_smi(tmp_path / "npu-smi", HOSTS["950"]())
    cfg = config(default_doc, fake, tmp_path)
    reply = run_telemetry(CycleRequest(cfg, [], cfg.db_url, kind=TELEMETRY))
    assert reply.kind == DONE
    (sample,) = reply.telemetry
    assert sample.npus[0].chips[0].values["power_w"] == 296.5
    store = Store.open(cfg.db_url)
    with store.engine.connect() as conn:
        (power,) = th.newest(conn, th.TelemetryFilters(metrics=("power_w",)), 5)
    assert power.points[-1][1] == 296.5 and power.host == "local"

    # a host without npu-smi: nothing stored, said once in the daemon's log
    cfg2 = config(default_doc, tmp_path / "no-npu-smi", tmp_path)
    reply = run_telemetry(CycleRequest(cfg2, [], cfg2.db_url, kind=TELEMETRY))
    (none,) = reply.telemetry
    assert not none.available and not none.failed and "not found" in (none.reason or "")

    daemon = Daemon(setup_of(cfg2, tmp_path), lambda: setup_of(cfg2, tmp_path))
    caplog.set_level(logging.INFO, logger="auditor.daemon")
    for _ in range(3):
        daemon._say_telemetry(reply.telemetry)
    said = [r.getMessage() for r in caplog.records if "no NPUs" in r.getMessage()]
    assert said == [f"host local: no NPUs ({none.reason}): no telemetry recorded"]
    with store.engine.connect() as conn:
        assert len(th.newest(conn, th.TelemetryFilters(), 100)) == len(sample.npus[0].chips[0].values)
    store.close()


def test_cli_sample_and_show(stacks, tmp_path: Path) -> None:
    fake = write_npu_smi(tmp_path / "npu-smi", host_910b_8())
    cfg_path = tmp_path / "auditor.toml"
    text = (REPO / "auditor.toml").read_text()
    text = text.replace('runtime = "mindspore-lite"', f'runtime = "mindspore-lite"\nnpu_smi = "{fake}"')
    cfg_path.write_text(text)
    db = tmp_path / "history.db"

    def run(*a: str) -> subprocess.CompletedProcess[str]:
        return auditor("--config", str(cfg_path), "--db", str(db), *a, timeout=300)

    sampled = run("telemetry", "sample")
    assert sampled.returncode == 1, sampled.stderr  # NPU 6 reaches limits, NPU 7 fails
    assert "NPU telemetry (stored)" in sampled.stdout and "npu6  312.4 W  91 °C" in sampled.stdout
    assert (
        "! warning  host local NPU 6: chip temperature 91 °C, at or above the warning limit 85 °C"
        in sampled.stdout
    )
    shown = run("telemetry", "show", "--npu", "6", "--metric", "temperature_c")
    assert shown.returncode == 0, shown.stderr
    assert "host local" in shown.stdout and "npu6      temperature_c" in shown.stdout and "91" in shown.stdout
    as_json = json.loads(run("telemetry", "show", "--json").stdout)
    assert {s["npu"] for s in as_json} == set(range(7))
