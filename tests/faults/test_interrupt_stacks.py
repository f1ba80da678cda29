"""An audit interrupted mid-cycle leaves a run marked aborted, its workers gone, and the
runs stored before it intact."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from auditor.db import schema as m
from auditor.history.store import Store
from auditor.stacks.warm import WARM_DIR_ENV
from tests.cli import auditor, auditor_argv
from tests.conftest import DEFAULT_CONFIG, REPO, worker_pids

pytestmark = pytest.mark.stacks


def _default_sigint() -> None:
    # A shell starts background jobs with SIGINT ignored, and Python then leaves it ignored
    # (no KeyboardInterrupt): give the audit the disposition an interactive user's has.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(db) -> subprocess.Popen[str]:
    # Its own zygotes: its workers then descend from it, to be counted (not from the session's).
    env = {k: v for k, v in os.environ.items() if k != WARM_DIR_ENV}
    return subprocess.Popen(
        auditor_argv("--config", str(DEFAULT_CONFIG), "--db", str(db), "audit"),
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _gone(pids: list[int], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(_alive(p) for p in pids)


def _mid_cycle(proc: subprocess.Popen[str], polls: int = 1200) -> None:
    """Wait (every 50 ms, up to 1200 times) until the audit's workers are up: mid-cycle."""
    for _ in range(polls):
        if _workers_of(proc.pid):
            return
        if proc.poll() is not None:
            raise AssertionError(f"the audit ended ({proc.returncode}) before a worker started")
        time.sleep(0.05)
    raise AssertionError("no worker started")


def _workers_of(pid: int) -> list[int]:
    """Stack workers whose parent is pid (they run in their own sessions, so not in its group)."""
    return worker_pids(parent=pid)


@pytest.fixture(scope="module")
def earlier_run(stacks, tmp_path_factory) -> Path:
    """A history holding one complete run (one pair, one probe: any complete run will do)."""
    db = tmp_path_factory.mktemp("earlier") / "h.db"
    done = auditor(
        "--config", str(DEFAULT_CONFIG), "--db", str(db), "audit", "--pair", "ms20->lite20",
        "--probe", "obs_normalizer",
    )  # fmt: skip
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr[-3000:]
    return db


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_mid_cycle_marks_run_aborted_and_keeps_history(earlier_run, tmp_path, signum):
    db = tmp_path / "h.db"
    shutil.copyfile(earlier_run, db)  # a complete run stored before
    store = Store.open(f"sqlite:///{db}")
    with Session(store.engine) as s:
        before = s.scalar(select(func.count()).select_from(m.MetricRow))
    assert before > 0

    proc = _start(db)
    # Wait until the cycle's workers are up, i.e. we are in the middle of the cycle.
    _mid_cycle(proc)
    started = _workers_of(proc.pid) + worker_pids(parent=proc.pid, zygotes=True)
    proc.send_signal(signum)
    code = proc.wait(timeout=60)
    assert code == 128 + signum
    assert "marked aborted" in proc.stderr.read()
    # Its workers and its zygotes (they are reparented once it is gone: counted by pid).
    assert _gone(started), [p for p in started if _alive(p)]

    with Session(store.engine) as s:
        runs = s.scalars(select(m.Run).order_by(m.Run.id)).all()
        assert [r.status for r in runs] == ["complete", "aborted"]
        assert signal.Signals(signum).name in runs[1].note
        assert (
            s.scalar(
                select(func.count())
                .select_from(m.ProbeResultRow)
                .where(m.ProbeResultRow.run_id == runs[1].id)
            )
            == 0
        )
        assert s.scalar(select(func.count()).select_from(m.MetricRow)) == before


def test_killed_audit_is_marked_aborted_at_next_start(stacks, tmp_path):
    db = tmp_path / "h.db"
    proc = _start(db)
    _mid_cycle(proc)
    workers = _workers_of(proc.pid)
    zygotes = worker_pids(parent=proc.pid, zygotes=True)
    assert zygotes, "the audit started no zygote ([worker] warm = cycle is the default)"
    proc.kill()
    proc.wait()
    # A zygote sees the end of its stdin and ends, killing what it forked; the workers see
    # theirs too. Nothing of the killed audit keeps running.
    assert _gone(zygotes + workers, 20), [p for p in zygotes + workers if _alive(p)]
    store = Store.open(f"sqlite:///{db}")
    (run,) = store.runs()
    # Read as interrupted as soon as its process is gone, before anything is written ...
    assert run.status == "aborted" and f"interrupted: process {proc.pid}" in run.note
    with Session(store.engine) as s:
        assert s.get(m.Run, run.id).status == "running"
    # ... and marked so in the database by the next start.
    store.begin_run("next")
    first, _ = sorted(store.runs(), key=lambda r: r.id)
    assert first.status == "aborted" and f"process {proc.pid}" in first.note
    with Session(store.engine) as s:
        assert s.get(m.Run, run.id).status == "aborted"
