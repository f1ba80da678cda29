"""What the daemon's cycle fork server imports once for all its cycle children
(auditor.daemon.forks): the cycle child and everything a cycle imports on its way, the
built-in plugins, the history's migration check, and PostgreSQL's driver and the job queue
where they are installed (``auditor[postgres]``), included. A user's plugins are not
imported here: each cycle loads them afresh, so an upgraded plugin takes effect at the next
cycle, as it does with a cold child."""

from __future__ import annotations

import contextlib
import importlib

import alembic.command  # noqa: F401 - Store.open checks and migrates the schema at every cycle
import alembic.runtime.migration  # noqa: F401
import alembic.script  # noqa: F401

from auditor.daemon import cycle_child  # noqa: F401 - the child's entry point and the cycle
from auditor.extend.manager import BUILTINS

for _name in BUILTINS:
    importlib.import_module(_name)
# imported by SQLAlchemy's create_engine and by the queue at each cycle; optional extras
for _name in ("psycopg", "sqlalchemy.dialects.postgresql.psycopg", "procrastinate"):
    with contextlib.suppress(ImportError):
        importlib.import_module(_name)
# numpy's submodules that it imports on first use (np.random, np.ma)
for _name in ("numpy.random", "numpy.ma"):
    importlib.import_module(_name)
