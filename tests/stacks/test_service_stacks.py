"""The service starts as installed: `auditor service install` refuses, with the list, what the
unit's user could not do, creates the service user, writes a unit that `systemd-analyze verify`
accepts; then the unit's ExecStart runs as the unit's User=, with the unit's environment and
working directory (setpriv, as systemd would start it), runs a cycle on the real stacks, stores
it, and stops on SIGTERM.

It all happens in a private mount namespace (tests/service_host.py): the unit, the config in
/etc/auditor and the state directory are that scenario's only, and the stacks are where the
README's install step puts them (/var/cache/auditor/stacks)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests import service_host
from tests.conftest import REPO
from tests.requires import require

pytestmark = pytest.mark.stacks

START_AS_SYSTEMD = r"""
import json, os, pwd, signal, sqlite3, subprocess, sys, time
unit = {}
for line in open("/etc/systemd/system/auditor.service"):
    key, sep, value = line.strip().partition("=")
    if sep and not line.startswith("#"):
        unit.setdefault(key, []).append(value)
spec = {"%S": "/var/lib", "%C": "/var/cache"}
def expand(text):
    for k, v in spec.items():
        text = text.replace(k, v)
    return text
user = unit["User"][0]
account = pwd.getpwnam(user)
# What systemd does before ExecStart: the state and cache directories, owned by the user.
for key, top in (("StateDirectory", "/var/lib"), ("CacheDirectory", "/var/cache")):
    path = os.path.join(top, unit[key][0])
    os.makedirs(path, exist_ok=True)
    os.chown(path, account.pw_uid, account.pw_gid)
env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": account.pw_dir,
       "USER": user, "LOGNAME": user, "SHELL": account.pw_shell}
for words in unit.get("Environment", []):
    for word in words.split():
        k, _, v = word.partition("=")
        env[k] = expand(v)
cwd = expand(unit["WorkingDirectory"][0].lstrip("-"))
argv = ["setpriv", "--reuid", str(account.pw_uid), "--regid", str(account.pw_gid), "--init-groups", "--"]
argv += unit["ExecStart"][0].split()
proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=open("daemon.log", "w"))
db = "/var/lib/auditor/history.db"
run = None
deadline = time.monotonic() + 900
while time.monotonic() < deadline and proc.poll() is None:
    if os.path.exists(db):
        try:  # the file exists before the daemon's migration child has made its tables
            with sqlite3.connect(db) as c:
                run = c.execute("SELECT id, status, outcome FROM runs WHERE status = 'complete'").fetchone()
        except sqlite3.OperationalError:
            run = None
        if run:
            break
    time.sleep(1)
alive = proc.poll() is None
proc.send_signal(signal.SIGTERM)
code = proc.wait(timeout=120)
owner = pwd.getpwuid(os.stat(db).st_uid).pw_name if os.path.exists(db) else None
print(json.dumps({"run": run, "alive": alive, "code": code, "db_owner": owner, "unit": unit,
                  "log": open("daemon.log").read()[-4000:]}))
"""

SCENARIO = """
A={repo}/.venv/bin/auditor
U={user}
# the README's install step for the stacks (they are there already: it takes seconds)
AUDITOR_STACKS_DIR=/var/cache/auditor/stacks {repo}/scripts/install-stacks ms20 lite20 2> install-stacks.err
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
    script = SCENARIO.format(
        repo=REPO, user=service_user, python=REPO / ".venv" / "bin" / "python", start=START_AS_SYSTEMD
    )
    done = service_host.run(script, tmp_path)
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
