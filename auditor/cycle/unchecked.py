"""What a cycle was asked to check and could not: each is an ``unchecked`` finding, so the
run's outcome is not consistent and the report says what and why (auditor.results.UNCHECKED).

- a fingerprint collector that failed: its section of the stack was not looked at;
- a watched model pattern or file (``[stacks.X] models``) that could not be read, or a file
  that is not a MindIR the rules can read;
- a plugin that did not load: whatever it would have checked was not;
- a ``source = "db"`` stack without a complete publication, or with one older than its
  ``max_publication_age``.

(A model probe whose file cannot be read, and a pair whose train side has no publication, are
unchecked results of their own: auditor.cycle.user_models, auditor.cycle.cycle.)
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime

from auditor.config.tables import Config
from auditor.extend.manager import one_line
from auditor.fingerprint.collect import errors as collector_errors
from auditor.history.publication import PublicationSummary, age_words
from auditor.results import UNCHECKED, Finding, StackReport

SEVERITY = "warning"


def _finding(subject: str, what: str, message: str, **details: object) -> Finding:
    return Finding(UNCHECKED, SEVERITY, subject, f"{subject}/{UNCHECKED}/{what}", message, dict(details))


def stack_findings(stacks: Mapping[str, StackReport]) -> list[Finding]:
    """Collectors that failed and watched models that could not be read, per stack."""
    out = []
    for name, report in stacks.items():
        document = report.fingerprint or {}
        for section, error in collector_errors(document).items():
            out.append(
                _finding(
                    name,
                    f"collector/{section}",
                    f"{name}: the {section} collector failed, its part of the stack was not checked: {error}",
                    section=section,
                    error=error,
                )
            )
        watch = document.get("models")
        if not isinstance(watch, dict):
            continue
        for what, why in (watch.get("unknown") or {}).items():
            out.append(
                _finding(
                    name,
                    f"models/{what}",
                    f"{name}: watched model {what} was not checked: {why}",
                    path=what,
                    reason=why,
                )
            )
        for path, entry in (watch.get("files") or {}).items():
            if isinstance(entry, dict) and entry.get("readable") is False:
                out.append(
                    _finding(
                        name,
                        f"models/{path}",
                        f"{name}: watched model {path} is not a MindIR the auditor can read, its version "
                        f"and operators were not checked: {entry.get('reason')}",
                        path=path,
                        reason=entry.get("reason"),
                    )
                )
    return out


_PLUGIN = re.compile(r"^plugin (?:directory )?(\S+?):? ")


def plugin_findings(problems: Sequence[str]) -> list[Finding]:
    """One finding per plugin problem (a plugin that did not import, a hook that raised...)."""
    out = []
    for problem in problems:
        line = one_line(problem)
        m = _PLUGIN.match(line)
        who = m.group(1) if m else line[:60]
        out.append(
            _finding(
                "plugins",
                who,
                f"{line}; what this plugin checks was not checked",
                problem=line,
            )
        )
    return out


def publication_findings(
    config: Config, read: Mapping[str, PublicationSummary | None], now: datetime
) -> list[Finding]:
    """A ``source = "db"`` stack with no complete publication, or one older than its limit."""
    out = []
    for name, summary in read.items():
        limit = config.stacks[name].max_publication_age
        if summary is None:
            out.append(
                _finding(
                    name,
                    "publication",
                    f'{name} is read from the database (source = "db") but has no complete publication '
                    "there: none of its pairs was checked",
                )
            )
            continue
        age = summary.age_seconds(now)
        if limit is not None and age is not None and age > limit:
            out.append(
                _finding(
                    name,
                    "publication-age",
                    f"{name}: the newest {summary.describe(now)} is older than max_publication_age "
                    f"({age_words(limit)}): its pairs were compared with an export training may have "
                    "replaced since",
                    publication=summary.id,
                    age_seconds=age,
                    limit_seconds=limit,
                )
            )
    return out


__all__ = ["plugin_findings", "publication_findings", "stack_findings"]
