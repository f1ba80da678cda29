"""The shipped rules on a real scrape, and the textfile for cron, on the real stacks (#53).

A daemon audits ms20 -> lite20 every few seconds with a tolerance of 0 (the stacks differ: a
drift); a real Prometheus (Debian's package) scrapes it every second and evaluates
contrib/prometheus/auditor.rules.yml. The drift alert fires; once the config is reloaded with a
tolerance the difference is within, the next cycle is consistent and the alert resolves. The
oracle is Prometheus' own API. Then `audit --alerts --textfile`, as cron would run it: the file
holds the cycle's metrics in the text format promtool reads, and the alerts open in the history
and reach the sink as the daemon's do; plain `audit` records none."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.cli import auditor_argv
from tests.conftest import REPO
from tests.monitoring_servers import PROMETHEUS, PROMTOOL, http, missing, start_prometheus
from tests.requires import require
from tests.stacks.test_daemon_stacks import alert_events, config_text, start_daemon, wait_for

pytestmark = pytest.mark.stacks

RULES = REPO / "contrib" / "prometheus" / "auditor.rules.yml"
DRIFT = {"alertname": "AuditorPairDrift", "pair": "ms20->lite20", "probe": "ppo_policy", "variant": "fp32"}
KEY = "ms20->lite20/ppo_policy/drift/mean+std+logp+action"


def firing(prom_url: str, alertname: str) -> list[dict]:
    answer = http(prom_url + "/api/v1/alerts")["data"]["alerts"]
    return [a for a in answer if a["labels"]["alertname"] == alertname and a["state"] == "firing"]


def test_a_real_prometheus_fires_the_drift_alert_and_resolves_it(stacks, tmp_path: Path) -> None:
    require("prometheus", lambda: missing(PROMETHEUS))
    cfg, db, log = tmp_path / "auditor.toml", tmp_path / "h.db", tmp_path / "daemon.log"
    cfg.write_text(config_text(tmp_path, tolerance=0, interval="3"))
    env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}
    proc = start_daemon(cfg, db, log, env)
    prom = None
    try:
        wait_for("the metrics endpoint", lambda: "Prometheus metrics on" in log.read_text(), 60, proc, log)
        target = re.search(r"Prometheus metrics on http://(127\.0\.0\.1:\d+)/metrics", log.read_text()).group(
            1
        )
        shutil.copy(RULES, tmp_path / "auditor.rules.yml")
        prom = start_prometheus(
            tmp_path / "prometheus",
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            f"rule_files: [{tmp_path / 'auditor.rules.yml'}]\n"
            f"scrape_configs: [{{job_name: auditor, static_configs: [{{targets: ['{target}']}}]}}]\n",
        )
        wait_for("the drift alert firing", lambda: firing(prom.url, "AuditorPairDrift"), 180, proc, log)
        (alert,) = firing(prom.url, "AuditorPairDrift")
        assert {k: alert["labels"][k] for k in DRIFT} == DRIFT and alert["labels"]["severity"] == "warning"
        assert alert["annotations"]["runbook_url"] == "monitoring/#auditorpairdrift"

        # the recorded age of the last cycle, from the daemon's own timestamps; no missed cycle
        def age() -> list:  # a rule group of its own: evaluated in its own turn
            query = "/api/v1/query?query=auditor:last_complete_run:age_seconds"
            return http(prom.url + query)["data"]["result"]

        wait_for("the recorded age of the last cycle", age, 30, proc, log)
        (recorded,) = age()
        assert 0 <= float(recorded["value"][1]) < 120, recorded
        assert firing(prom.url, "AuditorNoRecentCycle") == []

        # the cause goes: the difference is within the reloaded tolerance, the alert resolves
        cfg.write_text(config_text(tmp_path, tolerance=1.0, interval="3"))
        proc.send_signal(signal.SIGHUP)
        wait_for("the drift alert resolved", lambda: not firing(prom.url, "AuditorPairDrift"), 180, proc, log)
        status = http(
            prom.url + '/api/v1/query?query=auditor_probe_status{auditor_probe_status="consistent"}'
        )["data"]["result"]
        assert [s["value"][1] for s in status] == ["1"], status
    finally:
        if prom is not None:
            prom.stop()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)


def test_audit_from_cron_writes_the_textfile_and_keeps_the_alerts(stacks, tmp_path: Path) -> None:
    require("prometheus", lambda: missing(PROMTOOL))
    cfg, db, prom_file = tmp_path / "auditor.toml", tmp_path / "h.db", tmp_path / "auditor.prom"
    jsonl = tmp_path / "alerts.jsonl"
    text = config_text(tmp_path, tolerance=0)  # a drift
    cfg.write_text(text.replace("resolve_after = 1", "resolve_after = 1\nopen_after = 1"))

    def audit(*extra: str) -> subprocess.CompletedProcess:
        argv = auditor_argv("--config", str(cfg), "--db", str(db), "audit", *extra)
        return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600)

    first = audit("--alerts", "--textfile", str(prom_file))
    assert first.returncode == 1, first.stderr[-3000:]
    assert "auditor: open alerts: 1 warning" in first.stderr, first.stderr[-3000:]
    assert alert_events(jsonl, KEY) == [("opened", KEY)]  # opened and delivered, as the daemon does
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("auditor.prom")] == ["auditor.prom"]

    text = prom_file.read_text()
    lines = {
        line.split(" ")[0]: line.rsplit(" ", 1)[1] for line in text.splitlines() if not line.startswith("#")
    }
    where = 'pair="ms20->lite20",probe="ppo_policy",variant="fp32"'
    drift = f'auditor_probe_status{{auditor_probe_status="drift",{where}}}'
    assert lines[drift] == "1.0"
    assert lines['auditor_open_alerts{severity="warning"}'] == "1.0"
    assert lines["auditor_schedule_interval_seconds"] == "2.0"  # [schedule] interval = 2
    assert "auditor_last_complete_run_timestamp_seconds" in lines
    assert not any(name.startswith(("auditor_runs", "auditor_start_")) for name in lines)  # a daemon's only
    # promtool reads the file as node_exporter's collector would; its only lint is the latency
    # family's quantile label (a gauge per quantile, as the daemon has always served it)
    checked = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True)
    said = {line.split(" ", 1)[1] for line in (checked.stdout + checked.stderr).splitlines() if line.strip()}
    assert checked.returncode in (0, 3) and said <= {
        'non-summary metrics should not have "quantile" label'
    }, said

    # without --alerts: the run is stored and no alert is touched. The cause is gone in it
    # (a tolerance the difference is within), so an audit that judged alerts would resolve it
    cfg.write_text(
        config_text(tmp_path, tolerance=1.0).replace("resolve_after = 1", "resolve_after = 1\nopen_after = 1")
    )
    second = audit()
    assert second.returncode == 0 and "open alerts" not in second.stderr, second.stdout[-2000:]
    assert alert_events(jsonl, KEY) == [("opened", KEY)]  # not resolved
    runs = json.loads(
        subprocess.run(
            auditor_argv("--config", str(cfg), "--db", str(db), "runs", "--format", "json"),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
    )
    assert len(runs) == 2
