"""Nothing unchecked is called clean: what a cycle was asked to check and could not becomes an
``unchecked`` finding or result, the outcome is the worst status of every part of the run
with the count of each, and the unchecked status goes through the report, the JSON, the
history (``--status``), alerts and Prometheus like any other."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timedelta

import pytest
from click.testing import CliRunner

from auditor.cli.main import cli
from auditor.config.load import parse
from auditor.cycle import unchecked
from auditor.exposition.prometheus import RUN_OUTCOMES
from auditor.history.publication import PublicationSummary
from auditor.history.store import Store
from auditor.report.html import STATUS_COLORS
from auditor.report.text import render_json, render_text
from auditor.results import (
    CONSISTENT,
    ERROR,
    STATUS_ORDER,
    UNCHECKED,
    CycleResult,
    Finding,
    ProbeResult,
    StackReport,
)


def result(status: str = CONSISTENT, variant: str = "fp32", message: str = "ok") -> ProbeResult:
    return ProbeResult("ms20->lite20", "ms20", "lite20", "ppo_policy", "3", variant, status, message)


def stack(name: str, fingerprint: dict | None = None) -> StackReport:
    return StackReport(name, "infer", "mindspore-lite", "/py", "cpu", "local", fingerprint or {"runtime": {}})


def cycle(results, findings=(), stacks=None) -> CycleResult:
    stacks = stacks or {"ms20": stack("ms20"), "lite20": stack("lite20")}
    return CycleResult(1.0, 2.0, "t.toml", stacks, list(results), list(findings))


def own_finding(r: ProbeResult) -> Finding:
    severity = {"drift": "warning", "unsupported": "warning", "error": "error", "unchecked": "warning"}[
        r.status
    ]
    return Finding(r.status, severity, r.pair, f"{r.pair}/{r.probe}/{r.variant}/{r.status}", r.message)


def test_the_outcome_is_the_worst_of_every_part_with_every_count():
    """The report that said UNSUPPORTED while it held two drifts and two errors: findings count."""
    unsupported = result("unsupported", "fp16", "unsupported operator: StandardNormal")
    findings = [
        own_finding(unsupported),
        Finding("invariant", "error", "lite20", "lite20/std", "lite20 computed std = 0"),
        Finding("invariant", "error", "lite20", "lite20/logp", "lite20 computed logp = -inf"),
        Finding("model-drift", "warning", "lite20", "lite20/model-drift/a", "deployed model a changed"),
        Finding("version-drift", "info", "lite20", "lite20/version-drift", "lite20 changed"),
    ]
    r = cycle([result(), unsupported], findings)
    assert r.status_counts() == {CONSISTENT: 1, "unsupported": 1, ERROR: 2}
    assert r.outcome == ERROR and r.exit_code == 1
    assert (
        render_text(r)
        .rstrip()
        .endswith(
            "Outcome: ERROR (1 consistent, 0 unchecked, 0 drift, 1 unsupported, 0 incompatible, 2 error); "
            "exit status 1"
        )
    )


def test_the_outcome_word_and_the_exit_status_always_agree():
    """A finding of severity error or critical makes the exit status 1: the outcome then says
    error (never "Outcome: CONSISTENT ...; exit status 1"), whatever else the run holds."""
    deployed = Finding("model-drift", "critical", "lite20", "lite20/model-drift/p", "another graph deployed")
    r = cycle([result()], [deployed])
    assert (r.outcome, r.exit_code, r.status_counts()) == (ERROR, 1, {CONSISTENT: 1, ERROR: 1})
    assert (
        render_text(r)
        .rstrip()
        .endswith(
            "Outcome: ERROR (1 consistent, 0 unchecked, 0 drift, 0 unsupported, 0 incompatible, 1 error); "
            "exit status 1"
        )
    )
    # a blocking rule finding counts through the variants it blocked, and only through them
    blocks = {"blocks": [{"pair": "ms20->lite20", "variant": "fp16"}]}
    incompatible = Finding("incompatible", "critical", "lite20", "lite20/mindir", "cannot load", blocks)
    blocked = result("incompatible", "fp16", "cannot load")
    assert cycle([result(), blocked], [incompatible]).status_counts() == {CONSISTENT: 1, "incompatible": 1}
    other = Finding("operator-support", "critical", "lite20", "lite20/op", "no kernel", blocks)
    assert cycle([result()], [other]).outcome == ERROR  # it blocked nothing of this run: it counts
    # a stack's failure finding counts as the stack, and on its own when the stack is not marked
    down = Finding("stack-unavailable", "error", "ms20", "ms20/stack-unavailable", "crashed")
    broken = {"ms20": dataclasses.replace(stack("ms20"), error="crashed")}
    assert cycle([], [down], broken).status_counts() == {ERROR: 1}
    assert cycle([result()], [down]).outcome == ERROR
    for r in (cycle([result()]), cycle([result()], [deployed]), cycle([result("drift")])):
        assert r.exit_code == (0 if r.outcome == CONSISTENT else 1)
        assert json.loads(render_json(r))["exit_code"] == r.exit_code


def test_unchecked_alone_is_not_clean_and_says_what_and_why():
    lost = Finding(
        UNCHECKED, "warning", "lite20", "lite20/unchecked/collector/cann", "the cann collector failed"
    )
    r = cycle([result()], [lost])
    assert r.outcome == UNCHECKED and r.exit_code == 1
    text = render_text(r)
    assert "Not checked (the run cannot be called consistent)\n  ? the cann collector failed" in text
    assert (
        "Outcome: UNCHECKED (1 consistent, 1 unchecked, 0 drift, 0 unsupported, 0 incompatible, 0 error)"
        in text
    )
    doc = json.loads(render_json(r))
    assert doc["outcome"] == UNCHECKED and doc["exit_code"] == 1
    assert doc["statuses"] == {CONSISTENT: 1, UNCHECKED: 1} and doc["unchecked"] == [
        "the cann collector failed"
    ]


def test_a_rule_that_raised_left_its_checks_undone():
    raised = Finding(
        "rule-error", "warning", "cann", "cann/rule-error", "rule cann failed, its checks were skipped"
    )
    assert cycle([result()], [raised]).outcome == UNCHECKED


def test_an_unchecked_result_counts_once():
    missing = result(UNCHECKED, "model", "export/policy.mindir: no such file")
    r = cycle([missing], [own_finding(missing)])
    assert r.status_counts() == {UNCHECKED: 1}
    assert r.unchecked == ["ms20->lite20 ppo_policy [model]: export/policy.mindir: no such file"]


def test_every_consumer_knows_every_status():
    assert UNCHECKED in STATUS_ORDER and STATUS_ORDER.index(UNCHECKED) == 1
    assert tuple(STATUS_COLORS) == STATUS_ORDER
    assert set(STATUS_ORDER) <= set(RUN_OUTCOMES)


def test_collectors_that_failed_and_watched_models_not_read():
    fp = {
        "runtime": {},
        "cann": {"error": "auditor.plugins.collectors.cann: collect() raised OSError: EIO"},
        "driver": {"version": None, "unknown": {"version": "missing"}},  # unknown is not a failure
        "models": {
            "patterns": ["/srv/*.mindir"],
            "files": {"/srv/b.mindir": {"sha256": "ab", "readable": False, "reason": "encrypted"}},
            "unknown": {"/srv/*.mindir": "no file matches"},
        },
    }
    found = unchecked.stack_findings({"lite20": stack("lite20", fp)})
    keys = sorted(f.key for f in found)
    assert keys == [
        "lite20/unchecked/collector/cann",
        "lite20/unchecked/models//srv/*.mindir",
        "lite20/unchecked/models//srv/b.mindir",
    ]
    assert all(f.kind == UNCHECKED for f in found)
    assert any("no file matches" in f.message for f in found)


def test_plugins_that_did_not_load():
    problems = [
        "plugin my_rules (/etc/auditor/plugins/my_rules.py): cannot import: "
        "ModuleNotFoundError: No module named 'x'",
        "plugin hooks_raise: auditor_rules raised RuntimeError: down\nTraceback (most recent call last):\n"
        '  File "/p/hooks_raise.py", line 3, in auditor_rules\n',
    ]
    found = unchecked.plugin_findings(problems)
    assert [f.key for f in found] == ["plugins/unchecked/my_rules", "plugins/unchecked/hooks_raise"]
    assert "No module named 'x'" in found[0].message and "(at /p/hooks_raise.py:3)" in found[1].message
    assert "Traceback" not in found[1].message


def _split_config(max_age: str | None):
    doc = {
        "stacks": {
            "ms20": {"role": "train", "runtime": "mindspore", "source": "db"},
            "lite20": {"role": "infer", "runtime": "mindspore-lite", "python": "/py"},
        },
        "pairs": [{"train": "ms20", "infer": "lite20", "probes": ["ppo_policy"]}],
    }
    if max_age is not None:
        doc["stacks"]["ms20"]["max_publication_age"] = max_age
    return parse(doc, "t.toml")


def test_a_missing_or_stale_publication():
    now = datetime(2026, 5, 1, 12, 0, 0)
    fresh = PublicationSummary(7, "ms20", "train-box", "train-zone", 3, now - timedelta(minutes=30))
    stale = dataclasses.replace(fresh, completed_at=now - timedelta(hours=3))
    assert unchecked.publication_findings(_split_config("1h"), {"ms20": fresh}, now) == []
    assert unchecked.publication_findings(_split_config(None), {"ms20": stale}, now) == []
    [old] = unchecked.publication_findings(_split_config("1h"), {"ms20": stale}, now)
    assert old.kind == UNCHECKED and old.details["age_seconds"] == 3 * 3600
    assert "publication 7 of ms20 by train-zone (run 3, 2026-05-01 09:00:00 UTC, 3.0 h old)" in old.message
    assert "older than max_publication_age (60 min)" in old.message
    [missing] = unchecked.publication_findings(_split_config(None), {"ms20": None}, now)
    assert "has no complete publication there" in missing.message


def test_max_publication_age_belongs_to_a_stack_read_from_the_database():
    from auditor.config.tables import ConfigError

    doc = {
        "stacks": {
            "ms20": {"role": "train", "runtime": "mindspore", "python": "/py", "max_publication_age": "1h"}
        },
        "models": {},
        "pairs": [],
    }
    doc["stacks"]["ms20"]["publish"] = ["ppo_policy"]
    with pytest.raises(ConfigError) as info:
        parse(doc, "t.toml")
    assert any(
        e.startswith("stacks.ms20.max_publication_age: only a stack read from the database")
        for e in info.value.errors
    )


def test_unchecked_goes_through_the_history_and_its_filters(history_db):
    url = f"sqlite:///{history_db}"
    store = Store.open(url)
    missing = result(UNCHECKED, "model", "export/policy.mindir: no such file")
    run_id = store.begin_run("t.toml")
    store.finish_run(run_id, cycle([result(), missing], [own_finding(missing)]), {})
    store.close()
    runner = CliRunner()
    listed = runner.invoke(cli, ["--db", url, "runs", "--json"])
    assert json.loads(listed.stdout)[0]["outcome"] == UNCHECKED
    rows = runner.invoke(cli, ["--db", url, "history", "--status", UNCHECKED, "--format", "json"])
    assert rows.exit_code == 0, rows.output
    assert [r["variant"] for r in json.loads(rows.stdout)] == ["model"]
