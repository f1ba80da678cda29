"""The documentation's pages as tests read them: a page's section by its title, and the fenced
blocks in it. A test that runs a page's commands names the page and the section, so a moved
section fails loudly instead of leaving the commands unrun."""

from __future__ import annotations

import re

from tests.conftest import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("**/*.md"))]
"""Every page of the documentation: the README (the front door) and docs/ (the site)."""


def section(page: str, title: str) -> str:
    """The text of the ``## title`` section of ``page`` (a path from the repository's root),
    up to the next ``## `` heading outside a fenced block."""
    text = (REPO / page).read_text()
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    inside, fence = False, False
    for line in lines:
        if line.startswith("```"):
            fence = not fence
        if not fence and line.startswith("## "):
            if inside:
                break
            inside = line[3:].strip() == title
            continue
        if inside:
            out.append(line)
    assert inside or out, f"{page} has no section titled {title!r}"
    return "".join(out)


def blocks(page: str, title: str) -> list[tuple[str, str]]:
    """(language, code) of every fenced block of that section."""
    return re.findall(r"```(\w*)\n(.*?)```", section(page, title), re.DOTALL)
