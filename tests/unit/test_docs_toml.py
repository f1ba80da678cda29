"""Every ```toml block of the README and docs/ parses: a user pastes them into auditor.toml
(a block that spans an inline table over two lines is not TOML, and says so only then)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]
BLOCK = re.compile(r"^```toml\n(.*?)^```", re.S | re.M)


def blocks() -> list[tuple[str, int, str]]:
    out = []
    for page in PAGES:
        text = page.read_text()
        for m in BLOCK.finditer(text):
            out.append((page.relative_to(ROOT).as_posix(), text[: m.start()].count("\n") + 1, m.group(1)))
    return out


@pytest.mark.faults
@pytest.mark.parametrize(
    ("page", "line", "body"), blocks(), ids=lambda v: str(v) if isinstance(v, (str, int)) else ""
)
def test_every_toml_block_parses(page: str, line: int, body: str) -> None:
    try:
        tomllib.loads(body)
    except tomllib.TOMLDecodeError as exc:
        pytest.fail(f"{page}:{line}: not TOML: {exc}")


def test_the_pages_have_toml_blocks() -> None:
    """The scan finds what it checks (a changed fence style must not make it vacuous)."""
    found = blocks()
    assert len(found) >= 10 and any(page.startswith("docs/") for page, _, _ in found)
    assert any("[models.policy.train]" in body for _, _, body in found)
