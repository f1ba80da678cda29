"""The shipped Prometheus rules (contrib/prometheus) and Grafana dashboard (contrib/grafana):
promtool accepts the rules and passes their unit tests, which fire and keep quiet every alert;
every expression parses and names only metrics a real exposition of the auditor has; every
runbook link lands on a section of docs/monitoring.md."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import yaml

from auditor.exposition.families import summarize
from auditor.exposition.prometheus import MetricsExporter
from auditor.results import (
    ChipTelemetry,
    Finding,
    HostTelemetry,
    NpuTelemetry,
    Throughput,
)
from tests.conftest import REPO
from tests.docs import blocks
from tests.monitoring_servers import PROMTOOL, missing
from tests.requires import require
from tests.unit.exposition.test_prometheus import families, result

RULES = REPO / "contrib" / "prometheus" / "auditor.rules.yml"
RULE_TESTS = REPO / "contrib" / "prometheus" / "auditor.rules.test.yml"
DASHBOARD = REPO / "contrib" / "grafana" / "auditor-dashboard.json"
MONITORING = REPO / "docs" / "monitoring.md"


def rules() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def panel_exprs() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]


def exposed_names() -> set[str]:
    """The sample names of a daemon's exposition after a cycle with every family filled."""
    cycle = result()
    cycle.findings.extend(
        [
            Finding("out-of-line", "warning", "infer-07", "k1", "infer-07 computes ppo_policy differently"),
            Finding("npu-telemetry", "error", "infer-02", "k2", "NPU 6 at 91 °C"),
        ]
    )
    cycle.results[0] = replace(cycle.results[0], throughput=(Throughput(8, 800.0),), saturation_batch=8)
    exporter = MetricsExporter(lambda: ())
    exporter.record_cycle(summarize(cycle))
    exporter.record_schedule(600.0)
    exporter.record_alerts({"warning": 1})
    values = {"temperature_c": 40.0, "power_w": 80.0, "hbm_usage_pct": 10.0, "ecc_hbm_double_bit": 0.0}
    npu = NpuTelemetry(0, (ChipTelemetry("0", values),))
    exporter.record_telemetry([HostTelemetry("infer-02", "lite20", 1.0, True, npus=(npu,))])
    return {s.name for f in families(exporter.render().decode()).values() for s in f.samples}


def require_promtool() -> str:
    require("prometheus", lambda: missing(PROMTOOL))
    return PROMTOOL


def names_in(expr: str) -> set[str]:
    """The auditor metric names an expression reads: identifiers outside quoted strings, not
    recording rules' names (with a colon) nor label names (before = in a matcher or in by/on)."""
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    bare = re.sub(r"\b(by|on|without|ignoring)\s*\([^)]*\)", "", bare)
    bare = re.sub(r"\{[^}]*\}", "", bare)
    return set(re.findall(r"(?<![\w:])auditor_[a-z0-9_]+(?![\w:])", bare))


def test_promtool_checks_the_rules_and_runs_their_unit_tests() -> None:
    promtool = require_promtool()
    checked = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules())} rules found" in checked.stdout
    tested = subprocess.run(
        [promtool, "test", "rules", RULE_TESTS.name], capture_output=True, text=True, cwd=RULE_TESTS.parent
    )
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


def test_every_alert_is_tested_firing_and_quiet() -> None:
    cases: dict[str, set[bool]] = {}
    for group in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for case in group.get("alert_rule_test", []):
            cases.setdefault(case["alertname"], set()).add(bool(case.get("exp_alerts")))
    alerts = {r["alert"] for r in rules() if "alert" in r}
    assert alerts and {a: cases.get(a, set()) for a in alerts} == {a: {True, False} for a in alerts}
    recorded = {r["record"] for r in rules() if "record" in r}
    tested = {
        case["expr"]
        for group in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in group.get("promql_expr_test", [])
    }
    assert recorded and recorded <= tested


def test_every_expression_parses_and_reads_only_what_the_auditor_exports(tmp_path: Path) -> None:
    exprs = [r["expr"] for r in rules()] + panel_exprs()
    exported = exposed_names()
    unknown = {name for e in exprs for name in names_in(e)} - exported
    assert unknown == set(), f"not exported by the auditor: {sorted(unknown)}"
    assert len({n for e in panel_exprs() for n in names_in(e)}) >= 12  # the dashboard reads them
    # each panel's query parses: promtool checks it as a recording rule's expression
    queries = [{"record": f"panel:q{i}", "expr": e} for i, e in enumerate(exprs)]
    doc = {"groups": [{"name": "panels", "rules": queries}]}
    path = tmp_path / "panels.yml"
    path.write_text(yaml.safe_dump(doc))
    promtool = require_promtool()
    checked = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_name_finder_is_not_fooled_by_labels_and_strings() -> None:
    assert names_in('sum by (auditor_x) (auditor_a{auditor_b="auditor_c"}) > on (auditor_y) auditor:z') == {
        "auditor_a"
    }


def test_every_runbook_link_lands_on_a_section_of_the_monitoring_page() -> None:
    headings = {
        re.sub(r"[^a-z0-9_-]", "", line.lstrip("#").strip().lower().replace(" ", "-"))
        for line in MONITORING.read_text().splitlines()
        if line.startswith("#")
    }
    links = [r["annotations"]["runbook_url"] for r in rules() if "alert" in r]
    assert links and all(link.startswith("monitoring/#") for link in links)
    assert {link.split("#", 1)[1] for link in links} <= headings


def test_the_monitoring_pages_rule_commands_as_written(tmp_path: Path) -> None:
    """docs/monitoring.md, "Rules": its commands run from a copy of the checkout's contrib/, with
    /tmp replaced by the test's directory; the prefixed copy still passes promtool."""
    require_promtool()
    [(lang0, check), (lang1, prefix)] = blocks("docs/monitoring.md", "Rules")
    assert (lang0, lang1) == ("sh", "sh")
    shutil.copytree(REPO / "contrib", tmp_path / "contrib")
    script = check + prefix.replace("/tmp/", f"{tmp_path}/")
    argv = ["bash", "-euo", "pipefail", "-c", script]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("SUCCESS") == 3, done.stdout
    prefixed = yaml.safe_load((tmp_path / "auditor.rules.yml").read_text())
    links = [r["annotations"]["runbook_url"] for g in prefixed["groups"] for r in g["rules"] if "alert" in r]
    assert links and all(u.startswith("https://docs.internal/auditor/monitoring/#") for u in links)
