"""The documentation's sections that a new user follows step by step are executed as written, so
the documentation cannot drift from the program again (docs/hosts.md, docs/service.md,
docs/own-policy.md):

- "Training and inference on different hosts": the shell block that starts two OpenSSH
  servers, the ``two-hosts.toml`` block, and the three commands (hosts check, audit across
  the hosts, fingerprint), in a home folder of the test's own (the one change: the ports
  2201/2202 become free ones);
- "Running as a service": the install block (``sudo`` is a shim, the test runs as root), in a
  private mount namespace (tests/service_host.py) standing for the host, so the unit, the
  config, /opt/auditor and the service's directories are the scenario's alone;
- "Auditing your own policy": the preflight and gate commands on a policy the real ms20
  exported, the ``[models.policy]`` block added to the shipped config, ``golden record``, the
  audit against that golden, then the deployed-model watch blocks (the one change: the
  served folder /srv/policy becomes the test's own) through a replaced served file;
- "A fleet": the PostgreSQL block (``sudo -u postgres`` is a shim reaching the test's server),
  ``trainer.toml`` and ``inference.toml`` (the changes: ``db.internal:5432`` becomes the test
  server, ``/opt/stacks`` the installed stacks), an audit on each side, trainer first, then
  ``auditor history --pair 'ms20->lite20'`` and ``auditor publications`` as the prose says;
- "A group of hosts": the one-machine ``fleet.toml`` (six command-transport hosts, at most four
  in flight) and its commands: config check, audit, hosts list, history --group, db size;
- "Auditors sharing a group's hosts": that ``fleet.toml`` with the ``[queue]`` block added and
  two auditors in one named cycle on the test PostgreSQL server, then ``hosts list``;
- docs/getting-started.md: the demo, its history, a generated config checked and audited.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess

import pytest

from auditor.common.paths import stacks_dir
from tests import service_host
from tests.conftest import REPO, stack_python
from tests.docs import blocks
from tests.requires import require
from tests.sshd import free_port, unavailable
from tests.user_models import export_user_policy

pytestmark = pytest.mark.stacks


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
    require("sshd", unavailable)
    home, checkout, env = home
    [(lang0, servers), (lang1, toml), (lang2, run)] = blocks(
        "docs/hosts.md", "Training and inference on different hosts"
    )
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


NARROW = r"""
import re
path = "/etc/auditor/auditor.toml"
text = open(path).read()
text = re.sub(r"^\[\[pairs\]\]\n(?:[^\n\[#][^\n]*\n)*\n?", "", text, flags=re.M)
text = text.replace("[rollout]\nenabled = true", "[rollout]\nenabled = false", 1)
text += '\n[[pairs]]\ntrain = "ms20"\ninfer = "lite20"\nprobes = ["ppo_policy"]\n'
text = text.replace("[probes.ppo_policy]\n", '[probes.ppo_policy]\nvariants = ["fp32"]\n', 1)
open(path, "w").write(text)
"""
"""What the service test changes in the installed config before the unit starts: the demo's
four pairs, rollouts and every variant take minutes; one pair's fp32 policy shows the same."""


