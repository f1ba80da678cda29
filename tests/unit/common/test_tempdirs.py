"""Owned temporary directories: removed on every way out, and reaped (with any process still
running in them) once their owner is gone, as after a SIGKILL of the auditor."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from auditor.common import tempdirs


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_owned_removes_the_directory_on_an_exception(tmp_path):
    with pytest.raises(KeyboardInterrupt), tempdirs.owned("auditor-cycle-", str(tmp_path)) as path:
        assert (path / tempdirs.OWNER_FILE).exists()
        raise KeyboardInterrupt
    assert not path.exists()


def test_a_directory_of_a_dead_owner_is_reaped_with_the_process_inside(tmp_path):
    path = tempdirs.make("auditor-ms20-", str(tmp_path))
    (path / tempdirs.OWNER_FILE).write_text(json.dumps({"host": socket.gethostname(), "pid": dead_pid()}))
    # A worker left running in its work dir by a killed auditor (its own process group).
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], cwd=path, start_new_session=True
    )
    mine = tempdirs.make("auditor-cycle-", str(tmp_path))
    other_host = tempdirs.make("auditor-lite20-", str(tmp_path))
    (other_host / tempdirs.OWNER_FILE).write_text(json.dumps({"host": "elsewhere", "pid": dead_pid()}))
    unmarked = tmp_path / "auditor-unmarked"
    unmarked.mkdir()
    try:
        assert tempdirs.orphans(str(tmp_path)) == [path]
        assert tempdirs.reap(str(tmp_path)) == [path]
        assert sleeper.wait(timeout=10) == -9
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
    assert not path.exists() and mine.exists() and other_host.exists() and unmarked.exists()


def test_a_reused_pid_is_not_the_owner(tmp_path):
    path = tempdirs.make("auditor-cycle-", str(tmp_path))
    info = json.loads((path / tempdirs.OWNER_FILE).read_text())
    assert tempdirs.owner_alive(info)
    info["start"] = int(info["start"]) - 1  # same pid, another process
    assert not tempdirs.owner_alive(info)


def test_a_worker_work_dir_is_owned(tmp_path, monkeypatch):
    from auditor.config.tables import StackConfig
    from auditor.stacks.worker import StackWorker

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    stack = StackConfig(name="s", role="train", runtime="mindspore", python="/nonexistent/python")
    worker = StackWorker(stack)
    assert (worker.workdir / tempdirs.OWNER_FILE).exists()
    assert str(worker.workdir).startswith(str(tmp_path))
    worker.close()
    assert not worker.workdir.exists()
    assert os.listdir(tmp_path) == []
