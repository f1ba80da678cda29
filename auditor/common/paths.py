"""Where the auditor keeps things by default, following the XDG base directories."""

from __future__ import annotations

import os
from pathlib import Path


def _xdg(var: str, fallback: str) -> Path:
    value = os.environ.get(var)
    return Path(value) if value else Path.home() / fallback


def state_dir() -> Path:
    """Per-user state: the history database and exported artifacts."""
    return _xdg("XDG_STATE_HOME", ".local/state") / "auditor"


def default_db_url() -> str:
    return f"sqlite:///{state_dir() / 'history.db'}"


def stacks_dir() -> Path:
    """Where scripts/install-stacks puts the reference stacks."""
    value = os.environ.get("AUDITOR_STACKS_DIR")
    return Path(value) if value else _xdg("XDG_CACHE_HOME", ".cache") / "auditor" / "stacks"
