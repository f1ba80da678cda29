"""A test that needs a real part can never vanish from a green run (tests/requires.py): every
skip point of the suite goes through ``need``, and the tests behind each of them, with their
parts made unavailable, fail under the require flags and skip without them."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

from tests.cli import REPO

TESTS = REPO / "tests"
SKIPS = {"skip", "importorskip", "skipif", "xfail"}

BEHIND_A_PART = [
    # the reference stacks (the session fixture), and what the stacks' tests need besides
    "tests/stacks/test_warm_stacks.py::test_warm_off_starts_every_worker_cold",
    "tests/fleet/test_readme_stacks.py::test_two_hosts_as_written",  # sshd
    "tests/fleet/test_readme_stacks.py::test_service_install_as_written",  # a private namespace
    "tests/stacks/test_service_stacks.py::test_the_installed_unit_runs_a_cycle_as_its_user",
    "tests/fleet/test_hosts_stacks.py::test_two_host_cycle_matches_the_local_pair_and_fingerprints_show_the_hosts",
    "tests/fleet/test_parity_stacks.py::test_audit",
    "tests/faults/test_secrets_stacks.py::test_no_planted_secret_appears_anywhere",
    "tests/faults/test_leftovers_stacks.py::test_daemon_cycles_with_an_ssh_host_and_sigkills_leave_nothing_behind",
    "tests/unit/worker/test_py37_compat.py",  # Python 3.7
    "tests/unit/report/test_report_html.py::test_chromium_renders_the_plots",  # headless Chromium
    "tests/unit/daemon/test_service.py::test_systemd_analyze_verifies_unit_and_drop_in",
    "tests/stacks/test_install_stacks.py::test_missing_python_37_is_named_with_what_to_install",
    "tests/stacks/test_install_stacks.py::test_python_37_is_found_through_pyenv_when_not_on_path",
    "tests/unit/history/test_store.py::test_open_creates_schema_at_head[postgresql]",  # PostgreSQL
    "tests/faults/test_db_robustness.py::test_a_full_disk_leaves_no_half_schema_and_is_named_as_full",
    "tests/unit/exposition/test_rules.py::test_promtool_checks_the_rules_and_runs_their_unit_tests",
    "tests/unit/alerts/test_alertmanager_sink.py::test_alerts_appear_grouped_per_pair_are_silenced_and_resolve",
    "tests/stacks/test_monitoring_stacks.py::test_audit_from_cron_writes_the_textfile_and_keeps_the_alerts",
]
"""At least one test behind each skip point of the suite (the files are checked below)."""


def _calls(tree: ast.AST) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in SKIPS:
            base = node.value
            names = []
            while isinstance(base, ast.Attribute):
                names.append(base.attr)
                base = base.value
            if isinstance(base, ast.Name) and base.id == "pytest":
                found.append((node.attr, node.lineno))
    return found


def test_no_test_skips_but_through_need():
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        if path == TESTS / "requires.py":
            continue
        for name, line in _calls(ast.parse(path.read_text())):
            offenders.append(f"{path.relative_to(REPO)}:{line}: pytest.{name}")
    assert offenders == [], "skip through tests/requires.py (need/require), never directly"


def test_every_file_with_a_skip_point_has_a_test_in_the_proof():
    files = set()
    for path in sorted(TESTS.rglob("*.py")):
        if path.name in ("requires.py", "test_requires.py"):
            continue
        if re.search(r"\b(need|require)\(", path.read_text()):
            files.add(str(path.relative_to(REPO)))
    listed = {n.split("::")[0] for n in BEHIND_A_PART}
    assert files - listed - {"tests/conftest.py"} == set()
    assert all((REPO / f).is_file() for f in listed)


def _pytest(*flags: str) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUDITOR_REQUIRE_", "PYTEST_XDIST"))}
    env.pop("AUDITOR_ZYGOTES", None)
    env["AUDITOR_TEST_UNAVAILABLE"] = "all"
    env.update(dict(f.split("=", 1) for f in flags))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", "-rfEs", *BEHIND_A_PART],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return proc.returncode, proc.stdout


def _counts(summary: str) -> dict[str, int]:
    last = summary.strip().splitlines()[-1]
    return {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|errors?)", last)}


def test_with_the_parts_away_they_fail_under_the_flags_and_skip_without():
    code, out = _pytest("AUDITOR_REQUIRE_STACKS=1", "AUDITOR_REQUIRE_POSTGRES=1")
    counts = _counts(out)
    assert code == 1 and "skipped" not in counts and "passed" not in counts, out[-3000:]
    assert counts.get("failed", 0) + counts.get("error", 0) + counts.get("errors", 0) >= len(BEHIND_A_PART)
    for flag in ("AUDITOR_REQUIRE_STACKS=1", "AUDITOR_REQUIRE_POSTGRES=1"):
        assert f"is required ({flag})" in out
    code, out = _pytest()
    counts = _counts(out)
    assert code == 0 and set(counts) == {"skipped"} and counts["skipped"] >= len(BEHIND_A_PART), out[-3000:]
    assert "made unavailable (AUDITOR_TEST_UNAVAILABLE)" in out
