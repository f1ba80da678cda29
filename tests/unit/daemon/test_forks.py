"""Children forked from a fork server that imported a module once (auditor/daemon/forks.py):
their pipes, session, environment and exit status, as a cold Popen child's; the import done
once in the server, not in each child. Oracles: /proc and the children's own reports."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
from multiprocessing import forkserver

import pytest

from auditor.common.child_process import kill_group
from auditor.daemon.forks import ForkedChild, fork

TARGET = "tests.unit.daemon.fork_target"


@pytest.fixture
def import_log(tmp_path, monkeypatch):
    """A fresh server for each test (one per process, preloading what its first fork asked),
    whose imports of the target are noted in a file of this test."""
    path = tmp_path / "imports.log"
    monkeypatch.setenv("FORK_TARGET_LOG", str(path))
    forkserver._forkserver._stop()  # the method CPython's own tests stop it with
    yield path
    forkserver._forkserver._stop()


def ask(child: ForkedChild, line: str) -> dict:
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write(line.encode() + b"\n")
    child.stdin.flush()
    report = json.loads(child.stdout.read())
    child.stdin.close()
    child.stdout.close()
    return report


def test_a_forked_child_is_a_fresh_session_with_the_environment_it_was_given(import_log):
    env = {"ONLY": "this", "PATH": os.environ.get("PATH", "")}
    child = fork(sys.executable, [TARGET], TARGET, "report", env)
    report = ask(child, "hello")
    assert child.wait(30) == 0 and child.returncode == 0 and child.poll() == 0
    assert report["said"] == "hello" and report["pid"] == child.pid
    assert report["sid"] == child.pid  # its own session: a kill of its group reaches what it starts
    assert report["ppid"] != os.getpid()  # the server's child, not ours
    # the environment whole: not ours, not what the server's own imports set in its own
    assert report["env"] == env
    # not multiprocessing's to join at exit: a hung child would keep its parent from exiting
    assert child.process not in multiprocessing.active_children()


def test_the_import_is_done_once_by_the_server_not_by_each_child(import_log):
    reports = [ask(fork(sys.executable, [TARGET], TARGET, "report", {}), "x") for _ in range(3)]
    servers = {r["ppid"] for r in reports}
    assert len(servers) == 1 and len({r["pid"] for r in reports}) == 3
    [server] = servers
    assert import_log.read_text().splitlines() == [f"imported in {server}"]


def test_a_forked_childs_exit_status_and_kill_read_as_a_popens(import_log):
    child = fork(sys.executable, [TARGET], TARGET, "report", {})
    ask(child, "exit 3")
    assert child.wait(30) == 3
    hung = fork(sys.executable, [TARGET], TARGET, "hang", {})
    with pytest.raises(subprocess.TimeoutExpired):
        hung.wait(0.2)
    assert hung.poll() is None
    kill_group(hung)  # as ChildCycle kills a child that does not end
    assert hung.returncode == -signal.SIGKILL
