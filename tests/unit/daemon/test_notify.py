"""sd_notify: messages arrive on a datagram socket the test creates, as systemd would."""

from __future__ import annotations

import os
import socket
import uuid

import pytest

from auditor.daemon.sd_notify import Notifier


@pytest.fixture
def listener(tmp_path):
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(2)
    yield str(path), sock
    sock.close()


def _received(sock: socket.socket) -> dict[str, str]:
    data = sock.recv(4096).decode()
    return dict(line.split("=", 1) for line in data.split("\n"))


def test_ready_status_reloading_stopping(listener):
    path, sock = listener
    n = Notifier({"NOTIFY_SOCKET": path})
    assert n.enabled
    assert n.ready("started; next cycle 12:00")
    msg = _received(sock)
    assert msg == {"READY": "1", "STATUS": "started; next cycle 12:00", "MAINPID": str(os.getpid())}
    assert n.status("last cycle: run 3 drift")
    assert _received(sock) == {"STATUS": "last cycle: run 3 drift"}
    assert n.reloading()
    msg = _received(sock)
    assert msg["RELOADING"] == "1" and int(msg["MONOTONIC_USEC"]) > 0
    assert n.stopping()
    assert _received(sock)["STOPPING"] == "1"


def test_a_newline_in_a_value_cannot_inject_a_line(listener):
    path, sock = listener
    Notifier({"NOTIFY_SOCKET": path}).status("two\nREADY=1")
    assert _received(sock) == {"STATUS": "two READY=1"}


def test_abstract_socket():
    name = f"auditor-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(2)
        assert Notifier({"NOTIFY_SOCKET": "@" + name}).status("abstract")
        assert sock.recv(100) == b"STATUS=abstract"


def test_watchdog_only_when_watchdog_usec_is_set(listener):
    path, sock = listener
    off = Notifier({"NOTIFY_SOCKET": path})
    assert off.watchdog_interval is None and not off.watchdog()
    on = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "4000000"})
    assert on.watchdog_interval == 2.0
    assert on.watchdog()
    assert _received(sock) == {"WATCHDOG": "1"}


def test_watchdog_meant_for_another_process_is_ignored(listener):
    path, _ = listener
    other = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "4000000", "WATCHDOG_PID": "1"})
    assert other.watchdog_interval is None
    mine = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "4000000", "WATCHDOG_PID": str(os.getpid())})
    assert mine.watchdog_interval == 2.0


def test_nothing_happens_without_notify_socket(listener):
    _, sock = listener
    n = Notifier({"WATCHDOG_USEC": "1000000"})
    assert not n.enabled
    assert not n.ready("x") and not n.status("x") and not n.watchdog() and not n.stopping()
    sock.settimeout(0.2)
    with pytest.raises(TimeoutError):
        sock.recv(10)


def test_unreachable_socket_is_logged_once_not_raised(tmp_path, caplog):
    n = Notifier({"NOTIFY_SOCKET": str(tmp_path / "nobody-listens")})
    assert not n.status("a")
    assert not n.status("b")
    assert len([r for r in caplog.records if "cannot notify" in r.getMessage()]) == 1
