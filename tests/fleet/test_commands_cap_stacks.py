"""`hosts check`, `fingerprint` and `config check --hosts` keep `[worker] max_hosts` (#54): with
warm workers (the default) each kept every host's warm worker and connection open to the end,
6 of 6 hosts at once under max_hosts = 3, where `audit` keeps 3. Six inference hosts on the
real lite20 stack, stood in by the ``command`` transport behind a wrapper that logs when a
process on a host starts and ends, so what is open is observed, not inferred."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from auditor.cli.main import cli
from tests.fault_kit import lite20_elsewhere, small_config
from tests.fleet.test_fleet_cap_stacks import in_flight

pytestmark = [pytest.mark.stacks, pytest.mark.faults]

HOSTS = [f"infer-{i}" for i in range(1, 7)]
TRACKED = """
echo "+ $H" >> "$LOG"
"$@"
status=$?
echo "- $H" >> "$LOG"
exit $status
"""


@pytest.fixture(scope="module")
def fleet(stacks: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Path]:
    d = tmp_path_factory.mktemp("commands-cap")
    config = small_config(d)
    config.write_text(config.read_text().replace("parallel = 2\n", "parallel = 2\nmax_hosts = 3\n"))
    log = d / "hosts.log"
    argv = ["env", "H={host}", f"LOG={log}", "sh", "-c", TRACKED, "sh"]
    lite20_elsewhere(
        config, f'[groups.infer]\nhosts = ["infer-[1:6]"]\ncommand = {json.dumps(argv)}\n', 'group = "infer"'
    )
    return ["--config", str(config), "--db", str(d / "h.db")], log


@pytest.mark.parametrize(
    "command", [["hosts", "check"], ["fingerprint"], ["config", "check", "--hosts"]], ids=" ".join
)
def test_the_command_keeps_max_hosts_open_at_once(fleet: tuple[list[str], Path], command: list[str]) -> None:
    base, log = fleet
    log.unlink(missing_ok=True)
    done = CliRunner().invoke(cli, [*base, *command])
    assert done.exit_code == 0, done.output
    assert "Traceback" not in done.output
    most, reached = in_flight(log.read_text().splitlines())
    assert set(reached) == set(HOSTS), reached  # every host was reached ...
    assert most <= 3, (
        log.read_text()
    )  # ... and at most 3 at once (this machine counts too, while its stacks run)
