"""Which cells to keep in float32: the bisection `auditor fix` runs over a network's cells.

The cells are in graph order (the order they finish on a forward pass). A candidate keeps a
contiguous run of them in float32, the rest computing in float16; each candidate is judged by
a real export, load and audit (``judge``), so the search keeps their number small:

1. nothing kept (the network cast to float16 whole);
2. the cells from where the drift was localized to the end (``start``);
3. if that fails, the window's start is before ``start``: the largest b whose [b, end) passes;
4. the smallest end e whose [b, e) passes, then the largest start b whose [b, e) passes.

Keeping more cells in float32 is assumed not to make a policy fail that passed with fewer
(what a precision search rests on; Polygraphy's ``debug precision`` bisects the same way).
At most 2·⌈log₂ n⌉ + 2 candidates for n cells. When even every cell kept fails, no subset
passes, and the closest candidate (by the judge's score) says why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from math import ceil, log2
from typing import Any


@dataclass(frozen=True)
class Trial:
    """One candidate judged: the cells it kept, whether it passed, its score (lower is closer to
    passing: failed checks, say), and what the judge returned for it."""

    keep: tuple[str, ...]
    passed: bool
    score: float = 0.0
    detail: Any = None


@dataclass
class Search:
    """The search's outcome: the cells kept by the passing candidate (None: none passed), every
    candidate judged in order."""

    cells: tuple[str, ...]
    start: int
    trials: list[Trial] = field(default_factory=list)
    found: tuple[str, ...] | None = None

    @property
    def closest(self) -> Trial | None:
        """The candidate nearest to passing (a passing one, else the lowest score, the fewest
        cells kept among equals)."""
        if not self.trials:
            return None
        return min(self.trials, key=lambda t: (not t.passed, t.score, len(t.keep)))

    @property
    def bound(self) -> int:
        """The most candidates the search may judge for its cells."""
        return max_candidates(len(self.cells))


def max_candidates(n: int) -> int:
    """2·⌈log₂ n⌉ + 2: what the search costs at most for ``n`` cells."""
    return 2 * ceil(log2(n)) + 2 if n > 1 else 2


def search(cells: Sequence[str], start: int, judge: Callable[[tuple[str, ...]], Trial]) -> Search:
    """Bisect over ``cells`` (graph order) from ``start`` (the first cell at or after the
    localized drift; 0 when it was not localized) for the smallest contiguous run to keep in
    float32. ``judge(keep)`` exports, serves and audits one candidate."""
    cells = tuple(cells)
    n = len(cells)
    start = min(max(int(start), 0), max(n - 1, 0))
    out = Search(cells, start)
    seen: dict[tuple[str, ...], Trial] = {}

    def passes(lo: int, hi: int) -> bool:
        keep = cells[lo:hi]
        if keep not in seen:
            seen[keep] = judge(keep)
            out.trials.append(seen[keep])
        return seen[keep].passed

    if passes(0, 0) or n == 0:
        out.found = () if out.trials[0].passed else None
        return out
    lo = start
    if not passes(start, n):
        # the run starts before the localized cell: the largest b in [0, start) with [b, n) passing
        found = _largest(0, start - 1, lambda b: passes(b, n))
        if found is None:
            return out  # every cell kept from 0 failed too: no subset passes
        lo = found  # the largest such start: no later one can pass with a shorter end either
    # the smallest end e in (lo, n] with [lo, e) passing ([lo, n) does)
    hi = _smallest(lo + 1, n - 1, lambda e: passes(lo, e))
    hi = n if hi is None else hi
    # the largest start b in [lo, hi) with [b, hi) passing ([lo, hi) does); known already
    # when lo was searched for
    best = _largest(lo + 1, hi - 1 if lo == start else lo, lambda b: passes(b, hi))
    best = lo if best is None else best
    out.found = cells[best:hi]
    return out


def _largest(left: int, right: int, ok: Callable[[int], bool]) -> int | None:
    """The largest x in [left, right] with ok(x), ok holding up to some x and not after it."""
    found = None
    while left <= right:
        mid = (left + right + 1) // 2
        if ok(mid):
            found, left = mid, mid + 1
        else:
            right = mid - 1
    return found


def _smallest(left: int, right: int, ok: Callable[[int], bool]) -> int | None:
    """The smallest x in [left, right] with ok(x), ok failing up to some x and holding after."""
    found = None
    while left <= right:
        mid = (left + right) // 2
        if ok(mid):
            found, right = mid, mid - 1
        else:
            left = mid + 1
    return found
