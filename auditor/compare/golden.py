"""Golden files: a model's inputs and the outputs it must give, as one ``.npz`` (docs/golden.md).

Arrays ``input_0``, ``input_1``, ... in the model's input order, ``output_0``, ... in its
output order, and ``meta``: a 0-d unicode array holding JSON (format, version, names, the
model file's sha256, where and when it was recorded). Everything loads with numpy alone and
``allow_pickle=False``.
"""

from __future__ import annotations

import io
import json
import os
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

FORMAT, VERSION = "auditor-golden", 1


class GoldenError(Exception):
    """A golden file that cannot be used; the message names the file and the problem."""


@dataclass(frozen=True)
class Golden:
    inputs: list[np.ndarray]
    outputs: list[np.ndarray]
    input_names: list[str] = field(default_factory=list)
    output_names: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def model_sha256(self) -> str | None:
        return self.meta.get("model_sha256")


def write_golden(
    path: str | os.PathLike[str],
    inputs: list[np.ndarray],
    outputs: list[np.ndarray],
    input_names: list[str],
    output_names: list[str],
    **meta: Any,
) -> Path:
    """Write atomically (a temporary file renamed over ``path``)."""
    p = Path(path)
    document = {
        "format": FORMAT,
        "version": VERSION,
        "input_names": list(input_names),
        "output_names": list(output_names),
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **meta,
    }
    arrays = {f"input_{i}": np.asarray(x) for i, x in enumerate(inputs)}
    arrays.update({f"output_{i}": np.asarray(y) for i, y in enumerate(outputs)})
    arrays["meta"] = np.array(json.dumps(document, sort_keys=True))
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_bytes(buf.getvalue())
    tmp.replace(p)
    return p


def read_golden(path: str | os.PathLike[str]) -> Golden:
    p = Path(path)
    try:
        with np.load(p, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise GoldenError(f"{p}: no such golden file (record one with `auditor golden record`)") from None
    except IsADirectoryError:
        raise GoldenError(f"{p}: is a directory, not a golden .npz") from None
    except PermissionError:
        raise GoldenError(f"{p}: not readable (permission denied)") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise GoldenError(f"{p}: not a golden .npz ({type(exc).__name__}: {exc})") from None
    if "meta" not in arrays:
        raise GoldenError(f"{p}: no 'meta' array: not written by `auditor golden record` (docs/golden.md)")
    try:
        meta = json.loads(str(arrays["meta"][()]))
    except (ValueError, TypeError) as exc:
        raise GoldenError(f"{p}: 'meta' is not JSON: {exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise GoldenError(f"{p}: 'meta' does not say format {FORMAT!r}")
    if meta.get("version") != VERSION:
        raise GoldenError(f"{p}: golden format version {meta.get('version')!r}; this auditor reads {VERSION}")
    inputs = _numbered(arrays, "input", p)
    outputs = _numbered(arrays, "output", p)
    if not inputs or not outputs:
        raise GoldenError(
            f"{p}: needs input_0... and output_0... arrays ({len(inputs)} inputs, {len(outputs)} outputs)"
        )
    names_in, names_out = list(meta.get("input_names") or []), list(meta.get("output_names") or [])
    for what, names, arrs in (("input_names", names_in, inputs), ("output_names", names_out, outputs)):
        if names and len(names) != len(arrs):
            raise GoldenError(f"{p}: meta {what} lists {len(names)} names for {len(arrs)} arrays")
    return Golden(inputs, outputs, names_in, names_out, meta)


def _numbered(arrays: dict[str, np.ndarray], prefix: str, p: Path) -> list[np.ndarray]:
    keys = sorted((k for k in arrays if k.startswith(prefix + "_")), key=lambda k: k)
    indices = []
    for k in keys:
        suffix = k[len(prefix) + 1 :]
        if not suffix.isdigit():
            raise GoldenError(f"{p}: unexpected array {k!r} (arrays are {prefix}_0, {prefix}_1, ...)")
        indices.append(int(suffix))
    if sorted(indices) != list(range(len(indices))):
        raise GoldenError(f"{p}: {prefix} arrays are not numbered 0..{len(indices) - 1}: {sorted(keys)}")
    return [arrays[f"{prefix}_{i}"] for i in range(len(indices))]
