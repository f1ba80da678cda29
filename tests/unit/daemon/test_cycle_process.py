"""The daemon's cycle in a child process (auditor/daemon/cycle_process.py), on a config whose stacks
cannot start (nothing to install): a real child runs the real cycle, stores the run, and
comes back with its reply; aborts, an unusable history and a child that dies."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from auditor.config.load import parse
from auditor.daemon.cycle_process import ABORTED, DONE, FAILED, SKIPPED, ChildCycle, CycleRequest
from auditor.db import schema as m
from auditor.history.store import Store
from tests.unit.daemon.test_daemon import minimal


@pytest.fixture
def history(history_db):
    return f"sqlite:///{history_db}"


def runs(url: str) -> list[tuple[int, str, str | None]]:
    store = Store(url)
    try:
        with Session(store.engine) as s:
            return [(r.id, r.status, r.note) for r in s.scalars(select(m.Run).order_by(m.Run.id))]
    finally:
        store.close()


def test_a_cycle_in_a_child_comes_back_whole(tmp_path, history):
    child = ChildCycle(CycleRequest(parse(minimal()), [], history))
    reply = child.run()
    assert reply.kind == DONE, reply.message
    summary = reply.summary
    assert reply.run_id == 1 and summary is not None and summary.run_id == 1
    # the stacks' interpreters do not exist: the summary says so, it does not fail the cycle
    assert "stack(s) unavailable: tr, inf" in summary.counts and summary.outcome == "error"
    # what Prometheus serves is plain data (the daemon unpickles no result type of the cycle)
    families = {f.name: f for f in summary.families}
    assert [labels for labels, _ in families["auditor_stack"].samples] == [
        ("tr", "train", "mindspore", "local"),
        ("inf", "infer", "mindspore-lite", "local"),
    ]
    assert reply.open_alerts is not None and set(reply.open_alerts) >= {"warning", "error"}
    assert reply.finished >= reply.started > 0
    assert runs(history) == [(1, "complete", None)]
    assert child.proc is not None and child.proc.returncode == 0  # reaped, exited cleanly


def test_an_abort_sent_before_the_run_exists_reaches_it(history):
    child = ChildCycle(CycleRequest(parse(minimal()), [], history))
    child.abort("SIGTERM")
    assert child.aborted
    reply = child.run()
    assert reply.kind == ABORTED and reply.run_id == 1
    assert "SIGTERM" in reply.message
    [(run_id, status, note)] = runs(history)
    assert status == "aborted" and "SIGTERM" in (note or "")


def test_a_stop_before_the_run_begins_begins_none(history):
    """#54: a run began 0.9 s after the daemon said "SIGTERM received: stopping" (its child had
    just been started). Told the daemon stops, a child that has not begun its run begins none."""
    child = ChildCycle(CycleRequest(parse(minimal()), [], history))
    child.stopping()
    reply = child.run()
    assert reply.kind == SKIPPED and reply.message == "the daemon is stopping"
    assert runs(history) == []
    assert child.proc is not None and child.proc.returncode == 0


def test_an_unusable_history_skips_the_cycle_and_names_it(tmp_path):
    (tmp_path / "a-file").write_text("not a directory")
    url = f"sqlite:///{tmp_path / 'a-file' / 'h.db'}"
    reply = ChildCycle(CycleRequest(parse(minimal()), [], url)).run()
    assert reply.kind == SKIPPED and "history database unavailable" in reply.message
    assert reply.run_id is None


def test_a_child_that_dies_is_a_failed_cycle_with_its_status(history):
    reply = ChildCycle(CycleRequest(parse(minimal()), [], history), python="/bin/false").run()
    assert reply.kind == FAILED
    assert "ended without a reply (exit status 1" in reply.message
    missing = ChildCycle(CycleRequest(parse(minimal()), [], history), python="/no/such/python").run()
    assert missing.kind == FAILED and "cannot start the cycle process /no/such/python" in missing.message
    assert runs(history) == []  # nothing recorded, nothing lost


def test_a_forked_child_killed_mid_cycle_is_a_failed_cycle_with_its_status(history):
    """The child forked from the fork server (the default here) is not ours: its status comes
    from the server, and a kill of it reads as a cold child's would."""
    child = ChildCycle(CycleRequest(parse(minimal()), [], history))
    assert child.fork
    killed = threading.Event()

    def kill_when_started() -> None:
        while child.proc is None:
            time.sleep(0.001)
        os.kill(child.proc.pid, signal.SIGKILL)
        killed.set()

    threading.Thread(target=kill_when_started, daemon=True).start()
    reply = child.run()
    assert killed.is_set()
    assert reply.kind == FAILED and "ended without a reply (killed by SIGKILL" in reply.message
    assert child.proc is not None and child.proc.returncode == -signal.SIGKILL
