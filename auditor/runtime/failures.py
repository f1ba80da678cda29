"""What a runtime's failure means, read from its message and log: a file too new for it (the
runtime said the highest version it reads), an operator it cannot load, run or export.

A runtime's package lists the patterns of its own messages (``Pattern``); the generic one
below ("unsupported operator: X") applies to every runtime. A match turns a failed request
into a result (incompatible, unsupported) instead of an error, and teaches the auditor a
limit it stores and checks before the next load.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from auditor.results import INCOMPATIBLE, UNSUPPORTED

STATUSES = (INCOMPATIBLE, UNSUPPORTED)


@dataclass(frozen=True)
class Failure:
    """``status``: incompatible (the file is of a version or kind it cannot read) or
    unsupported (an operator it cannot load, run or export). ``words``: the runtime's own
    words that say so. ``operator``: the operator as the runtime named it;
    ``artifact_operator``: the same operator as the artifact's operator list names it, when it
    is to be learned and checked before later loads. ``maximum``/``version``: the highest format
    version the runtime reads and the file's, when it said them."""

    status: str
    words: str
    operator: str | None = None
    artifact_operator: str | None = None
    maximum: int | None = None
    version: int | None = None


@dataclass(frozen=True)
class Pattern:
    """One message a runtime writes when it fails for a reason the auditor understands.
    ``operator``, ``maximum`` and ``version`` name the regex groups holding them;
    ``artifact_operator`` maps the match to the operator's name in the artifact (default: the
    ``operator`` group as it is). ``learned``: whether the operator is one the runtime cannot
    load or run, to remember and check before later loads (not when it only cannot export
    it, or when the message's name for it need not be the artifact's)."""

    regex: re.Pattern[str]
    status: str
    operator: int | str | None = None
    maximum: int | str | None = None
    version: int | str | None = None
    artifact_operator: Callable[[re.Match[str]], str] | None = None
    learned: bool = True

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(
                f"a failure pattern's status is one of {', '.join(STATUSES)}, not {self.status!r}"
            )

    def match(self, text: str) -> Failure | None:
        m = self.regex.search(text)
        if m is None:
            return None
        operator = m.group(self.operator) if self.operator is not None else None
        artifact = self.artifact_operator(m) if self.artifact_operator is not None else operator
        artifact = artifact if self.learned else None
        return Failure(
            self.status,
            m.group(0),
            operator,
            artifact,
            int(m.group(self.maximum)) if self.maximum is not None else None,
            int(m.group(self.version)) if self.version is not None else None,
        )


GENERIC = (
    Pattern(
        re.compile(r"unsupported op(?:erator)?(?: type)?:?\s*['\"]?([A-Za-z_][\w.]*)", re.IGNORECASE),
        UNSUPPORTED,
        operator=1,
        learned=False,
    ),
)
"""Any runtime that says "unsupported operator: X" means it (its name for X need not be the
artifact's, so nothing is learned from it)."""


def explain(patterns: Iterable[Pattern], text: str) -> Failure | None:
    """The first of ``patterns``, then the generic ones, that matches ``text``."""
    for pattern in (*patterns, *GENERIC):
        found = pattern.match(text)
        if found is not None:
            return found
    return None
