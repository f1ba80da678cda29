"""sd_notify without a dependency: tell systemd (``Type=notify``) how the daemon is doing.

systemd passes the address of a datagram socket in ``$NOTIFY_SOCKET`` (a path, or an abstract
socket when it starts with ``@``); each message is newline-separated ``KEY=value`` lines.
Without ``$NOTIFY_SOCKET`` (not started by systemd) every call does nothing, so the daemon
can call these unconditionally. A failure to send is logged once and never raised: the
service manager being unreachable must not stop an audit.
"""

from __future__ import annotations

import logging
import os
import socket
import time

log = logging.getLogger(__name__)


class Notifier:
    def __init__(self, environ: dict[str, str] | None = None):
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        self.address: str | None = None
        if address:
            # "@name" is a socket in the abstract namespace, written with a leading NUL.
            self.address = "\0" + address[1:] if address.startswith("@") else address
        self.watchdog_interval = _watchdog_interval(env)
        self._warned = False

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, **fields: str | int) -> bool:
        """Send ``KEY=value`` lines (``send(READY=1, STATUS="...")``); False when not sent."""
        if self.address is None:
            return False
        message = "\n".join(f"{k}={_one_line(str(v))}" for k, v in fields.items()).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto(message, self.address)
        except OSError as exc:
            if not self._warned:
                log.warning("cannot notify the service manager at %s: %s", self.address.lstrip("\0"), exc)
                self._warned = True
            return False
        return True

    def ready(self, status: str) -> bool:
        return self.send(READY=1, STATUS=status, MAINPID=os.getpid())

    def status(self, status: str) -> bool:
        return self.send(STATUS=status)

    def reloading(self) -> bool:
        # MONOTONIC_USEC: systemd (Type=notify-reload) matches the reload to this message.
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.send(RELOADING=1, MONOTONIC_USEC=usec, STATUS="reloading the configuration")

    def stopping(self, status: str = "stopping") -> bool:
        return self.send(STOPPING=1, STATUS=status)

    def watchdog(self) -> bool:
        return self.send(WATCHDOG=1) if self.watchdog_interval is not None else False


def _one_line(value: str) -> str:
    # A newline would start a new KEY=value line; systemd would read the rest as garbage.
    return " ".join(value.splitlines())


def _watchdog_interval(env: dict[str, str] | os._Environ[str]) -> float | None:
    """Seconds between WATCHDOG=1 pings (half of WatchdogSec), or None when the watchdog is off
    or meant for another process (``$WATCHDOG_PID`` names a different pid)."""
    usec = env.get("WATCHDOG_USEC", "")
    pid = env.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    if pid and (not pid.isdigit() or int(pid) != os.getpid()):
        return None
    return int(usec) / 1e6 / 2
