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
    converter: Candidate | None = None
    """Where the serving stack converts: the fix's plan with the converter's weight_fp16 set the
    other way (its only float16 setting in Lite 2.0); when no plan passed, the best of the
    search run again with that setting (``converter_search``)."""
    converter_search: Search | None = None
    seconds: float = 0.0
    asked: bool = False
    """A float16 fix was asked for (``--dtype float16``) whether or not the policy as configured
    passes (a model served in float32 today)."""

    @property
    def already_passes(self) -> bool:
        return self.as_configured.passed and not self.asked

    @property
    def by_converter(self) -> bool:
        """No precision plan passed with the conversion as configured, but one did with the
        converter's weight_fp16 set the other way: the fix is that plan and that setting."""
        searched = self.search is not None and self.search.found is not None
        return (
            not self.already_passes and not searched and self.converter is not None and self.converter.passed
        )

    @property
    def found(self) -> bool:
        searched = self.search is not None and self.search.found is not None
        return self.already_passes or searched or self.by_converter

    @property
    def kept(self) -> tuple[str, ...] | None:
        """The cells the fix keeps in float32 (empty: none; None: nothing passed)."""
        if self.already_passes:
            return ()
        if self.by_converter:
            assert self.converter is not None and self.converter.plan is not None
            return tuple(self.converter.plan["keep"])
        return self.search.found if self.search is not None else None

    @property
    def weight_fp16(self) -> bool | None:
        """The converter setting the fix needs (None: the conversion as configured, or none)."""
        if not self.by_converter:
            return None
        table = self.target.conversion()
        return None if table is None else not table.weight_fp16

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
        if self.by_converter:
            return self.converter
        return self.candidate(self.kept) if self.kept is not None else None

    @property
    def all_float16(self) -> Candidate | None:
        return self.candidate(())

    @property
    def exports(self) -> int:
        """Exports audited: the policy as configured, each candidate (with the converter's other
        setting too), the float32 one."""
        searched = len(self.search.trials) if self.search else 0
        if self.converter_search is not None:
            searched += len(self.converter_search.trials)
        else:
            searched += self.converter is not None
        return 1 + searched + (self.float32 is not None)

    def change(self) -> list[str]:
        """The code that gives the network the fix's precision (empty when nothing to change)."""
        if self.already_passes or self.kept is None:
            return []
        return [code.IMPORT, *code.lines([c["path"] for c in self.cells], self.kept)]

    def config_change(self) -> list[str]:
        """The conversion setting the fix needs, as the config's line (empty: none)."""
        if self.weight_fp16 is None:
            return []
        t = self.target
        model = getattr(t, "model", None)
        table = (
            f"models.{t.name}.convert"
            if model is not None and model.convert is not None
            else f"stacks.{t.stack}.convert"
        )
        return [f"[{table}] weight_fp16 = {'true' if self.weight_fp16 else 'false'}"]

    def converter_settings(self) -> list[str] | None:
        """The converter's own precision settings, as its worker read them (None: no conversion
        ran, or a converter that does not say)."""
        for c in (self.converter, self.fixed, self.as_configured):
            conv = c.result.conversion if c is not None and c.result is not None else None
            if conv is not None and isinstance(conv.info.get("precision_settings"), list):
                return list(conv.info["precision_settings"])
        return None


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
    table = target.conversion()
    if table is not None:
        # the converter's own float16 setting, set the other way (Lite 2.0 has no per-layer
        # precision to search: converter_settings says what it has): the fix's plan with it,
        # else the whole search again with it
        flipped = not table.weight_fp16
        words = f"converter weight_fp16 = {'true' if flipped else 'false'}"
        if out.search.found is not None:
            say(f"{words}, {describe(out.search.found)}")
            out.converter = target.audit(plan(out.search.found), weight_fp16=flipped)
        else:

            def judge_flipped(keep: tuple[str, ...]) -> Trial:
                say(f"{words}, candidate {describe(keep)}")
                candidate = target.audit(plan(keep), weight_fp16=flipped)
                return Trial(keep, candidate.passed, candidate.score, candidate)

            out.converter_search = search(paths, start, judge_flipped)
            best = out.converter_search.closest
            out.converter = best.detail if best is not None else None
    if out.found:
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
