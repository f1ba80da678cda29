"""A module for tests/unit/daemon/test_forks.py to preload in the fork server and fork from: it
notes in a file (``FORK_TARGET_LOG``, read at import from the server's environment) each time
it is imported, and its entry point reports what the forked child sees."""

from __future__ import annotations

import json
import os

_log = os.environ.get("FORK_TARGET_LOG")
if _log:
    with open(_log, "a") as f:
        f.write(f"imported in {os.getpid()}\n")
os.environ["SET_BY_AN_IMPORT"] = "1"  # as threadpoolctl sets KMP_DUPLICATE_LIB_OK


def report(stdin, stdout) -> None:
    """Echo the request line with what this process is: pid, parent, session, environment."""
    line = stdin.readline().decode().strip()
    stdout.write(
        json.dumps(
            {
                "said": line,
                "pid": os.getpid(),
                "ppid": os.getppid(),
                "sid": os.getsid(0),
                "env": dict(os.environ),
            }
        ).encode()
    )
    stdout.close()
    if line == "exit 3":
        os._exit(3)


def hang(stdin, stdout) -> None:
    stdin.read()  # until killed, or the parent closes its end
