"""ARCHITECTURE.md names every module of the package, so the code map cannot silently fall
behind the code (a module added without a line in the map fails here)."""

from __future__ import annotations

import re

from tests.conftest import REPO

MAP = (REPO / "ARCHITECTURE.md").read_text()


def named(module: str) -> bool:
    stem = module.rsplit("/", 1)[-1].removesuffix(".py")
    return module in MAP or f"`{stem}.py`" in MAP or re.search(rf"`{re.escape(stem)}`", MAP) is not None


def test_every_module_is_in_the_code_map() -> None:
    modules = [
        str(p.relative_to(REPO))
        for folder in ("auditor", "plugins", "probes")
        for p in sorted((REPO / folder).rglob("*.py"))
        if p.name != "__init__.py"
    ]
    patterns = ("plugins/default_", "plugins/sink_", "plugins/collectors/", "probes/")
    missing = [m for m in modules if not m.startswith(patterns) and not named(m)]
    assert missing == []
