"""What the auditor knows about a probe: its name, version, inputs, outputs, variants and how
to make its seeded weights and inputs. The model-building half lives in the same module and
runs inside the train stack's worker (``build_cell``).

A probe module declares its parameters' types and ranges in ``PARAMS`` (a plain dict per
parameter, a JSON Schema subset: ``{"type": "integer", "minimum": 1, "maximum": 65536}``), and
``[probes.NAME.params]`` in auditor.toml is validated against it like every other key; a
parameter it leaves out gets the type of its default.

A probe module may declare ``VARIANTS``, an ordered mapping of variant name to parameter
overrides (``{"fp32": {"dtype": "float32"}, "fp16": {"dtype": "float16"}}``): each variant is
built, exported and compared on its own. Without it the probe has one variant named after its
``dtype`` parameter ("fp32", "fp16", ...; "default" when it has none).
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

from auditor.config.fields import check_param, infer_param_spec

if TYPE_CHECKING:
    import numpy as np

DTYPE_NAMES = {"float32": "fp32", "float16": "fp16", "float64": "fp64", "bfloat16": "bf16"}


def dtype_variant_name(params: dict[str, Any]) -> str:
    """The name of the one variant of a probe without VARIANTS: its dtype's short name."""
    dtype = params.get("dtype")
    return DTYPE_NAMES.get(str(dtype), str(dtype)) if dtype is not None else "default"


