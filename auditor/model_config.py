"""``[models.NAME]``: a user's own exported MindIR audited like a probe, without Python; and
``[stacks.X] models``: the model files a stack serves (the deployed-model watch).

    [models.policy]
    path = "export/policy.mindir"       # relative to the config file
    stacks = ["lite20"]                 # where it is served (default: every infer stack)
    reference = "ms210-graph"           # a stack that runs it as the reference, or:
    golden = "policy.golden.npz"        # inputs and expected outputs (docs/golden.md)
    output_names = ["logits", "mean"]   # optional; else the golden's, else output0, output1...
    seed = 0                            # of the generated inputs
    atol = 1e-5                         # element-wise thresholds, as [probes.P]
    rtol = 1e-5
    outputs.mean = { atol = 1e-4 }      # per output
    [[models.policy.inputs]]            # optional: default, the file's own input signature
    name = "obs"                        # with normal(0, 1) floats and a batch of 1
    shape = [64, 11]
    dtype = "float32"
    generator = "normal"                # normal (mean, std) | uniform (low, high) | npz
    npz = "recorded_obs.npz"            # generator = "npz": recorded observations
    key = "obs"                         # ... the array's name in it (default: name)

Parsed here, not in auditor.config, which calls ``parse_models`` and
``parse_stack_models`` once each; problems go to the same error list, with their key paths.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from auditor.compare import Tolerance

GENERATORS = ("normal", "uniform", "npz")
INPUT_DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool")
MODEL_KEYS = {
    "path",
    "stacks",
    "reference",
    "golden",
    "output_names",
    "seed",
    "atol",
    "rtol",
    "outputs",
    "inputs",
}
INPUT_KEYS = {"name", "shape", "dtype", "generator", "mean", "std", "low", "high", "npz", "key"}

Error = Callable[[str, str], None]


@dataclass(frozen=True)
class InputSpec:
    """One input of a model probe and how its values are made (seeded from the model's seed)."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    generator: str = "normal"
    mean: float = 0.0
    std: float = 1.0
    low: float = -1.0
    high: float = 1.0
    npz: str = ""
    key: str = ""


@dataclass(frozen=True)
class ModelConfig:
    name: str
    path: str
    stacks: tuple[str, ...]
    """The stacks that serve the model and are compared with the reference."""
    reference: str | None = None
    """A stack that runs the same file as the reference (e.g. ms210-graph), or None."""
    golden: str | None = None
    """A golden .npz (inputs and expected outputs, docs/golden.md), or None."""
    inputs: tuple[InputSpec, ...] = ()
    output_names: tuple[str, ...] = ()
    seed: int = 0
    thresholds: Tolerance = Tolerance()
    outputs: dict[str, Tolerance] = field(default_factory=dict)

    @property
    def probe_config(self) -> Any:
        """The thresholds as the probes' ``auditor.config.ProbeConfig``, so that model probes
        resolve them the same way (per output, then the built-in dtype defaults)."""
        from auditor.config import ProbeConfig

        return ProbeConfig(self.name, self.thresholds, dict(self.outputs))

    def tolerance_for(self, output: str, dtype: str | None = None) -> Tolerance:
        """The output's thresholds; an fp16/bf16 output gets the built-in dtype thresholds
        (auditor.config.DTYPE_TOLERANCES), as a probe's fp16 variant does."""
        return self.probe_config.tolerance_for(output, None, dtype)

    @property
    def reference_label(self) -> str:
        """The reference side's name in results: the stack, or "golden"."""
        return self.reference or "golden"


def relative_to(source: str, path: str) -> str:
    """A path from the config, relative to the config file's directory; ~ and $VARs expanded."""
    path = os.path.expanduser(os.path.expandvars(path))
    if os.path.isabs(path) or source.startswith("<"):
        return path
    return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(source)), path))


def _number(doc: Mapping[str, Any], key: str, path: str, default: float, error: Error) -> float:
    value = doc.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        error(f"{path}.{key}", f"must be a number, not {value!r}")
        return default
    return float(value)


def _tolerance(doc: Mapping[str, Any], path: str, base: Tolerance, error: Error) -> Tolerance:
    values = {}
    for name in ("atol", "rtol"):
        value = _number(doc, name, path, getattr(base, name), error)
        if value < 0:
            error(f"{path}.{name}", f"must be a number 0 or more, not {value!r}")
            value = getattr(base, name)
        values[name] = value
    return Tolerance(**values)


def _strings(doc: Mapping[str, Any], key: str, path: str, error: Error) -> tuple[str, ...]:
    value = doc.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        error(f"{path}.{key}", f"must be a list of names, not {value!r}")
        return ()
    return tuple(value)