def test_service_install_as_written(stacks, service_account, tmp_path):
    require("namespace", service_host.unavailable)
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
    # the third block, the unit by hand without systemd, is START_AS_SYSTEMD's work below
    # (tests/unit/daemon/test_service.py holds it to the unit's own lines)
    [(lang0, show), (lang1, install), (lang2, _)] = blocks("docs/service.md", "Running as a service")
    assert (lang0, lang1, lang2) == ("sh", "sh", "sh")
    script = f"""
export PATH={shims}:$PATH
cd {checkout}
{show}
{install}
test -f /etc/systemd/system/auditor.service -a -f /etc/systemd/system/auditor.service.d/hardening.conf
systemd-analyze verify /etc/systemd/system/auditor.service
/opt/auditor/bin/auditor service check --exec /opt/auditor/bin/auditor
# the test's one change, after the checks: a cycle of one pair, not the demo's four
{REPO / ".venv" / "bin" / "python"} - <<'PY'
{NARROW}
PY
# what `systemctl start auditor` does next: ExecStart as the unit's user, until one cycle is stored
{REPO / ".venv" / "bin" / "python"} - > {tmp_path / "started.json"} <<'PY'
{service_host.START_AS_SYSTEMD}
PY
"""
    done = service_host.run(script, tmp_path, private=(*service_host.PRIVATE, "/opt/auditor"))
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-5000:]
    assert "[Service]" in out and "Type=notify" in out and "PrivateTmp=yes" in out  # what service print shows
    assert "created the system user auditor" in out or "checked: user auditor can run" in out
    assert "ok: user auditor can start the service" in out
    assert "Traceback" not in out
    # /root stays closed (tests/service_host.py): the cycle below ran every stack as the user
    started = json.loads((tmp_path / "started.json").read_text())
    assert started["unit"]["User"] == ["auditor"] and started["db_owner"] == "auditor"
    assert started["run"] is not None, started["log"]
    _, status, outcome = started["run"]
    # ms20 -> lite20's fp32 PPO policy, complete as the service user; the stacks it ran are the
    # ones install-stacks pointed at Pythons the user can run (/root stays closed)
    assert status == "complete" and outcome == "consistent", started["log"]
    assert started["alive"] and started["code"] == 0, started["log"]


