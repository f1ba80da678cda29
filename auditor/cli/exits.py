"""How a command ends: the exit statuses every command shares, and Ctrl-C as a shell expects
it. Standard library only, so the light entry point (auditor.entry) can use it before the
CLI is imported."""

from __future__ import annotations

import sys

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2
"""Clean; the audit found something (or a check failed); unusable input or environment."""


def interrupted() -> None:
    """Exit as a shell expects after Ctrl-C (128 + SIGINT), quietly."""
    try:
        sys.stderr.write("auditor: interrupted\n")
        sys.stderr.flush()
    except (OSError, KeyboardInterrupt):
        pass
    raise SystemExit(130)
