"""The README's sections that a new user follows step by step are executed as written, so the
documentation cannot drift from the program again:

- "Training and inference on different hosts": the shell block that starts two OpenSSH
  servers, the ``two-hosts.toml`` block, and the three commands (hosts check, audit across
  the hosts, fingerprint), in a home folder of the test's own (the one change: the ports
  2201/2202 become free ones);
- "Running as a service": the install block (``sudo`` is a shim, the test runs as root), in a
  private mount namespace (tests/service_host.py) standing for the host, so the unit, the
  config, /opt/auditor and the service's directories are the scenario's alone.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess

import pytest

from auditor.common.paths import stacks_dir
from tests import service_host
from tests.conftest import REPO
from tests.sshd import free_port, unavailable

pytestmark = pytest.mark.stacks

README = REPO / "README.md"


def blocks(section: str) -> list[tuple[str, str]]:
    """(language, code) of every fenced block of the README section titled ``section``."""
    text = README.read_text()
    assert f"\n## {section}\n" in text, section
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(\w*)\n(.*?)```", body, re.DOTALL)


def commands(code: str) -> list[str]:
    """The command lines of a block, comments and blank lines left out."""
    out = []
    for line in code.splitlines():
        line = re.sub(r"\s+#\s.*$", "", line).strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


@pytest.fixture
def home(tmp_path):
    """A user's home and a checkout with the auditor's .venv, as the README assumes."""
    home = tmp_path / "home"
    checkout = tmp_path / "checkout"
    home.mkdir()
    checkout.mkdir()
    (checkout / ".venv").symlink_to(REPO / ".venv")
    env = {
        "HOME": str(home),
        "PATH": os.environ["PATH"],
        "AUDITOR_STACKS_DIR": str(stacks_dir()),
        "LANG": "C.UTF-8",
    }
    yield home, checkout, env
    for pid_file in home.glob("auditor-hosts/*/sshd.pid"):  # the block says: kill $(cat .../sshd.pid)
        with contextlib.suppress(ValueError, ProcessLookupError, OSError):
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGTERM)


def test_two_hosts_as_written(stacks, home):
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    home, checkout, env = home
    [(lang0, servers), (lang1, toml), (lang2, run)] = blocks("Training and inference on different hosts")
    assert (lang0, lang1, lang2) == ("sh", "toml", "sh")
    ports = {"2201": str(free_port()), "2202": str(free_port())}
    for old, new in ports.items():
        servers, toml = servers.replace(old, new), toml.replace(old, new)
    done = subprocess.run(
        ["bash", "-e", "-c", servers], cwd=checkout, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    (checkout / "two-hosts.toml").write_text(toml)
    said = {}
    for line in commands(run):
        said[line.split()[3]] = subprocess.run(
            ["bash", "-c", line], cwd=checkout, env=env, capture_output=True, text=True, timeout=1800
        )
    for what, done in said.items():
        assert "Traceback" not in done.stderr and "No module named" not in done.stdout + done.stderr, what
    hosts = said["hosts"]
    assert hosts.returncode == 0, hosts.stdout + hosts.stderr
    assert hosts.stdout.count(" ok  Python 3.7.") == 2
    audit = said["audit"]
    assert audit.returncode in (0, 1), audit.stderr[-3000:]
    assert (
        "ms20 → lite20" in audit.stdout
        and "on train-host" in audit.stdout
        and "on infer-host" in audit.stdout
    )
    for broken in ("UNAVAILABLE", "WORKER FAILED", "Not checked", "Outcome: UNCHECKED"):
        assert broken not in audit.stdout, audit.stdout[-4000:]
    fingerprint = said["fingerprint"]
    assert fingerprint.returncode == 0, fingerprint.stdout[-3000:] + fingerprint.stderr[-3000:]
    assert "train-host" in fingerprint.stdout and "infer-host" in fingerprint.stdout


SUDO = '#!/bin/sh\n# the test runs as root: sudo [VAR=value...] command\nexec env "$@"\n'


@pytest.fixture
def service_account():
    """The README installs for user auditor: created by the install, removed afterwards
    (unless it was there before the test)."""
    existed = subprocess.run(["id", "auditor"], capture_output=True).returncode == 0
    yield
    if not existed:
        subprocess.run(["userdel", "auditor"], capture_output=True)


def test_service_install_as_written(stacks, service_account, tmp_path):
    reason = service_host.unavailable()
    if reason:
        pytest.skip(reason)
    os.chmod(tmp_path, 0o755)
    checkout = tmp_path / "checkout"
    shutil.copytree(
        REPO, checkout, ignore=shutil.ignore_patterns(".venv", ".git", "__pycache__", "*.egg-info", "build")
    )
    (checkout / ".venv").symlink_to(REPO / ".venv")
    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "sudo").write_text(SUDO)
    (shims / "sudo").chmod(0o755)
    [(lang0, show), (lang1, install)] = blocks("Running as a service")
    assert (lang0, lang1) == ("sh", "sh")
    script = f"""
export PATH={shims}:$PATH
cd {checkout}
{show}
{install}
test -f /etc/systemd/system/auditor.service -a -f /etc/systemd/system/auditor.service.d/hardening.conf
systemd-analyze verify /etc/systemd/system/auditor.service
/opt/auditor/bin/auditor service check --exec /opt/auditor/bin/auditor
"""
    done = service_host.run(script, tmp_path, private=(*service_host.PRIVATE, "/opt/auditor"))
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-5000:]
    assert "[Service]" in out and "Type=notify" in out and "PrivateTmp=yes" in out  # what service print shows
    assert "created the system user auditor" in out or "checked: user auditor can run" in out
    assert "ok: user auditor can start the service" in out
    assert "Traceback" not in out
