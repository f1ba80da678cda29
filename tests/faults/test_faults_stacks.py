"""The operator's fault suite on the real stacks (ms20 -> lite20): a worker killed or
stopped at each request type, a worker that dies between requests, a fingerprint lost to a
dying worker, and a bounded kill -9 loop over real `auditor audit` processes.

The rule: no run reads complete and clean when a worker failed in it; the next drift check
compares with the last good fingerprint; nothing is left behind (processes, temporary
directories); no completed run is lost. AUDITOR_KILL9_TRIALS sets the loop's size (default
3; bench/soak.py --soak runs 100 and more).
"""

from __future__ import annotations

import os
import signal
import tempfile

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from auditor.cli.drift import drift_history
from auditor.config.load import load
from auditor.cycle.audit_run import AuditRun
from auditor.db import schema as m
from auditor.extend.manager import Plugins
from auditor.fingerprint.drift import KIND as DRIFT_KIND
from auditor.history.store import Store
from auditor.results import CONSISTENT, ERROR
from tests.conftest import worker_pids
from tests.fault_kit import daemon_soak, kill9_trials, leftovers, small_config, worker_fault

pytestmark = pytest.mark.stacks

KILL9_TRIALS = int(os.environ.get("AUDITOR_KILL9_TRIALS", "3"))


