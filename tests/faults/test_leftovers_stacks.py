"""Nothing left behind by the daemon's cycles with a stack on an ssh host (tests/sshd.py): each
cycle process ends with ``os._exit``, some are SIGKILLed mid-cycle, and afterwards no
temporary directory (``auditor-ssh-*`` control sockets included), no process and no ssh
client of ours is left here, and no worker directory on the host. And the daemon rides out
its PostgreSQL server being stopped and started again.

AUDITOR_SSH_CYCLES and AUDITOR_SSH_KILLS set the size (default 6 cycles, 2 SIGKILLs;
bench/soak.py --soak runs 100 and 20).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.fault_kit import postgres_outage, ssh_daemon_soak
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
    reason = unavailable()
    if reason:
        if os.environ.get("AUDITOR_REQUIRE_STACKS") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
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


def test_the_daemon_rides_out_postgresql_stopped_and_started_again(stacks, postgres, tmp_path: Path) -> None:
    name = f"outage_{os.getpid()}"
    postgres.create_database(name)
    url = f"postgresql://{postgres.user}@127.0.0.1:{postgres.port}/{name}?password=outage-pw"
    (tmp_path / "run").mkdir()
    figures = postgres_outage(tmp_path / "run", postgres, url)
    assert figures.after >= figures.before + 2 and figures.exit_status == 0, figures
    assert figures.tracebacks == 0, figures.log[-4000:]
    assert "outage-pw" not in figures.log
    # the outage was seen and said, in words (a cycle skipped or a run aborted), not as a traceback
    assert "history" in figures.log and ("cycle skipped" in figures.log or "aborted" in figures.log), (
        figures.log[-4000:]
    )
