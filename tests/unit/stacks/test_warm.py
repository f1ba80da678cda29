"""Warm workers without a framework: the auditor's own interpreter stands in for a stack's, and a
runtime class written by the test stands in for its runtime (auditor.stacks.warm,
auditor.worker.zygote). What is tested is the fork server and the auditor's side of it: the
real stacks are in tests/stacks/test_warm_stacks.py."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from auditor.config.tables import HostConfig, StackConfig
from auditor.stacks.launch import local_worker_env, worker_packages
from auditor.stacks.payload import Packages
from auditor.stacks.warm import Identity, WarmPool, WarmUnavailable, Zygote, fork_from, inert
from auditor.stacks.worker import StackWorker, WorkerError

RUNTIME = '''
import os
from auditor.worker.runtimes import Runtime


class EchoRuntime(Runtime):
    package = "fakert"
    preload = ("fakert.heavy",)

    def __init__(self, device):
        Runtime.__init__(self, device)
        import fakert.heavy
        self.version = fakert.heavy.VERSION

    def signature(self, name):
        """Here: the worker's own value of environment variable ``name`` (what it would run with),
        or with "startup:", what its fingerprint records it was started with."""
        if name.startswith("startup:"):
            from auditor.worker import fingerprint

            return fingerprint.STARTUP_ENVIRON.get(name.partition(":")[2])
        return os.environ.get(name)
'''


@pytest.fixture
def fakert(tmp_path: Path) -> Path:
    """A runtime package of the test's: its class preloads ``fakert.heavy``."""
    package = tmp_path / "fakert"
    package.mkdir()
    (package / "rt.py").write_text(RUNTIME)
    # Like MindSpore, whose import sets variables of its own (MS_DEV_*, LD_LIBRARY_PATH).
    heavy = 'import os\nos.environ["FAKERT_LIB"] = "set at import"\nVERSION = "1.0"\n'
    (package / "heavy.py").write_text(heavy)
    return package


@pytest.fixture
def pool(monkeypatch) -> WarmPool:
    monkeypatch.delenv("AUDITOR_ZYGOTES", raising=False)  # this pool's own zygotes only
    pool = WarmPool("cycle")
    yield pool
    pool.close()


def packages(fakert: Path) -> Packages:
    core = worker_packages()
    return Packages([*core, ("fakert", str(fakert))], core.entries)


def worker(
    fakert: Path, pool: WarmPool | None, runtime_class: str = "fakert.rt:EchoRuntime", **env: str
) -> StackWorker:
    stack = StackConfig("fake", "infer", "fake", sys.executable, env=env)
    return StackWorker(stack, 30, 30, packages(fakert), runtime_class, warm=pool)


def comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def wait_gone(pid: int, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def test_workers_are_forked_from_one_zygote_each_a_process_of_its_own(fakert, pool):
    first, second = worker(fakert, pool), worker(fakert, pool)
    with first, second:
        a, b = first.start(), second.start()
        assert first.forked and second.forked
        assert a["runtime_version"] == "1.0" and a["pid"] != b["pid"]
        [zygote] = pool.zygotes()
        assert parent(a["pid"]) == parent(b["pid"]) == zygote.pid
        assert comm(a["pid"]) == "auditor-worker" and comm(zygote.pid) == "auditor-zygote"
        # each in a session of its own, as a cold worker is: a kill of its group is its own
        assert os.getsid(a["pid"]) == a["pid"] and os.getpgid(b["pid"]) == b["pid"]
        assert zygote.forks == 2 and zygote.preloaded == ["fakert.heavy"]
        assert zygote.threads  # the threads it had at fork (the main thread at least)
        assert first.request("echo", value=[1, 2]).result == {"value": [1, 2]}
    # closed workers exited normally, and the zygote said so
    assert first.proc.returncode == 0 and second.proc.returncode == 0


def test_a_killed_worker_costs_itself_only(fakert, pool):
    with worker(fakert, pool) as one, worker(fakert, pool) as other:
        pid = one.start()["pid"]
        other.start()
        os.killpg(pid, signal.SIGKILL)
        assert one.proc.wait(timeout=10) == -signal.SIGKILL  # as the zygote reaped it
        with pytest.raises(WorkerError) as caught:
            one.request("echo", value=1)
        assert caught.value.kind == "crash" and "exit status -9" in caught.value.message
        assert other.request("echo", value=2).result == {"value": 2}
        with worker(fakert, pool) as third:
            third.start()
            assert third.forked
    assert len(pool.zygotes()) == 1


def test_a_deadline_kills_the_forked_worker_and_its_group(fakert, pool):
    with worker(fakert, pool) as w:
        pid = w.start()["pid"]
        # a request that never ends: "echo" of nothing is quick, so stop the worker instead
        os.kill(pid, signal.SIGSTOP)
        with pytest.raises(WorkerError) as caught:
            w.request("echo", timeout=0.5, value=1)
        assert caught.value.kind == "timeout"
        assert wait_gone(pid)
        assert w.proc.poll() == -signal.SIGKILL


def test_a_worker_dies_with_its_zygote_and_the_stack_then_starts_cold(fakert, pool, caplog):
    with worker(fakert, pool) as w:
        pid = w.start()["pid"]
        [zygote] = pool.zygotes()
        os.kill(zygote.pid, signal.SIGKILL)
        assert wait_gone(pid), "the forked worker outlived its zygote"
        assert w.proc.wait(timeout=10) == -signal.SIGKILL
        assert w.proc.zygote_gone
    with caplog.at_level(logging.WARNING, "auditor.stacks.warm"), worker(fakert, pool) as again:
        hello = again.start()
        assert not again.forked and hello["runtime_version"] == "1.0"
    assert "stack fake: its workers start cold (its warm worker died" in caplog.text


def test_the_requesters_environment_reaches_the_worker_and_inert_variables_share_a_zygote(
    fakert, pool, monkeypatch
):
    with worker(fakert, pool) as first:
        first.start()
    monkeypatch.setenv("PATH", "/opt/fake-npu-smi/bin:" + os.environ["PATH"])
    with worker(fakert, pool) as second:
        second.start()
        assert second.forked
        assert second.request("signature", model="PATH").result["inputs"] == os.environ["PATH"]
    assert len(pool.zygotes()) == 1  # PATH is read when a subprocess runs, not at import
    with worker(fakert, pool) as third:
        third.start()
        # what the runtime's import set stays, as in a cold worker; the fingerprint records the
        # environment the requester started it with, not the zygote's
        assert third.request("signature", model="FAKERT_LIB").result["inputs"] == "set at import"
        assert third.request("signature", model="startup:PATH").result["inputs"] == os.environ["PATH"]
        assert third.request("signature", model="startup:FAKERT_LIB").result["inputs"] is None
    with worker(fakert, pool, OMP_NUM_THREADS="1") as fourth:
        fourth.start()
    assert len(pool.zygotes()) == 2  # a variable a runtime may read at import: a zygote of its own


def test_identity_keys_on_what_the_zygote_imported(tmp_path):
    env = local_worker_env({})
    venvs = []
    for name in ("a", "b"):
        (tmp_path / name / "bin").mkdir(parents=True)
        (tmp_path / name / "bin" / "python").symlink_to(sys.executable)
        venvs.append(tmp_path / name / "bin" / "python")
    core = worker_packages()
    lite = "auditor.plugins.runtimes.lite.worker:LiteRuntime"
    key = Identity.of(sys.executable, lite, core, env).key
    more = Packages([*core, ("tests", "/somewhere/tests")], core.entries)
    same = [
        Identity.of(sys.executable, lite, more, env),
        Identity.of(sys.executable, lite, core, {**env, "HOME": "/x"}),
        Identity.of(sys.executable, "auditor.plugins.runtimes.lite.worker:OtherClass", core, env),
    ]
    other = [
        Identity.of(sys.executable, "auditor.plugins.runtimes.mindspore.worker:MindSporeRuntime", core, env),
        Identity.of(sys.executable, lite, core, {**env, "GLOG_v": "3"}),
        Identity.of("/usr/bin/env", lite, core, env),
    ]
    # Two venvs of one Python: their bin/python links to the same interpreter, yet each imports
    # its own site-packages (a stack pointed at another stack's venv must not share its zygote).
    assert len({Identity.of(str(p), "m:C", core, env).key for p in venvs}) == 2
    assert [i.key for i in same] == [key] * 3
    assert len({i.key for i in other} | {key}) == 4
    assert inert("PYTEST_CURRENT_TEST") and inert("AUDITOR_ZYGOTES") and not inert("LD_LIBRARY_PATH")


def test_a_runtime_changed_on_disk_gets_a_fresh_zygote(fakert, pool):
    with worker(fakert, pool) as w:
        assert w.start()["runtime_version"] == "1.0"
    [old] = pool.zygotes()
    (fakert / "heavy.py").write_text('VERSION = "2.0"  # upgraded\n')
    with worker(fakert, pool) as w:
        hello = w.start()
        assert w.forked and hello["runtime_version"] == "2.0"
    [new] = pool.zygotes()
    assert new.pid != old.pid and wait_gone(old.pid)


def test_a_zygote_that_cannot_import_its_runtime_leaves_the_stack_cold(fakert, pool, caplog):
    with caplog.at_level(logging.WARNING, "auditor.stacks.warm"), worker(fakert, pool, "fakert.rt:Nope") as w:
        with pytest.raises(WorkerError) as caught:
            w.start()
        assert not w.forked
    assert "cannot import fakert.rt:Nope" in caught.value.message  # the cold worker's own words
    assert "its warm worker did not start" in caplog.text and "AttributeError" in caplog.text
    assert pool.zygotes() == []


def test_off_starts_every_worker_cold(fakert):
    with worker(fakert, WarmPool("off")) as w:
        w.start()
        assert not w.forked and b"auditor.worker.main" in Path(f"/proc/{w.proc.pid}/cmdline").read_bytes()


def test_a_requester_that_hangs_up_gets_its_worker_killed(fakert, pool):
    with worker(fakert, pool) as w:
        w.start()
    [zygote] = pool.zygotes()
    identity = Identity.of(sys.executable, "fakert.rt:EchoRuntime", packages(fakert), local_worker_env({}))
    request = {
        "spec": {"runtime": "fake", "device": "cpu", "workdir": "/tmp", "packages": packages(fakert),
                 "runtime_class": "fakert.rt:EchoRuntime"},
        "env": None,
        "workdir": "/tmp",
    }  # fmt: skip
    proc = fork_from(pool.address(identity.key), request, 10, "fake")
    assert parent(proc.pid) == zygote.pid
    proc.conn.close()  # the auditor is gone, its worker's stdin still open: the zygote ends it
    assert wait_gone(proc.pid)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        stream.close()


def test_a_bad_request_is_refused_and_the_zygote_serves_on(fakert, pool):
    with worker(fakert, pool) as w:
        w.start()
    [zygote] = pool.zygotes()
    identity = Identity.of(sys.executable, "fakert.rt:EchoRuntime", packages(fakert), local_worker_env({}))
    address = pool.address(identity.key)
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(address)
        s.sendall(b"\x00\x00\x00\x05hello")  # no descriptors, not JSON
        answer = s.recv(4096)
    assert b"bad request" in answer
    with worker(fakert, pool) as w:
        w.start()
        assert w.forked
    assert [z.pid for z in pool.zygotes()] == [zygote.pid]


def test_closing_the_pool_ends_its_zygotes_and_their_directory(fakert, pool):
    with worker(fakert, pool) as w:
        w.start()
    [zygote] = pool.zygotes()
    directory = pool.directory()
    pool.close()
    assert wait_gone(zygote.pid) and not directory.exists()


def test_an_unreferenced_pool_ends_its_zygotes(fakert, monkeypatch):
    monkeypatch.delenv("AUDITOR_ZYGOTES", raising=False)
    pool = WarmPool("cycle")
    with worker(fakert, pool) as w:
        w.start()
    [zygote] = pool.zygotes()
    del w, pool
    assert wait_gone(zygote.pid)


def test_a_state_directory_too_long_for_a_socket_gets_a_short_one(fakert, tmp_path, monkeypatch, caplog):
    """A daemon whose state directory is deep (a socket path is limited to 107 bytes) still keeps
    warm workers: they listen in a short private directory, said once, removed with the pool."""
    monkeypatch.delenv("AUDITOR_ZYGOTES", raising=False)
    deep = tmp_path / ("s" * max(1, 100 - len(str(tmp_path)))) / "zygotes"
    assert len(str(deep / "0123456789abcdef.sock")) > 107
    pool = WarmPool("daemon", directory=deep, shared="")
    try:
        with caplog.at_level(logging.INFO, "auditor.stacks.warm"), worker(fakert, pool) as w:
            w.start()
            assert w.forked
        [zygote] = pool.zygotes()
        directory = pool.directory()
        assert directory != deep and not deep.exists()
        assert len(pool.address("0123456789abcdef" * 4)) <= 107
        said = f"{deep} is too long a path for a unix socket: the warm workers listen in {directory}"
        assert said in caplog.text
    finally:
        pool.close()
    assert wait_gone(zygote.pid) and not directory.exists()


def test_a_short_state_directory_is_used_as_it_is(tmp_path):
    pool = WarmPool("daemon", directory=tmp_path / "zygotes", shared="")
    try:
        assert pool.directory() == tmp_path / "zygotes" and (tmp_path / "zygotes").is_dir()
    finally:
        pool.close()
    assert (tmp_path / "zygotes").is_dir()  # the daemon's state directory is not the pool's to remove


def test_a_remote_zygote_that_never_reads_its_frames_fails_at_its_deadline(tmp_path: Path) -> None:
    """A host stalled before it reads the zygote's frames (here: a shell that sleeps) fills the
    pipe, and the write of the frames blocks. The launch must still end at its deadline: closing
    the stdin of a pipe a write is blocked on would wait for ever (the cycle with it)."""
    identity = Identity.remote("stalled", "/usr/bin/python3", "rt:Runtime", "0" * 64, {})
    zygote = Zygote(identity, str(tmp_path / "z.sock"), ["lite20@stalled"])
    said: list[BaseException] = []

    def launch() -> None:
        try:
            zygote.launch(["sh", "-c", "sleep 600"], None, tmp_path, [b"x" * (4 << 20)], 1.0)
        except BaseException as exc:  # noqa: BLE001 - what it raised is the assertion
            said.append(exc)

    thread = threading.Thread(target=launch, daemon=True)
    thread.start()
    thread.join(120)  # a bound on a hang only: the deadline is 1 s
    assert not thread.is_alive(), "the launch hung past its deadline"
    assert len(said) == 1 and isinstance(said[0], WarmUnavailable), said
    assert "within 1 s" in str(said[0]) and zygote.proc is not None and zygote.proc.poll() is not None


@pytest.mark.faults
def test_a_zygote_that_stops_answering_is_replaced(fakert, pool, caplog):
    """#54: a zygote that dies is replaced; one that is alive and does not answer (stopped,
    stuck) was kept, so every later cycle of warm = "daemon" waited start_timeout for it, said
    at INFO only. The daemon's check before each cycle asks each zygote for its status."""
    with worker(fakert, pool) as w:
        w.start()
    [zygote] = pool.zygotes()
    assert pool.check(0.5) == []  # an answering zygote stays
    os.kill(zygote.pid, signal.SIGSTOP)
    try:
        with caplog.at_level(logging.WARNING, "auditor.stacks.warm"):
            assert pool.check(0.5) == ["fake"]
        assert "the warm worker of fake did not answer within 0.5 s" in caplog.text
        assert "a fresh one starts" in caplog.text
        assert wait_gone(zygote.pid)  # ended, stopped or not
        with worker(fakert, pool) as again:
            again.start()
            assert again.forked
        [fresh] = pool.zygotes()
        assert fresh.pid != zygote.pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(zygote.pid, signal.SIGKILL)


@pytest.mark.faults
def test_a_shared_zygote_that_does_not_answer_costs_one_deadline_once(fakert, tmp_path, caplog):
    """A cycle child forking from the daemon's zygotes (AUDITOR_ZYGOTES) whose zygote is stuck:
    the first worker's start waits its one deadline (not the stuck zygote's, then a fresh
    one's), and is an error that says so; the child asks that zygote no more: the next
    worker forks from a zygote of its own at once, with a warning in the log."""
    daemon = WarmPool("daemon", directory=tmp_path / "zygotes", shared="")
    child = WarmPool("cycle", shared=str(tmp_path / "zygotes"))
    try:
        with worker(fakert, daemon) as w:
            w.start()
        [stuck] = daemon.zygotes()
        os.kill(stuck.pid, signal.SIGSTOP)
        first = StackWorker(StackConfig("fake", "infer", "fake", sys.executable), 1, 30, packages(fakert),
                            "fakert.rt:EchoRuntime", warm=child)  # fmt: skip
        with (
            caplog.at_level(logging.WARNING, "auditor.stacks.warm"),
            first,
            pytest.raises(WorkerError) as caught,
        ):
            first.start()
        assert caught.value.kind == "timeout" and "not started within 1 s" in caught.value.message
        assert "the daemon's warm worker in" in caplog.text and "cannot serve" in caplog.text
        with worker(fakert, child) as second:
            second.start()
            assert second.forked
        [own] = child.zygotes()
        assert own.pid != stuck.pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(stuck.pid, signal.SIGCONT)
        child.close()
        daemon.close()


@pytest.mark.faults
def test_a_stack_that_hangs_costs_one_start_timeout_not_two(tmp_path, pool):
    """#54: a stack whose interpreter hangs cost twice start_timeout per command (its zygote's
    wait, then a cold start's). Its interpreter, a wrapper that counts its starts, is started
    once (for the zygote): no cold start follows a warm worker that took the whole deadline."""
    starts = tmp_path / "starts"
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\necho start >> {starts}\nexec sleep 600\n")
    python.chmod(0o755)
    w = StackWorker(StackConfig("hung", "infer", "fake", str(python)), 1, 30, worker_packages(),
                    "fakert.rt:EchoRuntime", warm=pool)  # fmt: skip
    with w, pytest.raises(WorkerError) as caught:
        w.start()
    assert caught.value.kind == "timeout" and "no cold start was tried" in caught.value.message
    assert starts.read_text().splitlines() == ["start"]


ESCAPER = '''
import os, subprocess
from auditor.worker.runtimes import Runtime


class EscapingRuntime(Runtime):
    """Starts a helper that leaves the worker's session and directory, as a daemon does."""

    package = "fakert"

    def __init__(self, device):
        Runtime.__init__(self, device)
        self.version = "1.0"
        helper = subprocess.Popen(["sleep", "600"], start_new_session=True, cwd="/")
        with open(os.environ["ESCAPED_PIDS"], "a") as f:
            f.write("%d\\n" % helper.pid)
'''


@pytest.mark.faults
@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_what_a_worker_started_in_a_session_of_its_own_ends_with_it(fakert, pool, tmp_path, warm):
    """#54: a child that leaves the worker's process group (setsid), and its directory, outlived
    audit, check, fingerprint and config check --hosts. It inherits the worker's mark, and the
    worker's close ends it, cold or forked from a zygote."""
    (fakert / "escaping.py").write_text(ESCAPER)
    pids = tmp_path / "pids"
    with worker(
        fakert, pool if warm else None, "fakert.escaping:EscapingRuntime", ESCAPED_PIDS=str(pids)
    ) as w:
        w.start()
        assert w.forked == warm
        [helper] = [int(line) for line in pids.read_text().split()]
        assert os.getsid(helper) == helper and Path(f"/proc/{helper}/cwd").resolve() == Path("/")
    assert wait_gone(helper), "the helper outlived its worker"


@pytest.mark.faults
def test_what_a_remote_worker_started_in_a_session_of_its_own_ends_with_it(fakert, tmp_path):
    """The same on another host (here the command transport to this machine): the remote
    supervisor ends what carries its worker's mark when the worker's connection ends."""
    (fakert / "escaping.py").write_text(ESCAPER)
    pids = tmp_path / "pids"
    stack = StackConfig("fake", "infer", "fake", sys.executable, host="box", env={"ESCAPED_PIDS": str(pids)})
    box = HostConfig("box", command=("env",))
    shipped = packages(fakert)
    shipped = Packages(
        shipped, [*shipped.entries, "fakert.escaping"]
    )  # the payload holds what entries import
    with StackWorker(stack, 30, 30, shipped, "fakert.escaping:EscapingRuntime", host=box) as w:
        w.start()
        [helper] = [int(line) for line in pids.read_text().split()]
        assert os.getsid(helper) == helper
    assert wait_gone(helper), "the helper outlived its remote worker"
