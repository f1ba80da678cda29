"""What a serving stack really serves: the model its deployment converts with MindSpore Lite's
converter (``[stacks.X.convert]``, ``[models.N.convert]``), converted here with exactly those
options in that stack's worker (auditor.plugins.runtimes.lite.converter), recorded and then loaded in
place of the export.

The converted artifact is recorded like an export (content-addressed, kept with the run) with
what identifies it: its digest, its format (``ms`` or ``mindir``), the options and the
converter config file's digest, the converter's version (package and build commit) and the
source's digest. A converted MindIR is not byte-stable (its primitives come in a different
order each time, measured): ``canonical_sha256`` digests it with them sorted.

A conversion that fails is the result of that probe variant (or model), an error carrying the
converter's own words: its exception says only "Common error code.", so the decisive lines
of its log ([ERROR]/[CRITICAL]) are added.

``served``: a converted file the stack serves (on its host) is compared with a fresh
conversion of its named source: same digest, or the same outputs on seeded inputs.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from auditor.compare.outputs import Tolerance, compare_output, failure_text
from auditor.config.tables import ConvertTable, StackConfig
from auditor.results import CONSISTENT, DRIFT, ERROR, Artifact, ProbeResult
from auditor.stacks.worker import StackWorker, WorkerError
from auditor.worker import files
from auditor.worker.mindir import canonical_sha256, read_info

KINDS = {"ms": "lite-ms", "mindir": "lite-mindir"}
"""Artifact kinds of converted models."""
CONFIG_SECTIONS = (
    "common_quant_param",
    "mixed_bit_weight_quant_param",
    "full_quant_param",
    "data_preprocess_param",
    "registry",
    "acl_option_cfg_param",
    "acl_init_options",
    "acl_build_options",
    "micro_param",
    "cpu_option_cfg_param",
    "transform_quant_param",
    "model_param",
    "ascend_context",
)
"""The config-file sections compiled into MindSpore Lite 2.0.0's converter (``strings`` of
libmindspore_converter.so, research notes A4); any other section is ignored without a word."""
_SECTION = re.compile(r"^\s*\[([^\]]*)\]\s*$", re.M)
_LOG_LINE = re.compile(r"^\[(ERROR|CRITICAL)\] [A-Z]+\([^)]*\):\S+ \[(.*)$")
MAX_LOG_LINES = 4


@dataclass(frozen=True)
class Converted:
    path: Path
    """The converted file, staged on this machine for the load."""
    artifact: Artifact


def config_text(table: ConvertTable, stack: str) -> str | None:
    """The converter config file's text, or WorkerError naming the file and the problem."""
    if not table.config_file:
        return None
    try:  # a regular file, read with a deadline (auditor.worker.files), like every file named
        return files.read_bytes(table.config_file).decode("utf-8")
    except (files.FileProblem, UnicodeDecodeError) as exc:
        raise WorkerError(
            stack, "convert", "error", f"cannot read the converter config file {table.config_file}: {exc}"
        ) from None


def decisive_lines(log: str) -> list[str]:
    """The converter's [ERROR]/[CRITICAL] log lines, without their pid and time stamps."""
    out: list[str] = []
    for line in log.splitlines():
        match = _LOG_LINE.match(line.strip())
        if match and match.group(2) not in out:
            out.append(match.group(2))
    return out[:MAX_LOG_LINES]


def failure(exc: WorkerError, table: ConvertTable) -> WorkerError:
    """The worker's error as the result will say it: the options, the converter's exception,
    its decisive log lines."""
    if exc.kind != "error":
        return exc
    lines = decisive_lines(exc.log)
    message = f"MindSpore Lite converter ({table.describe()}): {exc.message}"
    if lines:
        message += "; its log says: " + " | ".join(lines)
    out = WorkerError(exc.stack, "convert", exc.kind, message, exc.log, exc.error_type, exc.traceback)
    out.host = exc.host
    return out


def convert(
    worker: StackWorker,
    stack: StackConfig,
    table: ConvertTable,
    source: bytes,
    model: str,
    tmp: Path,
    keep: dict[str, bytes] | None = None,
) -> Converted:
    """Convert ``source`` (a MindIR's bytes) in the stack's worker with ``table``'s options;
    the converted bytes are staged in ``tmp`` and kept in ``keep`` (the cycle's artifacts).
    Raises WorkerError: a conversion failure carries the converter's words."""
    config = config_text(table, stack.name)
    try:
        reply = worker.request("convert", model=model, mindir=source, options=table.options(), config=config)
    except WorkerError as exc:
        raise failure(exc, table) from None
    data: bytes = reply.result["data"]
    info = describe(data, reply.result, table, hashlib.sha256(source).hexdigest(), config, source)
    artifact = Artifact(info["sha256"], KINDS[info["format"]], len(data), info)
    path = Path(tmp) / f"{artifact.sha256}.{info['format']}"
    path.write_bytes(data)
    if keep is not None:
        keep.setdefault(artifact.sha256, data)
    return Converted(path, artifact)


