"""From finding to fix: audit the policy as configured, list its cells, bisect from where its
drift was localized for the fewest cells to keep in float32 (auditor.fix.search), each
candidate exported, served and audited for real (auditor.fix.target), then what the fix
costs against the policy computed whole in float16 and whole in float32.

The outcome is plain data the command renders (text, JSON) and writes (``--out``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from auditor.fix import code
from auditor.fix.search import Search, Trial, search
from auditor.fix.target import FLOAT16, Candidate, Target

FLOAT32 = "float32"


def plan(keep: Sequence[str], compute: str = FLOAT16) -> dict[str, Any]:
    """A precision plan as the worker applies it (auditor.worker.precision)."""
    return {"compute": compute, "keep": list(keep)}


def start_index(cells: Sequence[str], localization: Any) -> int:
    """Where the search starts: the cell the drift was localized at, when it names one of
    ``cells``; else past the exposed layers that agreed before the first that did not (a
    probe's exposed layers are its first cells, in order); 0 without a localization."""
    if localization is None or getattr(localization, "layer", None) is None:
        return 0
    if localization.layer in cells:
        return list(cells).index(localization.layer)
    agreed = 0
    for layer in localization.layers:
        if layer.output or not layer.passed:
            break
        agreed += 1
    return min(agreed, max(len(cells) - 1, 0))


@dataclass
class Fix:
    """What `auditor fix` found for one target."""

    target: Target
    as_configured: Candidate
    cells: list[dict[str, Any]] = field(default_factory=list)
    search: Search | None = None
    float32: Candidate | None = None
    """The policy computed whole in float32: what the fix costs is said against it."""
    seconds: float = 0.0
    asked: bool = False
    """A float16 fix was asked for (``--dtype float16``) whether or not the policy as configured
    passes (a model served in float32 today)."""

    @property
    def already_passes(self) -> bool:
        return self.as_configured.passed and not self.asked

    @property
    def found(self) -> bool:
        return self.already_passes or (self.search is not None and self.search.found is not None)

    @property
    def kept(self) -> tuple[str, ...] | None:
        """The cells the fix keeps in float32 (empty: none; None: nothing passed)."""
        if self.already_passes:
            return ()
        return self.search.found if self.search is not None else None

    def candidate(self, keep: Sequence[str] | None) -> Candidate | None:
        """The audited candidate that kept ``keep`` (None: the closest one)."""
        if self.search is None:
            return None
        trial = (
            self.search.closest
            if keep is None
            else next((t for t in self.search.trials if t.keep == tuple(keep)), None)
        )
        return trial.detail if trial is not None else None

    @property
    def fixed(self) -> Candidate | None:
        """The passing candidate (the configured policy itself when it passes already)."""
        if self.already_passes:
            return self.as_configured
        return self.candidate(self.kept) if self.kept is not None else None

    @property
    def all_float16(self) -> Candidate | None:
        return self.candidate(())

    @property
    def exports(self) -> int:
        """Exports audited: the policy as configured, each candidate, the float32 one."""
        return 1 + (len(self.search.trials) if self.search else 0) + (self.float32 is not None)

    def change(self) -> list[str]:
        """The code that gives the network the fix's precision (empty when nothing to change)."""
        if self.already_passes or self.kept is None:
            return []
        return [code.IMPORT, *code.lines([c["path"] for c in self.cells], self.kept)]


def run(target: Target, say: Callable[[str], None] = lambda _: None, asked: bool = False) -> Fix:
    """Search ``target``'s fix; ``say`` hears each step (the command's progress on stderr);
    ``asked``: search a float16 fix even when the policy as configured passes."""
    t0 = time.monotonic()
    say(f"auditing {target.label} as configured")
    out = Fix(target, target.audit(None), asked=asked)
    if out.already_passes:
        out.seconds = time.monotonic() - t0
        return out
    out.cells = target.cells()
    paths = [c["path"] for c in out.cells]
    start = start_index(paths, out.as_configured.result.localization if out.as_configured.result else None)

    def judge(keep: tuple[str, ...]) -> Trial:
        say(f"candidate {describe(keep)}")
        candidate = target.audit(plan(keep))
        return Trial(keep, candidate.passed, candidate.score, candidate)

    out.search = search(paths, start, judge)
    if out.search.found is not None:
        say("the policy whole in float32, for the cost")
        out.float32 = target.audit(plan((), FLOAT32))
    out.seconds = time.monotonic() - t0
    return out


def describe(keep: Sequence[str]) -> str:
    """A candidate in words: which cells stay in float32."""
    if not keep:
        return "nothing kept in float32"
    if len(keep) > 4:  # a long run: its ends and its length
        return f"keep {cell_name(keep[0])} … {cell_name(keep[-1])} ({len(keep)} cells) in float32"
    return "keep " + ", ".join(cell_name(p) for p in keep) + " in float32"


def cell_name(path: str) -> str:
    return path or "the network's own operations"
