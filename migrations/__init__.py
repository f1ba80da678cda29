"""Alembic environment and versions of the history database. Installed as ``auditor.migrations``."""
