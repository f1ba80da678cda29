"""`auditor audit` options that are decided before any stack starts."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from auditor.cli.main import cli
from tests.conftest import DEFAULT_CONFIG


def test_a_json_file_in_a_missing_directory_is_refused_before_any_work(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    target = tmp_path / "nosuch" / "run.json"
    done = CliRunner().invoke(
        cli, ["--config", str(DEFAULT_CONFIG), "--db", str(db), "audit", "--json-file", str(target)]
    )
    assert done.exit_code == 2, done.output
    assert f"--json-file {target}: no such directory {target.parent}" in done.stderr
    assert not db.exists()  # refused before the history was opened, let alone a stack started


def test_json_file_is_explained_in_help() -> None:
    done = CliRunner().invoke(cli, ["audit", "--help"])
    said = " ".join(done.output.split())
    assert done.exit_code == 0 and "--json-file PATH" in said and "a pipeline the file" in said
