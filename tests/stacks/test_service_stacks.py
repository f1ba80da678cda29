"""The service starts as installed: `auditor service install` refuses, with the list, what the
unit's user could not do, creates the service user, writes a unit that `systemd-analyze verify`
accepts; then the unit's ExecStart runs as the unit's User=, with the unit's environment and
working directory (setpriv, as systemd would start it), runs a cycle on the real stacks, stores
it, and stops on SIGTERM.

It all happens in a private mount namespace (tests/service_host.py): the unit, the config in
/etc/auditor and the state directory are that scenario's only, the stacks are where the docs'
install step puts them (/var/cache/auditor/stacks), and /root stays closed to the service
user: the stacks run for it because scripts/install-stacks gave them Pythons it can run."""

from __future__ import annotations

import json
import os
import subprocess
import sysconfig

import pytest

from tests import service_host
from tests.conftest import REPO
from tests.requires import require

pytestmark = pytest.mark.stacks

SCENARIO = """
U={user}
# the docs' install step for the stacks: present already, they get Pythons the user can run
AUDITOR_STACKS_DIR=/var/cache/auditor/stacks {repo}/scripts/install-stacks ms20 lite20 2> install-stacks.err
# the auditor for the unit: a venv of a Python 3.11 the user can run, with this checkout's
# venv's packages on its path (docs/service.md installs with pip, as
# tests/fleet/test_readme_stacks.py does; here the checkout under test is what runs)
export AUDITOR_STACKS_DIR=/var/cache/auditor/stacks
py=$({repo}/scripts/install-stacks --shared-python 3.11 2>> install-stacks.err)
"$py" -m venv --without-pip /opt/auditor
site=$(/opt/auditor/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# the venv's packages, then its editable install of the checkout (a .pth runs its finder)
printf '%s\\n' {packages} > "$site/checkout.pth"
cat {packages}/__editable__*.pth > "$site/zz-checkout-editable.pth"
printf '#!/opt/auditor/bin/python\\nimport sys\\nfrom auditor.entry import main\\nsys.exit(main())\\n' \\
  > /opt/auditor/bin/auditor
chmod 755 /opt/auditor/bin/auditor
A=/opt/auditor/bin/auditor
cat > /etc/auditor/auditor.toml <<'EOF'
[stacks.ms20]
role = "train"
runtime = "mindspore"
python = "/var/cache/auditor/stacks/ms20/bin/python"

[stacks.lite20]
role = "infer"
runtime = "mindspore-lite"
python = "/var/cache/auditor/stacks/lite20/bin/python"

[[pairs]]
train = "ms20"
infer = "lite20"
probes = ["ppo_policy"]

[probes.ppo_policy]
variants = ["fp32"]
params = {{ batch = 8 }}

[latency]
batches = []
iterations = 5

[rollout]
enabled = false

[schedule]
interval = "1d"
run_on_start = true
EOF
chmod 600 /etc/auditor/auditor.toml    # root's alone: the service user cannot read it
set +e
$A service install --exec $A --user $U > refused.out 2> refused.err
echo $? > refused.code
set -e
test ! -e /etc/systemd/system/auditor.service     # nothing written
chmod 644 /etc/auditor/auditor.toml
$A service install --exec $A --user $U > installed.out 2> installed.err
systemd-analyze verify /etc/systemd/system/auditor.service > verify.out 2>&1 \\
  || echo "verify failed $?" >> verify.out
{python} - > started.json <<'PY'
{start}
PY
"""


@pytest.fixture
def service_user():
    """A service user name of this test run, deleted afterwards (the install creates it)."""
    name = f"audsvc{os.getpid()}"
    yield name
    subprocess.run(["userdel", name], capture_output=True)


def test_the_installed_unit_runs_a_cycle_as_its_user(stacks, service_user, tmp_path):
    require("namespace", service_host.unavailable)
    os.chmod(tmp_path, 0o755)
    packages = sysconfig.get_paths()["purelib"]  # this venv's (the tests run in it)
    script = SCENARIO.format(
        repo=REPO,
        packages=packages,
        user=service_user,
        python=REPO / ".venv" / "bin" / "python",
        start=service_host.START_AS_SYSTEMD,
    )
    done = service_host.run(script, tmp_path, private=(*service_host.PRIVATE, "/opt/auditor"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # refused first, with the list: the config it cannot read; nothing written
    assert (tmp_path / "refused.code").read_text().strip() == "1"
    refused = (tmp_path / "refused.err").read_text()
    assert f"the service would not start: user {service_user} cannot" in refused
    assert "read the config /etc/auditor/auditor.toml" in refused and "Traceback" not in refused
    assert f"created the system user {service_user}" in (tmp_path / "refused.out").read_text()
    # then installed: the unit and the drop-in, and systemd-analyze has nothing to say
    installed = (tmp_path / "installed.out").read_text()
    assert "/etc/systemd/system/auditor.service" in installed and "hardening.conf" in installed
    assert (tmp_path / "verify.out").read_text().strip() == ""
    # the unit's command, as its user: one cycle stored, then a clean stop on SIGTERM
    started = json.loads((tmp_path / "started.json").read_text())
    assert started["unit"]["User"] == [service_user]
    assert started["run"] is not None, started["log"]
    run_id, status, outcome = started["run"]
    assert status == "complete" and outcome == "consistent", started["log"]
    assert started["alive"] and started["code"] == 0, started["log"]
    assert started["db_owner"] == service_user
