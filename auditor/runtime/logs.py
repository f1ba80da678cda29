"""How a runtime's native log is read: the format of its lines, the lines that are no failure,
and the lines worth reading right after the one that names a cause.

A runtime's package declares its log format (``RuntimeSpec.log``: MindSpore and MindSpore
Lite write glog lines, "[ERROR] ME(pid,thread,python):time [path/file.cc:123] Func] words");
``auditor.stacks.failures`` keeps a failed or warned request's lines in their short form with
it. A runtime without one keeps no log lines (its exception's message is read all the same).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ERROR_LEVELS = ("ERROR", "CRITICAL", "EXCEPTION")


@dataclass(frozen=True)
class LogFormat:
    """The lines of a runtime's log. ``line``: a line the runtime wrote, with the groups level
    ("ERROR"), module ("ME"), where (the source, "path/file.cc:123") and words, in this order.
    ``noise``: lines that are no failure (printed on loads that work), left out. ``notable``:
    lines ranked right after those naming a cause (MindSpore 2.10's warning that the file is
    another release's, say). ``errors``: the levels that are errors, ranked before the others."""

    line: re.Pattern[str]
    noise: re.Pattern[str] | None = None
    notable: tuple[re.Pattern[str], ...] = ()
    errors: tuple[str, ...] = ERROR_LEVELS

    def __post_init__(self) -> None:
        patterns = [self.line, *self.notable] + ([self.noise] if self.noise is not None else [])
        if not all(isinstance(p, re.Pattern) for p in patterns):
            raise ValueError("log format: line, noise and notable must be compiled re.Pattern")
        if self.line.groups < 4:
            raise ValueError("log format: line needs the groups level, module, where and words")

    def lines(self, text: str) -> list[str]:
        """The runtime's own lines in ``text``, each once in order, in a short form (no pid,
        time or directory: "[ERROR] ME lite_model.h ConvertNodes] ..."), with how often a line
        repeated ("(x20)"); the noise left out."""
        seen: dict[str, int] = {}
        for raw in text.splitlines():
            m = self.line.match(raw.strip())
            if not m or (self.noise is not None and self.noise.search(raw)):
                continue
            level, module, where, words = m.groups()[:4]
            source = re.sub(r":\d+$", "", where).rpartition("/")[2]
            short = f"[{level}] {module} {source} {words.strip()}"
            seen[short] = seen.get(short, 0) + 1
        return [line if n == 1 else f"{line} (x{n})" for line, n in seen.items()]

    def is_notable(self, line: str) -> bool:
        """A line ranked right after those naming a cause."""
        return any(p.search(line) for p in self.notable)

    def is_error(self, line: str) -> bool:
        """A short line (``lines``) at an error level."""
        return line.startswith(tuple(f"[{level}]" for level in self.errors))
