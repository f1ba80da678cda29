"""Warm workers on the real stacks (auditor.stacks.warm, auditor.worker.zygote): repeatability
reruns still run in another process, each framework's zygote forks with the threads it is
documented to have, a runtime that opts out starts cold, a command ends its zygotes. That the
shipped cycle computes the same warm as cold is tested beside the shared default cycle
(tests/stacks/test_cycle_stacks.py), a daemon that keeps its zygotes in test_daemon_stacks.py,
a stack on another host in tests/fleet/test_hosts_stacks.py."""

from __future__ import annotations

import logging
import os
import signal
import tempfile
from pathlib import Path

import pytest

from auditor.cycle import probes, serving
from auditor.cycle.cycle import Cycle
from auditor.extend.manager import Plugins, builtin_probes
from auditor.stacks import worker as stack_worker
from auditor.stacks.warm import WarmPool
from tests.cli import auditor
from tests.configs import build
from tests.conftest import DEFAULT_CONFIG, OWN_ZYGOTES

pytestmark = pytest.mark.stacks


def _starts(monkeypatch) -> list[tuple[str, int, bool]]:
    """Every worker start of this test: (stack, pid, forked from a zygote)."""
    started: list[tuple[str, int, bool]] = []
    original = stack_worker.StackWorker.start

    def start(self):
        hello = original(self)
        started.append((self.stack.name, hello["pid"], self.forked))
        return hello

    monkeypatch.setattr(stack_worker.StackWorker, "start", start)
    return started


def test_a_repeatability_rerun_runs_in_a_process_started_cold(stacks, doc, monkeypatch, own_zygotes):
    """The rerun that decides "repeats" starts its interpreter anew: a fork of the zygote that
    computed the first result would share its address layout, hash seed and heap, and claim
    more than was measured."""
    config = build(
        doc,
        builtin_probes(),
        pairs=[{"train": "ms20", "infer": "ms210-graph", "probes": ["action_sampler"]}],
        variants={"action_sampler": ["seeded-normal"]},
        latency={"batches": []},
    )
    started = _starts(monkeypatch)
    result = Cycle(config, builtin_probes()).run()
    [r] = result.results
    checks = {c.metric: c for c in r.checks}
    assert "train_rerun_max_abs" in checks, sorted(checks)
    assert checks["train_rerun_max_abs"].passed and checks["train_rerun_max_abs"].value == 0
    ms20 = [(pid, forked) for stack, pid, forked in started if stack == "ms20"]
    assert [forked for _, forked in ms20] == [True, False], started  # the first forked, the rerun cold
    assert ms20[0][0] != ms20[1][0]  # the rerun's worker is another process
    assert "cold" in checks["train_rerun_max_abs"].message or checks["train_rerun_max_abs"].passed


def test_each_framework_forks_with_the_threads_it_is_documented_to_have(stacks, doc, own_zygotes):
    """ARCHITECTURE.md: after the import, MindSpore 2.0 and Lite 2.0 have one thread; on
    Python 3.11 numpy's OpenBLAS adds its server thread (MindSpore 2.10), which OpenBLAS stops
    around a fork itself. No framework thread pool has run work before the fork."""
    config = build(doc, builtin_probes())
    with Plugins(entry_points=False).reach(config) as stacks_reach:
        found = {i.stacks[0]: i for i in stacks_reach.prepare_warm(["ms20", "lite20", "ms210"])}
        assert set(found) == {"ms20", "lite20", "ms210"}
        assert len(found["ms20"].threads) == 1 and len(found["lite20"].threads) == 1
        assert len(found["ms210"].threads) == 2
        assert found["ms20"].preloaded == ["mindspore"] and found["lite20"].preloaded == ["mindspore_lite"]
        # The graph-mode runtime's class sits in MindSpore's module: one zygote serves both.
        with stacks_reach.worker("ms210-graph") as w:
            w.start()
            assert w.forked
        assert len(stacks_reach.warm.zygotes()) == 3
        for info in found.values():
            assert info.rss_bytes and info.rss_bytes > 100 * 2**20  # a framework is in it