def _input(doc: Any, path: str, source: str, error: Error) -> InputSpec | None:
    if not isinstance(doc, dict):
        error(path, "must be a table with name, shape, dtype and generator")
        return None
    for unknown in sorted(set(doc) - INPUT_KEYS):
        error(f"{path}.{unknown}", f"unknown key (expected one of: {', '.join(sorted(INPUT_KEYS))})")
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        error(f"{path}.name", "is required: the input's name")
        name = ""
    shape = doc.get("shape")
    if (
        not isinstance(shape, list)
        or not shape
        or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape)
    ):
        error(f"{path}.shape", f"must be a list of dimensions greater than 0, not {shape!r}")
        shape = None
    dtype = doc.get("dtype", "float32")
    if dtype not in INPUT_DTYPES:
        error(f"{path}.dtype", f"unknown dtype {dtype!r} (known: {', '.join(INPUT_DTYPES)})")
        dtype = "float32"
    generator = doc.get("generator", "npz" if "npz" in doc else "normal")
    if generator not in GENERATORS:
        error(f"{path}.generator", f"must be one of {', '.join(GENERATORS)}, not {generator!r}")
        generator = "normal"
    npz = doc.get("npz", "")
    if generator == "npz" and (not isinstance(npz, str) or not npz):
        error(f"{path}.npz", "is required with generator = 'npz': the .npz of recorded observations")
    low = _number(doc, "low", path, -1.0, error)
    high = _number(doc, "high", path, 1.0, error)
    if generator == "uniform" and not low < high:
        error(f"{path}.high", f"must be greater than low ({low}), not {high}")
    std = _number(doc, "std", path, 1.0, error)
    if std < 0:
        error(f"{path}.std", f"must be 0 or more, not {std}")
    key = doc.get("key", "")
    if not isinstance(key, str):
        error(f"{path}.key", f"must be the array's name in the .npz, not {key!r}")
        key = ""
    if not name or shape is None:
        return None
    return InputSpec(
        name,
        tuple(shape),
        dtype,
        generator,
        _number(doc, "mean", path, 0.0, error),
        std,
        low,
        high,
        relative_to(source, npz) if isinstance(npz, str) and npz else "",
        key,
    )


def parse_models(
    doc: Any, source: str, stacks: Mapping[str, Any], infer_stacks: Iterable[str], error: Error
) -> dict[str, ModelConfig]:
    """The ``[models]`` section. ``stacks``: every configured stack name (to check names);
    ``infer_stacks``: the default serving stacks."""
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        error("models", f"must be a table of [models.NAME] tables, not {type(doc).__name__}")
        return {}
    infer = tuple(infer_stacks)
    out = {}
    for name, m in doc.items():
        path = f"models.{name}"
        if not isinstance(m, dict):
            error(path, "must be a table")
            continue
        for unknown in sorted(set(m) - MODEL_KEYS):
            error(f"{path}.{unknown}", f"unknown key (expected one of: {', '.join(sorted(MODEL_KEYS))})")
        file = m.get("path")
        if not isinstance(file, str) or not file:
            error(f"{path}.path", "is required: the exported .mindir")
            file = ""
        served = _strings(m, "stacks", path, error) if "stacks" in m else infer
        for s in served:
            if s not in stacks:
                error(f"{path}.stacks", f"no stack named {s!r} in [stacks]")
        reference, golden = m.get("reference"), m.get("golden")
        if (reference is None) == (golden is None):
            error(path, "needs exactly one reference: reference = STACK, or golden = FILE.npz")
        if reference is not None and (not isinstance(reference, str) or reference not in stacks):
            error(f"{path}.reference", f"no stack named {reference!r} in [stacks]")
            reference = None
        if golden is not None and (not isinstance(golden, str) or not golden):
            error(f"{path}.golden", f"must be the path of a golden .npz, not {golden!r}")
            golden = None
        targets = tuple(s for s in served if s != reference)
        if not targets and file:
            error(f"{path}.stacks", "no stack to compare: name the stacks that serve the model")
        seed = m.get("seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            error(f"{path}.seed", f"must be an integer 0 or more, not {seed!r}")
            seed = 0
        raw_inputs = m.get("inputs", [])
        if not isinstance(raw_inputs, list):
            error(f"{path}.inputs", "must be an array of tables ([[models.NAME.inputs]])")
            raw_inputs = []
        inputs = [_input(d, f"{path}.inputs[{i}]", source, error) for i, d in enumerate(raw_inputs)]
        base = _tolerance(m, path, Tolerance(), error)
        outputs = {}
        raw_outputs = m.get("outputs", {})
        if not isinstance(raw_outputs, dict):
            error(f"{path}.outputs", "must be a table of per-output thresholds (outputs.NAME = {atol, rtol})")
            raw_outputs = {}
        for o, t in raw_outputs.items():
            if isinstance(t, dict):
                outputs[o] = _tolerance(t, f"{path}.outputs.{o}", base, error)
            else:
                error(f"{path}.outputs.{o}", "must be a table with atol and/or rtol")
        out[name] = ModelConfig(
            name,
            relative_to(source, file) if file else "",
            targets,
            reference if isinstance(reference, str) else None,
            relative_to(source, golden) if isinstance(golden, str) else None,
            tuple(i for i in inputs if i is not None),
            _strings(m, "output_names", path, error),
            seed,
            base,
            outputs,
        )
    return out


def parse_stack_models(value: Any, path: str, source: str, error: Error) -> tuple[str, ...]:
    """``[stacks.X] models``: paths or glob patterns of the model files the stack serves."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        error(f"{path}.models", f"must be a list of paths or glob patterns, not {value!r}")
        return ()
    return tuple(relative_to(source, v) for v in value)


def expand_patterns(patterns: Iterable[str]) -> list[str]:
    """The files the patterns name now, sorted; a plain path is kept even when missing (its
    absence is what the watch reports)."""
    found: set[str] = set()
    for p in patterns:
        if glob.has_magic(p):
            found.update(f for f in glob.glob(p) if os.path.isfile(f))
        else:
            found.add(p)
    return sorted(found)
