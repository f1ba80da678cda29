"""Browsing a shared history: two auditors (train-zone, infer-zone) on one database, stacks on
two hosts, a user's model; every read command's headers, --auditor filter and column, and
--format table|json|csv; history's selectors and --where on any recorded field."""

from __future__ import annotations

import csv
import io
import json
import shutil
from datetime import datetime, timedelta

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, text

from auditor.cli.main import cli
from auditor.history.store import Store
from tests.history_fixtures import generate_history

RUNS = 12
A, B = "train-zone", "infer-zone"


@pytest.fixture(scope="module")
def db(tmp_path_factory, history_template):
    path = tmp_path_factory.mktemp("browse") / "h.db"
    shutil.copyfile(history_template, path)
    store = Store.open(f"sqlite:///{path}")
    start = datetime(2026, 3, 1)
    generate_history(store.engine, RUNS, start=start, host=A, models=("policy",), error_rate=0, abort_rate=0)
    generate_history(
        store.engine,
        RUNS,
        start=start + timedelta(minutes=5),
        host=B,
        upgrade_at=None,
        error_rate=0,
        abort_rate=0,
    )
    store.close()
    return str(path)


def run(db: str, *args: str) -> str:
    result = CliRunner().invoke(cli, ["--db", db, *args], catch_exceptions=False)
    assert result.exit_code == 0, (args, result.output, result.stderr)
    return result.stdout


def csv_rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_history_has_the_auditor_column_in_every_format(db):
    table = run(db, "history", "--limit", "0")
    head = table.splitlines()[0].split()
    assert head[:4] == ["run", "started", "(UTC)", "auditor"]
    rows = csv_rows(run(db, "history", "--limit", "0", "--format", "csv"))
    assert {r["auditor"] for r in rows} == {A, B}
    doc = json.loads(run(db, "history", "--limit", "0", "--format", "json"))
    assert len(doc) == len(rows) == len(table.splitlines()) - 1
    assert {d["auditor"] for d in doc} == {A, B}


@pytest.mark.parametrize(
    ("args", "check"),
    [
        (("--auditor", A), lambda r: r["auditor"] == A),
        (("--auditor", A, "--auditor", B), lambda r: r["auditor"] in (A, B)),
        (("--pair", "ms20->lite20"), lambda r: r["pair"] == "ms20->lite20"),
        (("--stack", "ms210-graph"), lambda r: "ms210-graph" in r["pair"]),
        (("--probe", "ppo_policy"), lambda r: r["probe"] == "ppo_policy"),
        (("--model", "policy"), lambda r: r["probe"] == "policy" and r["variant"] == "model"),
        (("--host", B), lambda r: r["auditor"] == B),  # infer-zone's stacks live on its host
        (("--status", "incompatible"), lambda r: r["status"] == "incompatible"),
        (("--where", "status!=consistent"), lambda r: r["status"] != "consistent"),
        (("--where", "message~MindIR version 3"), lambda r: "MindIR version 3" in r["message"]),
        (
            ("--where", f"auditor={B}", "--where", "infer=lite20"),
            lambda r: r["auditor"] == B and "lite20" in r["pair"],
        ),
        (("--where", "variant=model"), lambda r: r["pair"] == "policy:golden->lite20"),
        (("--where", "probe_version=1", "--pair", "ms210->lite20"), lambda r: r["pair"] == "ms210->lite20"),
    ],
)
def test_each_selector_and_filter_narrows_the_rows(db, args, check):
    every = csv_rows(run(db, "history", "--limit", "0", "--format", "csv"))
    rows = csv_rows(run(db, "history", "--limit", "0", "--format", "csv", *args))
    assert rows and all(check(r) for r in rows), args
    assert len(rows) == sum(check(r) for r in every), args  # none left out either


def test_unknown_selector_values_and_fields_are_usage_errors(db):
    runner = CliRunner()
    bad = runner.invoke(cli, ["--db", db, "history", "--auditor", "nobody"])
    assert bad.exit_code == 2 and f"no auditor 'nobody' in the history (known: {B}, {A})" in bad.stderr
    bad = runner.invoke(cli, ["--db", db, "history", "--model", "nothing"])
    assert bad.exit_code == 2 and "no probe 'nothing'" in bad.stderr
    bad = runner.invoke(cli, ["--db", db, "history", "--where", "colour=red"])
    assert bad.exit_code == 2 and "no field 'colour'" in bad.stderr and "probe_version" in bad.stderr
    # A value no result has anywhere is a typo, = and != alike; ~ is a search that may find nothing.
    bad = runner.invoke(cli, ["--db", db, "history", "--where", "infer=lite2O"])
    assert bad.exit_code == 2 and "--where infer=lite2O: no infer 'lite2O' in the history" in bad.stderr
    assert "(known: " in bad.stderr and "lite20" in bad.stderr
    bad = runner.invoke(cli, ["--db", db, "history", "--where", "pair!=ms20->lite2O"])
    assert bad.exit_code == 2 and "no pair 'ms20->lite2O'" in bad.stderr
    bad = runner.invoke(cli, ["--db", db, "history", "--where", "run=999999"])
    assert bad.exit_code == 2 and "no stored result has run '999999'" in bad.stderr
    found = runner.invoke(cli, ["--db", db, "history", "--where", "message~no such words"])
    assert found.exit_code == 0 and "(no matching rows)" in found.stderr
    # A status that exists in the vocabulary but not (yet) in this history is a real question.
    valid = runner.invoke(cli, ["--db", db, "history", "--where", "status=unsupported"])
    assert valid.exit_code == 0, valid.stderr
    bad = runner.invoke(cli, ["--db", db, "history", "--where", "status=drfit"])
    assert bad.exit_code == 2 and "no status 'drfit'" in bad.stderr


