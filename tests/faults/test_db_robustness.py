"""A damaged history database: `audit` refuses it before any worker starts, with one clear
message; read commands say what is wrong and show what can still be read; a read-only
database serves reads. Hypothesis fuzzes the reader with damaged bytes and damaged rows:
the rule is "clear error or success, never a traceback".

AUDITOR_FUZZ_EXAMPLES sets the number of fuzzed inputs per surface (default 20; the soak
runs 1000).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from auditor.cli.main import main
from auditor.history.store import Store
from tests.cli import REPO
from tests.history_fixtures import generate_history
from tests.requires import require

EXAMPLES = int(os.environ.get("AUDITOR_FUZZ_EXAMPLES", "20"))
READ_COMMANDS = (["runs"], ["show", "latest"], ["show", "3"], ["history", "--limit", "5"], ["db", "current"])


def run_main(*args: str) -> tuple[int, str, str]:
    """``auditor ARGS`` in this process, through the real entry (main), output captured."""
    out, err = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = ["auditor", *args]
    code: int | str | None = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as exc:
        code = exc.code
    finally:
        sys.argv = argv
    return (code if isinstance(code, int) else 1), out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def base_db(tmp_path_factory, history_template: Path) -> Path:
    """A small generated history in one file (no -wal), to copy and damage."""
    path = tmp_path_factory.mktemp("base") / "history.db"
    shutil.copyfile(history_template, path)
    store = Store.open(f"sqlite:///{path}")
    generate_history(store.engine, 8, start=datetime(2026, 1, 1))
    store.close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    return path


def not_sqlite(path: Path) -> None:
    path.write_bytes(b"this is a text file, not a history database\n" * 50)


def corrupt_page(path: Path) -> None:
    data = bytearray(path.read_bytes())
    page = 4096
    data[4 * page : 4 * page + 64] = b"\xff" * 64  # the b-tree header of page 5
    path.write_bytes(bytes(data))


def corrupt_schema(path: Path) -> None:
    """The b-tree header of page 1 (after the file's 100-byte header): the schema's table, which
    SQLite reads before it can check any page, so even quick_check stops with "malformed"."""
    data = bytearray(path.read_bytes())
    data[100:164] = b"\xff" * 64
    path.write_bytes(bytes(data))


def corrupt_index(path: Path) -> None:
    """A key of the runs' start-time index rewritten in place: every page is sound (SQLite's
    quick_check says ok), but the index no longer matches its table."""
    conn = sqlite3.connect(path)
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'ix_runs_started_at'").fetchone()[0]
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    data = bytearray(path.read_bytes())
    at = data.index(b"2026-01-01 00:15", (root - 1) * page, root * page)
    data[at : at + 4] = b"2099"
    path.write_bytes(bytes(data))
    with contextlib.closing(sqlite3.connect(path)) as check:
        assert check.execute("PRAGMA quick_check").fetchall() == [("ok",)]


def dropped_table(path: Path) -> None:
    _sql(path, "PRAGMA foreign_keys=OFF", "DROP TABLE findings")


def bad_timestamp(path: Path) -> None:
    _sql(path, "UPDATE runs SET started_at = 'not a time' WHERE id = 3")


def bad_json(path: Path) -> None:
    _sql(path, "UPDATE fingerprint_templates SET document = '{broken' WHERE rowid = 1")


def _sql(path: Path, *statements: str) -> None:
    conn = sqlite3.connect(path)
    for s in statements:
        conn.execute(s)
    conn.commit()
    conn.close()


DAMAGES = {
    "not-sqlite": (not_sqlite, "file is not a database"),
    "corrupt-page": (corrupt_page, "damaged"),
    "corrupt-schema": (corrupt_schema, "the file is damaged"),
    "corrupt-index": (corrupt_index, "an index is damaged (SQLite integrity_check: row 2 missing from index"),
    "dropped-table": (dropped_table, "table missing: findings"),
    "bad-timestamp": (bad_timestamp, "unreadable timestamp in started_at"),
    "bad-json": (bad_json, "unreadable JSON in document"),
}


@pytest.fixture
def config(tmp_path) -> Path:
    """A config whose stack 'interpreter' leaves a mark when a cycle starts it."""
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\ntouch {tmp_path / 'cycle-started'}\nexit 1\n")
    python.chmod(0o755)
    path = tmp_path / "auditor.toml"
    path.write_text(
        f"""