def shell(line: str, cwd, env: dict, timeout: float = 1800) -> subprocess.CompletedProcess:
    done = subprocess.run(
        ["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert "Traceback" not in done.stdout + done.stderr, f"{line}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done


def outcome(done: subprocess.CompletedProcess) -> str:
    """The report's last line, checked against the exit status it states and the real one."""
    last = done.stdout.rstrip().splitlines()[-1]
    assert last.startswith("Outcome: ") and last.endswith(f"; exit status {done.returncode}"), done.stdout
    assert (done.returncode == 0) == last.startswith("Outcome: CONSISTENT ("), last
    return last


def test_own_model_as_written(stacks, home):
    home, checkout, env = home
    env = {**env, "PATH": f"{checkout / '.venv' / 'bin'}:{env['PATH']}"}  # `auditor` as the README writes it
    config = checkout / "auditor.toml"
    shutil.copy(REPO / "auditor.toml", config)
    (checkout / "export").mkdir()
    policy = export_user_policy("ms20", checkout / "export" / "policy.mindir", batch=64)
    page = blocks("docs/own-policy.md", "Auditing your own policy")
    [(_, preflight), (_, gate), (lang, model), (lang2, train), (lang3, policy_line), *rest] = page
    [(lang4, episodes), (_, golden), (_, watch), (_, severity)] = rest
    assert lang3 == "toml" and policy_line.startswith("policy = ")
    assert (
        lang4 == "toml" and "[models.policy.rollout]" in episodes
    )  # its own test: test_model_rollout_stacks
    assert lang == lang2 == "toml" and "[models.policy.train]" in train  # its own test: test_gate_stacks
    for name in ("actor", "critic"):  # the second preflight line checks two files at once
        shutil.copy(policy, checkout / "export" / f"{name}.mindir")
    # 1. preflight: ms20's export loads and runs on both infer stacks of the shipped config, and
    # neither is OK: ms210-graph serves another release's file (2.10 says 2.0 files may fail),
    # and Lite 2.0 is measured to compute this policy's LayerNorm differently
    first, second, third = commands(preflight)
    done = shell(first, checkout, env)
    assert done.returncode == 1 and done.stdout.count("load: ok") == 2, done.stdout
    assert "ms210-graph  WARNING" in done.stdout and "another release" in done.stdout, done.stdout
    assert "lite20       WARNING" in done.stdout and "compute LayerNorm differently" in done.stdout
    done = shell(second, checkout, env)
    assert done.returncode == 1, done.stdout + done.stderr
    reports = json.loads(done.stdout)
    assert [r["file"].rsplit("/", 1)[-1] for r in reports] == ["actor.mindir", "critic.mindir"], reports
    for report in reports:
        [verdict] = report["verdicts"]
        assert verdict["stack"] == "lite20" and verdict["load"]["ok"] and verdict["status"] == "warning"
    done = shell(third, checkout, env)  # --no-load never says OK
    assert done.returncode == 1 and "  OK" not in done.stdout, done.stdout
    [line] = commands(gate)  # the pipeline's gate stops the copy
    done = shell(line, checkout, {**env, "ARTIFACT": "export/policy.mindir"})
    assert done.returncode == 1 and done.stdout.rstrip().endswith("not deployable"), done.stdout
    # 2. the model probe's block, added to the config as written, with its policy line ("In PPO
    # terms"): the config check accepts it
    assert "[models.policy]\n" in model  # the line goes into that table, as its comment says
    line = policy_line.splitlines()[0]
    with_policy = model.replace("[models.policy]\n", f"[models.policy]\n{line}\n", 1)
    config.write_text(config.read_text() + "\n" + with_policy)
    done = shell("auditor config check", checkout, env)
    assert done.returncode == 0, done.stdout + done.stderr
    # 3. a golden from the reference stack, then golden = FILE instead of reference
    line = commands(golden)[0]  # the second records from a training network, not configured here
    done = shell(line, checkout, env)
    assert done.returncode == 0 and (checkout / "export" / "policy.golden.npz").is_file(), done.stderr
    text = config.read_text()
    assert 'reference = "ms210-graph"' in text
    head, _, tail = text.rpartition('reference = "ms210-graph"')  # the block added above
    config.write_text(head + 'golden = "export/policy.golden.npz"' + tail)
    done = shell("auditor audit --model policy --json-file result.json", checkout, env)
    assert "model policy: golden → lite20" in done.stdout and "64 samples compared with golden" in done.stdout
    outcome(done)
    # the declared policy in PPO terms: 64 states x 4 drawn actions, none that PPO would clip
    results = json.loads((checkout / "result.json").read_text())["results"]
    [served] = [r for r in results if r["probe"] == "policy"]
    ratios = {c["metric"]: c for c in served["checks"] if c["output"] is None}
    assert "256 samples, from the distributions' parameters in float64" in ratios["ratio_mean"]["message"]
    assert ratios["ppo_clip_share"]["value"] == 0 and ratios["ess"]["value"] > 0.9999, ratios
    assert served["status"] == "consistent" and ratios["kl_behaviour"]["value"] < 1e-6
    # 4. watch what is deployed: the blocks' keys go into the shipped [stacks.lite20]
    served = home / "srv-policy"
    served.mkdir()
    shutil.copy(policy, served / "policy.mindir")

    base = config.read_text()

    def serve(block: str) -> None:
        """The config as it was, with the block's keys at the top of [stacks.lite20]."""
        header, *keys = [ln for ln in block.strip().splitlines()]
        assert header == "[stacks.lite20]"
        keys = [k.replace("/srv/policy", str(served)) for k in keys]
        lines = base.splitlines()
        at = lines.index(header) + 1
        config.write_text("\n".join([*lines[:at], *keys, *lines[at:]]) + "\n")

    serve(watch)
    done = shell("auditor audit --model policy", checkout, env)
    outcome(done)
    serve(severity)
    export_user_policy("ms20", served / "policy.mindir", batch=64, fp16=True)  # another graph deployed
    done = shell("auditor audit --model policy --json", checkout, env)
    assert done.stdout.startswith("{"), (done.returncode, done.stderr[-2000:])
    doc = json.loads(done.stdout)
    [drift] = [f for f in doc["findings"] if f["kind"] == "model-drift"]
    assert drift["severity"] == "critical" and drift["subject"] == "lite20", drift  # the block's severity
    assert done.returncode == doc["exit_code"] == 1 and doc["outcome"] != "consistent", doc["outcome"]


PG_SUDO = """#!/bin/sh
# `sudo -u postgres COMMAND`: COMMAND as the test server's superuser
[ "$1" = -u ] && shift 2
exec env PGHOST=127.0.0.1 PGPORT={port} PGUSER={user} "$@"
"""


def test_fleet_as_written(stacks, postgres, home):
    home, checkout, env = home
    shims = home / "bin"
    shims.mkdir()
    (shims / "sudo").write_text(PG_SUDO.format(port=postgres.port, user=postgres.user))
    (shims / "sudo").chmod(0o755)
    env = {**env, "PATH": f"{shims}:{checkout / '.venv' / 'bin'}:{postgres.bin}:{env['PATH']}"}
    server = f"127.0.0.1:{postgres.port}"
    [(lang0, database), (lang1, trainer), (lang2, inference)] = blocks("docs/hosts.md", "A fleet")
    assert (lang0, lang1, lang2) == ("sh", "toml", "toml")
    assert "db.internal:5432" in database + trainer + inference and "/opt/stacks/ms20/bin/python" in trainer
    for name, block in (("trainer.toml", trainer), ("inference.toml", inference)):
        block = block.replace("db.internal:5432", server)
        for stack in ("ms20", "lite20"):
            block = block.replace(f"/opt/stacks/{stack}/bin/python", str(stack_python(stack)))
        (checkout / name).write_text(block)
    # the PostgreSQL block, then (in the same shell: it exports AUDITOR_DB_URL) what the prose
    # says to run: an audit on each side, trainer first, the pair's history, the publications
    run = [
        "auditor --config trainer.toml audit",
        "auditor --config inference.toml audit",
        "auditor history --pair 'ms20->lite20' --format json",
        "auditor publications --json",
    ]
    script = database.replace("db.internal:5432", server) + "".join(
        f"\nrc=0; {c} > {i}.out 2> {i}.err || rc=$?; echo $rc > {i}.rc" for i, c in enumerate(run)
    )
    done = shell(f"set -e\n{script}", checkout, env)
    assert done.returncode == 0 and "up to date" in done.stdout, done.stdout + done.stderr  # db current
    said = []
    for i, command in enumerate(run):
        code = int((checkout / f"{i}.rc").read_text())
        out, err = (checkout / f"{i}.out").read_text(), (checkout / f"{i}.err").read_text()
        assert "Traceback" not in out + err, f"{command}\n{err[-3000:]}"
        said.append((code, out, err))
    (code, out, err), (code2, out2, err2) = said[:2]
    assert "Publications (split mode)" in out and "published ms20:" in out, out + err
    assert "Not checked" not in out and code == 0, out[-3000:]  # only exports: nothing to compare
    assert "read ms20: publication" in out2 and "by train-zone" in out2, out2 + err2
    assert "Not checked" not in out2 and "ms20 → lite20" in out2, out2[-3000:]
    assert out2.rstrip().splitlines()[-1].endswith(f"; exit status {code2}")
    code, out, err = said[2]
    rows = json.loads(out)
    assert code == 0 and {r["probe"] for r in rows} == {"ppo_policy", "obs_normalizer"}, err
    code, out, err = said[3]
    [pub] = json.loads(out)
    assert code == 0 and (pub["stack"], pub["auditor_id"]) == ("ms20", "train-zone"), err
    assert {i["probe"] for i in pub["items"]} == {"ppo_policy", "obs_normalizer"}


def test_group_as_written(stacks, home):
    """ "A group of hosts": the one-machine example (six command-transport hosts, at most four
    in flight) and its commands, as written."""
    home, checkout, env = home
    found = blocks("docs/hosts.md", "A group of hosts")
    (lang0, toml), (lang1, run) = found[-2:]
    assert (lang0, lang1) == ("toml", "sh")
    (checkout / "fleet.toml").write_text(toml)
    said = {}
    for line in commands(run):
        words = line.split()
        said[" ".join(words[3:5])] = subprocess.run(
            ["bash", "-c", line], cwd=checkout, env=env, capture_output=True, text=True, timeout=1800
        )
    for what, done in said.items():
        assert "Traceback" not in done.stderr, what + done.stderr
    check = said["config check"]
    assert check.returncode == 0, check.stdout + check.stderr
    assert (
        "stack lite20 on infer-[1:6]: infer " in check.stdout and "hosts in flight: at most 4" in check.stdout
    )
    audit = said["audit"]
    assert audit.returncode in (0, 1), audit.stdout[-3000:] + audit.stderr[-3000:]
    assert "ms20 → lite20 on 6 hosts" in audit.stdout, audit.stdout
    assert len(audit.stdout.splitlines()) <= 40 and "UNAVAILABLE" not in audit.stdout, audit.stdout
    listed = said["hosts list"]
    assert listed.returncode == 0, listed.stderr
    rows = [line.split()[0] for line in listed.stdout.splitlines()[1:]]
    assert rows == [f"infer-{i}" for i in range(1, 7)], listed.stdout
    history = said["history --group"]
    assert history.returncode == 0 and history.stdout.count("ms20->lite20@infer-") == 6, history.stdout
    size = said["db size"]
    assert size.returncode == 0 and "1 complete run(s)" in size.stdout, size.stdout


def test_getting_started_as_written(stacks, home):
    """docs/getting-started.md from the demo on: `make demo` (its recipe as the Makefile has it;
    `-o setup`: the checkout's .venv is the suite's own, set up by the README's test command),
    the demo's history, a generated config checked, then audited. Each block as written."""
    home, checkout, env = home
    for name in ("Makefile", "auditor.toml"):
        shutil.copy(REPO / name, checkout / name)
    page = "docs/getting-started.md"
    ((_, demo),) = blocks(page, "Install and run the demo")[:1]
    assert commands(demo) == ["make demo"]
    done = subprocess.run(
        ["make", "-o", "setup", "demo"], cwd=checkout, env=env, capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Outcome: ERROR" in done.stdout and "(the run is stored in .demo/history.db" in done.stdout
    said = {}
    for section in ("Install and run the demo", "Your own config"):
        for lang, code in blocks(page, section):
            assert lang == "sh"
            for line in commands(code):
                if line != "make demo":
                    said[line] = subprocess.run(
                        ["bash", "-c", line],
                        cwd=checkout,
                        env=env,
                        capture_output=True,
                        text=True,
                        timeout=1800,
                    )
    for line, done in said.items():
        assert "Traceback" not in done.stderr, line + done.stderr
        expected = (0, 1) if line.endswith(" audit") else (0,)
        assert done.returncode in expected, line + done.stdout[-2000:] + done.stderr[-2000:]
    runs = [done.stdout for line, done in said.items() if line.endswith(" runs")]
    assert len(runs) == 2 and all(re.search(r"^1 .* complete ", out, re.MULTILINE) for out in runs), runs
    assert (checkout / "demo.html").stat().st_size > 10_000
    checked = [done.stdout for line, done in said.items() if line.endswith("config check --hosts")]
    assert checked and "my.toml: ok (2 stacks, 1 pair)" in checked[0], checked
    assert (home / ".local" / "state" / "auditor" / "history.db").is_file()  # the user's own, not the demo's


def test_queue_as_written(stacks, postgres, home):
    """ "Auditors sharing a group's hosts": the group's ``fleet.toml`` with the ``[queue]``
    block added, and two auditors in one cycle on the test PostgreSQL server, as written."""
    home, checkout, env = home
    env = {**env, "PATH": f"{checkout / '.venv' / 'bin'}:{env['PATH']}"}
    group_toml = blocks("docs/hosts.md", "A group of hosts")[-2][1]
    [(lang0, added), (lang1, run)] = blocks("docs/hosts.md", "Auditors sharing a group's hosts")
    assert (lang0, lang1) == ("toml", "sh")
    (checkout / "fleet.toml").write_text(group_toml + "\n" + added)
    url = "postgresql://auditor@db.internal:5432/auditor"
    assert url in run
    script = run.replace(url, postgres.create_database(f"queue_doc_{os.getpid()}"))
    done = shell(f"set -e\n{script}", checkout, env)
    listed = done.stdout
    reports = {who: (checkout / f"{who}.txt").read_text() for who in ("a", "b")}
    for who, other in (("a", "b"), ("b", "a")):
        text = reports[who]
        flat = " ".join(text.split())  # the report wraps a finding's lines
        assert "Traceback" not in text and "this auditor audited" in flat, text
        # the other named, or said to be still at work when this one stored its run
        assert f"by auditor-{other}" in flat or "by another auditor (still at work)" in flat, text
        assert outcome_of(text) in ("CONSISTENT", "DRIFT"), text
    rows = {line.split()[0]: line for line in listed.splitlines()[1:]}
    assert sorted(rows) == [f"infer-{i}" for i in range(1, 7)], listed
    by = {
        h: ("auditor-a" if "auditor-a" in line else "auditor-b" if "auditor-b" in line else "")
        for h, line in rows.items()
    }
    assert set(by.values()) == {"auditor-a", "auditor-b"}, listed


def outcome_of(report: str) -> str:
    return report.rstrip().splitlines()[-1].split()[1]
