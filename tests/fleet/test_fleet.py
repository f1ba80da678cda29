"""Several auditors on one history database (SQLite file and a real PostgreSQL server): URLs as
users write them, passwords never shown, migrations and writes from processes that start at
once, and what happens when the database is not there."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import subprocess
import sys
import textwrap
from datetime import datetime

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from auditor.cli.main import cli
from auditor.cycle.audit_run import AuditRun
from auditor.db import url as db_url
from auditor.history.store import Store, StoreError
from tests.conftest import REPO
from tests.unit.history.test_store import HEAD, cycle_result

SECRET = "s3cret-Pa55"


# -- URLs ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "driver"),
    [
        ("postgresql://auditor@db.example:5432/history", "postgresql+psycopg"),
        ("postgres://auditor@db.example/history", "postgresql+psycopg"),
        ("postgresql+psycopg://auditor@db.example/history", "postgresql+psycopg"),
        ("postgresql+psycopg2://auditor@db.example/history", "postgresql+psycopg2"),  # as written
        ("sqlite:////var/lib/auditor/history.db", "sqlite"),
    ],
)
def test_plain_postgresql_urls_use_the_installed_driver(written, driver):
    assert db_url.parse(written).drivername == driver


def test_password_is_redacted():
    url = f"postgresql://auditor:{SECRET}@db.example:5432/history"
    assert SECRET not in db_url.redact(url) and "auditor:***@db.example:5432/history" in db_url.redact(url)
    assert SECRET not in db_url.redact(f"postgresql://a:{SECRET}@[bad")  # not even a URL
    with pytest.raises(ValueError) as info:
        db_url.parse(f"postgresql://a:{SECRET}@host:notaport/db")
    assert SECRET not in str(info.value)


def test_unreachable_server_is_a_clear_error_without_the_password(postgres):
    # a port nobody listens on (the test server's, once stopped, would do too)
    url = f"postgresql://auditor:{SECRET}@127.0.0.1:1/history"
    with pytest.raises(StoreError) as info:
        Store.open(url)
    message = str(info.value)
    assert SECRET not in message and "auditor:***@127.0.0.1:1/history" in message
    assert "cannot open or migrate the history database" in message
    result = CliRunner().invoke(cli, ["--db", url, "db", "current"])
    assert result.exit_code != 0 and SECRET not in result.output + result.stderr
    assert "Traceback" not in result.output + result.stderr


def test_missing_driver_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg -> ImportError
    with pytest.raises(StoreError) as info:
        Store(f"postgresql://auditor:{SECRET}@db.example/history")
    message = str(info.value)
    assert "PostgreSQL driver" in message and "auditor[postgres]" in message and SECRET not in message


def test_url_from_the_environment(postgres_url, monkeypatch, tmp_path):
    """$AUDITOR_DB_URL: used when --db is not given; the config is not even read."""
    monkeypatch.setenv("AUDITOR_DB_URL", postgres_url)
    monkeypatch.setenv("AUDITOR_CONFIG", str(tmp_path / "missing.toml"))
    result = CliRunner().invoke(cli, ["db", "upgrade"])
    assert result.exit_code == 0, result.output + result.stderr
    store = Store(postgres_url)
    try:
        assert store.current_heads() == (HEAD,)
    finally:
        store.close()


# -- two auditors at once ---------------------------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[4])
    from auditor.history.store import Store
    from tests.unit.history.test_store import cycle_result
    url, who, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = Store.open(url, who)  # both processes migrate an empty database at the same moment
    for _ in range(runs):
        run_id = store.begin_run(who + ".toml")
        store.finish_run(run_id, cycle_result(), {})
    store.close()
    print("ok")
    """
)


def test_two_auditors_migrate_and_write_at_once(db_url):
    runs = 8
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, db_url, who, str(runs), str(REPO)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for who in ("auditor-a", "auditor-b")
    ]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0 and out.strip() == "ok", err
    store = Store(db_url)
    try:
        assert store.current_heads() == (HEAD,)
        with store.engine.connect() as conn:
            assert conn.scalar(text("SELECT count(*) FROM alembic_version")) == 1
            per = dict(
                conn.execute(
                    text(
                        "SELECT auditor_id, count(*) FROM runs WHERE status = 'complete' GROUP BY auditor_id"
                    )
                ).all()
            )
            # shared content (same stacks, fingerprints, artifact) stored once
            assert conn.scalar(text("SELECT count(*) FROM artifacts")) == 1
            assert conn.scalar(text("SELECT count(*) FROM stacks")) == len(cycle_result().stacks)
        assert per == {"auditor-a": runs, "auditor-b": runs}
        listed = CliRunner().invoke(cli, ["--db", db_url, "runs"])
        assert listed.exit_code == 0 and "auditor-a" in listed.output and "auditor-b" in listed.output
    finally:
        store.close()


