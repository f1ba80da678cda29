"""The systemd unit and hardening drop-in: their content, `systemd-analyze verify` on both,
and `auditor service install --root`."""

from __future__ import annotations

import configparser
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from auditor.cli.main import cli
from auditor.daemon.unit import UnitOptions, by_hand, hardening_text, next_steps, unit_text
from tests.docs import section
from tests.requires import made_unavailable, need, probe

AUDITOR_EXE = Path(sys.executable).parent / "auditor"


@pytest.fixture(scope="session")
def systemd_analyze() -> str:
    """systemd-analyze, installed from Debian's systemd package when missing (CI runs as root
    on Debian; scripts/setup does the same)."""
    found = None if made_unavailable("systemd-analyze") else shutil.which("systemd-analyze")
    if (
        found is None
        and not made_unavailable("systemd-analyze")
        and shutil.which("apt-get")
        and os.geteuid() == 0
    ):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], env=env, check=False, capture_output=True, timeout=600)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "systemd"],
            env=env,
            check=False,
            capture_output=True,
            timeout=900,
        )
        found = shutil.which("systemd-analyze")
    need("systemd-analyze", probe("systemd-analyze", lambda: None))
    if found is None:
        need("systemd-analyze", "not found and could not be installed (apt-get install systemd)")
    assert found is not None
    return found


def write_units(directory: Path, unit: str, hardening: str) -> Path:
    (directory / "auditor.service.d").mkdir(parents=True, exist_ok=True)
    (directory / "auditor.service").write_text(unit)
    (directory / "auditor.service.d" / "hardening.conf").write_text(hardening)
    return directory / "auditor.service"


def verify(analyze: str, unit: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [analyze, "verify", "--man=no", str(unit)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "SYSTEMD_LOG_COLOR": "0"},
    )


def parsed(text: str) -> configparser.ConfigParser:
    cp = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    cp.optionxform = str  # type: ignore[assignment, method-assign]
    cp.read_string(text)
    return cp