@dataclass(frozen=True)
class ProbeSpec:
    name: str
    version: str
    module: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    default_params: dict[str, Any] = field(default_factory=dict)
    variants: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Variant name -> parameter overrides, in the module's order (never empty after from_module)."""
    comparators: tuple[str, ...] = ()
    """Names of the comparators (``auditor_comparators``) run on this probe's outputs."""
    rerun: frozenset[str] = frozenset()
    """Variants whose outputs are checked for repeatability in a fresh worker process."""
    param_schema: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Parameter name -> its declaration (``PARAMS``, else the type of its default)."""
    precision: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Variant -> a per-cell precision plan (auditor.worker.precision: ``{"compute": "float16",
    "keep": [cell path, ...]}``): that variant's network is built with float32 weights and
    computes as the plan says (``Cell.to_float``), its export too. `auditor fix` audits its
    candidates so; a module never declares it."""

    @classmethod
    def from_module(cls, module: ModuleType | str) -> ProbeSpec:
        mod = importlib.import_module(module) if isinstance(module, str) else module
        missing = [
            a
            for a in ("NAME", "VERSION", "INPUTS", "OUTPUTS", "make_weights", "make_inputs", "build_cell")
            if not hasattr(mod, a)
        ]
        if missing:
            raise TypeError(f"probe module {mod.__name__} lacks {', '.join(missing)}")
        defaults = dict(getattr(mod, "DEFAULT_PARAMS", {}))
        variants = {str(k): dict(v) for k, v in dict(getattr(mod, "VARIANTS", {})).items()}
        for variant, overrides in variants.items():
            unknown = sorted(set(overrides) - set(defaults))
            if unknown:
                raise TypeError(
                    f"probe module {mod.__name__}: VARIANTS[{variant!r}] sets unknown parameter(s) "
                    f"{', '.join(unknown)} (DEFAULT_PARAMS has {', '.join(sorted(defaults))})"
                )
        schema = _param_schema(mod.__name__, defaults, dict(getattr(mod, "PARAMS", {})), variants)
        if not variants:
            variants = {dtype_variant_name(defaults): {}}
        rerun = getattr(mod, "RERUN_IN_FRESH_PROCESS", ())
        rerun_set = frozenset(variants) if rerun is True else frozenset(rerun or ())
        if rerun_set - set(variants):
            raise TypeError(
                f"probe module {mod.__name__}: RERUN_IN_FRESH_PROCESS names unknown variant(s) "
                f"{', '.join(sorted(rerun_set - set(variants)))}"
            )
        return cls(
            mod.NAME,
            str(mod.VERSION),
            mod.__name__,
            tuple(mod.INPUTS),
            tuple(mod.OUTPUTS),
            defaults,
            variants,
            tuple(getattr(mod, "COMPARATORS", ())),
            rerun_set,
            schema,
        )

    def params(self, overrides: dict[str, Any]) -> dict[str, Any]:
        unknown = set(overrides) - set(self.default_params)
        if unknown:
            raise ValueError(
                f"probe {self.name} has no parameter(s) {', '.join(sorted(unknown))} "
                f"(known: {', '.join(sorted(self.default_params))})"
            )
        return {**self.default_params, **overrides}

    def variant_params(self, variant: str, overrides: dict[str, Any]) -> dict[str, Any]:
        """Parameters of one variant: defaults, then the config's overrides, then the variant's
        own (a variant is defined by its overrides, so they win; the config check reports a
        params key that a variant sets)."""
        if variant not in self.variants:
            raise ValueError(
                f"probe {self.name} has no variant {variant!r} (known: {', '.join(self.variants)})"
            )
        return {**self.params(overrides), **self.variants[variant]}

    def select_variants(self, names: tuple[str, ...] | None) -> tuple[str, ...]:
        """The variants to run: all of them, or those named (in the probe's order)."""
        if not names:
            return tuple(self.variants)
        unknown = [n for n in names if n not in self.variants]
        if unknown:
            known = ", ".join(self.variants)
            raise ValueError(f"probe {self.name} has no variant(s) {', '.join(unknown)} (known: {known})")
        return tuple(v for v in self.variants if v in names)

    def _module(self) -> ModuleType:
        return importlib.import_module(self.module)

    def make_weights(self, params: dict[str, Any]) -> dict[str, np.ndarray]:
        return self._module().make_weights(params)

    def make_inputs(self, params: dict[str, Any]) -> list[np.ndarray]:
        return self._module().make_inputs(params)

    def rounding(self, params: dict[str, Any]) -> dict[str, np.ndarray]:
        """Per output, per element on the probe's own inputs: how far two correct evaluations
        in the probe's dtype can be apart (``rounding(params)``, optional; an element within
        it passes whatever atol/rtol say)."""
        fn = getattr(self._module(), "rounding", None)
        return dict(fn(params)) if fn is not None else {}

    def comparator_defaults(self, params: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """Options the probe gives its comparators (``comparator_options(params)``, optional):
        what only the probe knows, such as which input element belongs to which class."""
        fn = getattr(self._module(), "comparator_options", None)
        return dict(fn(params)) if fn is not None else {}


def _param_schema(
    module: str, defaults: dict[str, Any], declared: dict[str, Any], variants: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """PARAMS completed from the defaults' types; the defaults and every variant's overrides
    must satisfy it (a probe that contradicts its own declaration is the author's bug)."""

    unknown = sorted(set(declared) - set(defaults))
    if unknown:
        raise TypeError(f"probe module {module}: PARAMS declares {', '.join(unknown)}, not in DEFAULT_PARAMS")
    schema = {k: dict(declared[k]) if k in declared else infer_param_spec(v) for k, v in defaults.items()}
    problems = []
    for where, values in [("DEFAULT_PARAMS", defaults)] + [
        (f"VARIANTS[{v!r}]", o) for v, o in variants.items()
    ]:
        for key, value in values.items():
            problems += check_param(schema[key], value, f"{where}[{key!r}]")
    if problems:
        raise TypeError(f"probe module {module}: {'; '.join(problems)}")
    return schema


def single_file_problem(module: str) -> str | None:
    """Why the worker cannot import ``module``, when it is a top-level module outside any
    package (a lone ``.py`` in a plugin directory), with what to do; None otherwise."""
    top = module.partition(".")[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return f"no module named {top!r} in the auditor's environment or plugin directories"
    if spec.submodule_search_locations:
        return None
    where = spec.origin or top
    return (
        f"{where} is a single-file module: a stack worker imports the stack side of plugins "
        f"(build_cell, collectors, runtime classes) from packages only. Move it into a folder "
        f"with an __init__.py (e.g. {top}_pkg/__init__.py, empty or holding the hooks, and "
        f"{top}_pkg/{top}.py) and name it {top}_pkg.{top} in the hook"
    )
