"""Fixtures of the history's unit tests."""

from __future__ import annotations

import pytest

from auditor.history.store import Store


@pytest.fixture
def store(history_url):
    """An empty, up-to-date history: a copy of the migrated SQLite template, then a PostgreSQL
    database (conftest.history_url)."""
    s = Store.open(history_url)
    yield s
    s.close()