def test_runs_in_every_format_and_per_auditor(db):
    table = run(db, "runs", "--limit", "100").splitlines()
    assert table[1].split()[:4] == ["id", "started", "(UTC)", "finished"] and "auditor" in table[1].split()
    rows = csv_rows(run(db, "runs", "--limit", "100", "--format", "csv"))
    assert len(rows) == 2 * RUNS and {r["auditor_id"] for r in rows} == {A, B}
    mine = json.loads(run(db, "runs", "--limit", "100", "--auditor", B, "--json"))
    assert len(mine) == RUNS and {r["auditor_id"] for r in mine} == {B}


def test_show_the_latest_run_of_one_auditor(db):
    latest_a = csv_rows(run(db, "show", "latest", "--auditor", A, "--format", "csv"))
    assert latest_a and {r["auditor"] for r in latest_a} == {A}
    assert any(r["pair"] == "policy:golden->lite20" for r in latest_a)
    latest_b = json.loads(run(db, "show", "latest", "--auditor", B, "--format", "json"))
    assert latest_b["run"]["auditor_id"] == B and latest_b["run"]["id"] != int(latest_a[0]["run"])
    assert run(db, "show", "latest", "--auditor", B, "--format", "table").startswith(
        f"run {latest_b['run']['id']}"
    )


def test_trend_per_auditor_as_csv_and_json(db):
    rows = csv_rows(run(db, "trend", "--metric", "max_abs", "--pair", "ms20->lite20", "--format", "csv"))
    assert {r["auditor"] for r in rows} == {A, B} and list(rows[0])[:2] == ["metric", "pair"]
    only = json.loads(
        run(db, "trend", "--metric", "max_abs", "--pair", "ms20->lite20", "--auditor", A, "--format", "json")
    )
    points = [p for s in only["series"] for p in s["points"]]
    assert points and {p["auditor"] for p in points} == {A}


def test_the_html_report_of_one_auditor(db, tmp_path):
    out = run(db, "report", "--out", str(tmp_path / "a.html"), "--auditor", A, "--pair", "ms20->lite20")
    assert "wrote" in out and (tmp_path / "a.html").stat().st_size > 0


def test_show_names_a_models_golden_side(db):
    text = run(db, "show", "latest", "--auditor", A)
    line = next(x for x in text.splitlines() if "policy:golden->lite20" in x)
    assert "p50 golden" in line and "p50 train" not in line


def test_the_commands_that_used_to_raise_say_one_line(db, tmp_path):
    """`db prune --keep-days 99999999999` (a date before year 1) and `trend` on a run whose
    started_at is empty (a hand-edited or damaged row) used to end in a traceback."""
    result = CliRunner().invoke(cli, ["--db", db, "db", "prune", "--keep-days", "99999999999", "--dry-run"])
    assert result.exit_code == 2 and "Traceback" not in result.output + result.stderr
    assert "--keep-days" in result.stderr
    damaged = tmp_path / "damaged.db"
    shutil.copy(db, damaged)
    engine = create_engine(f"sqlite:///{damaged}")
    with engine.begin() as conn:
        conn.execute(text("UPDATE runs SET started_at = '' WHERE id = (SELECT min(id) FROM runs)"))
    engine.dispose()
    result = CliRunner().invoke(
        cli, ["--db", str(damaged), "trend", "--metric", "max_abs", "--pair", "ms20->lite20"]
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 0 and "Traceback" not in result.output + result.stderr, result.stderr
    assert result.stdout.strip(), "the other runs' points are still shown"


@pytest.mark.faults
@pytest.mark.parametrize(
    "args",
    [("history", "--limit", "5"), ("show", "latest"), ("trend", "--metric", "max_abs", "--limit", "3")],
)
def test_every_read_command_takes_json_as_format_json(db, args):
    short = json.loads(run(db, *args, "--json"))
    assert short and short == json.loads(run(db, *args, "--format", "json"))


def test_show_says_what_the_live_report_said_of_a_drift(tmp_path, history_template):
    """A stored drift keeps its first divergent layer and its answer in PPO terms: `show RUN`
    (text and JSON) says both, as the live report did (#48: both were lost once stored)."""
    from dataclasses import replace

    from auditor.policy.localize import Localization
    from auditor.report.summary import ppo_words
    from tests.report_fixtures import failing_cycle

    path = tmp_path / "h.db"
    shutil.copyfile(history_template, path)
    cycle = failing_cycle()
    where = "first divergent: output std (after the last exposed layer fc1), 256/256 elements out"
    drift = next(i for i, r in enumerate(cycle.results) if r.status == "drift" and r.variant == "fp16")
    cycle.results[drift] = replace(cycle.results[drift], localization=Localization("std", where))
    store = Store.open(f"sqlite:///{path}")
    store.finish_run(store.begin_run("test"), cycle, {})
    store.close()
    said = ppo_words(cycle.results[drift])
    assert said is not None
    text = run(path, "show", "latest")
    assert f"localized: {where}" in text and said in text
    doc = json.loads(run(path, "show", "latest", "--format", "json"))
    stored = next(
        r for r in doc["results"] if r["pair"] == cycle.results[drift].pair and r["variant"] == "fp16"
    )
    assert stored["localization"] == where and stored["in_ppo_terms"] == said
