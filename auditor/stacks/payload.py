"""The worker code a remote host receives: one zip of the packages a worker registers
(the worker itself, the probes, the fingerprint collectors, plugins' probe modules).

Built once per distinct set of files and kept by content: a cycle with eight remote stacks
zips once. The zip is deterministic (sorted names, fixed timestamps), so its digest only
changes when the code does.
"""

from __future__ import annotations

import hashlib
import io
import os
import threading
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

SKIP_DIRS = {"__pycache__", ".git", ".mypy_cache", ".pytest_cache", ".ruff_cache", "operator_tables"}
"""Never read in a worker: caches, and the runtimes' measured operator tables (auditor side only)."""
SKIP_SUFFIXES = (".pyc", ".pyo", ".so", ".mindir")
MAX_FILE = 8 * 1024 * 1024


@dataclass(frozen=True)
class Payload:
    data: bytes
    sha256: str
    files: int


_cache: dict[tuple, Payload] = {}
_lock = threading.Lock()


def _files(packages: Sequence[tuple[str, str]]) -> list[tuple[str, Path]]:
    """(name in the zip, file) for every file of the packages. A package's subdirectory
    that is itself a listed package is left to that entry. An empty package directory
    still exists after unpacking: the worker registers each package by its directory."""
    listed = {str(Path(d).resolve()) for _, d in packages}
    out: dict[str, Path] = {}
    for name, directory in packages:
        if name == "auditor":
            # Only its listed subpackages run in a stack; the rest of the auditor needs 3.11.
            continue
        root = Path(directory).resolve()
        prefix = name.replace(".", "/")
        for dirpath, dirnames, filenames in os.walk(root):
            here = Path(dirpath)
            dirnames[:] = sorted(
                d for d in dirnames if d not in SKIP_DIRS and str((here / d).resolve()) not in listed
            )
            for f in sorted(filenames):
                path = here / f
                if f.endswith(SKIP_SUFFIXES) or not path.is_file() or path.stat().st_size > MAX_FILE:
                    continue
                out.setdefault(f"{prefix}/{path.relative_to(root).as_posix()}", path)
    return sorted(out.items())


def build(packages: Sequence[tuple[str, str]]) -> Payload:
    """The zip of ``packages`` ((module name, directory) pairs, as worker_packages gives)."""
    files = _files(packages)
    key = tuple((arc, str(p), p.stat().st_mtime_ns, p.stat().st_size) for arc, p in files)
    with _lock:
        cached = _cache.get(key)
    if cached is not None:
        return cached
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as z:
        for arc, path in files:
            info = zipfile.ZipInfo(arc, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, path.read_bytes())
    data = buffer.getvalue()
    payload = Payload(data, hashlib.sha256(data).hexdigest(), len(files))
    with _lock:
        if len(_cache) > 16:
            _cache.clear()
        _cache[key] = payload
    return payload
