"""Artifact formats: the file a train runtime exports and an infer runtime loads (MindIR, ONNX).

A format is read without any framework, in the auditor process, into a summary (a plain dict)
that the cycle stores with the artifact and the rules read: ``sha256``, ``size``,
``readable`` (and ``reason`` when not), ``op_types``, ``inputs`` and ``outputs``, plus the
format's own fields. ``read`` never raises: the bytes may come from another host or a shared
database. MindIR is defined here because the auditor's own features take MindIR files (user
models, served files, publications) and because a runtime plugin that names no format serves
MindIR; other formats live in their runtime's package (ONNX in ``auditor.plugins.runtimes.ort``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from auditor.worker import mindir


@dataclass(frozen=True)
class ArtifactFormat:
    """``name`` is the word used in config, results and the export request ("mindir");
    ``title`` the word a person reads ("MindIR"); ``suffix`` the file name's end (".mindir"),
    which tells an exporting runtime what to write. ``read(data)`` gives the summary.
    ``version_field``: the summary's key holding the
    format version a loader checks (MindIR's ``mind_ir_version``); ``producer_field``: the key
    naming the release that wrote the file, when the format records it; ``producer_name``:
    the software whose release that is ("MindSpore")."""

    name: str
    title: str
    suffix: str
    read: Callable[[bytes], dict[str, Any]]
    version_field: str | None = None
    producer_field: str | None = None
    producer_name: str = ""

    def __post_init__(self) -> None:
        if not self.suffix.startswith("."):
            raise ValueError(f"format {self.name}: suffix must start with '.', not {self.suffix!r}")

    def version(self, summary: dict[str, Any]) -> int | None:
        """The file's format version, if the format has one and the file says it."""
        value = summary.get(self.version_field) if self.version_field else None
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def producer(self, summary: dict[str, Any]) -> str | None:
        value = summary.get(self.producer_field) if self.producer_field else None
        return str(value) if value else None


def _read_mindir(data: bytes) -> dict[str, Any]:
    return asdict(mindir.read_info(data))


MINDIR = ArtifactFormat(
    "mindir",
    "MindIR",
    ".mindir",
    _read_mindir,
    version_field="mind_ir_version",
    producer_field="model_version",
    producer_name="MindSpore",
)
