"""A probe's thresholds and comparator options, resolved per output, variant and dtype from
the levels of ``[probes.NAME]`` (the most specific level that sets a key wins), with the
built-in low-precision tolerances underneath."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any

from auditor.compare.verdicts import Tolerance

DTYPE_TOLERANCES: dict[str, dict[str, float]] = {
    "float16": {"atol": 1e-3, "rtol": 1e-3},
    "bfloat16": {"atol": 1e-2, "rtol": 1e-2},
}
"""Built-in element-wise thresholds of the low-precision dtypes, as if written in every probe's
``[probes.X.dtype.D]``. One fp16 ULP is at most 2**-10 (9.8e-4) of a normal value, so rtol 1e-3
passes a one-ULP difference, msProbe's acceptance for fp16; bf16's ULP is 2**-7 (7.8e-3).
Every other dtype starts from ``Tolerance()`` (1e-5, about 84 fp32 ULPs, Polygraphy's default)."""


@dataclasses.dataclass(frozen=True)
class ThresholdScope:
    """What one level of a probe's config sets (None: not set there, inherited): atol/rtol,
    per-output atol/rtol, and comparator options. Used for ``dtype.D`` and ``variant.V``."""

    atol: float | None = None
    rtol: float | None = None
    outputs: dict[str, dict[str, float]] = field(default_factory=dict)
    comparators: dict[str, dict[str, Any]] = field(default_factory=dict)

    def settings(self, output: str) -> dict[str, float]:
        own = {k: v for k, v in (("atol", self.atol), ("rtol", self.rtol)) if v is not None}
        return {**own, **self.outputs.get(output, {})}


@dataclasses.dataclass(frozen=True)
class ProbeConfig:
    """A probe's settings. Thresholds are resolved per key (atol and rtol separately), the most
    specific level that sets the key winning:

        variant.V.outputs.O > variant.V > dtype.D.outputs.O > dtype.D
            > outputs.O > the probe's atol/rtol > Tolerance() (1e-5, 1e-5)

    where D is the variant's ``dtype`` parameter and ``DTYPE_TOLERANCES`` fills in what
    ``dtype.D`` leaves unset. Comparator options merge the same way: ``comparators.C``, then
    ``dtype.D.comparators.C``, then ``variant.V.comparators.C``.
    """

    name: str
    thresholds: Tolerance = Tolerance()
    outputs: dict[str, Tolerance] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    variants: tuple[str, ...] = ()
    """The variants to run; empty: all the probe declares."""
    dtypes: dict[str, ThresholdScope] = field(default_factory=dict)
    variant_scopes: dict[str, ThresholdScope] = field(default_factory=dict)
    comparators: dict[str, dict[str, Any]] = field(default_factory=dict)

    def _scopes(self, variant: str | None, dtype: str | None) -> list[ThresholdScope]:
        scopes = []
        if dtype is not None:
            builtin = DTYPE_TOLERANCES.get(dtype, {})
            configured = self.dtypes.get(dtype, ThresholdScope())
            scopes.append(
                ThresholdScope(
                    configured.atol if configured.atol is not None else builtin.get("atol"),
                    configured.rtol if configured.rtol is not None else builtin.get("rtol"),
                    configured.outputs,
                    configured.comparators,
                )
            )
        if variant is not None and variant in self.variant_scopes:
            scopes.append(self.variant_scopes[variant])
        return scopes

    def tolerance_for(self, output: str, variant: str | None = None, dtype: str | None = None) -> Tolerance:
        own = self.outputs.get(output, self.thresholds)
        tol = {"atol": own.atol, "rtol": own.rtol}
        for scope in self._scopes(variant, dtype):
            tol.update(scope.settings(output))
        return Tolerance(**tol)

    def comparator_options(
        self, comparator: str, variant: str | None = None, dtype: str | None = None
    ) -> dict[str, Any]:
        options = dict(self.comparators.get(comparator, {}))
        for scope in self._scopes(variant, dtype):
            options.update(scope.comparators.get(comparator, {}))
        return options
