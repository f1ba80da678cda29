"""The architecture holds: imports only go down the layers ARCHITECTURE.md lists (at every
level: inside functions and under ``TYPE_CHECKING`` too), no modules import each other in a
circle, code that runs inside a stack imports nothing of the auditor's 3.11 side, and the
code map names every module. The layer order is written once, in ARCHITECTURE.md."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import REPO

MAP = (REPO / "ARCHITECTURE.md").read_text()
# The top-level folders installed inside the package (pyproject's package-dir).
MAPPED = {"plugins": "auditor.plugins", "probes": "auditor.probes", "migrations": "auditor.migrations"}


def layers() -> list[list[str]]:
    """The ```layers block of ARCHITECTURE.md, bottom to top: each line is a number, then the
    units on that layer (a package under auditor/, a root module, or a mapped folder)."""
    block = re.search(r"```layers\n(.*?)```", MAP, re.S)
    assert block, "ARCHITECTURE.md has no ```layers block"
    out = []
    for line in block.group(1).splitlines():
        words = line.split("#", 1)[0].split()
        if words and words[0].isdigit():
            out.append(words[1:])
    return out


def modules() -> dict[str, Path]:
    found = {}
    for folder in ("auditor", *MAPPED):
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[0] in MAPPED:
                parts = MAPPED[parts[0]].split(".") + parts[1:]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


MODULES = modules()


def unit(module: str) -> str:
    """The layer unit a module belongs to: ``auditor.cycle.suite`` -> ``cycle``; a root module
    (``auditor.results``) is its own unit; ``auditor`` itself (the package face) is ``auditor``."""
    parts = module.split(".")
    if len(parts) == 1:
        return "auditor"
    if module in MAPPED.values() or ".".join(parts[:2]) in MAPPED.values():
        return parts[1]
    return parts[1]


def imports(module: str) -> dict[str, int]:
    """Every auditor module ``module`` imports, at any level, with the first line."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: dict[str, int] = {}
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module:
                out.setdefault(name, node.lineno)
    return out


GRAPH = {m: imports(m) for m in MODULES}


def test_the_layers_name_every_unit_once() -> None:
    listed = [u for layer in layers() for u in layer]
    assert len(listed) == len(set(listed)), "a unit is listed twice"
    present = {unit(m) for m in MODULES}
    assert present - set(listed) == set(), "units missing from ARCHITECTURE.md's layers"
    assert set(listed) - present == set(), "ARCHITECTURE.md lists units that do not exist"


def test_imports_only_go_down() -> None:
    rank = {u: i for i, layer in enumerate(layers()) for u in layer}
    upward = [
        f"{MODULES[m].relative_to(REPO)}:{line} imports {target} ({unit(m)} -> {unit(target)})"
        for m, deps in GRAPH.items()
        for target, line in deps.items()
        if unit(target) != unit(m) and rank[unit(target)] >= rank[unit(m)]
    ]
    assert upward == []


def circles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on: set[str] = set()
    stack: list[str] = []
    found = []
    for root in GRAPH:
        if root in index:
            continue
        work = [(root, iter(GRAPH[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(GRAPH[w])))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def test_no_import_circles() -> None:
    assert circles() == []


def test_the_circle_finder_finds_a_circle() -> None:
    GRAPH["auditor.common.paths"] = {**GRAPH["auditor.common.paths"], "auditor.common.tempdirs": 1}
    GRAPH["auditor.common.tempdirs"] = {**GRAPH["auditor.common.tempdirs"], "auditor.common.paths": 1}
    try:
        assert ["auditor.common.paths", "auditor.common.tempdirs"] in circles()
    finally:
        GRAPH["auditor.common.paths"] = imports("auditor.common.paths")
        GRAPH["auditor.common.tempdirs"] = imports("auditor.common.tempdirs")


def stack_side(module: str) -> bool:
    """Code that runs inside a stack: auditor/worker/, the collectors, the probes, and every
    module of a built-in runtime's package but its ``spec.py`` (the auditor's side)."""
    if module.startswith(("auditor.worker", "auditor.plugins.collectors", "auditor.probes")):
        return True
    return module.startswith("auditor.plugins.runtimes") and not module.endswith(".spec")


def test_code_that_runs_in_a_stack_imports_only_stack_code() -> None:
    """auditor/worker/, the collectors, the probes and the runtimes' worker side run on Python
    3.7 without the auditor's __init__ or dependencies: they import only stack-side code."""
    assert stack_side("auditor.plugins.runtimes.mindspore.worker")
    assert not stack_side("auditor.plugins.runtimes.mindspore.spec")
    bad = [
        f"{MODULES[m].relative_to(REPO)}:{line} imports {target}"
        for m, deps in GRAPH.items()
        if stack_side(m)
        for target, line in deps.items()
        if not stack_side(target)
    ]
    assert bad == []


def test_every_module_is_in_the_code_map() -> None:
    missing = [
        str(p.relative_to(REPO))
        for m, p in MODULES.items()
        if p.name != "__init__.py"
        and not str(p.relative_to(REPO)).startswith(
            ("plugins/default_", "plugins/sink_", "plugins/collectors/", "probes/", "migrations/")
        )
        and str(p.relative_to(REPO)) not in MAP
        and (p.is_relative_to(REPO / "plugins") or f"`{p.relative_to(REPO / 'auditor')}`" not in MAP)
    ]
    assert missing == []


def test_every_package_is_installed() -> None:
    """pyproject.toml lists the packages a wheel holds (the top-level folders are mapped into
    the package): a package left out works from a checkout and is missing when installed."""
    import tomllib

    setup = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    present = {m for m, p in MODULES.items() if p.name == "__init__.py"}
    assert set(setup["packages"]) == present


def test_the_migration_chain_is_named_to_its_end() -> None:
    """#54: ARCHITECTURE.md said 0001..0012 while the chain ended at 0014."""
    last = max(p.name[:4] for p in (REPO / "migrations" / "versions").glob("0*.py"))
    named = re.findall(r"0001\.\.(\d{4})", MAP)
    assert named and set(named) == {last}, (named, last)
