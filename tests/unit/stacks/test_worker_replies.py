"""A worker's answer is checked before anything reads it (#37): a frame of the wrong shape, or
announcing more bytes than a tensor or a file could need, is a ``protocol`` error of that
stack (its worker killed), never a traceback of the command; and what a worker started in a
session of its own (out of its process group) does not outlive it. The worker here is a
script that speaks the real protocol wrongly on purpose."""

from __future__ import annotations

import os
import struct
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from auditor.config.tables import StackConfig
from auditor.stacks.worker import StackWorker, WorkerError
from auditor.worker import files

LIAR = """
import json, os, struct, subprocess, sys, time
sys.path[:0] = {paths!r}
from auditor.worker import protocol
out = os.fdopen(os.dup(1), "wb")
mode = {mode!r}
while True:
    request = protocol.read_frame(sys.stdin.buffer)
    if request is None:
        break
    if request["op"] == "hello":
        protocol.write_frame(out, {{"ok": True, "result": {{"pid": os.getpid(), "runtime_version": "0"}}}})
    elif mode == "huge":
        header = json.dumps({{"body": {{"ok": True}}, "blobs": [4 * 1024 ** 3 - 1]}}).encode()
        out.write(b"AUDF" + struct.pack(">I", len(header)) + header)
        out.flush()
    elif mode == "deaf":  # answers, then reads no more: stuck, or its host's connection stalled
        protocol.write_frame(out, {{"ok": True, "result": {{"outputs": []}}}})
        time.sleep(600)
    elif mode == "escape":
        child = subprocess.Popen(["sleep", "600"], start_new_session=True)
        with open("escaped.pid", "w") as f:
            f.write(str(child.pid))
        protocol.write_frame(out, {{"ok": True, "result": {{}}}})
    else:
        protocol.write_frame(out, json.loads(mode))
"""

ROOT = str(Path(__file__).resolve().parents[3])


def liar(tmp_path: Path, mode: str) -> StackWorker:
    script = tmp_path / "liar.py"
    script.write_text(LIAR.format(paths=[ROOT], mode=mode))
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {script}\n")
    python.chmod(0o755)
    limits = files.Limits(64 * 1024 * 1024, 10.0)
    return StackWorker(StackConfig("liar", "infer", "x", str(python)), 30, 30, file_limits=limits)


@pytest.mark.faults
@pytest.mark.parametrize(
    ("reply", "said"),
    [
        ('"just a string"', "a str, not a reply"),
        ('{"ok": false, "error": "boom"}', "its error is a str, not a description"),
        ('{"ok": true, "result": [1, 2]}', "its result is a list, not a mapping"),
        ('{"ok": "yes", "result": {}}', "its ok is a str, not true or false"),
        ('{"ok": true, "result": {"outputs": "not a list"}}', "run: outputs is a str, not a list"),
        ('{"ok": true, "result": {}}', "run: no outputs"),
        ('{"ok": true, "result": {"outputs": []}, "log": 5}', "its log is an int, not text"),
    ],
)
def test_a_reply_of_the_wrong_shape_is_a_protocol_error_of_that_stack(tmp_path, reply, said):
    with liar(tmp_path, reply) as w:
        w.start()
        with pytest.raises(WorkerError) as caught:
            w.request("run", model="m", inputs=[])
        assert caught.value.kind == "protocol"
        assert said in caught.value.message and "stack liar" in caught.value.describe()
        assert w.proc.poll() is not None  # killed: nothing it says can be trusted any more


@pytest.mark.faults
def test_a_frame_announcing_gigabytes_is_refused_before_it_is_read(tmp_path):
    """The cap is what a tensor or a file could need ([files] max_size_mb, here 64 MiB, and a
    margin), not the protocol's 4 GiB: nothing is read past the header."""
    with liar(tmp_path, "huge") as w:
        w.start()
        with pytest.raises(WorkerError) as caught:
            w.request("run", model="m", inputs=[])
        assert caught.value.kind == "protocol" and "over the" in caught.value.message
        assert "announces 4294967295 bytes" in caught.value.message


@pytest.mark.faults
def test_what_a_worker_started_in_a_session_of_its_own_ends_with_it(tmp_path):
    w = liar(tmp_path, "escape")
    w.start()
    w.request("escape-now")
    pid = int((w.workdir / "escaped.pid").read_text())
    assert os.getsid(pid) == pid != os.getsid(w.proc.pid)  # out of the worker's process group
    w.close()
    for _ in range(200):  # a kill just sent lands a moment later
        if not _alive(pid):
            break
        time.sleep(0.05)
    assert not _alive(pid), "the escaped child outlived its worker"


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_the_protocols_own_limit_still_holds_for_the_worker_side():
    from auditor.worker import protocol

    header = b'{"body": {}, "blobs": [5000000000]}'

    class Stream:
        data = b"AUDF" + struct.pack(">I", len(header)) + header

        def read(self, n):
            chunk, Stream.data = Stream.data[:n], Stream.data[n:]
            return chunk

    with pytest.raises(protocol.ProtocolError, match="over the"):
        protocol.read_frame(Stream())


@pytest.mark.faults
def test_a_worker_that_stops_reading_fails_the_request_at_its_deadline(tmp_path):
    """A large request to a worker that no longer reads fills the pipe: the write itself must
    end at the request's deadline, or the answer's deadline never starts."""
    with liar(tmp_path, "deaf") as w:
        w.start()
        w.request("run", model="m", inputs=[], timeout=5)  # taken; it reads no more
        big = [np.zeros(4 << 20, dtype=np.uint8)]  # far beyond a pipe's buffer
        with pytest.raises(WorkerError) as caught:
            w.request("run", model="m", inputs=big, timeout=1)
        assert caught.value.kind == "timeout" and "not taken within 1 s" in caught.value.message
        assert w.proc.poll() is not None  # killed
