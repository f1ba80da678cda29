"""The ``auditor`` command's entry point, kept to the standard library: importing the CLI
(click, SQLAlchemy, pluggy, the plugins) takes a moment, and Ctrl-C in that moment must end
the command with status 130 and one line, not a traceback from inside an import."""

from __future__ import annotations

from auditor.cli.exits import interrupted
from auditor.common.memory import tune_malloc


def main() -> None:
    tune_malloc()  # before any thread (auditor.common.memory)
    try:
        from auditor.cli.main import main as cli_main

        cli_main()
    except KeyboardInterrupt:
        interrupted()


if __name__ == "__main__":
    main()