[stacks.t]
role = "train"
runtime = "mindspore"
python = "{python}"
[stacks.i]
role = "infer"
runtime = "mindspore-lite"
python = "{python}"
[[pairs]]
train = "t"
infer = "i"
probes = ["ppo_policy"]
"""
    )
    return path


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_audit_refuses_a_damaged_database_before_any_worker_starts(base_db, tmp_path, config, damage):
    db = tmp_path / "h.db"
    shutil.copy(base_db, db)
    apply, words = DAMAGES[damage]
    apply(db)
    code, out, err = run_main("--config", str(config), "--db", str(db), "audit")
    assert code == 2, (out, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert words in err
    assert not (tmp_path / "cycle-started").exists()


@pytest.mark.parametrize(
    ("damage", "remedy"),
    [
        ("corrupt-index", "'REINDEX'"),
        ("corrupt-page", "restore"),
        ("corrupt-schema", "restore"),
        ("bad-json", ""),
    ],
)
def test_db_check_names_the_damage_and_the_remedy_and_the_audit_writes_nothing(
    base_db, tmp_path, config, damage, remedy
):
    db = tmp_path / "h.db"
    shutil.copy(base_db, db)
    DAMAGES[damage][0](db)
    before = db.read_bytes()
    code, out, err = run_main("--db", str(db), "db", "check")
    assert code == 1 and "Traceback" not in err and DAMAGES[damage][1] in out, (out, err)
    assert remedy in out if remedy else "remedy" not in out
    code, _, err = run_main("--config", str(config), "--db", str(db), "audit")
    assert code == 2 and "nothing was written" in err and (remedy in err), err
    # Not a page changed (opening it may switch the header's journal mode to WAL), no WAL written.
    assert db.read_bytes()[100:] == before[100:]
    wal = db.with_name(db.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    if damage == "corrupt-index":  # the remedy works
        subprocess.run(["sqlite3", str(db), "REINDEX"], check=True)
        code, out, _ = run_main("--db", str(db), "db", "check")
        assert code == 0 and out.rstrip().endswith("ok"), out


def test_audit_on_a_healthy_database_does_start_the_cycle(base_db, tmp_path, config):
    """The counterpart: the marker above does tell whether a cycle started."""
    db = tmp_path / "h.db"
    shutil.copy(base_db, db)
    code, _, err = run_main("--config", str(config), "--db", str(db), "audit")
    assert code == 1 and "Traceback" not in err
    assert (tmp_path / "cycle-started").exists()


@pytest.mark.parametrize("damage", sorted(DAMAGES))
@pytest.mark.parametrize("command", READ_COMMANDS, ids=" ".join)
def test_read_commands_on_a_damaged_database_never_trace_back(base_db, tmp_path, damage, command):
    db = tmp_path / "h.db"
    shutil.copy(base_db, db)
    DAMAGES[damage][0](db)
    code, out, err = run_main("--db", str(db), *command)
    assert code in (0, 1), (code, out, err)
    assert "Traceback" not in err + out
    if code:
        assert err.startswith("auditor: ") and err.strip(), err


@pytest.mark.parametrize("damage", ["bad-timestamp", "bad-json", "dropped-table"])
def test_read_commands_show_what_can_be_read_and_name_the_rest(base_db, tmp_path, damage):
    db = tmp_path / "h.db"
    shutil.copy(base_db, db)
    DAMAGES[damage][0](db)
    code, out, err = run_main("--db", str(db), "runs")
    assert code == 0 and len([line for line in out.splitlines() if "complete" in line]) >= 7
    code, out, err = run_main("--db", str(db), "show", "3")
    assert code == 0 and out.startswith("run 3"), err
    if damage == "dropped-table":
        assert "unreadable (damaged history database): findings: no such table: findings" in out
    else:
        assert "auditor: warning: a stored " in err and "is unreadable" in err
    code, out, err = run_main("--db", str(db), "db", "check")
    assert code == 1 and "problem: " in out


def read_only_url(path: Path) -> str:
    """A read-only database. chmod alone does not stop root, so SQLite is also told to open
    the file read-only, which fails writes the same way."""
    path.chmod(0o444)
    return f"sqlite:///file:{path}?mode=ro&uri=true"


def test_a_read_only_database_serves_reads_and_audit_says_why_it_cannot_write(base_db, tmp_path, config):
    db = tmp_path / "h.db"
    shutil.copy(base_db, db)
    url = read_only_url(db)
    for command in READ_COMMANDS:
        code, out, err = run_main("--db", url, *command)
        assert code == 0 and "Traceback" not in err, (command, out, err)
    code, _, err = run_main("--config", str(config), "--db", url, "audit")
    assert code == 2 and "read-only" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "cycle-started").exists()
    assert not Path("file:").exists()  # the URI is not taken for a directory to create


def test_a_run_left_running_by_a_dead_process_reads_as_interrupted_without_a_write(base_db, tmp_path):
    db = tmp_path / "h.db"
    shutil.copy(base_db, db)
    gone = subprocess.Popen(["true"])
    gone.wait()
    conn = sqlite3.connect(db)
    conn.execute(
        "INSERT INTO runs (started_at, status, host, pid, config_path) VALUES (?, 'running', ?, ?, 'x.toml')",
        ("2026-02-01 00:00:00.000000", socket.gethostname(), gone.pid),
    )
    run_id = conn.execute("SELECT max(id) FROM runs").fetchone()[0]
    conn.commit()
    conn.close()
    url = read_only_url(db)  # reading must not need to write
    code, out, _ = run_main("--db", url, "runs", "--limit", "1")
    assert code == 0 and "aborted" in out and f"interrupted: process {gone.pid} ended" in out
    code, out, _ = run_main("--db", url, "show", str(run_id))
    assert code == 0 and out.startswith(f"run {run_id}  aborted") and "interrupted" in out
    assert sqlite3.connect(db).execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone() == (
        "running",
    )


# -- fuzzing -----------------------------------------------------------------------------------

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,
)


def _no_traceback(db_arg: str) -> None:
    for command in READ_COMMANDS + (["db", "check"],):
        code, out, err = run_main("--db", db_arg, *command)
        assert code in (0, 1, 2), (command, code, err)
        assert "Traceback" not in out + err, (command, err)
        if code:  # a clear message: an error line, or db check's list of problems
            assert "auditor: " in err or "problem: " in out, (command, out, err)


@FUZZ
@given(
    edits=st.lists(
        st.tuples(st.integers(min_value=0, max_value=1 << 20), st.binary(min_size=1, max_size=64)),
        min_size=1,
        max_size=6,
    ),
    truncate=st.one_of(st.none(), st.integers(min_value=0, max_value=1 << 20)),
)
def test_fuzzed_database_bytes_give_a_clear_error_or_success(base_db, tmp_path_factory, edits, truncate):
    db = tmp_path_factory.mktemp("fuzz") / "h.db"
    data = bytearray(base_db.read_bytes())
    for offset, chunk in edits:
        at = offset % len(data)
        data[at : at + len(chunk)] = chunk
    if truncate is not None:
        data = data[: truncate % (len(data) + 1)]
    db.write_bytes(bytes(data))
    _no_traceback(str(db))


ROW_TARGETS = (
    ("runs", "started_at"),
    ("runs", "finished_at"),
    ("runs", "status"),
    ("runs", "pid"),
    ("fingerprints", "document"),
    ("fingerprints", "created_at"),
    ("threshold_sets", "document"),
    ("probe_results", "metric_set_id"),
    ("probe_results", "status"),
    ("findings", "details"),
    ("artifacts", "info"),
    ("metrics", "value"),
    ("latencies", "p50_us"),
    ("run_stacks", "fingerprint_digest"),
)
VALUES = st.one_of(
    st.text(max_size=40),
    st.binary(max_size=40),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.none(),
    st.sampled_from(["{", "[1,", "null", "9999-99-99 99:99:99", "", "2026-13-45T25:61:61", '{"a":']),
)


@FUZZ
@given(rows=st.lists(st.tuples(st.sampled_from(ROW_TARGETS), VALUES), min_size=1, max_size=5))
def test_fuzzed_rows_give_a_clear_error_or_success(base_db, tmp_path_factory, rows):
    db = tmp_path_factory.mktemp("fuzz") / "h.db"
    shutil.copy(base_db, db)
    conn = sqlite3.connect(db)
    for (table, column), value in rows:
        with contextlib.suppress(sqlite3.Error):  # a NOT NULL column refuses None: fine
            conn.execute(
                f'UPDATE "{table}" SET "{column}" = ? WHERE rowid IN (SELECT rowid FROM "{table}" LIMIT 2)',
                (value,),
            )
    conn.commit()
    conn.close()
    _no_traceback(str(db))


def test_schema_text_that_is_not_utf8_is_a_clear_error(base_db, tmp_path):
    """Found by the fuzzer: one byte 0x80 inside the stored schema makes SQLite hand back
    text Python cannot decode (a UnicodeDecodeError, not a database error)."""
    db = tmp_path / "h.db"
    data = bytearray(base_db.read_bytes())
    at = data.find(b"CREATE TABLE artifacts (")
    data[at + 23] = 0x80
    db.write_bytes(bytes(data))
    _no_traceback(str(db))


# -- a full file system (#37), in a private mount namespace with a small tmpfs -------------------
FULL_DISK = r"""
set -u
A="{python} -m auditor"
D={where}
mkdir -p $D/new $D/old
mount -t tmpfs -o size=64k tmpfs $D/new
$A --db $D/new/h.db db upgrade > new1.out 2> new1.err; echo $? > new1.code
mount -o remount,size=20m $D/new
$A --db $D/new/h.db db upgrade > new2.out 2> new2.err; echo $? > new2.code
$A --db $D/new/h.db runs > new3.out 2> new3.err; echo $? > new3.code
mount -t tmpfs -o size=3m tmpfs $D/old
$A --db $D/old/h.db db upgrade > /dev/null 2>&1
dd if=/dev/zero of=$D/old/fill bs=4k > /dev/null 2>&1 || true
for c in runs "show 1" "db check"; do
  n=$(echo $c | tr -d ' ')
  $A --db $D/old/h.db $c > full-$n.out 2> full-$n.err; echo $? > full-$n.code
