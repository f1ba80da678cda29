"""What a comparison concludes, as plain data: an output's verdict and metrics, a comparator's
checks, the tolerance they were held to, and their text. Kept apart from the comparison itself
(auditor.compare.outputs, numpy) so that what only reads or reports verdicts (the config, the
outcome vocabulary, the daemon) never loads numpy."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

METRIC_NAMES: tuple[str, ...] = (
    "max_abs",
    "max_rel",
    "mean_abs",
    "cosine",
    "rel_lt_1e-3",
    "bitwise_equal",
    "nan_inf_mismatch",
    "min_atol",
    "min_rtol",
)

# How worst() reduces each metric: larger is worse for differences and counts,
# smaller is worse for similarities and shares.
_WORST: dict[str, Callable[..., float]] = {
    "max_abs": max,
    "max_rel": max,
    "mean_abs": max,
    "cosine": min,
    "rel_lt_1e-3": min,
    "bitwise_equal": min,
    "nan_inf_mismatch": max,
    "min_atol": max,
    "min_rtol": max,
}


@dataclass(frozen=True)
class Tolerance:
    """Element-wise tolerance; an element fails only if it exceeds *both*."""

    atol: float = 1e-5
    rtol: float = 1e-5

    def __post_init__(self) -> None:
        # A NaN or negative tolerance would make every check meaningless.
        for name in ("atol", "rtol"):
            value = getattr(self, name)
            if not value >= 0:
                raise ValueError(f"{name} must be >= 0, got {value!r}")


@dataclass(frozen=True)
class OutputComparison:
    """Verdict and metrics for one named output (see ``METRIC_NAMES``)."""

    output: str
    passed: bool
    metrics: dict[str, float]
    failing: int
    total: int
    shape_mismatch: str | None


@dataclass(frozen=True)
class MetricCheck:
    """One figure a comparator computed, and whether it is within the limit it is held to.

    ``output`` names the output it is about (None: the probe as a whole); ``limit`` is the
    threshold used (None: the metric is informational and always passes); ``direction`` how the
    value is held to it: "<=" (at most) or ">=" (at least); empty: inferred for display from
    the value, the limit and the verdict (``bound``).
    """

    metric: str
    value: float
    passed: bool
    limit: float | None = None
    output: str | None = None
    message: str = ""
    direction: str = ""

    def bound(self) -> str:
        """ "<=" or ">=" for a limited check: the declared direction, else the one the verdict
        implies (a value under its limit that passed, or over it that failed, had an upper
        bound); "" when it cannot be told (informational, or value equal to the limit)."""
        if self.limit is None:
            return ""
        if self.direction:
            return self.direction
        if self.value == self.limit or self.value != self.value:
            return ""
        below = self.value < self.limit
        return "<=" if below == self.passed else ">="


@dataclass(frozen=True)
class Comparator:
    """A named comparison run in the auditor on a probe's outputs, beyond the element-wise
    check every output gets. ``compare(train, infer, options)`` takes both sides' outputs by
    name and the probe's options for this comparator, and returns its MetricChecks."""

    name: str
    compare: Callable[[dict[str, np.ndarray], dict[str, np.ndarray], dict], list[MetricCheck]]
    description: str = ""
    drawn: bool = False
    """Also give it the outputs on actions drawn from the infer side's policy (``logp@behaviour``,
    auditor.compare.ratios); the others see the probe's own outputs only."""


def check_text(c: MetricCheck) -> str:
    where = f"{c.output}: " if c.output else ""
    limit = f" (limit {c.limit:.3g})" if c.limit is not None else ""
    return f"{where}{c.metric} {c.value:.3g}{limit}" + (f": {c.message}" if c.message else "")


def failure_text(c: OutputComparison) -> str:
    if c.shape_mismatch:
        return f"{c.output}: shape differs ({c.shape_mismatch})"
    m = c.metrics
    return (
        f"{c.output}: {c.failing}/{c.total} elements out of tolerance "
        f"(max abs {m['max_abs']:.3g}, max rel {m['max_rel']:.3g}, "
        f"would pass at atol {m['min_atol']:.3g} or rtol {m['min_rtol']:.3g})"
    )


def worst(comparisons: Sequence[OutputComparison]) -> dict[str, float]:
    """Worst value of each metric over several outputs, for a one-line summary.

    Max for differences and counts, min for ``cosine``, ``rel_lt_1e-3`` and
    ``bitwise_equal``. An empty list yields each reduction's neutral value
    (0.0 for max keys, 1.0 for min keys), matching an empty comparison.
    """
    out: dict[str, float] = {}
    for key in METRIC_NAMES:
        reduce = _WORST[key]
        neutral = 0.0 if reduce is max else 1.0
        out[key] = float(reduce((c.metrics[key] for c in comparisons), default=neutral))
    return out
