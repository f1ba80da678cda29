"""Alert sink ``exec``: runs a command for each alert event, with the event's JSON on its
stdin, to page, open a ticket, or anything a script can do.

    [alerts.sinks.pager]
    type = "exec"
    command = ["/usr/local/bin/page-oncall", "--team", "ml-platform"]   # or one string, split like a shell
    timeout = 30                 # seconds; then the command's whole process group is killed
    env = { PAGER_QUEUE = "ml" } # optional extra environment

The command also gets ``AUDITOR_ALERT_EVENT`` (opened, reminder, resolved),
``AUDITOR_ALERT_KEY``, ``AUDITOR_ALERT_SEVERITY`` and ``AUDITOR_ALERT_STATE`` in its
environment. Exit status 0 is a delivery; anything else (or a timeout) is a failure, retried
at the next notification, with the end of the command's stderr in the error.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
from typing import Any

from auditor.alerts.sinks import SinkType, option_problems


class ExecSink:
    def __init__(
        self, name: str, command: list[str], timeout: float = 30.0, env: dict[str, str] | None = None
    ):
        self.name = name
        self.command = command
        self.timeout = timeout
        self.env = env or {}

    def send(self, event: dict[str, Any]) -> None:
        alert = event["alert"]
        env = {
            **os.environ,
            **self.env,
            "AUDITOR_ALERT_EVENT": str(event["event"]),
            "AUDITOR_ALERT_KEY": str(alert["key"]),
            "AUDITOR_ALERT_SEVERITY": str(alert["severity"]),
            "AUDITOR_ALERT_STATE": str(alert["state"]),
        }
        proc = subprocess.Popen(
            self.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,  # a timeout kills what the command started, too
        )
        try:
            _, stderr = proc.communicate(json.dumps(event).encode(), timeout=self.timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise TimeoutError(
                f"{self.command[0]} did not finish within {self.timeout:g} s; killed"
            ) from None
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        if proc.returncode != 0:
            tail = stderr.decode(errors="replace").strip()[-500:]
            raise RuntimeError(
                f"{self.command[0]} exited with status {proc.returncode}" + (f": {tail}" if tail else "")
            )


def _command(value: Any) -> list[str]:
    return shlex.split(value) if isinstance(value, str) else list(value)


def validate(options: dict[str, Any]) -> list[str]:
    problems = option_problems(
        options, {"command": (list, str), "timeout": (int, float), "env": dict}, required=("command",)
    )
    command = options.get("command")
    if isinstance(command, (list, str)):
        try:
            argv = _command(command)
        except ValueError as exc:
            return [*problems, f"command: cannot split {command!r}: {exc}"]
        if not argv or not all(isinstance(a, str) and a for a in argv):
            problems.append("command: must be a non-empty list of strings (the program, then its arguments)")
        elif shutil.which(argv[0]) is None:
            problems.append(f"command: {argv[0]!r} is not an executable file or a program on PATH")
    timeout = options.get("timeout", 30)
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and not timeout > 0:
        problems.append(f"timeout: must be greater than 0, not {timeout!r}")
    env = options.get("env")
    for key, value in env.items() if isinstance(env, dict) else ():
        if not isinstance(value, str):
            problems.append(f"env.{key}: must be a string, not {type(value).__name__}")
    return problems


def create(name: str, options: dict[str, Any]) -> ExecSink:
    return ExecSink(
        name, _command(options["command"]), float(options.get("timeout", 30)), dict(options.get("env") or {})
    )


SINK_TYPE = SinkType("exec", "runs a command with the alert event's JSON on stdin", validate, create)
