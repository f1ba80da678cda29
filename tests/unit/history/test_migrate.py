"""The daemon's migrations run in a child: the database comes up to date, the daemon's process
never imports Alembic, and a failure is the child's one-line message."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from auditor.history.migrate import open_store
from auditor.history.store import Store, StoreError, shipped_head

PROBE = """
import sys
from auditor.history.migrate import open_store
store = open_store(sys.argv[1])
print(store.at_shipped_head(), "alembic" in sys.modules, "mako" in sys.modules)
"""


def test_a_new_database_is_migrated_by_a_child_and_alembic_stays_out(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    done = subprocess.run([sys.executable, "-c", PROBE, url], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False", "False"]
    store = Store(url)
    assert store.current_heads() == (shipped_head(),)
    # up to date now: opened without a child
    again = subprocess.run([sys.executable, "-c", PROBE, url], capture_output=True, text=True, timeout=120)
    assert again.stdout.split() == ["True", "False", "False"]


def test_a_migration_that_fails_is_one_message(tmp_path: Path) -> None:
    bad = tmp_path / "h.db"
    bad.write_text("not a database\n" * 100)
    with pytest.raises(StoreError, match=r"h.db: file is not a database") as err:
        open_store(f"sqlite:///{bad}")
    assert "Traceback" not in str(err.value) and "\n" not in str(err.value).strip()
