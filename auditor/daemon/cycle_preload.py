"""What the daemon's cycle fork server imports once for all its cycle children
(auditor.daemon.forks): the cycle child and everything a cycle imports on its way, the
built-in plugins and the history's migration check included. A user's plugins are not
imported here: each cycle loads them afresh, so an upgraded plugin takes effect at the next
cycle, as it does with a cold child."""

from __future__ import annotations

import importlib

import alembic.command  # noqa: F401 - Store.open checks and migrates the schema at every cycle
import alembic.runtime.migration  # noqa: F401
import alembic.script  # noqa: F401

from auditor.daemon import cycle_child  # noqa: F401 - the child's entry point and the cycle
from auditor.extend.manager import BUILTINS

for _name in BUILTINS:
    importlib.import_module(_name)
