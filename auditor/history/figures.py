"""Figures the history derives from other stored rows instead of storing them.

The serving side's throughput at a batch size is that batch over the p50 of its first
latency row at that batch (auditor.policy.latency.throughput, over the same rows the store
writes: the probe's own batch first, then ``[latency] batches`` and the sweep). It is read as
the metric ``throughput`` with output ``b<batch>``, as it was when it was stored. Derived, it
costs no row, and it keeps the metric sets content-addressed (auditor.db.content): a figure
measured anew every cycle would make every result's set unique.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import Float, String, and_, cast, func, literal, select
from sqlalchemy.orm import aliased

from auditor.db import schema as m

THROUGHPUT = "throughput"
SIDE = "infer"
_OUTPUT = re.compile(r"b([0-9]+)\Z")

L = m.LatencyRow
_FIRST = aliased(L, name="l_batch_first")


def output_of(lat: Any = L) -> Any:
    """The output a latency row's throughput is read under: ``b<batch>``."""
    return literal("b", String()) + cast(lat.batch, String())


def value_of(lat: Any = L) -> Any:
    """Samples per second at the median call: batch / (p50 in seconds)."""
    return cast(lat.batch, Float()) / (lat.p50_us / 1e6)


def batch_of(output: str) -> int | None:
    """The batch of a throughput output (``b512`` -> 512); None for any other output."""
    found = _OUTPUT.match(output)
    return int(found.group(1)) if found else None


def counted(lat: Any = L) -> Any:
    """The condition that ``lat`` carries a throughput: a serving-side row with a positive p50,
    the first of its result at its batch."""
    first = (
        select(func.min(_FIRST.id))
        .where(_FIRST.result_id == lat.result_id, _FIRST.side == SIDE, _FIRST.batch == lat.batch)
        .scalar_subquery()
    )
    return and_(lat.side == SIDE, lat.p50_us > 0, lat.id == first)


__all__ = ["SIDE", "THROUGHPUT", "batch_of", "counted", "output_of", "value_of"]
