"""Version drift: what changed between two fingerprint documents of one stack, in plain words.

``diff(before, after)`` is a pure function: it walks both documents field by field and
returns one ``Change`` per differing leaf, the fields that change numbers first (framework,
CANN, driver, firmware, Python, numerics environment, framework packages), then the other
packages, the host, and last the reasons why a value is unknown. A section that a collector
failed to produce (``{"error": ...}``), or that one document lacks, is one change, not one
per field. Two fields that say the same thing (MindSpore's version in ``framework`` and in
``runtime``) are reported once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from auditor.results import Finding

KIND = "version-drift"


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


MISSING: Any = _Missing()


@dataclass(frozen=True)
class Change:
    path: str  # dotted path in the document, e.g. "framework.mindspore.version"
    before: Any  # None where the value was unknown; absent keys are None too (see words)
    after: Any
    words: str  # "mindspore 2.9.0 -> 2.10.0"
    important: bool = False  # may change the numbers a policy computes


# Fields by importance, with the label a person knows them by.
NAMED: tuple[tuple[str, str], ...] = (
    ("framework.mindspore.version", "mindspore"),
    ("framework.mindspore", "mindspore"),
    ("framework.mindspore_lite.version", "mindspore-lite"),
    ("framework.mindspore_lite", "mindspore-lite"),
    ("runtime.runtime_version", ""),  # labelled with the runtime's package name
    ("cann.compiler_version", "CANN compiler"),
    ("cann.version", "CANN"),
    ("cann.toolkit.version", "CANN toolkit"),
    ("cann.toolkit", "CANN toolkit"),
    ("cann.nnae.version", "nnae"),
    ("cann.nnae", "nnae"),
    ("cann.nnrt.version", "nnrt"),
    ("cann.nnrt", "nnrt"),
    ("cann.layout", "CANN layout"),
    ("cann.root", "CANN root"),
    ("cann.choice.mindspore.package", "CANN MindSpore would load"),
    ("cann.choice.mindspore_lite.package", "CANN MindSpore Lite would load"),
    ("driver.version", "driver"),
    ("firmware.version", "firmware"),
    ("framework.mindspore.supported_cann", "MindSpore's supported CANN"),
    ("framework.mindspore.commit_id", "mindspore commit"),
    ("framework.mindspore_lite.commit_id", "mindspore-lite commit"),
    ("cann.toolkit.innerversion", "CANN toolkit innerversion"),
    ("driver.innerversion", "driver innerversion"),
    ("firmware.package_version", "firmware package"),
    ("driver.package_version", "driver package"),
    ("runtime.python", "Python"),
    ("host.python.version", "Python"),
    ("host.cpu_numerics", "CPU numerics features"),
    ("runtime.numpy", "numpy"),
    ("runtime.runtime_package", "runtime package"),
    ("runtime.runtime", "runtime"),
)
IMPORTANT_UNTIL = "runtime.numpy"  # NAMED entries up to this one may change numbers
LATER: tuple[tuple[str, str], ...] = (
    ("npu_smi.driver_version", "npu-smi driver"),
    ("npu_smi.board.firmware_version", "npu-smi firmware"),
    ("npu_smi.count", "NPU count"),
    ("host.os_release.PRETTY_NAME", "OS"),
    ("host.kernel", "kernel"),
    ("host.arch", "arch"),
    ("host.cpu_model", "CPU"),
    ("runtime.executable", "interpreter"),
    ("host.python.executable", "interpreter"),
    ("host.hostname", "hostname"),
    ("host.machine_id", "machine id"),
    ("connection.host", "host"),
    ("connection.transport", "transport"),
    ("connection.destination", "destination"),
    ("connection.address", "address"),
)
_RANK = {path: i for i, (path, _) in enumerate(NAMED)}
_IMPORTANT = {path for path, _ in NAMED[: _RANK[IMPORTANT_UNTIL] + 1]}
_LABEL = dict(NAMED) | dict(LATER)
_LATER_RANK = {path: i for i, (path, _) in enumerate(LATER)}


def diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[Change]:
    """The changes from ``before`` to ``after``, most important first."""
    found: list[tuple[tuple[int, int, str], Change]] = []
    for section in sorted(set(before) | set(after)):
        b, a = before.get(section, MISSING), after.get(section, MISSING)
        if b == a:
            continue
        if isinstance(b, dict) and isinstance(a, dict) and not _failed(b) and not _failed(a):
            for path, bv, av in _leaves(section, b, a):
                found.append((_rank(path), _change(path, bv, av, before, after)))
        else:
            found.append((_rank(section), _section_change(section, b, a)))
    found.sort(key=lambda item: item[0])
    out: list[Change] = []
    seen: set[str] = set()
    for _, change in found:
        if change.words not in seen:
            seen.add(change.words)
            out.append(change)
    return out


def drift_finding(
    stack: str, changes: list[Change], previous_run: int | None, previous_digest: str, digest: str
) -> Finding:
    """The one finding for a stack whose fingerprint changed: every change in its details."""
    shown = [c.words for c in changes[:8]]
    more = len(changes) - len(shown)
    since = f"since run {previous_run}" if previous_run is not None else "since its last fingerprint"
    message = f"{stack} changed {since}: " + "; ".join(shown) + (f"; and {more} more" if more > 0 else "")
    return Finding(
        KIND,
        "warning" if any(c.important for c in changes) else "info",
        stack,
        f"{stack}/{KIND}",
        message,
        {
            "changes": [asdict(c) for c in changes],
            "previous_run": previous_run,
            "previous_digest": previous_digest,
            "digest": digest,
            "action": "re-run the probes' pairs with this stack (the audit did) and check their results; "
            "if the change was not planned, find who upgraded the stack",
        },
    )


def _failed(section: dict[str, Any]) -> bool:
    return set(section) == {"error"}


def _leaves(prefix: str, b: dict[str, Any], a: dict[str, Any]):  # noqa: ANN202 - a generator
    for key in sorted(set(b) | set(a), key=str):
        bv, av = b.get(key, MISSING), a.get(key, MISSING)
        if bv == av:
            continue
        path = f"{prefix}.{key}"
        if isinstance(bv, dict) and isinstance(av, dict):
            yield from _leaves(path, bv, av)
        else:
            yield path, bv, av


def _rank(path: str) -> tuple[int, int, str]:
    parts = path.split(".")
    if "unknown" in parts:
        return (9, 0, path)
    if path in _RANK:
        return (0, _RANK[path], path)
    if parts[0] == "environment":
        return (1, 0, path)
    if path.startswith("packages.framework."):
        return (2, 0, path)
    if path.startswith("packages.all."):
        return (3, 0, path)
    if path in _LATER_RANK:
        return (4, _LATER_RANK[path], path)
    return (5, 0, path)


def _important(path: str) -> bool:
    return path in _IMPORTANT or path.startswith(("environment.", "packages.framework."))


def _change(path: str, b: Any, a: Any, before: Mapping[str, Any], after: Mapping[str, Any]) -> Change:
    parts = path.split(".")
    absent = "unknown"
    if parts[0] == "environment" and len(parts) == 2:
        label, absent = f"env {parts[1]}", "unset"
    elif path.startswith(("packages.framework.", "packages.all.")) and len(parts) == 3:
        label, absent = parts[2], "not installed"
    elif path == "runtime.runtime_version":
        package = (after.get("runtime") or {}).get("runtime_package") or (before.get("runtime") or {}).get(
            "runtime_package"
        )
        label = str(package or "runtime")
    elif path in ("framework.mindspore", "framework.mindspore_lite"):
        label, absent = _LABEL[path], "not installed"
    elif "unknown" in parts:
        i = parts.index("unknown")
        field = ".".join(parts[:i] + parts[i + 1 :])
        words = f"why {field} is unknown: {_show(b, 'known')} -> {_show(a, 'known')}"
        return Change(path, _plain(b), _plain(a), words)
    else:
        label = _LABEL.get(path, path)
    words = f"{label} {_show(b, absent)} -> {_show(a, absent)}"
    return Change(path, _plain(b), _plain(a), words, _important(path))


def _section_change(section: str, b: Any, a: Any) -> Change:
    if isinstance(a, dict) and _failed(a):
        words = f"{section}: its collector failed ({_short(a['error'])})"
    elif isinstance(b, dict) and _failed(b):
        words = f"{section}: its collector works again"
    elif b is MISSING:
        words = f"{section}: now collected"
    elif a is MISSING:
        words = f"{section}: no longer collected"
    else:
        words = f"{section} {_show(b, 'unknown')} -> {_show(a, 'unknown')}"
    important = section in ("framework", "cann", "driver", "firmware", "environment", "runtime")
    return Change(section, _plain(b), _plain(a), words, important)


def _plain(value: Any) -> Any:
    return None if value is MISSING else value


def _show(value: Any, absent: str) -> str:
    if value is MISSING or value is None:
        return absent
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        if isinstance(value.get("version"), str):
            return value["version"]
        return _short(json.dumps(value, sort_keys=True, separators=(",", ":")))
    if isinstance(value, list):
        if all(isinstance(v, (str, int, float)) for v in value):
            return "[" + ", ".join(str(v) for v in value) + "]"
        return _short(json.dumps(value, sort_keys=True, separators=(",", ":")))
    if value == "":
        return '""'
    return _short(str(value))


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
