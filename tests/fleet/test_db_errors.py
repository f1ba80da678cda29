"""A history database that cannot be used is one line naming it and why, never a traceback:
a wrong PostgreSQL password, a server that does not answer, a driver that is not installed,
for the commands that write (``db upgrade``), check (``db check``, ``db current``) and read
(``runs``, ``history``). Each runs as a user runs it, ``python -m auditor`` in a process of its
own, so what is seen is what the terminal shows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli import auditor

SECRET = "wr0ng-Pa55"
COMMANDS = (["db", "upgrade"], ["db", "check"], ["db", "current"], ["runs"], ["history"])
TIMEOUT = 120
WITHOUT_PSYCOPG = (
    sys.executable,
    "-c",
    "import runpy, sys\nsys.modules['psycopg'] = None\n"
    "sys.argv = ['auditor', *sys.argv[1:]]\nrunpy.run_module('auditor', run_name='__main__')\n",
)  # ``python -m auditor`` as if the PostgreSQL driver were not installed


def one_line_failure(done: subprocess.CompletedProcess, *says: str) -> None:
    text = done.stdout + done.stderr
    assert done.returncode in (1, 2), text
    assert "Traceback" not in text and 'File "' not in text, text
    assert SECRET not in text, text
    for words in says:
        assert words in text, text


@pytest.fixture(scope="module")
def password_user(postgres) -> str:
    """A role that must give its password (scram), with a database of its own: the server's
    pg_hba.conf gets a line for it ahead of the test server's trust lines."""
    postgres.sql("CREATE ROLE pwuser LOGIN PASSWORD 'right-one'")
    postgres.sql("CREATE DATABASE pwdb OWNER pwuser")
    hba = Path(postgres.datadir) / "pg_hba.conf"
    hba.write_text("host all pwuser 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
    postgres.sql("SELECT pg_reload_conf()")
    return f"postgresql://pwuser:{SECRET}@127.0.0.1:{postgres.port}/pwdb"


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_wrong_password(password_user, args):
    one_line_failure(
        auditor("--db", password_user, *args, timeout=TIMEOUT),
        "password authentication failed",
        "pwuser:***@",
    )


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_server_not_answering(args):
    url = f"postgresql://auditor:{SECRET}@127.0.0.1:1/history"  # nobody listens on port 1
    one_line_failure(
        auditor("--db", url, *args, timeout=TIMEOUT), "Connection refused", "auditor:***@127.0.0.1:1"
    )


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_driver_not_installed(args):
    url = f"postgresql://auditor:{SECRET}@db.example/history"
    done = auditor("--db", url, *args, timeout=TIMEOUT, program=WITHOUT_PSYCOPG)
    one_line_failure(done, "PostgreSQL driver", "auditor[postgres]")
    assert done.returncode == 2
