"""``auditor db current | upgrade | prune`` on real database files, an old (0001) one included."""

from __future__ import annotations

import json
import socket
import sqlite3
from datetime import datetime, timedelta

import pytest
from click.testing import CliRunner
from sqlalchemy import inspect

from auditor.cli.main import cli
from auditor.history.store import Store
from tests.conftest import DEFAULT_CONFIG
from tests.history_fixtures import generate_history

HISTORY_INDEXES = {
    "metrics": {"ix_metrics_set_id_name_output"},  # 0005's (result_id, name, output), by set since 0013
    "latencies": {"ix_latencies_result_id_side"},
    "probe_results": {
        "ix_probe_results_pair_run_id",
        "ix_probe_results_probe_status",
        "ix_probe_results_artifact_sha256",
    },
    "run_stacks": {"ix_run_stacks_fingerprint_digest"},
}


def run_cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def indexes(path) -> dict[str, set[str]]:
    store = Store(f"sqlite:///{path}")
    try:
        insp = inspect(store.engine)
        return {t: {i["name"] for i in insp.get_indexes(t)} for t in HISTORY_INDEXES}
    finally:
        store.close()


@pytest.fixture
def old_db(tmp_path):
    """A database at revision 0001 holding a generated history, as an older auditor left it."""
    path = tmp_path / "old.db"
    store = Store(f"sqlite:///{path}")
    store.upgrade("0001")
    # 0001's schema has every column the generator writes.
    generate_history(store.engine, 50, start=datetime(2026, 1, 1))
    store.close()
    return path


def test_current_on_an_old_database_then_upgrade(old_db):
    code, out, err = run_cli("--db", str(old_db), "db", "current")
    assert code == 0, err
    assert "revision: 0001\n" in out
    assert "pending:  " in out and "0005" in out and "auditor db upgrade" in out
    code, _, _ = run_cli("--db", str(old_db), "db", "current", "--check")
    assert code == 1
    assert not any(HISTORY_INDEXES[t] & found for t, found in indexes(old_db).items())
    assert "ix_metrics_result_id" in indexes(old_db)["metrics"]

    code, out, err = run_cli("--db", str(old_db), "db", "upgrade")
    assert code == 0, err
    assert "from 0001 to " in out and "0005" in out

    for table, wanted in HISTORY_INDEXES.items():
        assert wanted <= indexes(old_db)[table], table
    # the single-column indexes the new ones cover are gone
    assert "ix_metrics_result_id" not in indexes(old_db)["metrics"]
    assert "ix_latencies_result_id" not in indexes(old_db)["latencies"]
    with sqlite3.connect(old_db) as c:
        assert c.execute("SELECT count(*) FROM runs").fetchone()[0] == 50  # data kept
        assert c.execute("SELECT count(*) FROM sqlite_stat1 WHERE tbl = 'metrics'").fetchone()[0] > 0

    code, out, _ = run_cli("--db", str(old_db), "db", "current", "--check")
    assert code == 0 and out.rstrip().endswith("up to date")
    code, out, _ = run_cli("--db", str(old_db), "db", "upgrade")
    assert code == 0 and out.startswith("already up to date at ")
    # and the upgraded history answers queries
    code, out, _ = run_cli("--db", str(old_db), "history", "--limit", "2", "--format", "json")
    assert code == 0 and len(json.loads(out)) == 2


