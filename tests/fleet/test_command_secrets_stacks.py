"""A token in a host's ``command`` prefix is never shown or kept (#54: it was printed and stored
in 11 places: text and JSON outputs, the HTML report, the history through the fingerprint's
``connection.command``). One inference host reached with ``env API_TOKEN=... --token ...``, the
real lite20 behind it; every command a user runs on it, and the history's bytes, searched for
the token."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from auditor.cli.main import cli
from tests.fault_kit import lite20_elsewhere, small_config

pytestmark = [pytest.mark.stacks, pytest.mark.faults]

TOKEN = "s3cr3t-7f2a9c"


@pytest.fixture(scope="module")
def setup(stacks: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Path]:
    d = tmp_path_factory.mktemp("command-secrets")
    config = small_config(d)
    # env takes the assignment; the shell ignores "--token VALUE" given to it as $1 and $2
    argv = ["env", f"API_TOKEN={TOKEN}", "sh", "-c", 'shift 2; exec "$@"', "sh", "--token", TOKEN]
    lite20_elsewhere(config, f"[hosts.edge]\ncommand = {json.dumps(argv)}\n", 'host = "edge"')
    return ["--config", str(config), "--db", str(d / "h.db")], d


COMMANDS = [
    ["config", "check"],
    ["config", "check", "--json"],
    ["config", "check", "--hosts"],
    ["hosts", "check"],
    ["hosts", "check", "--json"],
    ["fingerprint"],
    ["fingerprint", "--json"],
    ["audit"],
    ["audit", "--json"],
    ["hosts", "list"],
    ["hosts", "list", "--json"],
    ["runs", "--format", "json"],
    ["show", "latest", "--format", "json"],
]


def test_no_output_and_no_stored_byte_holds_the_token(setup: tuple[list[str], Path]) -> None:
    base, d = setup
    runner = CliRunner()
    shown = {}
    for command in COMMANDS:
        done = runner.invoke(cli, [*base, *command])
        assert done.exit_code in (0, 1), (command, done.output)
        assert "Traceback" not in done.output, (command, done.output)
        shown[" ".join(command)] = done.output
    report = d / "report.html"
    done = runner.invoke(cli, [*base, "report", "--out", str(report)])
    assert done.exit_code == 0, done.output
    shown["report"] = report.read_text()
    leaked = [what for what, text in shown.items() if TOKEN in text]
    assert not leaked, leaked
    assert "edge" in shown["hosts check"] and "API_TOKEN=***" in shown["hosts check"], shown["hosts check"]
    assert TOKEN.encode() not in (d / "h.db").read_bytes()
    # what is stored of the connection says how the host was reached, the token hidden
    fingerprint = json.loads(shown["fingerprint --json"])
    command = fingerprint["lite20"]["connection"]["command"]
    assert command[:2] == ["env", "API_TOKEN=<redacted>"] and command[-2:] == ["--token", "<redacted>"]