def describe(
    data: bytes,
    reply: dict[str, Any],
    table: ConvertTable,
    source_sha256: str,
    config: str | None,
    source: bytes | None = None,
) -> dict[str, Any]:
    """The converted artifact's fingerprint: digest, format, options, converter, source; and
    what the converter ignored without a word (``input_shape`` names that match no input of
    the source, config sections it does not know)."""
    info: dict[str, Any] = {
        "sha256": hashlib.sha256(data).hexdigest(),
        "format": reply.get("format") or table.save_type,
        "options": table.options(),
        "config_file": table.config_file,
        "config_sha256": hashlib.sha256(config.encode()).hexdigest() if config is not None else None,
        "converter": reply.get("converter") or {},
        "source_sha256": source_sha256,
    }
    if reply.get("precision_settings") is not None:  # what the converter offers (auditor fix)
        info["precision_settings"] = list(reply["precision_settings"])
    # what the converter accepts without a word and then ignores: said with the artifact
    names = {t.name for t in (read_info(source).inputs or ())} if source is not None else set()
    ignored = sorted(k for k in table.input_shape if names and k not in names)
    if ignored:
        info["ignored_input_shape"] = ignored
    unknown = sorted({m.strip() for m in _SECTION.findall(config or "")} - set(CONFIG_SECTIONS))
    if unknown:
        info["unknown_config_sections"] = unknown
    if info["format"] == "mindir":
        mindir = read_info(data)
        info["canonical_sha256"] = canonical_sha256(data)
        info["mindir"] = {
            k: v for k, v in asdict(mindir).items() if k in ("model_version", "mind_ir_version", "op_types")
        }
    return info


# -- served conversions: a converted file on the host against a fresh conversion of its source ------


def served_results(
    worker: StackWorker, stack: StackConfig, fingerprint: dict[str, Any] | None, seed: int = 0
) -> list[ProbeResult]:
    """One result per ``[stacks.X.convert] served`` file: consistent when a fresh conversion of
    its source gives the same bytes, or the same outputs on seeded inputs; drift otherwise; an
    error when the source cannot be converted or either cannot be run."""
    table = stack.convert
    assert table is not None
    files = ((fingerprint or {}).get("models") or {}).get("files") or {}
    out = []
    for served, source in sorted(table.served.items()):
        base = dict(
            pair=f"{stack.name}:served",
            train=stack.name,
            infer=stack.name,
            probe=Path(served).name,
            probe_version="",
            variant="served-conversion",
            thresholds={"*": asdict(Tolerance())},
        )
        try:
            out.append(_served(worker, stack, table, served, source, files.get(served), seed, base))
        except WorkerError as exc:
            out.append(
                ProbeResult(
                    status=ERROR,
                    message=f"{served} against a fresh conversion of {source}: {exc.describe()}",
                    log=exc.log,
                    **base,
                )
            )
    return out


def _served(
    worker: StackWorker,
    stack: StackConfig,
    table: ConvertTable,
    served: str,
    source: str,
    watched: dict[str, Any] | None,
    seed: int,
    base: dict[str, Any],
) -> ProbeResult:
    model = f"served/{stack.name}/{served}"
    config = config_text(table, stack.name)
    try:
        reply = worker.request("convert", model=model, path=source, options=table.options(), config=config)
    except WorkerError as exc:
        raise failure(exc, table) from None
    fresh = reply.result
    fresh_sha = hashlib.sha256(fresh["data"]).hexdigest()
    info = describe(fresh["data"], fresh, table, "", config)
    artifact = Artifact(fresh_sha, KINDS[info["format"]], len(fresh["data"]), info | {"source": source})
    if watched is not None and watched.get("sha256") == fresh_sha:
        return ProbeResult(
            status=CONSISTENT,
            message=f"{served} is byte for byte what converting {source} ({table.describe()}) gives now",
            conversion=artifact,
            **base,
        )
    # Not watched, or other bytes (a converted MindIR differs run to run): compare what they compute.
    worker.request("load", model=model + "@served", path=served, mindir=None)
    worker.request("load", model=model + "@fresh", path=fresh["path"], mindir=None)
    signature = worker.request("signature", model=model + "@served").result["inputs"]
    rng = np.random.RandomState(seed)
    inputs = [np.ascontiguousarray(rng.normal(size=t["shape"]).astype(t["dtype"])) for t in signature]
    a = worker.request("run", model=model + "@served", inputs=inputs).result["outputs"]
    b = worker.request("run", model=model + "@fresh", inputs=inputs).result["outputs"]
    if len(a) != len(b):
        return ProbeResult(
            status=DRIFT,
            message=f"{served} gives {len(a)} outputs, a fresh conversion of {source} {len(b)}",
            conversion=artifact,
            **base,
        )
    comparisons = tuple(
        compare_output(f"output{i}", x, y, Tolerance()) for i, (x, y) in enumerate(zip(a, b, strict=True))
    )
    failed = [c for c in comparisons if not c.passed]
    why = "other bytes" if watched is not None else "not in the stack's models watch: its digest is unknown"
    if failed:
        return ProbeResult(
            status=DRIFT,
            message=f"{served} is not what converting {source} ({table.describe()}) gives now ({why}): "
            + "; ".join(failure_text(c) for c in failed),
            outputs=comparisons,
            conversion=artifact,
            **base,
        )
    return ProbeResult(
        status=CONSISTENT,
        message=f"{served} computes what a fresh conversion of {source} computes ({why}; same outputs)",
        outputs=comparisons,
        conversion=artifact,
        **base,
    )