# -- the database goes away ---------------------------------------------------------------------------


def test_database_gone_mid_cycle_fails_the_run_clearly_then_reaps_it(postgres, postgres_url, doc):
    """Decision: an auditor keeps nothing locally. A cycle whose results cannot be written
    fails clearly (RunNotStored, the daemon logs it and carries on); when the database is
    back, the run left 'running' is marked aborted by the next cycle."""
    from auditor.config.load import parse
    from auditor.extend.manager import Plugins

    store = Store.open(postgres_url, "auditor-a")
    database = store.engine.url.database
    config = parse(doc, "test.toml", known_probes=None)
    run = AuditRun(config, Plugins(entry_points=False), store)
    run.begin()

    def cut() -> None:
        postgres.sql(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
        postgres.sql(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{database}'")

    try:
        cut()
        with pytest.raises(StoreError) as info:
            store.finish_run(run.run_id, cycle_result(), {})
        assert f"could not store run {run.run_id}" in str(info.value)
        with pytest.raises(StoreError, match="cannot record a new run"):
            store.begin_run("test.toml")
        run._mark_aborted("could not store results")  # the database is still away: not raised
    finally:
        postgres.sql(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
    next_run = store.begin_run("test.toml")
    runs = {r.id: r for r in store.runs()}
    assert runs[run.run_id].status == "aborted"
    assert runs[run.run_id].note == "the history database was unreachable when the run ended"
    assert runs[next_run].status == "running"
    store.close()


def test_schema_newer_than_the_auditor_is_refused(postgres_url):
    store = Store.open(postgres_url)
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0999'"))
    store.close()
    result = CliRunner().invoke(cli, ["--db", postgres_url, "db", "current"])
    assert "Traceback" not in result.output + result.stderr
    with pytest.raises(StoreError, match="newer auditor"):
        Store.open(postgres_url)


def test_make_test_requires_postgres():
    """CI must not pass by skipping: `make test` turns a missing server into a failure."""
    assert "AUDITOR_REQUIRE_POSTGRES=1" in (REPO / "Makefile").read_text()


# -- publications (split mode) without the stacks -----------------------------------------------------


def _published(store: Store, mindir: bytes, stack: str = "ms20", complete: bool = True) -> int:
    """A run of auditor 'trainer' that published one variant of ``stack``; its run id."""
    import numpy as np

    from auditor.history import publication
    from auditor.results import CycleResult

    item = publication.PublishedItem(
        job_key="ppo_policy-fp32-0123456789",
        probe="ppo_policy",
        probe_version="1",
        variant="fp32",
        mindir=mindir,
        mindir_info={"sha256": hashlib.sha256(mindir).hexdigest(), "mind_ir_version": 1},
        inputs=[np.arange(6, dtype=np.float32).reshape(2, 3)],
        outputs=[np.ones((2, 1), dtype=np.float32)],
    )
    run_id = store.begin_run("trainer.toml")
    pub = publication.PublicationSet(stack, "trainhost", {"runtime": {"version": "2.0.0"}}, [item])
    result = CycleResult(0.0, 1.0, "trainer.toml", {}, [], [], publications=[pub])
    if complete:
        store.finish_run(run_id, result, {})
    else:  # what a publisher that died half-way could leave: the items, no completed_at
        from sqlalchemy.orm import Session

        with Session(store.engine) as s, s.begin():
            publication.write(s, run_id, "trainer", [pub], datetime(2030, 1, 1))
            s.execute(text("UPDATE publications SET completed_at = NULL WHERE run_id = :r"), {"r": run_id})
    return run_id


def test_publications_are_content_addressed_and_read_back(db_url):
    from auditor.history import publication

    store = Store.open(db_url, "trainer")
    try:
        assert publication.latest(store.engine, "ms20") is None
        first = _published(store, b"mindir-one")
        second = _published(store, b"mindir-one")  # the same export again: no new artifact
        with store.engine.connect() as conn:
            kinds = dict(conn.execute(text("SELECT kind, count(*) FROM artifacts GROUP BY kind")).all())
        assert kinds == {"mindir": 1, "inputs": 1, "outputs": 1}
        pub = publication.latest(store.engine, "ms20")
        assert pub is not None and pub.run_id == second != first and pub.auditor_id == "trainer"
        [item] = pub.items
        assert item.mindir == b"mindir-one" and item.inputs[0].shape == (2, 3) and item.outputs[0].sum() == 2
        assert pub.fingerprint == {"runtime": {"version": "2.0.0"}} and pub.host == "trainhost"
        assert publication.latest(store.engine, "ms210") is None
    finally:
        store.close()


def test_a_half_published_set_is_never_consumed(db_url):
    from auditor.history import publication

    store = Store.open(db_url, "trainer")
    try:
        _published(store, b"complete")
        _published(store, b"half", complete=False)  # newer, but not complete
        pub = publication.latest(store.engine, "ms20")
        assert pub is not None and pub.items[0].mindir == b"complete"
    finally:
        store.close()


def test_the_publications_command_lists_what_is_in_the_database(db_url):
    """`auditor publications`: newest first, each with its stack, auditor, run, age and the
    digest of every export; an incomplete one is marked; --stack, --complete and --json."""
    store = Store.open(db_url, "trainer")
    try:
        first = _published(store, b"mindir-one")
        _published(store, b"mindir-two", stack="ms210")
        half = _published(store, b"half", complete=False)
    finally:
        store.close()
    runner = CliRunner()
    listed = runner.invoke(cli, ["--db", db_url, "publications"])
    assert listed.exit_code == 0, listed.output + listed.stderr
    lines = listed.stdout.splitlines()
    assert (
        lines[1].startswith("  publication ")
        and "of ms20 by trainer" in lines[1]
        and "INCOMPLETE" in lines[1]
    )
    assert f"of ms20 by trainer (run {first}, " in listed.stdout and " old): 1 export" in listed.stdout
    one = hashlib.sha256(b"mindir-one").hexdigest()
    assert f"      ppo_policy [fp32]  MindIR sha256 {one[:16]}" in lines
    doc = json.loads(runner.invoke(cli, ["--db", db_url, "publications", "--stack", "ms20", "--json"]).stdout)
    assert [(p["run_id"], p["completed_at"] is None) for p in doc] == [(half, True), (first, False)]
    assert doc[1]["items"] == [{"probe": "ppo_policy", "variant": "fp32", "mindir_sha256": one}]
    assert doc[1]["age_seconds"] >= 0
    complete = json.loads(runner.invoke(cli, ["--db", db_url, "publications", "--complete", "--json"]).stdout)
    assert {p["stack"] for p in complete} == {"ms20", "ms210"} and all(p["completed_at"] for p in complete)
    # CSV: a row per export under a header; --auditor narrows to the publishing auditor
    done = runner.invoke(cli, ["--db", db_url, "publications", "--format", "csv", "--auditor", "trainer"])
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert [(int(r["run_id"]), r["stack"], r["mindir_sha256"]) for r in rows][-1] == (first, "ms20", one)
    assert len(rows) == 3 and {r["auditor_id"] for r in rows} == {"trainer"}
    nobody = runner.invoke(cli, ["--db", db_url, "publications", "--auditor", "someone-else"])
    assert nobody.exit_code == 0 and "no publications by someone-else" in nobody.stdout


def test_publications_are_pruned_with_their_runs(db_url):
    """Retention takes a publication with its run, and its artifacts once nothing refers to them."""
    from auditor.history.retention import prune

    store = Store.open(db_url, "trainer")
    try:
        _published(store, b"old export")
        with store.engine.begin() as conn:
            conn.execute(text("UPDATE runs SET started_at = '2020-01-01 00:00:00'"))
            conn.execute(text("UPDATE artifacts SET created_at = '2020-01-01 00:00:00'"))
        _published(store, b"new export")
        result = prune(store.engine, 30, auditor_id="trainer")
        assert result.runs == 1 and result.deleted["publications"] == 1
        assert result.deleted["publication_items"] == 1
        with store.engine.connect() as conn:
            left = dict(conn.execute(text("SELECT kind, count(*) FROM artifacts GROUP BY kind")).all())
            # the old MindIR went; inputs and outputs are the same content as the new run's: kept
            assert left == {"mindir": 1, "inputs": 1, "outputs": 1}
            assert conn.scalar(text("SELECT count(*) FROM publications")) == 1
    finally:
        store.close()


# -- config ----------------------------------------------------------------------------------------------


def test_split_mode_config(doc):
    from auditor.config.load import parse

    doc["stacks"]["ms20"] = {"role": "train", "runtime": "mindspore", "source": "db"}  # no python
    doc["stacks"]["ms210"]["publish"] = ["ppo_policy"]
    config = parse(doc, known_probes={"ppo_policy", "action_sampler", "obs_normalizer"})
    assert config.fleet.is_remote("ms20") and not config.fleet.is_remote("ms210")
    assert config.fleet.publish == {"ms210": ("ppo_policy",)}
    doc["pairs"] = []  # a train-side auditor that only publishes needs no pair
    assert parse(doc, known_probes=None).fleet.publish == {"ms210": ("ppo_policy",)}


@pytest.mark.parametrize(
    ("stack", "table", "message"),
    [
        ("lite20", {"source": "db"}, "stacks.lite20.source: only a train stack can come from the database"),
        ("ms20", {"source": "s3"}, "stacks.ms20.source: must be one of local, db, not 's3'"),
        ("lite20", {"publish": ["ppo_policy"]}, "stacks.lite20.publish: only a train stack exports"),
        ("ms20", {"publish": "ppo_policy"}, "stacks.ms20.publish: must be an array"),
        ("ms20", {"publish": ["nope"]}, "stacks.ms20.publish[0]: unknown probe 'nope'"),
        ("ms20", {"source": "db", "publish": ["ppo_policy"]}, "stacks.ms20.publish: a stack read from"),
    ],
)
def test_split_mode_config_errors(doc, stack, table, message):
    from auditor.config.load import parse
    from auditor.config.tables import ConfigError

    doc["stacks"][stack].update(table)
    with pytest.raises(ConfigError) as info:
        parse(doc, known_probes={"ppo_policy", "action_sampler", "obs_normalizer"})
    assert any(e.startswith(message) for e in info.value.errors), info.value.errors


def test_auditor_id_config(doc):
    from auditor.config.load import parse

    assert parse(doc).auditor_id == ""
    doc["storage"]["auditor_id"] = "train-zone-1"
    assert parse(doc).auditor_id == "train-zone-1"


KEPT_BY_MIGRATIONS = ("runs", "probe_results", "latencies", "findings", "run_stacks")


def test_migrations_with_data_and_back(db_url):
    """A history left at revision 0001 by an old auditor migrates to head with its rows (runs
    get their writer's host name as auditor id), and the whole chain goes down and up again."""
    from tests.history_fixtures import generate_history

    def counts() -> dict[str, int]:
        with store.engine.connect() as conn:
            return {t: conn.scalar(text(f"SELECT count(*) FROM {t}")) for t in KEPT_BY_MIGRATIONS}

    store = Store(db_url)
    try:
        store.upgrade("0001")
        generate_history(store.engine, 30, start=datetime(2026, 1, 1), host="old-host")
        before = counts()
        assert before["latencies"] > 0 and before["probe_results"] > 0
        store.upgrade()
        assert store.current_heads() == (HEAD,)
        # every row survives (SQLite's batch rebuild of probe_results with foreign keys enforced
        # deleted every latency by cascade)
        assert counts() == before
        with store.engine.connect() as conn:
            ids = conn.execute(text("SELECT DISTINCT auditor_id FROM runs")).scalars().all()
            if conn.dialect.name == "sqlite":  # the pooled connection enforces foreign keys again
                assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert ids == ["old-host"]
        store.downgrade("0001")
        assert store.current_heads() == ("0001",)
        assert counts() == before
        store.upgrade()
        assert store.current_heads() == (HEAD,)
    finally:
        store.close()


def test_audit_with_the_database_unreachable_at_start_fails_before_any_worker(monkeypatch):
    from tests.conftest import DEFAULT_CONFIG

    monkeypatch.setenv("AUDITOR_DB_URL", f"postgresql://auditor:{SECRET}@127.0.0.1:1/history")
    result = CliRunner().invoke(cli, ["--config", str(DEFAULT_CONFIG), "audit"])
    assert result.exit_code == 2
    message = "cannot open or migrate the history database postgresql://auditor:***@127.0.0.1:1/history"
    assert message in result.stderr
    assert SECRET not in result.output + result.stderr and "Traceback" not in result.stderr


def test_db_size_on_postgresql(postgres_url):
    """auditor db size reads PostgreSQL's own figure for the database."""
    store = Store.open(postgres_url, "size-check")
    try:
        store.finish_run(store.begin_run("size.toml"), cycle_result(), {})
    finally:
        store.close()
    result = CliRunner().invoke(cli, ["--db", postgres_url, "db", "size", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["runs"] >= 1 and doc["bytes"] > 1_000_000  # a PostgreSQL database is megabytes at least
    assert doc["per_run"] == doc["bytes"] / doc["runs"]
