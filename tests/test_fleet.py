"""Several auditors on one history database (SQLite file and a real PostgreSQL server): URLs as
users write them, passwords never shown, migrations and writes from processes that start at
once, and what happens when the database is not there."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from auditor import db_url
from auditor.audit_run import AuditRun
from auditor.cli import cli
from auditor.store import Store, StoreError
from tests.conftest import REPO
from tests.test_store import HEAD, cycle_result

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
    from auditor.store import Store
    from tests.test_store import cycle_result
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
    finally:
        store.close()


# -- the database goes away ---------------------------------------------------------------------------


def test_database_gone_mid_cycle_fails_the_run_clearly_then_reaps_it(postgres, postgres_url, doc):
    """Decision: an auditor keeps nothing locally. A cycle whose results cannot be written
    fails clearly (RunNotStored, the daemon logs it and carries on); when the database is
    back, the run left 'running' is marked aborted by the next cycle."""
    from auditor.config import parse
    from auditor.plugin_manager import Plugins

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