def test_onnx_runtime_opts_out_and_starts_cold_saying_so(stacks, doc, caplog, own_zygotes):
    ort = {"role": "infer", "runtime": "ort", "python": str(stacks / "ort" / "bin" / "python")}
    config = build(doc, builtin_probes(), stacks={**doc["stacks"], "ort": ort})
    plugins = Plugins(entry_points=False)
    assert plugins.runtimes()["ort"].cold
    with caplog.at_level(logging.WARNING, "auditor.stacks.warm"), plugins.reach(config) as stacks_reach:
        with stacks_reach.worker("ort") as w:
            hello = w.start()
        assert not w.forked and hello["runtime_package"] == "onnxruntime"
        assert stacks_reach.warm.zygotes() == []
    assert "stack ort: its workers start cold (runtime ort opts out of warm workers" in caplog.text


def test_a_command_ends_its_zygotes(stacks, tmp_path):
    """`auditor hosts check` forks its workers from zygotes of its own and ends them when done.
    Its temporary directory is this test's own (short enough for sockets): the other test
    process's commands make and remove zygote directories in /tmp at the same time."""
    with tempfile.TemporaryDirectory(prefix="zy", dir="/tmp") as tmp:
        proc = auditor("--config", str(DEFAULT_CONFIG), "hosts", "check", env={**OWN_ZYGOTES, "TMPDIR": tmp})
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.count("warm: forked from a zygote") == 4  # ms210, ms210-graph, ms20, lite20
        assert "holds" in proc.stdout and "thread(s) at fork" in proc.stdout
        made = [p.name for p in Path(tmp).iterdir()]
        assert not [n for n in made if n.startswith("auditor-zygotes-")], made


def test_warm_off_starts_every_worker_cold(stacks, doc):
    config = build(doc, builtin_probes(), worker={"warm": "off"})
    with Plugins(entry_points=False).reach(config) as stacks_reach:
        assert isinstance(stacks_reach.warm, WarmPool) and stacks_reach.warm.mode == "off"
        with stacks_reach.worker("lite20") as w:
            w.start()
            assert not w.forked
        assert stacks_reach.warm.zygotes() == []


def _zygote_of(worker) -> int:
    return int(Path(f"/proc/{worker.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


@pytest.mark.faults
@pytest.mark.parametrize("side", ["train", "serve"])
def test_a_zygote_killed_while_its_worker_works_costs_no_result(stacks, doc, monkeypatch, own_zygotes, side):
    """#54: a zygote killed while a worker forked from it served a request lost that request
    (an error result, no retry), and the death was read as the runtime crashing on the file.
    The worker is lost with its zygote, not by what it was asked: the work is done once more on
    a fresh worker, said in the result's log, and judged."""
    config = build(
        doc,
        builtin_probes(),
        pairs=[{"train": "ms20", "infer": "lite20", "probes": ["ppo_policy"]}],
        variants={"ppo_policy": ["fp32"]},
        latency={"batches": []},
        rollout={"enabled": False},
    )
    killed: list[int] = []

    def kill_first(worker) -> None:
        if not killed and worker.forked:
            killed.append(_zygote_of(worker))
            os.kill(killed[0], signal.SIGKILL)  # the worker dies with it, mid-work

    if side == "serve":
        serve_on = serving.Serving.serve_on

        def serving_once(self, worker, stack, audit, side, loaded, reference=False):
            if stack == "lite20":
                kill_first(worker)
            return serve_on(self, worker, stack, audit, side, loaded, reference)

        monkeypatch.setattr(serving.Serving, "serve_on", serving_once)
    else:
        train = probes._train

        def training_once(state, worker, *args):
            kill_first(worker)
            return train(state, worker, *args)

        monkeypatch.setattr(probes, "_train", training_once)
    result = Cycle(config, builtin_probes()).run()
    assert killed, "the worker was not forked from a zygote"
    [r] = result.results
    assert r.status == "consistent", r.message
    again = "served again on a fresh worker" if side == "serve" else "built again on a fresh worker"
    assert again in r.log and "zygote died" in r.log, r.log
