"""Ratios measured on a noisy machine, summed up the same way by every bench.

On a shared 2-core machine the load moves a single timing by tens of percent either way, so
one ratio says little; what a systematic cost would show as is the same shift in every
round. The geometric mean of the per-round ratios estimates that shift, and its 95% interval
(two standard errors of the mean of the logs) says whether the rounds were enough to tell.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def geomean_interval(ratios: Sequence[float]) -> tuple[float, float, float]:
    """(geometric mean, low, high) of ``ratios``; the interval is the mean alone for one ratio."""
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), math.exp(mean), math.exp(mean)
    se = statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - 2 * se), math.exp(mean + 2 * se)
