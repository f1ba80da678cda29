"""The ``auditor`` command's entry point, kept to the standard library: importing the CLI
(click, SQLAlchemy, pluggy, the plugins) takes a moment, and Ctrl-C in that moment must end
the command with status 130 and one line, not a traceback from inside an import."""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from auditor.cli import main as cli_main

        cli_main()
    except KeyboardInterrupt:
        interrupted()


def interrupted() -> None:
    """Exit as a shell expects after Ctrl-C (128 + SIGINT), quietly."""
    try:
        sys.stderr.write("auditor: interrupted\n")
        sys.stderr.flush()
    except (OSError, KeyboardInterrupt):
        pass
    raise SystemExit(130)


if __name__ == "__main__":
    main()
