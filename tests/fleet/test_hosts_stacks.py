"""Stacks on other hosts, driven over real OpenSSH servers on 127.0.0.1 (tests/sshd.py) and
through a real command-prefix wrapper: the same cycle as local, failures per stack with
messages that name the host, and nothing left behind on either side."""

from __future__ import annotations

import copy
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from pathlib import Path

import pytest

from auditor.cycle.cycle import Cycle
from auditor.results import CONSISTENT, ERROR
from auditor.stacks.transport import CONNECTIONS
from tests.ascend_trees import build_tree
from tests.cli import auditor
from tests.configs import FP32_POLICY, build, probes_with
from tests.conftest import stack_python, worker_pids
from tests.requires import require
from tests.sshd import Sshd, _descends, keygen, make_sshd, unavailable, write_machine_id

pytestmark = pytest.mark.stacks


@pytest.fixture(scope="module")
def hosts(stacks, tmp_path_factory) -> dict[str, tuple[Sshd, object]]:
    """Two sshd "hosts", each with its own Ascend tree, system_root and machine id."""
    require("sshd", unavailable)  # CI: scripts/setup installs openssh-server
    base = tmp_path_factory.mktemp("hosts")
    REMOTE_TMP.mkdir(exist_ok=True)
    out = {}
    for name, tree_name in (("hostA", "consistent-8.2"), ("hostB", "310p-nnrt")):
        tree = build_tree(base / "trees" / name, tree_name)
        write_machine_id(tree.system_root, name)
        # the hosts' sessions keep their files in a folder of this test process's own, so what
        # the tests see left behind there is theirs, not another test's running beside them
        out[name] = (make_sshd(base / "sshd", name, session_env={"TMPDIR": str(REMOTE_TMP)}), tree)
        SERVERS.add(out[name][0].proc.pid)
    yield out
    for server, _ in out.values():
        server.stop()
    shutil.rmtree(REMOTE_TMP, ignore_errors=True)


def _stack(name: str, runtime: str, role: str, tree, host: str = "local", **extra) -> dict:
    return {
        "role": role,
        "runtime": runtime,
        "python": str(stack_python(name)),
        "host": host,
        "ascend_root": str(tree.ascend_root),
        "system_root": str(tree.system_root),
        "npu_smi": str(tree.npu_smi),
        **extra,
    }


def _config(doc: dict, stacks: dict, hosts: dict, pairs: list[dict], **worker):
    return build(
        doc,
        probes_with("faulty"),
        source="test",
        stacks=stacks,
        hosts=hosts,
        pairs=pairs,
        rollout={"enabled": False},
        latency={"batches": [], "iterations": 20},
        worker=worker,
        variants=FP32_POLICY,
    )


REMOTE_TMP = Path(tempfile.gettempdir()) / f"auditor-test-hosts-{os.getpid()}"
"""The sshd hosts' TMPDIR: where their workers' folders appear."""


def _remote_dirs() -> set[str]:
    return {p.name for p in REMOTE_TMP.glob("auditor-w-*")}


def _ssh_clients() -> list[int]:
    """ssh client processes started by this test process's auditor (masters included)."""
    return _ssh_clients_of(CONNECTIONS)


