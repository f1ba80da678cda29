"""The worker code a remote host receives: one zip of exactly the modules a worker imports.

What travels is derived, not listed: from the entry modules (the worker's request loop, and
the modules the worker is asked to import by name: the runtime class, the probes, the
fingerprint collectors, a plugin's stack side) the imports are followed in the source (``ast``:
``import a.b``, ``from . import c``, ``importlib.import_module("literal")``, at any depth,
function bodies included), and every module found in one of the worker's packages goes in,
with the ``__init__`` of any package below a registered one (Python runs those). Modules of
other packages (the standard library, numpy, the framework) are the host's own. So the MindIR
reader goes because the ``models`` collector imports it, and nothing of the auditor that only
runs on Python 3.11 goes at all.

Built once per distinct set of files and kept by content: a cycle with eight remote stacks
zips once. The zip is deterministic (sorted names, fixed timestamps), so its digest only
changes when the code does.
"""

from __future__ import annotations

import ast
import hashlib
import io
import threading
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

WORKER_ENTRY = "auditor.worker.main"
"""The module every worker runs (``auditor.worker.bootstrap``, ``remote_boot``)."""
ZYGOTE_ENTRY = "auditor.worker.zygote"
"""The module a warm stack interpreter runs (``[worker] warm``), on another host too."""
MAX_FILE = 8 * 1024 * 1024
_IMPORTERS = {("importlib", "import_module"), ("", "import_module"), ("", "__import__")}


class Packages(list):
    """The packages a worker registers, as ``(module name, directory)`` pairs (parents first),
    and the modules it may be asked to import by name (``entries``), from which the payload's
    files are found."""

    def __init__(self, packages: Iterable[tuple[str, str]] = (), entries: Iterable[str] = ()):
        super().__init__(packages)
        self.entries: tuple[str, ...] = tuple(dict.fromkeys([WORKER_ENTRY, ZYGOTE_ENTRY, *entries]))


@dataclass(frozen=True)
class Payload:
    data: bytes
    sha256: str
    files: int
    names: tuple[str, ...] = ()
    """The modules it holds."""


_cache: dict[tuple, Payload] = {}
_lock = threading.Lock()


def _locate(name: str, packages: Sequence[tuple[str, str]]) -> tuple[Path | None, bool]:
    """(the file of module ``name``, whether it is a package's ``__init__``), or (None, True)
    for a registered package itself (it has no file the worker runs), or (None, False) when
    the module is not in the worker's packages."""
    best = max(
        (p for p in packages if name == p[0] or name.startswith(p[0] + ".")),
        key=lambda p: len(p[0]),
        default=None,
    )
    if best is None:
        return None, False
    if name == best[0]:
        return None, True
    parts = name[len(best[0]) + 1 :].split(".")
    base = Path(best[1]).joinpath(*parts)
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py"), False
    if (base / "__init__.py").is_file():
        return base / "__init__.py", True
    return None, False


def _imports(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Every module name ``tree`` may import, absolute (parents included)."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                if node.level - 1 >= len(parts):
                    continue
                base = ".".join(parts[: len(parts) - (node.level - 1)])
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            if base:
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            owner = (
                func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else ""
            )
            attr = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else ""
            )
            if (owner, attr) in _IMPORTERS and isinstance(node.args[0].value, str):
                found.add(node.args[0].value)
    out = set()
    for name in found:
        parts = name.split(".")
        out.update(".".join(parts[: i + 1]) for i in range(len(parts)))
    return out


def module_files(packages: Sequence[tuple[str, str]], entries: Iterable[str]) -> dict[str, Path]:
    """Module name -> file, for each module in ``packages`` that ``entries`` import, directly
    or through each other. A file that does not parse is kept (the worker then reports its
    SyntaxError, as it would locally) and not followed. One derivation at a time: CPython
    3.11's ``ast.parse`` is not safe in several threads at once (workers start in parallel).
    Derived again only when one of the files changed (a fleet's hosts start the same code:
    parsing it for each cost more than the rest of a host's start in the auditor)."""
    key = (tuple(tuple(p) for p in packages), tuple(entries))
    with _derive_lock:
        known = _derived.get(key)
        if known is not None and all(_stamp(path) == stamp for path, stamp in known[1].items()):
            return dict(known[0])
        found = _module_files(packages, key[1])
        if len(_derived) > 16:
            _derived.clear()
        _derived[key] = (found, {path: _stamp(path) for path in found.values()})
        return dict(found)


_derive_lock = threading.Lock()
_derived: dict[tuple, tuple[dict[str, Path], dict[Path, tuple[int, int] | None]]] = {}


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _module_files(packages: Sequence[tuple[str, str]], entries: Iterable[str]) -> dict[str, Path]:
    seen: set[str] = set()
    files: dict[str, Path] = {}
    todo = list(entries)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path, is_package = _locate(name, packages)
        if path is None:
            continue
        files[name] = path
        try:
            tree = ast.parse(path.read_bytes(), str(path))
        except (SyntaxError, ValueError, OSError):
            continue
        todo.extend(_imports(tree, name, is_package) - seen)
    return files


def _arcname(module: str, path: Path) -> str:
    """Where a module goes in the zip: its name as a path (the remote boot registers each
    package at its name's path), whatever its directory is called in a checkout."""
    return module.replace(".", "/") + ("/__init__.py" if path.name == "__init__.py" else ".py")


def build(packages: Sequence[tuple[str, str]], entries: Iterable[str] | None = None) -> Payload:
    """The zip of the modules ``entries`` (default: those ``packages`` carries, a ``Packages``)
    import from ``packages`` ((module name, directory) pairs, as worker_packages gives)."""
    if entries is None:
        entries = getattr(packages, "entries", (WORKER_ENTRY,))
    found = module_files(packages, entries)
    files = sorted((_arcname(m, p), p, m) for m, p in found.items() if p.stat().st_size <= MAX_FILE)
    key = tuple((arc, str(p), p.stat().st_mtime_ns, p.stat().st_size) for arc, p, _ in files)
    with _lock:
        cached = _cache.get(key)
    if cached is not None:
        return cached
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as z:
        for arc, path, _ in files:
            info = zipfile.ZipInfo(arc, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, path.read_bytes())
    data = buffer.getvalue()
    payload = Payload(data, hashlib.sha256(data).hexdigest(), len(files), tuple(sorted(m for *_, m in files)))
    with _lock:
        if len(_cache) > 16:
            _cache.clear()
        _cache[key] = payload
    return payload
