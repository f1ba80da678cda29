"""Alert sink ``jsonl``: appends each alert event (the JSON payload of ``auditor.alerts.engine``) as
one line to a file, for log shippers and scripts.

    [alerts.sinks.file]
    type = "jsonl"
    path = "/var/lib/auditor/alerts.jsonl"   # absolute; $VAR and ~ are expanded
    fsync = false                            # optional: fsync after each line

Each line is written with a single ``write`` on a file opened with O_APPEND, so lines from
concurrent writers never interleave.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from auditor.alerts.sinks import SinkType, option_problems
from auditor.config.tables import UnsetVariable, expand


class JsonLinesSink:
    def __init__(self, name: str, path: str, fsync: bool = False):
        self.name = name
        self.path = Path(path)
        self.fsync = fsync

    def send(self, event: dict[str, Any]) -> None:
        line = (json.dumps(event, sort_keys=True, separators=(",", ":")) + "\n").encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
        try:
            os.write(fd, line)
            if self.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)


def validate(options: dict[str, Any]) -> list[str]:
    problems = option_problems(options, {"path": str, "fsync": bool}, required=("path",))
    path = options.get("path")
    try:
        if isinstance(path, str) and not os.path.isabs(expand(path)):
            problems.append(f"path: must be an absolute path, not {path!r}")
    except UnsetVariable as exc:
        problems.append(f"path: {exc}")
    return problems


def create(name: str, options: dict[str, Any]) -> JsonLinesSink:
    return JsonLinesSink(name, expand(options["path"]), bool(options.get("fsync", False)))


SINK_TYPE = SinkType("jsonl", "appends each alert event as a JSON line to a file", validate, create)