def test_current_and_check_as_json(old_db, history_db):
    """#54: db current and db check had no --json."""
    code, out, err = run_cli("--db", str(old_db), "db", "current", "--json", "--check")
    doc = json.loads(out)
    assert code == 1 and doc["revision"] == ["0001"] and doc["up_to_date"] is False, err
    assert "0005" in doc["pending"] and doc["latest"] == [doc["pending"][-1]]
    code, out, _ = run_cli("--db", str(history_db), "db", "current", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["pending"] == [] and doc["revision"] == doc["latest"] and doc["up_to_date"]
    code, out, _ = run_cli("--db", str(history_db), "db", "check", "--json")
    assert code == 0 and json.loads(out) == {
        "database": f"sqlite:///{history_db}",
        "ok": True,
        "problems": [],
        "remedy": "",
        "read_only": False,
    }


def test_current_on_an_empty_database(tmp_path):
    sqlite3.connect(tmp_path / "new.db").close()  # a database file without any table
    code, out, _ = run_cli("--db", str(tmp_path / "new.db"), "db", "current")
    assert code == 0
    assert "revision: (none: no schema yet)" in out and "pending:  0001" in out


def test_reads_and_checks_create_nothing(tmp_path):
    """A typo'd SQLite path is said, and no read or check leaves a directory or file behind;
    only a command that writes (db upgrade, audit) creates the database."""
    missing = tmp_path / "typo" / "deeper" / "history.db"
    for args in (
        ["db", "current"],
        ["db", "check"],
        ["db", "prune"],
        ["runs"],
        ["history"],
        ["show", "latest"],
        ["trend", "--metric", "max_abs"],
        ["alerts"],
        ["baseline", "show"],
    ):
        code, _, err = run_cli("--db", str(missing), *args)
        assert code == 2, (args, err)
        assert f"no history database at {missing}" in err and "Traceback" not in err, (args, err)
        assert not (tmp_path / "typo").exists(), args
    # Nor a writing command: a directory that is not there is a typo until made on purpose.
    for args in (["db", "upgrade"],):
        code, _, err = run_cli("--db", str(missing), *args)
        assert code == 2 and "Traceback" not in err, (args, err)
        assert f"its directory {missing.parent} does not exist" in err, (args, err)
        assert not (tmp_path / "typo").exists(), args
    missing.parent.mkdir(parents=True)
    code, out, err = run_cli("--db", str(missing), "db", "upgrade")
    assert code == 0, err
    assert missing.is_file() and "upgraded" in out


def test_the_default_history_directory_is_made(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("AUDITOR_DB_URL", raising=False)
    code, out, err = run_cli("--config", str(DEFAULT_CONFIG), "db", "upgrade")
    assert code == 0 and "upgraded" in out, err
    assert (tmp_path / "state" / "auditor" / "history.db").is_file()


def test_current_on_a_database_from_a_newer_auditor(history_db):
    path = history_db
    with sqlite3.connect(path) as c:
        c.execute("UPDATE alembic_version SET version_num = '9999_future' WHERE rowid = 1")
    code, _, err = run_cli("--db", str(path), "db", "current")
    assert code == 1
    assert "which this auditor does not know" in err


def test_upgrade_downgrade_round_trip(tmp_path):
    """The history-indexes migration can be taken back (alembic downgrade) and re-applied."""
    from alembic import command

    from auditor.history.store import alembic_config

    path = tmp_path / "rt.db"
    store = Store.open(f"sqlite:///{path}")
    cfg = alembic_config(store.url)
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0005-1")  # to the revision before it, wherever it is
    assert "0005" not in store.current_heads()
    assert "ix_metrics_result_id" in indexes(path)["metrics"]
    store.upgrade()
    assert store.current_heads() == store.head_revisions()
    store.close()


@pytest.fixture
def dated_history(history_db):
    """A copy of the migrated template holding 60 days of runs, for prune."""
    path = history_db
    store = Store.open(f"sqlite:///{path}")
    now = datetime.now().replace(microsecond=0)
    # 60 runs a day apart, the newest today, written by this host's auditor (prune's default)
    generate_history(
        store.engine,
        60,
        start=now - timedelta(days=59, hours=1),
        interval=timedelta(days=1),
        host=socket.gethostname(),
    )
    store.close()
    return path


def run_count(path) -> int:
    with sqlite3.connect(path) as c:
        return c.execute("SELECT count(*) FROM runs").fetchone()[0]


def test_prune_command(dated_history):
    code, out, err = run_cli("--db", str(dated_history), "db", "prune", "--keep-days", "30", "--dry-run")
    assert code == 0, err
    assert out.startswith(f"would delete 30 run(s) of auditor {socket.gethostname()} started before ")
    assert "(keep_days = 30)" in out
    code, out, _ = run_cli(
        "--db", str(dated_history), "db", "prune", "--keep-days", "30", "--dry-run", "--auditor", "x"
    )
    assert code == 0 and out.startswith("would delete 0 run(s) of auditor x ")
    code, out, _ = run_cli(
        "--db", str(dated_history), "db", "prune", "--keep-days", "30", "--dry-run", "--all-auditors"
    )
    assert code == 0 and out.startswith("would delete 30 run(s) started before ")
    assert run_count(dated_history) == 60
    code, out, _ = run_cli("--db", str(dated_history), "db", "prune", "--keep-days", "30", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["runs"] == 30 and not doc["dry_run"] and doc["deleted"]["metrics"] > 0
    assert run_count(dated_history) == 30
    code, out, _ = run_cli("--db", str(dated_history), "db", "prune", "--keep-days", "0")
    assert out.strip() == "keep_days is 0: every run is kept" and run_count(dated_history) == 30
    code, _, err = run_cli("--db", str(dated_history), "db", "prune", "--keep-days", "-3")
    assert code == 2 and "--keep-days" in err


def test_prune_reads_keep_days_from_the_config(dated_history, tmp_path, monkeypatch):
    config = tmp_path / "auditor.toml"
    text = DEFAULT_CONFIG.read_text().replace("keep_days = 90", "keep_days = 10")
    assert "keep_days = 10" in text
    config.write_text(text.replace('url = ""', f'url = "sqlite:///{dated_history}"'))
    code, out, err = run_cli("--config", str(config), "db", "prune")
    assert code == 0, err
    assert "(keep_days = 10)" in out and out.startswith("deleted 50 run(s)")
    assert run_count(dated_history) == 10
    # with --db and no config anywhere, the default (90 days) applies
    monkeypatch.chdir(tmp_path / "..")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "nowhere"))
    monkeypatch.delenv("AUDITOR_CONFIG", raising=False)
    code, out, _ = run_cli("--db", str(dated_history), "db", "prune", "--dry-run")
    assert code == 0 and "(keep_days = 90)" in out and "would delete 0 run(s)" in out
