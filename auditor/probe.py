"""What the auditor knows about a probe: its name, version, inputs, outputs and how to make
its seeded weights and inputs. The model-building half lives in the same module and runs
inside the train stack's worker (``build_cell``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ProbeSpec:
    name: str
    version: str
    module: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    default_params: dict[str, Any] = field(default_factory=dict)

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
        return cls(
            mod.NAME,
            str(mod.VERSION),
            mod.__name__,
            tuple(mod.INPUTS),
            tuple(mod.OUTPUTS),
            dict(getattr(mod, "DEFAULT_PARAMS", {})),
        )

    def params(self, overrides: dict[str, Any]) -> dict[str, Any]:
        unknown = set(overrides) - set(self.default_params)
        if unknown:
            raise ValueError(
                f"probe {self.name} has no parameter(s) {', '.join(sorted(unknown))} "
                f"(known: {', '.join(sorted(self.default_params))})"
            )
        return {**self.default_params, **overrides}

    def _module(self) -> ModuleType:
        return importlib.import_module(self.module)

    def make_weights(self, params: dict[str, Any]) -> dict[str, np.ndarray]:
        return self._module().make_weights(params)

    def make_inputs(self, params: dict[str, Any]) -> list[np.ndarray]:
        return self._module().make_inputs(params)


def builtin_probes() -> dict[str, ProbeSpec]:
    """The probes the built-in plugin registers (no entry points, no plugin directories)."""
    from auditor.plugin_manager import Plugins

    return Plugins(entry_points=False).probes()
