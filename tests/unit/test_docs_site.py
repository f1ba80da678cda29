"""The documentation as a newcomer meets it: a README that is a front door (short, linking every
page), a site MkDocs builds strictly (a broken link, a missing anchor or a page left out of the
nav fails), and a configuration reference that is the schema's own words."""

from __future__ import annotations

import re
import subprocess
import sys

from auditor.policy import checks
from tests.conftest import REPO
from tests.docs import PAGES

README_MAX_LINES = 250


def test_the_readme_is_a_front_door_to_every_page():
    text = (REPO / "README.md").read_text()
    assert text.count("\n") <= README_MAX_LINES
    assert "make demo" in text and "make test" in text  # the two commands
    linked = set(re.findall(r"\]\(docs/([\w.-]+\.md)", text))
    pages = {p.name for p in (REPO / "docs").glob("*.md")} - {"index.md"}
    assert pages <= linked, sorted(pages - linked)


def test_the_site_builds_strictly_with_every_page(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    for page in PAGES[1:]:
        name = page.stem
        built = tmp_path / "site" / ("index.html" if name == "index" else f"{name}/index.html")
        assert built.is_file(), f"{page.name} was not built"


def test_the_configuration_reference_is_generated_from_the_schema():
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "config-reference"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    reference = (REPO / "docs" / "reference.md").read_text()
    for key in ("## `[worker]`", 'warm = "cycle"', "## `[[pairs]]`", "## `[probes.ppo_policy.params]`"):
        assert key in reference, key


def test_the_checks_page_holds_the_checks_table() -> None:
    """docs/checks.md says every check of auditor.policy.checks, in the table's own words."""
    page = (REPO / "docs" / "checks.md").read_text()
    assert "\n".join(checks.table()) in page