done
"""


def _namespace() -> str | None:
    if os.geteuid() != 0:
        return "mounting a small tmpfs needs root"
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True)
    if probe.returncode != 0:
        return f"no private mount namespace here: {probe.stderr.decode(errors='replace').strip()}"
    return None


def test_a_full_disk_leaves_no_half_schema_and_is_named_as_full(tmp_path):
    """A new SQLite history on a file system with 64 KiB free: the schema is one transaction, so
    nothing is left of it; once space is freed it is created whole (no "table ... already
    exists"). An existing history on a full file system: every read command says the file
    system is full and what to do, not only "disk I/O error", and ends without a traceback."""
    require("namespace", _namespace)
    script = tmp_path / "full.sh"
    script.write_text(FULL_DISK.format(python=sys.executable, where=tmp_path / "mnt"))
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "--", "bash", str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr

    def said(name: str) -> tuple[int, str]:
        return int((tmp_path / f"{name}.code").read_text()), (tmp_path / f"{name}.err").read_text()

    code, err = said("new1")
    assert code == 1 and "database or disk is full" in err and "Traceback" not in err
    code, err = said("new2")
    assert code == 0, err  # created whole now: nothing of the failed attempt was left
    code, err = said("new3")
    assert code == 0 and "no runs yet" in (tmp_path / "new3.out").read_text(), err
    for name in ("full-runs", "full-show1", "full-dbcheck"):
        code, err = said(name)
        text = err + (tmp_path / f"{name}.out").read_text()
        assert code == 1 and "Traceback" not in text, text
        assert "is full" in text and "free some space there" in text, text