def _settled(check, seconds: float = 15.0) -> bool:
    """Poll ``check`` until it holds (cleanup on the far side of a connection is asynchronous)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return check()


def _my_workers() -> list[int]:
    """Workers started by this test process, here or through its sshd "hosts" (the machine
    is shared: other processes' workers are not ours to count)."""
    roots = {os.getpid(), *SERVERS}
    return [p for p in worker_pids() if any(_descends(p, r) for r in roots)]


SERVERS: set[int] = set()
"""The sshd listeners started by these tests."""


def _no_leftovers(before: set[str]) -> None:
    assert _settled(lambda: _my_workers() == []), _my_workers()
    assert _settled(lambda: _remote_dirs() <= before), _remote_dirs() - before
    assert _settled(lambda: _ssh_clients() == []), _ssh_clients()


def _metrics(result) -> list[tuple]:
    return [(o.output, o.passed, sorted(o.metrics.items())) for o in result.outputs]


def test_two_host_cycle_matches_the_local_pair_and_fingerprints_show_the_hosts(hosts, default_doc):
    (a, tree_a), (b, tree_b) = hosts["hostA"], hosts["hostB"]
    before = _remote_dirs()
    config = _config(
        default_doc,
        {
            "ms20": _stack("ms20", "mindspore", "train", tree_a, "hostA"),
            "lite20": _stack("lite20", "mindspore-lite", "infer", tree_b, "hostB"),
            "ms20-here": _stack("ms20", "mindspore", "train", tree_a),
            "lite20-here": _stack("lite20", "mindspore-lite", "infer", tree_b),
        },
        {"hostA": a.host_table(), "hostB": b.host_table()},
        [
            {"train": "ms20", "infer": "lite20", "probes": ["ppo_policy", "obs_normalizer"]},
            {"train": "ms20-here", "infer": "lite20-here", "probes": ["ppo_policy", "obs_normalizer"]},
        ],
        parallel=4,
    )
    result = Cycle(config, probes_with("faulty")).run()
    remote = [r for r in result.results if r.pair == "ms20->lite20"]
    local = [r for r in result.results if r.pair == "ms20-here->lite20-here"]
    assert len(remote) == len(local) >= 2
    for r, here in zip(remote, local, strict=True):
        assert (r.probe, r.variant) == (here.probe, here.variant)
        assert r.status == here.status == CONSISTENT, r.message
        assert _metrics(r) == _metrics(here)
        assert r.artifact.info["mind_ir_version"] == here.artifact.info["mind_ir_version"]
    fa, fb = result.stacks["ms20"].fingerprint, result.stacks["lite20"].fingerprint
    assert fa["connection"]["host"] == "hostA" and fb["connection"]["host"] == "hostB"
    assert fa["connection"]["transport"] == "ssh"
    assert fa["connection"]["address"] == f"127.0.0.1:{a.port}"
    assert fb["connection"]["destination"].endswith(f":{b.port}")
    assert fa["host"]["machine_id"] != fb["host"]["machine_id"]
    assert result.stacks["ms20"].host == "hostA"
    assert "connection" not in result.stacks["ms20-here"].fingerprint
    # Same files, same interpreter: the remote stack differs from the local one only by where it is.
    same = {k: v for k, v in fa.items() if k != "connection"}
    assert same["cann"] == result.stacks["ms20-here"].fingerprint["cann"]
    _no_leftovers(before)


def test_each_connection_failure_names_its_host_and_the_other_pairs_run(hosts, default_doc, tmp_path):
    (a, tree_a), (b, tree_b) = hosts["hostA"], hosts["hostB"]
    stranger = keygen(tmp_path / "stranger", "not-authorized")
    empty_known = tmp_path / "known_hosts"
    empty_known.write_text("")
    # hostA's key recorded for hostB's address: what a reinstalled (or impersonated) host looks like
    changed_known = tmp_path / "changed_known_hosts"
    a_key = (a.dir / "host_ed25519.pub").read_text().split()[:2]
    changed_known.write_text(f"[127.0.0.1]:{b.port} {' '.join(a_key)}\n")
    # A port that accepts connections and never says a word: a host that hangs.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    from tests.sshd import free_port

    before = _remote_dirs()
    lite = lambda host, **extra: _stack("lite20", "mindspore-lite", "infer", tree_b, host, **extra)  # noqa: E731
    config = _config(
        default_doc,
        {
            "ms20": _stack("ms20", "mindspore", "train", tree_a, "hostA"),
            "lite20": lite("hostB"),
            "lite20-key": lite("wrongkey"),
            "lite20-port": lite("wrongport"),
            "lite20-hostkey": lite("unknownkey"),
            "lite20-python": lite("hostB", python="/opt/nowhere/bin/python3.7"),
            # MindSpore's runtime with Lite's interpreter: starts, cannot import mindspore.
            "graph-nort": _stack("lite20", "mindspore-graph", "infer", tree_b, "hostB"),
            "lite20-changed": lite("changedkey"),
            "lite20-silent": lite("silent"),
        },
        {
            "hostA": a.host_table(),
            "hostB": b.host_table(),
            "wrongkey": b.host_table(identity_file=str(stranger)),
            "wrongport": b.host_table(port=free_port()),
            "unknownkey": b.host_table(
                options=[f"UserKnownHostsFile={empty_known}", "StrictHostKeyChecking=yes"]
            ),
            "changedkey": b.host_table(
                options=[f"UserKnownHostsFile={changed_known}", "StrictHostKeyChecking=yes"]
            ),
            "silent": b.host_table(port=silent.getsockname()[1], connect_timeout=2),
        },
        [
            {"train": "ms20", "infer": n, "probes": ["obs_normalizer"]}
            for n in ("lite20", "lite20-key", "lite20-port", "lite20-hostkey", "lite20-python", "graph-nort")
            + ("lite20-changed", "lite20-silent")
        ],
        parallel=3,
    )
    try:
        result = Cycle(config, probes_with("faulty")).run()
    finally:
        silent.close()
    by = {r.infer: r for r in result.results}
    assert by["lite20"].status == CONSISTENT
    expect = {
        "lite20-key": ("host wrongkey", "authentication failed", "authorized_keys"),
        "lite20-port": ("host wrongport", "connection was refused", "is sshd running"),
        "lite20-hostkey": ("host unknownkey", "host key is not known", "known_hosts"),
        "lite20-python": ("host hostB", "/opt/nowhere/bin/python3.7 is not found", "python to a path"),
        "graph-nort": ("stack graph-nort on host hostB", "mindspore"),
        "lite20-changed": ("host changedkey", "host key CHANGED", "ssh-keygen -R"),
        "lite20-silent": ("host silent", "no answer before ConnectTimeout"),
    }
    for name, words in expect.items():
        r = by[name]
        assert r.status == ERROR, name
        error = result.stacks[name].error
        for w in words:
            assert w in error, (name, w, error)
        assert "Traceback" not in error
    _no_leftovers(before)


def test_stopped_remote_worker_and_stopped_sshd_fail_only_their_pairs(hosts, default_doc, tmp_path):
    """A worker stopped with SIGSTOP misses its deadline; an sshd killed mid-request drops
    the connection; a worker killed by SIGKILL on its host is reported like a local one: each
    ends in an error naming the host, the local pair completes, and no worker, temporary
    directory or ssh client is left."""
    (a, tree_a), (b, tree_b) = hosts["hostA"], hosts["hostB"]
    c = make_sshd(tmp_path, "hostC")
    SERVERS.add(c.proc.pid)
    marker = tmp_path / "waiting.pid"
    before = _remote_dirs()
    config = _config(
        default_doc,
        {
            "ms20-stop": _stack("ms20", "mindspore", "train", tree_a, "hostA"),
            "ms20-drop": _stack("ms20", "mindspore", "train", tree_a, "hostC"),
            "ms20-crash": _stack("ms20", "mindspore", "train", tree_a, "hostA"),
            "lite20": _stack("lite20", "mindspore-lite", "infer", tree_b, "hostB"),
            "ms20-here": _stack("ms20", "mindspore", "train", tree_a),
        },
        {"hostA": a.host_table(), "hostB": b.host_table(), "hostC": c.host_table()},
        [
            {"train": "ms20-stop", "infer": "lite20", "probes": ["faulty"]},
            {"train": "ms20-drop", "infer": "lite20", "probes": ["faulty"]},
            {"train": "ms20-crash", "infer": "lite20", "probes": ["faulty"]},
            {"train": "ms20-here", "infer": "lite20", "probes": ["obs_normalizer"]},
        ],
        parallel=3,
        request_timeout=20,
    )
    # One faulty probe config, two behaviours: the probe reads its mode from the stack's env.
    modes = {"ms20-stop": "stop", "ms20-drop": "wait", "ms20-crash": "crash"}
    config = _with_faulty_modes(config, modes, marker)

    def stop_sshd_when_waiting() -> None:
        if _settled(marker.exists, 120):
            c.stop()

    stopper = threading.Thread(target=stop_sshd_when_waiting, daemon=True)
    stopper.start()
    try:
        result = Cycle(config, probes_with("faulty")).run()
    finally:
        stopper.join(130)
        c.stop()
    by = {r.train: r for r in result.results}
    assert by["ms20-here"].status == CONSISTENT
    stop, drop = by["ms20-stop"], by["ms20-drop"]
    assert stop.status == ERROR and "no answer within 20 s" in stop.message and "host hostA" in stop.message
    assert drop.status == ERROR and "host hostC" in drop.message
    assert "connection was lost" in drop.message, drop.message
    crash = by["ms20-crash"]
    assert crash.status == ERROR and "worker died during the request (killed by SIGKILL)" in crash.message
    assert "auditor worker: killed by signal 9" in crash.message  # the supervisor's word, over ssh
    pid = int(marker.read_text())
    assert _settled(lambda: not _alive(pid)), "the worker on the dropped host is still running"
    _no_leftovers(before)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _with_faulty_modes(config, modes: dict[str, str], marker: Path):
    """The faulty probe takes its mode from FAULTY_MODE in the train stack's env."""
    import dataclasses

    stacks = dict(config.stacks)
    for name, mode in modes.items():
        stacks[name] = dataclasses.replace(
            stacks[name], env={**stacks[name].env, "FAULTY_MODE": mode, "FAULTY_MARKER": str(marker)}
        )
    return dataclasses.replace(config, stacks=stacks)


def test_command_transport_runs_the_pair_through_a_wrapper(hosts, default_doc, tmp_path):
    """A host reached through an argv prefix: here a wrapper that execs with an emptied
    environment (as docker exec or kubectl exec give a fresh one)."""
    (_, tree_a), (_, tree_b) = hosts["hostA"], hosts["hostB"]
    wrapper = tmp_path / "fresh-env"
    log = tmp_path / "wrapper.log"
    wrapper.write_text(f'#!/bin/sh\necho "$$ $1" >> {log}\nexec env -i PATH=/usr/bin:/bin "$@"\n')
    wrapper.chmod(0o755)
    before = _remote_dirs()
    config = _config(
        default_doc,
        {
            "ms20": _stack("ms20", "mindspore", "train", tree_a, "box"),
            "lite20": _stack("lite20", "mindspore-lite", "infer", tree_b, "box"),
        },
        {"box": {"command": [str(wrapper)]}},
        [{"train": "ms20", "infer": "lite20", "probes": ["obs_normalizer"]}],
    )
    result = Cycle(config, probes_with("faulty")).run()
    assert result.results and all(r.status == CONSISTENT for r in result.results), result.results
    assert result.stacks["ms20"].fingerprint["connection"] == {
        "host": "box",
        "transport": "command",
        "command": [str(wrapper)],
        "address": None,
    }
    assert len(log.read_text().splitlines()) >= 2  # both workers went through the wrapper
    assert "HOME" not in result.stacks["ms20"].fingerprint["environment"].get("variables", {})
    _no_leftovers(before)


def test_sigkill_of_the_remote_supervisor_leaves_a_dir_the_next_connection_removes(hosts):
    """A crash that skips all cleanup (SIGKILL of the worker and its supervisor) leaves the
    private directory; the next worker started on that host removes it.

    The stack gets a temporary directory of its own: every test host is this one machine, so
    in the shared /tmp any other test's remote start (rightly) sweeps the dead directory
    before this test looks at it."""
    from auditor.config.tables import HostConfig, StackConfig
    from auditor.extend.manager import Plugins
    from auditor.stacks.transport import CONNECTIONS
    from auditor.stacks.worker import StackWorker

    b, tree_b = hosts["hostB"]
    t = b.host_table()
    host = HostConfig(
        "hostB",
        ssh=t["ssh"],
        port=t["port"],
        identity_file=t["identity_file"],
        options=tuple(t["options"]),
    )
    own_tmp = tempfile.mkdtemp(prefix="aud-tmp-")
    stack = StackConfig(
        "lite20",
        "infer",
        "mindspore-lite",
        str(stack_python("lite20")),
        host="hostB",
        env={"TMPDIR": own_tmp},
    )
    lite = Plugins(entry_points=False).runtimes()["mindspore-lite"].worker_class
    first = StackWorker(stack, host=host, start_timeout=60, runtime_class=lite)
    first.start()
    left = Path(str(first.workdir))
    assert left.parent == Path(own_tmp)
    assert oct(left.stat().st_mode & 0o777) == "0o700"
    os.kill(first.remote["supervisor"], signal.SIGKILL)  # the worker dies with it (PDEATHSIG)
    assert _settled(lambda: not _alive(first.hello["pid"]))
    assert left.exists()
    first.close()
    second = StackWorker(stack, host=host, start_timeout=60, runtime_class=lite)
    try:
        second.start()
        assert not left.exists()
        assert Path(str(second.workdir)).exists()
    finally:
        second.close()
        CONNECTIONS.close_all()
    assert _settled(lambda: not Path(str(second.workdir)).exists())
    os.rmdir(own_tmp)  # empty: nothing else was left there


def test_a_master_is_checked_and_closed_over_its_socket_without_ssh_processes(hosts, monkeypatch):
    """A later worker of a host finds the master by its socket, and the end of a cycle tells
    it to exit over that socket (OpenSSH's mux protocol): no ssh -O process for either, and
    no master left running. A socket nothing listens on is not a live master."""
    import subprocess

    from auditor.config.tables import HostConfig
    from auditor.stacks import transport

    a, _ = hosts["hostA"]
    t = a.host_table()
    host = HostConfig(
        "hostA", ssh=t["ssh"], port=t["port"], identity_file=t["identity_file"], options=tuple(t["options"])
    )
    connections = transport.Connections()
    control = connections.ensure(host)
    assert control is not None
    assert transport._terminate(control + ".none") is False
    started: list[list[str]] = []
    real_run = subprocess.run

    def recording(argv, *args, **kwargs):
        started.append(list(argv))
        return real_run(argv, *args, **kwargs)

    monkeypatch.setattr(transport.subprocess, "run", recording)
    try:
        assert connections.ensure(host) == control  # checked, not reopened
        assert len(_ssh_clients_of(connections)) == 1  # the master
        connections.close_all()
        assert _settled(lambda: not _ssh_clients_of(connections))
        assert not connections._check(host, control)
    finally:
        connections.shutdown()
    assert started == []


def _ssh_clients_of(connections) -> list[int]:
    """Live ssh processes whose command line names this Connections' socket directory."""
    if not connections._dir:
        return []
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if cmd and cmd[0] == b"ssh" and state != "Z" and any(connections._dir.encode() in w for w in cmd):
            found.append(int(entry.name))
    return found


def _toml(value: object) -> str:
    import json

    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


def _write_config(path: Path, stacks: dict, hosts: dict, pairs: list[dict]) -> Path:
    lines = ["[rollout]", "enabled = false", "[latency]", "batches = []", "iterations = 10"]
    lines += ["[probes.obs_normalizer]", 'variants = ["fp32"]']
    for name, table in hosts.items():
        lines.append(f"[hosts.{name}]")
        lines += [f"{k} = {_toml(v)}" for k, v in table.items()]
    for name, table in stacks.items():
        lines.append(f"[stacks.{name}]")
        lines += [f"{k} = {_toml(v)}" for k, v in table.items()]
    for p in pairs:
        lines.append("[[pairs]]")
        lines += [f"{k} = {_toml(v)}" for k, v in p.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_hosts_check_reports_each_host_and_stack_without_a_cycle(hosts, tmp_path):
    (a, tree_a), (b, tree_b) = hosts["hostA"], hosts["hostB"]
    config = _write_config(
        tmp_path / "auditor.toml",
        {
            "ms20": _stack("ms20", "mindspore", "train", tree_a, "hostA"),
            "lite20": _stack("lite20", "mindspore-lite", "infer", tree_b, "hostB"),
            "lite20-gone": _stack("lite20", "mindspore-lite", "infer", tree_b, "gone"),
            "lite20-nopy": _stack("lite20", "mindspore-lite", "infer", tree_b, "hostB", python="/no/python"),
        },
        {
            "hostA": a.host_table(),
            "hostB": b.host_table(),
            "gone": b.host_table(port=__import__("tests.sshd").sshd.free_port()),
        },
        [{"train": "ms20", "infer": "lite20", "probes": ["obs_normalizer"]}],
    )
    before = _remote_dirs()
    proc = auditor("--config", str(config), "hosts", "check")
    assert proc.returncode == 1, proc.stderr
    out = proc.stdout
    assert "hostA  ssh " in out and "reachable" in out
    assert "ms20           ok  Python 3.7." in out and "mindspore 2.0.0" in out
    assert "lite20         ok  Python 3.7." in out and "mindspore-lite 2.0.0" in out
    assert "gone  " in out and "UNREACHABLE" in out and "connection was refused" in out
    assert "not checked: lite20-gone" in out
    assert "lite20-nopy    FAILED" in out and "/no/python is not found" in out
    assert "Traceback" not in proc.stdout + proc.stderr
    ok = auditor("--config", str(config), "hosts", "check", "hostA")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert _settled(lambda: _remote_dirs() <= before)


def test_moved_stack_is_a_fingerprint_change_and_history_filters_by_host(hosts, tmp_path):
    """ms20 audited here, then on hostA: the second run reports the move as version drift
    (not a silent new baseline), and ``history --host`` tells the runs apart."""
    import json

    (a, tree_a), (_, tree_b) = hosts["hostA"], hosts["hostB"]
    db = tmp_path / "history.db"
    lite = _stack("lite20", "mindspore-lite", "infer", tree_b)
    pair = [{"train": "ms20", "infer": "lite20", "probes": ["obs_normalizer"]}]
    here = _write_config(
        tmp_path / "here.toml",
        {"ms20": _stack("ms20", "mindspore", "train", tree_a), "lite20": lite},
        {},
        pair,
    )
    there = _write_config(
        tmp_path / "there.toml",
        {"ms20": _stack("ms20", "mindspore", "train", tree_a, "hostA"), "lite20": lite},
        {"hostA": a.host_table()},
        pair,
    )
    first = auditor("--config", str(here), "--db", str(db), "audit", "--json")
    assert json.loads(first.stdout)["results"], first.stderr
    second = auditor("--config", str(there), "--db", str(db), "audit", "--json")
    doc = json.loads(second.stdout)
    drift = [f for f in doc["findings"] if f["kind"] == "version-drift" and f["subject"] == "ms20"]
    assert drift, doc["findings"]
    paths = {c["path"] for c in drift[0]["details"]["changes"]}
    assert "host.machine_id" in paths or "connection" in paths, paths
    assert all(r["status"] == CONSISTENT for r in doc["results"])
    text = auditor("--config", str(there), "--db", str(db), "history", "--host", "hostA", "--format", "csv")
    rows = text.stdout.strip().splitlines()
    assert len(rows) == 1 + len(doc["results"]), text.stdout + text.stderr
    local = auditor("--config", str(there), "--db", str(db), "history", "--host", "local", "--format", "csv")
    assert len(local.stdout.strip().splitlines()) == 1 + 2 * len(doc["results"])  # lite20 is local in both
    nowhere = auditor("--config", str(there), "--db", str(db), "history", "--host", "hostZ")
    assert "no host 'hostZ' in the history" in nowhere.stderr
    report = auditor("--config", str(there), "--db", str(db), "audit")
    assert "on hostA" in report.stdout and "on local" in report.stdout


def test_a_training_network_on_a_remote_train_stack_gets_its_package_with_the_worker(
    hosts, default_doc, tmp_path
):
    """[models.NAME] train on a stack behind ssh: the factory's package (found through
    train.path here) travels in the worker's payload, nothing installed there; the reference
    is the same as the one a local train stack builds."""
    from tests.conftest import REPO
    from tests.user_models import export_policies

    (a, tree_a), (_, tree_b) = hosts["hostA"], hosts["hostB"]
    fixtures = REPO / "tests" / "model_fixtures"
    export_policies("ms20", tmp_path, ("elu_gauss",))
    before = _remote_dirs()
    doc = copy.deepcopy(default_doc)
    network = {
        "factory": "mypolicy.nets:build_actor",
        "checkpoint": str(tmp_path / "elu_gauss.ckpt"),
        "path": str(fixtures),
        "kwargs": {"kind": "elu_gauss"},
    }
    doc["models"] = {
        where: {
            "path": str(tmp_path / "elu_gauss.mindir"),
            "stacks": ["lite20"],
            "train": {**network, "stack": stack},
        }
        for where, stack in (("remote", "ms20"), ("here", "ms20-here"))
    }
    config = _config(
        doc,
        {
            "ms20": _stack("ms20", "mindspore", "train", tree_a, "hostA"),
            "ms20-here": _stack("ms20", "mindspore", "train", tree_a),
            "lite20": _stack("lite20", "mindspore-lite", "infer", tree_b),
        },
        {"hostA": a.host_table()},
        [],
    )
    result = Cycle(config, probes_with("faulty")).run()
    remote, here = (next(r for r in result.results if r.probe == name) for name in ("remote", "here"))
    # the same verdict either way: the outputs agree, lite20's tanh head parts from the network
    # on the sweep input class only (measured), localized the same through ssh
    assert remote.status == here.status, (remote.message, here.message)
    assert all(o.passed for o in remote.outputs), remote.message
    assert [c.output for c in remote.checks if not c.passed] == ["output0@sweep"], remote.message
    assert remote.localization.message == here.localization.message
    assert remote.localization.layer == "tanh (Tanh)", remote.localization
    assert remote.train == "ms20" and result.stacks["ms20"].fingerprint["connection"]["transport"] == "ssh"
    assert _metrics(remote) == _metrics(here)  # the same network, weights and inputs on either host
    _no_leftovers(before)


def _my_zygotes() -> list[int]:
    """Zygotes started through this test's sshd "hosts" (a remote stack's warm interpreter)."""
    return [p for p in worker_pids(zygotes=True) if any(_descends(p, r) for r in SERVERS)]


def test_a_remote_stack_forks_its_workers_on_its_host_and_a_dead_zygote_leaves_it_cold(
    hosts, default_doc, caplog
):
    """[worker] warm on another host: the host's zygote receives the worker code once and each
    worker is a fork of it there (under the host's sshd, not the auditor); when that zygote
    dies, the stack's next workers start cold, said in the log; nothing is left behind."""
    import logging

    from auditor.extend.manager import Plugins

    (b, tree_b) = hosts["hostB"]
    before = _remote_dirs()
    config = _config(
        default_doc,
        {
            "ms20": _stack("ms20", "mindspore", "train", tree_b),
            "lite20": _stack("lite20", "mindspore-lite", "infer", tree_b, "hostB"),
        },
        {"hostB": b.host_table()},
        [{"train": "ms20", "infer": "lite20", "probes": ["ppo_policy"]}],
    )
    with Plugins(entry_points=False).reach(config) as stacks:
        first, second = stacks.worker("lite20"), stacks.worker("lite20")
        with first, second:
            a, c = first.start()["pid"], second.start()["pid"]
            assert first.forked and second.forked and a != c
            [zygote] = _my_zygotes()
            assert _parent(a) == _parent(c) == zygote
            assert _descends(zygote, b.proc.pid)  # on the "host": under its sshd
            assert first.request("echo", value="remote").result == {"value": "remote"}
            [info] = stacks.warm.zygotes()
            assert info.stacks == ["lite20"] and info.forks == 2 and info.preloaded == ["mindspore_lite"]
        os.kill(zygote, signal.SIGKILL)
        with caplog.at_level(logging.WARNING, "auditor.stacks.warm"), stacks.worker("lite20") as third:
            hello = third.start()
            assert not third.forked and hello["runtime_package"] == "mindspore-lite"
        assert "stack lite20: its workers start cold (its warm worker" in caplog.text
    CONNECTIONS.close_all()
    _no_leftovers(before)
    assert _settled(lambda: _my_zygotes() == []), _my_zygotes()


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_a_cap_on_hosts_ends_each_hosts_connection_before_the_next(hosts, default_doc, monkeypatch):
    """[worker] max_hosts = 2 over real ssh: the train stack here is held, the two serving hosts
    are one chunk each. hostA is fingerprinted and served, then its worker, warm zygote and ssh
    master are ended; hostB is connected, fingerprinted and served. Both pairs compute what the
    local pair computes, each host is connected once, and nothing is left behind."""
    (a, tree_a), (b, tree_b) = hosts["hostA"], hosts["hostB"]
    before = _remote_dirs()
    opened: list[str] = []
    real_open, real_close = CONNECTIONS._open, CONNECTIONS.close

    def counted(host, control):  # noqa: ANN001 - the real method's arguments
        opened.append(host.name)
        return real_open(host, control)

    def closed(name: str) -> None:
        opened.append(f"closed {name}")
        real_close(name)

    monkeypatch.setattr(CONNECTIONS, "_open", counted)
    monkeypatch.setattr(CONNECTIONS, "close", closed)
    config = _config(
        default_doc,
        {
            "ms20": _stack("ms20", "mindspore", "train", tree_a),
            "lite20-a": _stack("lite20", "mindspore-lite", "infer", tree_b, "hostA"),
            "lite20-b": _stack("lite20", "mindspore-lite", "infer", tree_b, "hostB"),
            "lite20-here": _stack("lite20", "mindspore-lite", "infer", tree_b),
        },
        {"hostA": a.host_table(), "hostB": b.host_table()},
        [
            {"train": "ms20", "infer": s, "probes": ["ppo_policy"]}
            for s in ("lite20-a", "lite20-b", "lite20-here")
        ],
        max_hosts=2,
    )
    result = Cycle(config, probes_with("faulty")).run()
    by_pair = {r.pair: r for r in result.results}
    here = by_pair["ms20->lite20-here"]
    for pair in ("ms20->lite20-a", "ms20->lite20-b"):
        assert by_pair[pair].status == CONSISTENT == here.status, by_pair[pair].message
        assert _metrics(by_pair[pair]) == _metrics(here)
    # hostA's master ended before hostB's opened; the last chunk's ends with the cycle
    assert opened == ["hostA", "closed hostA", "hostB", "closed hostB"], opened
    assert result.stacks["lite20-b"].fingerprint["connection"]
    assert result.stacks["lite20-a"].problems == () and result.stacks["lite20-a"].fingerprint["connection"]
    _no_leftovers(before)
