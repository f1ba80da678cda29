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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from auditor.worker import files

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

    def another_file(self, name: str, sha256: str) -> str | None:
        """What a golden recorded for another file than the one served (digest ``sha256``)
        means, with the remedy: every difference measured against it is the two files', not
        the stacks'. None when it was recorded for this file, or does not say for which."""
        recorded = self.model_sha256
        if recorded is None or recorded == sha256:
            return None
        stack = f" --stack {self.meta['stack']}" if self.meta.get("stack") else ""
        return (
            f"the golden was recorded for another file (sha256 {recorded[:12]}; this one is "
            f"{sha256[:12]}): what is measured against it is the two files' difference, not the "
            f"stacks'; if the model was retrained on purpose, record it again: auditor golden record "
            f"{name}{stack}"
        )


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


def read_golden(path: str | os.PathLike[str], limits: files.Limits = files.DEFAULT_LIMITS) -> Golden:
    """The golden at ``path``, read through auditor.worker.files (a regular file within
    ``limits``, numeric arrays, no pickles) and checked whole before anyone uses it: the meta
    document's types, the arrays' numbering and names. GoldenError names the file and the
    problem."""
    p = Path(path)
    arrays = _arrays(p, limits)
    if "meta" not in arrays:
        raise GoldenError(f"{p}: no 'meta' array: not written by `auditor golden record` (docs/golden.md)")
    return _golden(p, arrays)


def read_outputs(path: str | os.PathLike[str], limits: files.Limits = files.DEFAULT_LIMITS) -> Golden:
    """A golden (``read_golden``), or any other ``.npz`` of numeric arrays, such as a user's own
    dumps of a model's outputs: each array is an output under its name (``meta`` is empty,
    there are no inputs), in the file's order."""
    p = Path(path)
    arrays = _arrays(p, limits)
    if "meta" in arrays:
        return _golden(p, arrays)
    if not arrays:
        raise GoldenError(f"{p}: holds no arrays")
    for name, array in arrays.items():
        try:
            files.check_array(p, name, array)
        except files.FileProblem as exc:
            raise GoldenError(str(exc)) from None
    return Golden([], list(arrays.values()), [], list(arrays), {})


def _arrays(p: Path, limits: files.Limits) -> dict[str, np.ndarray]:
    try:
        return files.read_npz(p, limits, numeric=False)
    except files.FileProblem as exc:
        if exc.problem == "no such file":
            raise GoldenError(f"{p}: no such golden file (record one with `auditor golden record`)") from None
        problem = exc.problem.replace("not a readable .npz", "not a golden .npz", 1)
        raise GoldenError(f"{p}: {problem}") from None


def _golden(p: Path, arrays: dict[str, np.ndarray]) -> Golden:
    """A golden's arrays (``meta`` included) checked whole."""
    meta_array = arrays.pop("meta")
    if meta_array.shape != () or meta_array.dtype.kind != "U":
        raise GoldenError(
            f"{p}: 'meta' is not one JSON text ({meta_array.dtype}, shape {list(meta_array.shape)})"
        )
    try:
        meta = json.loads(str(meta_array[()]))
    except (ValueError, TypeError, RecursionError) as exc:
        raise GoldenError(f"{p}: 'meta' is not JSON: {exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise GoldenError(f"{p}: 'meta' does not say format {FORMAT!r}")
    if type(meta.get("version")) is not int or meta["version"] != VERSION:
        raise GoldenError(f"{p}: golden format version {meta.get('version')!r}; this auditor reads {VERSION}")
    _check_meta_types(meta, p)
    for name, array in arrays.items():
        try:
            files.check_array(p, name, array)
        except files.FileProblem as exc:
            raise GoldenError(str(exc)) from None
    inputs = _numbered(arrays, "input", p)
    outputs = _numbered(arrays, "output", p)
    extra = sorted(
        set(arrays)
        - {f"input_{i}" for i in range(len(inputs))}
        - {f"output_{i}" for i in range(len(outputs))}
    )
    if extra:
        raise GoldenError(
            f"{p}: unexpected array(s) {', '.join(map(repr, extra))} "
            "(a golden holds input_N, output_N and meta)"
        )
    if not inputs or not outputs:
        raise GoldenError(
            f"{p}: needs input_0... and output_0... arrays ({len(inputs)} inputs, {len(outputs)} outputs)"
        )
    names_in, names_out = list(meta.get("input_names") or []), list(meta.get("output_names") or [])
    for what, names, arrs in (("input_names", names_in, inputs), ("output_names", names_out, outputs)):
        if names and len(names) != len(arrs):
            raise GoldenError(f"{p}: meta {what} lists {len(names)} names for {len(arrs)} arrays")
    return Golden(inputs, outputs, names_in, names_out, meta)


_META_TYPES: dict[str, tuple[type, ...]] = {
    "model_sha256": (str,),
    "model_file": (str,),
    "model": (str,),
    "stack": (str,),
    "runtime": (str,),
    "runtime_version": (str,),
    "recorded_at": (str,),
    "seed": (int,),
}


def _check_meta_types(meta: dict[str, Any], p: Path) -> None:
    """The meta keys the auditor reads must have the type it reads them as (None: absent)."""
    for key in ("input_names", "output_names"):
        names = meta.get(key)
        if names is None:
            continue
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise GoldenError(f"{p}: meta {key} must be a list of names (strings), not {_shown(names)}")
        if len(set(names)) != len(names):
            raise GoldenError(f"{p}: meta {key} names an array twice: {names}")
    for key, types in _META_TYPES.items():
        value = meta.get(key)
        if value is not None and (not isinstance(value, types) or isinstance(value, bool)):
            raise GoldenError(f"{p}: meta {key} must be a {types[0].__name__}, not {_shown(value)}")


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


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
