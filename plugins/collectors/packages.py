"""Every Python distribution installed in the stack, name -> version, read from
``*.dist-info/METADATA`` and ``*.egg-info/PKG-INFO`` over ``sys.path``.

Python 3.7 has no ``importlib.metadata``, and importing a package to ask its version can
be slow or crash; the metadata files are what pip itself reads. The first distribution
of a name on ``sys.path`` wins, as it does for ``import``. Names are normalized (PEP 503:
lower case, runs of ``-_.`` as ``-``), so ``mindspore_lite`` is ``mindspore-lite``.
"""

import os
import re
import sys

from auditor.plugins.collectors._files import Unreadable, read_text

NAME = "packages"
FRAMEWORK = ("mindspore", "mindspore-lite", "numpy", "te", "hccl")


def normalize(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def collect(context):
    unknown = {}
    found = {}
    for name, version, reason in iter_distributions(context.get("sys_path") or sys.path):
        if name in found:
            continue  # shadowed by an earlier sys.path entry
        found[name] = version
        if reason:
            unknown[name] = reason
    framework = {}
    for name in FRAMEWORK:
        framework[name] = found.get(name)
        if name not in found:
            unknown[name] = "not installed (no %s-*.dist-info or *.egg-info on sys.path)" % name
    return {"all": dict(sorted(found.items())), "framework": framework, "unknown": unknown}


def iter_distributions(paths):
    """(normalized name, version or None, reason or None) for each distribution found."""
    for entry in paths:
        if not entry or not os.path.isdir(entry):
            continue  # "" is the worker's scratch directory; zip files hold no installs we track
        if entry.endswith(".egg"):
            yield _read(os.path.join(entry, "EGG-INFO", "PKG-INFO"), os.path.basename(entry))
        try:
            names = sorted(os.listdir(entry))
        except OSError:
            continue
        for item in names:
            path = os.path.join(entry, item)
            if item.endswith(".dist-info"):
                yield _read(os.path.join(path, "METADATA"), item)
            elif item.endswith(".egg-info"):
                meta = os.path.join(path, "PKG-INFO") if os.path.isdir(path) else path
                yield _read(meta, item)


def _read(path, dirname):
    base = dirname
    for suffix in (".dist-info", ".egg-info", ".egg"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    fallback = normalize(base.split("-")[0])
    try:
        # METADATA carries the long description after the headers; only the headers matter.
        text = read_text(path, truncate=True)
    except Unreadable as exc:
        return fallback, None, str(exc)
    headers = parse_headers(text)
    name, version = headers.get("name"), headers.get("version")
    if not name or not version:
        return fallback, None, "%s: garbled (no Name: and Version: headers)" % path
    return normalize(name), version, None


def parse_headers(text):
    """The RFC 822 style headers of a METADATA / PKG-INFO text (up to the first blank line)."""
    headers = {}
    for line in text.splitlines():
        if not line.strip():
            break
        key, sep, value = line.partition(":")
        if sep and not key.startswith((" ", "\t")):
            headers.setdefault(key.strip().lower(), value.strip())
    return headers
