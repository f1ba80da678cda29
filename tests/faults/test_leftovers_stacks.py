"""Nothing left behind by the daemon's cycles with a stack on an ssh host (tests/sshd.py): each
cycle process ends with ``os._exit``, some are SIGKILLed mid-cycle, and afterwards no
temporary directory (``auditor-ssh-*`` control sockets included), no process and no ssh
client of ours is left here, and no worker directory on the host. And the daemon rides out
its PostgreSQL server being stopped during a cycle and between cycles, and started again.

AUDITOR_SSH_CYCLES and AUDITOR_SSH_KILLS set the size (default 6 cycles, 2 SIGKILLs;
bench/soak.py --soak runs 100 and 20).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.fault_kit import audit_with_outage, postgres_outage, ssh_daemon_soak
from tests.requires import require
from tests.sshd import make_sshd, unavailable

pytestmark = pytest.mark.stacks

CYCLES = int(os.environ.get("AUDITOR_SSH_CYCLES", "6"))
KILLS = int(os.environ.get("AUDITOR_SSH_KILLS", "2"))


@pytest.fixture
def short_tmp():
    """A short base directory: the ssh control sockets must fit in its tmp/ to be counted there."""
    path = Path(tempfile.mkdtemp(prefix="f28-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_daemon_cycles_with_an_ssh_host_and_sigkills_leave_nothing_behind(stacks, short_tmp: Path) -> None:
    require("sshd", unavailable)
    remote_tmp = short_tmp / "remote-tmp"
    remote_tmp.mkdir()
    server = make_sshd(short_tmp / "sshd", "h", session_env={"TMPDIR": str(remote_tmp)})
    (short_tmp / "run").mkdir()
    try:
        figures = ssh_daemon_soak(short_tmp / "run", server, remote_tmp, CYCLES, KILLS, echo=print)
    finally:
        server.stop()
    print(figures.line())
    assert figures.cycles >= CYCLES and figures.kills == KILLS, figures.line()
    assert figures.most_ssh_dirs >= 1, "no ssh control directory was ever made: the test proves nothing"
    assert figures.clean, (
        figures.line(),
        figures.leftover_dirs,
        figures.leftover_processes,
        figures.remote_dirs,
    )


def test_the_daemon_rides_out_postgresql_stopped_during_and_between_cycles(
    stacks, postgres, tmp_path: Path
) -> None:
    name = f"outage_{os.getpid()}"
    postgres.create_database(name)
    url = f"postgresql://{postgres.user}@127.0.0.1:{postgres.port}/{name}?password=outage-pw"
    (tmp_path / "run").mkdir()
    figures = postgres_outage(tmp_path / "run", postgres, url)
    print(figures.line())
    tail = figures.log[-4000:]
    assert figures.after >= figures.before + 2 and figures.exit_status == 0, figures.line()
    assert figures.tracebacks == 0 and figures.continued_lines == 0, tail
    assert "outage-pw" not in figures.log
    # Stopped during a cycle: that cycle says so in one line, and its run is marked aborted with
    # the reason once the server is back (not left 'running', not reaped as a dead process's).
    interrupted = figures.interrupted
    ended = f"cycle of run {interrupted} did not complete"
    said = [line for line in figures.log.splitlines() if ended in line]
    assert len(said) == 1, tail
    assert "history database" in said[0], said
    assert said[0].endswith("the run is marked aborted when the history database is back"), said
    assert figures.interrupted_status == "aborted", figures.line()
    assert figures.interrupted_note.startswith(
        ("the history database failed during the cycle: ", "could not store results: ")
    ), figures.line()
    assert f"run {interrupted} marked aborted now that the history database is back" in figures.log, tail
    # Stopped between cycles: the cycles meanwhile are skipped with one line each.
    assert figures.skipped >= 1, tail


def test_audit_with_postgresql_stopped_during_its_cycle_says_it_in_one_line(
    stacks, postgres, tmp_path: Path
) -> None:
    name = f"audit_outage_{os.getpid()}"
    postgres.create_database(name)
    url = f"postgresql://{postgres.user}@127.0.0.1:{postgres.port}/{name}?password=outage-pw"
    status, err, run_status = audit_with_outage(tmp_path, postgres, url)
    assert status == 1, err  # not 130: nobody pressed Ctrl-C
    assert "Traceback" not in err and "outage-pw" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("auditor: the history database failed during the cycle: "), err
    assert lines[0].endswith("is marked aborted by the next run once the database is back"), err
    assert run_status == "running"  # as said: the database was away when the cycle ended
