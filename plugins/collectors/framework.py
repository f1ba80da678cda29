"""The MindSpore / MindSpore Lite builds installed in the stack, found without importing them.

- version: ``__version__`` of the package's ``version.py``;
- commit id: the ``.commit_id`` file the wheels ship (MindSpore:
  ``__commit_id__ = '[sha1]:87e30858,[branch]:(HEAD,origin/r2.0,r2.0)'``, which also gives
  ``commit_branch``; Lite: ``commit 87e30858f9e2...``, the full hash): the MindSpore and
  Lite builds of one release share the prefix;
- supported CANN: the list MindSpore itself checks CANN against, ``self.version = [...]`` in
  ``AscendEnvChecker.__init__`` of ``mindspore/run_check/_check_version.py``, read with
  ``ast`` so a new release needs no table in the auditor.

The package directory is found by walking ``sys.path``: importing (or ``find_spec`` of a
submodule) would run the package's ``__init__``, which loads native libraries.
"""

import ast
import os
import re
import sys

from auditor.plugins.collectors._cann_lookup import find_package, literal, parse_cann_lookup, parse_source
from auditor.plugins.collectors._files import Unreadable, read_text

NAME = "framework"
CHECKER = os.path.join("run_check", "_check_version.py")

_SHA1 = re.compile(r"\[sha1\]:\s*([0-9a-fA-F]{6,40})")
_BRANCH = re.compile(r"\[branch\]:\s*\(([^)]*)\)")
_GIT = re.compile(r"^commit\s+([0-9a-fA-F]{6,40})\b")
_HEX = re.compile(r"^([0-9a-fA-F]{6,40})$")


def collect(context):
    unknown = {}
    paths = context.get("sys_path") or sys.path
    ms = _package(paths, "mindspore", "mindspore", unknown)
    if ms is not None:
        checker = os.path.join(ms["path"], CHECKER)
        ms["checker_file"] = checker
        ms["supported_cann"] = _supported_cann(checker, "mindspore.supported_cann", unknown)
        ms["cann_lookup"] = _cann_lookup(checker, unknown)
    lite = _package(paths, "mindspore_lite", "mindspore_lite", unknown)
    return {"mindspore": ms, "mindspore_lite": lite, "unknown": unknown}


def _package(paths, package, key, unknown):
    where = find_package(paths, package)
    if where is None:
        unknown[key] = "not installed (no %s/__init__.py on sys.path)" % package
        return None
    info = {"path": where, "version": None, "commit_id": None}
    version_file = os.path.join(where, "version.py")
    try:
        info["version"] = parse_version(read_text(version_file), version_file)
    except (Unreadable, ValueError) as exc:
        unknown[key + ".version"] = str(exc)
    commit_file = os.path.join(where, ".commit_id")
    try:
        commit, branch = parse_commit_id(read_text(commit_file), commit_file)
    except (Unreadable, ValueError) as exc:
        unknown[key + ".commit_id"] = str(exc)
    else:
        info["commit_id"] = commit
        if branch is not None:  # only MindSpore's format names the branch
            info["commit_branch"] = branch
    return info


def parse_version(source, filename):
    """``__version__ = '2.0.0'`` from a version.py, without running it."""
    for node in parse_source(source, filename).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets
        ):
            value = literal(node.value)
            if isinstance(value, str) and value:
                return value
    raise ValueError("%s: no __version__ = '...' assignment" % filename)


def parse_commit_id(text, filename):
    """(commit id, branch or None) from a ``.commit_id`` file in any of the shipped formats."""
    text = text.strip()
    match = _SHA1.search(text)
    if match:
        branch = _BRANCH.search(text)
        return match.group(1), branch.group(1) if branch else None
    match = _GIT.match(text) or _HEX.match(text)
    if match:
        return match.group(1), None
    raise ValueError("%s: unrecognised content %r" % (filename, text[:80]))


def _supported_cann(path, key, unknown):
    try:
        return parse_supported_cann(read_text(path, limit=1024 * 1024), path)
    except (Unreadable, ValueError) as exc:
        unknown[key] = str(exc)
        return None


def _cann_lookup(path, unknown):
    try:
        return parse_cann_lookup(read_text(path, limit=1024 * 1024), path)
    except (Unreadable, ValueError) as exc:
        unknown["mindspore.cann_lookup"] = str(exc)
        return None


def parse_supported_cann(source, filename):
    """The ``self.version = [...]`` list of ``AscendEnvChecker.__init__``, as strings."""
    tree = parse_source(source, filename)
    for cls in tree.body:
        if not (isinstance(cls, ast.ClassDef) and cls.name == "AscendEnvChecker"):
            continue
        for init in cls.body:
            if not (isinstance(init, ast.FunctionDef) and init.name == "__init__"):
                continue
            for node in ast.walk(init):
                targets = node.targets if isinstance(node, ast.Assign) else []
                if isinstance(node, ast.AnnAssign) and node.value is not None:
                    targets = [node.target]
                for target in targets:
                    if (
                        isinstance(target, ast.Attribute)
                        and target.attr == "version"
                        and isinstance(target.value, ast.Name)
                        and target.value.id == "self"
                    ):
                        value = literal(node.value)
                        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
                            return list(value)
                        raise ValueError(
                            "%s:%d: self.version is not a list of strings" % (filename, node.lineno)
                        )
            raise ValueError("%s: AscendEnvChecker.__init__ sets no self.version" % filename)
        raise ValueError("%s: AscendEnvChecker has no __init__" % filename)
    raise ValueError("%s: no class AscendEnvChecker" % filename)
