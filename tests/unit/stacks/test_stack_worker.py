"""StackWorker lifecycle without a real stack: an interpreter that never answers stands in
for a runtime hung in native code."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from auditor.config.tables import StackConfig
from auditor.stacks.worker import StackWorker, WorkerError


@pytest.fixture
def silent_python(tmp_path: Path) -> str:
    """An executable that accepts the worker's arguments and never says hello."""
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\nexec sleep 600\n")
    script.chmod(0o755)
    return str(script)


def _start_in_thread(worker: StackWorker) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def start() -> None:
        try:
            worker.start()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=start)
    thread.start()
    return thread, errors


@pytest.mark.parametrize("delay", [0.0, 0.5])
def test_kill_from_another_thread_ends_a_waiting_start_at_once(silent_python: str, delay: float) -> None:
    """An aborted cycle kills workers while their threads wait for an answer: the wait must
    end now, not at the deadline (a closed pipe does not wake an epoll wait): it ends long
    before its 600 s, and as a crash (killed), not as a timeout."""
    worker = StackWorker(StackConfig("s", "train", "mindspore", silent_python), start_timeout=600)
    thread, errors = _start_in_thread(worker)
    time.sleep(delay)
    worker.kill()
    thread.join(timeout=60)
    assert not thread.is_alive(), "start() still waiting after kill()"
    [error] = errors
    assert isinstance(error, WorkerError) and error.kind == "crash"
    worker.close()
    assert worker.proc is not None and worker.proc.returncode is not None


def test_a_start_timeout_kills_the_silent_worker(silent_python: str) -> None:
    worker = StackWorker(StackConfig("s", "train", "mindspore", silent_python), start_timeout=0.5)
    with pytest.raises(WorkerError) as caught:
        worker.start()
    assert caught.value.kind == "timeout" and "0.5 s" in caught.value.message
    assert worker.proc is not None and worker.proc.poll() is not None
    worker.close()


def test_close_releases_every_pipe_of_the_worker(silent_python: str) -> None:
    """A daemon keeps the objects of its last cycle: pipes left to the garbage collector
    showed as two more open descriptors per cycle in the soak (bench/soak.py)."""
    worker = StackWorker(StackConfig("s", "train", "mindspore", silent_python), start_timeout=0.5)
    with pytest.raises(WorkerError):
        worker.start()
    worker.close()
    assert worker.proc is not None
    assert worker.proc.stdin.closed and worker.proc.stdout.closed and worker.proc.stderr.closed


def test_death_names_the_process_status_request_and_stderr(silent_python: str) -> None:
    worker = StackWorker(StackConfig("s", "train", "mindspore", silent_python), start_timeout=0.5)
    with pytest.raises(WorkerError):
        worker.start()
    text = worker.death("restarted")
    assert f"worker process {worker.proc.pid} of stack s ended (killed by SIGKILL)" in text
    assert "during or after its 'hello' request; restarted" in text
    assert "worker stderr (last lines):" in text
    worker.close()