@pytest.fixture(scope="module")
def plugins() -> Plugins:
    return Plugins(entry_points=False)


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """Temporary directories of the cycle (and its workers) go here, to be counted."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def audit(cfg, store, plugins):
    config = load(cfg, {n: p.default_params for n, p in plugins.probes().items()})
    run = AuditRun(config, plugins, store)
    return run.run()


def assert_nothing_left(root) -> None:
    assert worker_pids(parent=os.getpid()) == []
    assert leftovers(root) == ([], [])


def stored_run(store: Store, run_id: int) -> m.Run:
    with Session(store.engine) as s:
        return s.get(m.Run, run_id)


@pytest.mark.parametrize(
    "op,stack",
    [
        ("hello", "lite20"),
        ("fingerprint", "ms20"),
        ("build", "ms20"),
        ("export", "ms20"),
        ("load", "lite20"),
        ("run", "lite20"),
        ("time", "lite20"),
    ],
)
def test_a_worker_killed_mid_request_never_leaves_a_clean_run(
    stacks, tmp_path, private_tmp, plugins, op, stack
):
    store = Store.open(f"sqlite:///{tmp_path / 'h.db'}")
    with worker_fault(op, signal.SIGKILL, stack) as fired:
        result = audit(small_config(tmp_path), store, plugins)
    assert fired == [f"{stack}:{op}"]
    assert result.outcome == ERROR and result.exit_code == 1
    run = stored_run(store, result.run_id)
    assert (run.status, run.outcome) == ("complete", ERROR)
    report = result.stacks[stack]
    text = "\n".join([report.error or "", *report.problems])
    if op == "hello":
        assert report.error and report.fingerprint is None
        assert any(f.kind == "stack-unavailable" and f.subject == stack for f in result.findings)
    else:
        assert f"ended (killed by SIGKILL) during or after its '{op}' request" in text, text
        assert any(f.kind == "worker-failure" and f.subject == stack for f in result.findings)
    if op == "fingerprint":
        assert report.fingerprint is None  # not stored as a (fake) change of the stack
        assert "fingerprint not taken" in report.problems[0]
    assert_nothing_left(private_tmp)


@pytest.mark.parametrize("op,stack", [("hello", "ms20"), ("run", "lite20")])
def test_a_stopped_worker_is_killed_at_its_deadline_and_recorded(
    stacks, tmp_path, private_tmp, plugins, op, stack
):
    store = Store.open(f"sqlite:///{tmp_path / 'h.db'}")
    cfg = small_config(tmp_path, request_timeout=10, start_timeout=15)
    with worker_fault(op, signal.SIGSTOP, stack) as fired:
        result = audit(cfg, store, plugins)
    assert fired == [f"{stack}:{op}"]
    assert result.outcome == ERROR
    (r,) = result.results
    # a start has one deadline, said as such (#54); a request its own
    said = "not started within 15 s ([worker] start_timeout" if op == "hello" else "no answer within 10 s"
    assert r.status == ERROR and said in r.message, r.message
    assert_nothing_left(private_tmp)


def test_a_worker_dying_between_requests_is_recorded_not_restarted_silently(
    stacks, tmp_path, private_tmp, plugins
):
    """ms20 finishes the policy's export, then dies while idle; the next probe restarts it.
    Both probes are consistent, but the run says the worker was replaced, with its stderr."""
    store = Store.open(f"sqlite:///{tmp_path / 'h.db'}")
    cfg = small_config(tmp_path, probes=("ppo_policy", "obs_normalizer"))
    with worker_fault("export", signal.SIGKILL, "ms20", after=True) as fired:
        result = audit(cfg, store, plugins)
    assert fired == ["ms20:export"]
    assert [r.status for r in result.results] == [CONSISTENT, CONSISTENT]
    assert result.outcome == ERROR  # not clean: a worker was lost
    (problem,) = result.stacks["ms20"].problems
    assert "ended (killed by SIGKILL) during or after its 'export' request; restarted" in problem
    assert "worker stderr (last lines)" in problem
    finding = next(f for f in result.findings if f.kind == "worker-failure")
    assert finding.subject == "ms20" and "restarted" in finding.message
    with Session(store.engine) as s:
        rs = s.scalars(select(m.RunStack).where(m.RunStack.run_id == result.run_id)).all()
        assert any(x.error and "restarted" in x.error for x in rs)
    assert_nothing_left(private_tmp)


def test_drift_after_a_lost_fingerprint_is_judged_against_the_last_good_one(
    stacks, tmp_path, private_tmp, plugins
):
    store = Store.open(f"sqlite:///{tmp_path / 'h.db'}")
    good = audit(small_config(tmp_path), store, plugins)
    assert good.stacks["ms20"].fingerprint is not None
    with worker_fault("fingerprint", signal.SIGKILL, "ms20"):
        lost = audit(small_config(tmp_path), store, plugins)
    assert lost.stacks["ms20"].fingerprint is None and lost.outcome == ERROR
    # The stack really changes now (a numerics variable): drift must be found against run 1.
    changed = audit(
        small_config(tmp_path, ms20_env='OMP_NUM_THREADS = "3"', name="changed.toml"), store, plugins
    )
    drift = [f for f in changed.findings if f.kind == DRIFT_KIND and f.subject == "ms20"]
    assert drift, [f.kind for f in changed.findings]
    assert drift[0].details["previous_run"] == good.run_id
    assert "OMP_NUM_THREADS" in drift[0].message
    # And the history of ms20's fingerprint shows one change, not a failed collection.
    assert [e["run_id"] for e in drift_history(store, "ms20")] == [good.run_id, changed.run_id]
    assert_nothing_left(private_tmp)


def test_kill9_loop_loses_no_run_and_leaves_nothing(stacks, tmp_path, capsys):
    figures = kill9_trials(
        tmp_path, KILL9_TRIALS, seed=int(os.environ.get("AUDITOR_FAULT_SEED", "0")), echo=print
    )
    with capsys.disabled():
        print("\n" + figures.line())
    assert figures.clean, (figures.line(), figures.notes)
    assert figures.complete_runs >= 2


def test_daemon_soak_is_flat_and_leaves_nothing(stacks, tmp_path, capsys):
    """Cycles back to back in a real daemon: after each stored cycle its descriptors,
    threads and children are back where they were (a leak shows as a slope)."""
    figures = daemon_soak(tmp_path, cycles=4, echo=print)
    with capsys.disabled():
        print("\n" + figures.line())
    assert figures.cycles >= 4 and figures.tracebacks == 0 and figures.exit_status == 0
    assert (figures.leftover_dirs, figures.leftover_processes) == (0, 0)
    # A sample is taken after each stored cycle; with a 1 s schedule on a loaded machine the
    # next cycle may already have started (its workers and pipes counted). A leak raises every
    # later sample, so compare the least of the later ones.
    first, later = figures.samples[1], figures.samples[2:]
    assert min(s["fds"] for s in later) <= first["fds"], figures.samples
    assert min(s["threads"] for s in later) <= first["threads"], figures.samples
    # one cycle child at a time (the next may be running already): a leak makes it grow
    assert max(s["children"] for s in later) <= 1, figures.samples