def test_unit_has_what_a_managed_daemon_needs():
    text = unit_text(UnitOptions(exec_path="/opt/auditor/bin/auditor", config="/etc/auditor/a b.toml"))
    svc = parsed(text)["Service"]
    assert svc["Type"] == "notify"
    assert svc["ExecStart"] == "/opt/auditor/bin/auditor --config '/etc/auditor/a b.toml' daemon"
    assert svc["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert svc["Restart"] == "on-failure"
    assert int(svc["WatchdogSec"]) > 0
    assert svc["StateDirectory"] == "auditor"
    assert svc["User"] == "auditor" and svc["Group"] == "auditor"
    assert "XDG_STATE_HOME=%S" in svc["Environment"]
    # the stop timeout leaves room for [daemon] stop_timeout (30 s) plus the abort
    assert int(svc["TimeoutStopSec"]) >= 30 + 20
    assert parsed(text)["Install"]["WantedBy"] == "multi-user.target"


def test_every_hardening_option_says_what_it_breaks():
    lines = hardening_text().splitlines()
    options = [i for i, line in enumerate(lines) if line and not line.startswith(("#", "["))]
    assert len(options) >= 15
    for i in options:
        # the comment block right above each group of options has a "Breaks:" line
        j = i - 1
        while j >= 0 and lines[j] and not lines[j].startswith("#"):
            j -= 1
        block = []
        while j >= 0 and lines[j].startswith("#"):
            block.append(lines[j])
            j -= 1
        assert any("Breaks:" in b for b in block), f"{lines[i]} has no comment saying what it breaks"
    text = hardening_text()
    assert "/dev/davinci" in text  # the NPU device nodes PrivateDevices hides
    assert "home" in text.lower()  # venvs under home directories


def test_systemd_analyze_verifies_unit_and_drop_in(systemd_analyze, tmp_path):
    runner = CliRunner()
    unit = runner.invoke(cli, ["service", "print", "--exec", str(AUDITOR_EXE)])
    hardening = runner.invoke(cli, ["service", "print", "--hardening"])
    assert unit.exit_code == 0 and hardening.exit_code == 0
    path = write_units(tmp_path / "units", unit.output, hardening.output)
    result = verify(systemd_analyze, path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "auditor.service" not in result.stderr, result.stderr  # no warnings about our files


def test_systemd_analyze_catches_a_broken_drop_in(systemd_analyze, tmp_path):
    """The check above is not vacuous: verify reads the drop-in next to the unit."""
    unit = unit_text(UnitOptions(exec_path=str(AUDITOR_EXE)))
    path = write_units(tmp_path / "units", unit, hardening_text() + "ProtectHome=sometimes\n")
    result = verify(systemd_analyze, path)
    assert "hardening.conf" in result.stderr and "sometimes" in result.stderr


def test_systemd_analyze_catches_a_missing_executable(systemd_analyze, tmp_path):
    unit = unit_text(UnitOptions(exec_path=str(tmp_path / "no-such-auditor")))
    result = verify(systemd_analyze, write_units(tmp_path / "units", unit, hardening_text()))
    assert result.returncode != 0 and "no-such-auditor" in result.stderr


def test_install_with_root_writes_where_systemd_looks(tmp_path):
    root = tmp_path / "pkgroot"
    result = CliRunner().invoke(
        cli, ["service", "install", "--root", str(root), "--exec", str(AUDITOR_EXE), "--user", "svc-auditor"]
    )
    assert result.exit_code == 0, result.output
    unit = root / "etc/systemd/system/auditor.service"
    drop_in = root / "etc/systemd/system/auditor.service.d/hardening.conf"
    assert parsed(unit.read_text())["Service"]["User"] == "svc-auditor"
    assert drop_in.read_text() == hardening_text()
    assert oct(unit.stat().st_mode & 0o777) == "0o644"
    assert str(unit) in result.output
    assert (
        "systemctl daemon-reload" in result.output
        and "auditor service check --user svc-auditor" in result.output
    )


def test_install_unit_dir_and_no_hardening(tmp_path):
    result = CliRunner().invoke(
        cli,
        [
            "service",
            "install",
            "--root",
            str(tmp_path),
            "--unit-dir",
            "/usr/lib/systemd/system",
            "--no-hardening",
            "--exec",
            str(AUDITOR_EXE),
        ],
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "usr/lib/systemd/system/auditor.service").is_file()
    assert not (tmp_path / "usr/lib/systemd/system/auditor.service.d").exists()


def test_install_into_an_unwritable_place_fails_clearly(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = CliRunner().invoke(
        cli, ["service", "install", "--root", str(blocker / "x"), "--exec", str(AUDITOR_EXE)]
    )
    assert result.exit_code == 1
    assert "cannot write the unit" in result.output


def test_what_the_service_user_needs_and_what_the_hardening_hides(tmp_path):
    """The paths `service install` checks as the unit's user come from the config the unit
    reads; those under /tmp (PrivateTmp) or a database outside the state directory
    (ProtectSystem/ProtectHome) are refused while the hardening drop-in is installed."""
    from auditor.config.load import parse
    from auditor.daemon.install import STATE_DIR, _hidden_by_hardening, needs
    from auditor.daemon.unit import UnitOptions

    doc = {
        "storage": {"url": "sqlite:////home/me/history.db"},
        "hosts": {
            "far": {"ssh": "a@b", "identity_file": "/etc/auditor/id", "options": ["UserKnownHostsFile=/k"]}
        },
        "stacks": {
            "ms20": {"role": "train", "runtime": "mindspore", "python": "/tmp/checkout/ms20/bin/python"},
            "lite20": {
                "role": "infer",
                "runtime": "mindspore-lite",
                "python": "/srv/lite20/bin/python",
                "host": "far",
                "models": ["/srv/policy/*.mindir"],
            },
        },
        "pairs": [{"train": "ms20", "infer": "lite20", "probes": ["ppo_policy"]}],
    }
    config = parse(doc, str(tmp_path / "auditor.toml"))
    need = needs(
        UnitOptions("/opt/auditor/bin/auditor", "/etc/auditor/auditor.toml"), config, default_db=False
    )
    assert need.interpreters == {"ms20": "/tmp/checkout/ms20/bin/python"}  # lite20 is on host far
    assert need.readable == {
        "/etc/auditor/id": "hosts.far.identity_file (ssh runs as the service user)",
        "/k": "hosts.far.options UserKnownHostsFile",
    }
    assert str(need.database) == "/home/me/history.db"
    problems = _hidden_by_hardening(need)
    assert any(
        p.startswith("/tmp/checkout/ms20/bin/python (stack ms20's interpreter) is under /tmp")
        for p in problems
    )
    assert any(p.startswith("the history database /home/me/history.db is under /home") for p in problems)
    default = needs(UnitOptions("/opt/auditor/bin/auditor"), config, default_db=True)
    assert default.database == STATE_DIR / "history.db"


def test_service_check_json_says_what_the_user_cannot_do(tmp_path):
    """service check --json (#54): the user, the unit's paths and each problem, for a program;
    exit 1 while the service could not start. The config sits in pytest's private folder, so
    nobody, the user here, cannot read it."""
    config = tmp_path / "auditor.toml"
    config.write_text(
        '[stacks.a]\nrole = "train"\nruntime = "mindspore"\npython = "/usr/bin/python3"\n'
        '[stacks.b]\nrole = "infer"\nruntime = "mindspore-lite"\npython = "/usr/bin/python3"\n'
        '[[pairs]]\ntrain = "a"\ninfer = "b"\nprobes = ["ppo_policy"]\n'
    )
    runner = CliRunner()
    args = ["service", "check", "--json", "--exec", str(AUDITOR_EXE), "--config", str(config)]
    result = runner.invoke(cli, [*args, "--user", "nobody"])
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    if os.geteuid() != 0:  # the checks run as the service user: only root may, and it says so
        assert doc["problems"] == ["service check runs its checks as the service user: run it as root"]
        return
    assert (doc["user"], doc["exec"], doc["config"], doc["ok"]) == (
        "nobody",
        str(AUDITOR_EXE),
        str(config),
        False,
    )
    assert any(p.startswith(f"read the config {config}") for p in doc["problems"]), doc["problems"]
    # a refusal before any check is one problem in the same document
    result = runner.invoke(cli, [*args, "--user", "no-such-auditor-user"])
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and doc["problems"] == [
        "the service user no-such-auditor-user does not exist (`auditor service install` creates it)"
    ]


def test_the_docs_line_that_runs_the_unit_by_hand_is_the_units_own():
    """docs/service.md "Without systemd" (#54): the directories systemd makes, then ExecStart
    as the unit's user, in its environment and working directory, each from the unit itself,
    so the page cannot drift from the unit it stands for."""
    unit = parsed(unit_text(UnitOptions("/opt/auditor/bin/auditor", "/etc/auditor/auditor.toml")))["Service"]
    dirs = {"%S": "/var/lib", "%C": "/var/cache"}

    def expand(text: str) -> str:
        for key, value in dirs.items():
            text = text.replace(key, value)
        return text

    user = unit["User"]
    page = section("docs/service.md", "Running as a service")
    block = page[page.index("### Without systemd") :].split("```sh\n", 1)[1].split("```", 1)[0]
    made, run = block.strip().splitlines()
    state, cache = unit["StateDirectory"], unit["CacheDirectory"]
    assert made == f"sudo install -d -o {user} -g {user} /var/lib/{state} /var/cache/{cache}"
    where, env = expand(unit["WorkingDirectory"].lstrip("-")), expand(unit["Environment"])
    assert run == f"cd {where} && sudo -u {user} env {env} {unit['ExecStart']}"
    # and service install says the same lines on a machine without systemd
    options = UnitOptions("/opt/auditor/bin/auditor", "/etc/auditor/auditor.toml")
    assert by_hand(options) == [made.removeprefix("sudo "), run]
    said = next_steps(options, Path("/"), [], systemd=False)
    assert "does not run systemd" in said and f"  {run}\n" in said
    assert "does not run systemd" not in next_steps(options, Path("/"), [], systemd=True)
