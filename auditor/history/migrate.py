"""Migrating the history database in a short-lived child process, for the daemon.

Alembic (with Mako and Pygments) is imported only when the schema must change, but once
imported it stays: a daemon that created or upgraded its database at start idled 12 MB above
one that found it up to date (89 against 77 MB, the goal being 80). ``open_store`` therefore
runs the migration in ``python -m auditor.history.migrate`` (the auditor's own interpreter),
which takes the URL on stdin (never on its command line, where ``ps`` shows it), migrates
and exits; the daemon opens the up-to-date database without loading Alembic.
"""

from __future__ import annotations

import json
import subprocess
import sys

from auditor.common.child_process import own_package_env
from auditor.history.store import Store, StoreError

TIMEOUT = 3600.0
"""Seconds a migration may take (a large PostgreSQL history; another auditor holding the
migration lock)."""


def open_store(url: str, auditor_id: str = "") -> Store:
    """The store at ``url``, its schema brought up to date by a child process when it is
    behind. Raises StoreError with the child's message."""
    store = Store(url, auditor_id)
    if store.at_shipped_head():
        return store
    request = json.dumps({"url": url, "auditor_id": auditor_id})
    try:
        done = subprocess.run(
            [sys.executable, "-m", "auditor.history.migrate"],
            input=request,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            env=own_package_env(),  # the child imports this auditor, not another installed one
        )
    except subprocess.TimeoutExpired:
        store.close()
        raise StoreError(
            f"the history database {store.display_url} was not migrated within {TIMEOUT:g} s"
        ) from None
    if done.returncode != 0:
        store.close()
        said = done.stdout.strip() or (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise StoreError(said)
    return store


def main() -> int:
    """The child: one migration, its error (if any) as one line on stdout."""
    request = json.loads(sys.stdin.read())
    try:
        Store.open(request["url"], request.get("auditor_id", "")).close()
    except StoreError as exc:
        print(exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
