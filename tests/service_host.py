"""A host on which the auditor is installed as a service, for the tests: run a scenario in a
private mount namespace (``unshare --mount``), so that what an installation writes (the unit in
/etc/systemd/system, the config in /etc/auditor, the unit's state and cache directories) is
seen by that scenario only and is gone when it ends, whatever happens.

The namespace is a fresh host's view of the stacks: /var/cache/auditor/stacks (where the docs'
install step puts them) is this machine's installed stacks under an overlay whose writes land
in the scenario's folder, so ``scripts/install-stacks`` finds them present (seconds, no
download) and does there what it does on a real host, the real stacks left unchanged. /root
stays as it is (mode 700): the service user reaches no Python under it, and the stacks run
for it only if install-stacks gave them Pythons it can run.

``python -m tests.service_host SCRIPT WORK`` (as root) sets the namespace up and runs SCRIPT
with bash inside it; the test reads what SCRIPT prints.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from auditor.common.paths import stacks_dir

PRIVATE = ("/etc/systemd/system", "/etc/auditor", "/var/lib/auditor", "/var/cache/auditor")


def unavailable() -> str | None:
    if os.geteuid() != 0:
        return "the service test runs as root (it creates the service user and runs the unit as it)"
    for tool in ("unshare", "runuser", "setpriv", "useradd", "mount"):
        if subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True).returncode != 0:
            return f"{tool} is not installed"
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True)
    if probe.returncode != 0:
        return f"no private mount namespace here: {probe.stderr.decode(errors='replace').strip()}"
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("lower", "upper", "work", "merged"):
            os.mkdir(os.path.join(tmp, name))
        options = f"lowerdir={tmp}/lower,upperdir={tmp}/upper,workdir={tmp}/work"
        mount = f"mount -t overlay overlay -o {options} {tmp}/merged"
        probe = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount], capture_output=True
        )
        if probe.returncode != 0:
            return f"no overlay file system here: {probe.stderr.decode(errors='replace').strip()}"
    return None


# What systemd would do to start the installed unit, for a Python run as root in the namespace
# (``python - > started.json``): the unit's state and cache directories owned by its User=, its
# Environment= and WorkingDirectory=, then ExecStart under setpriv as that user; it waits for
# the first complete run in /var/lib/auditor/history.db, stops the daemon with SIGTERM and
# prints what it saw as JSON (the run, whether the daemon was alive, its exit status, the
# database's owner, the unit, the daemon's log).
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


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def setup_view(work: Path, private: tuple[str, ...] = PRIVATE) -> None:
    """Inside the namespace: the private directories, and the stacks where the docs put them
    (an overlay: the installed stacks below, the scenario's changes in ``work``)."""
    for path in private:
        _mount("-t", "tmpfs", "-o", "mode=0755", "tmpfs", path)
    stacks = Path("/var/cache/auditor/stacks")
    stacks.mkdir()
    upper, scratch = work / ".stacks-upper", work / ".stacks-work"
    upper.mkdir()
    scratch.mkdir()
    _mount(
        "-t",
        "overlay",
        "overlay",
        "-o",
        f"lowerdir={stacks_dir()},upperdir={upper},workdir={scratch}",
        str(stacks),
    )


def main() -> int:
    script, work = Path(sys.argv[1]), Path(sys.argv[2])
    setup_view(work, tuple(sys.argv[3:]) or PRIVATE)
    return subprocess.run(["bash", "-euo", "pipefail", str(script)], cwd=work).returncode


def run(
    script: str, work: Path, timeout: float = 1800, private: tuple[str, ...] = PRIVATE
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` (bash) in a fresh namespace where the folders ``private`` are the
    scenario's own; their mount points are created on the machine when missing (empty
    folders) and removed again afterwards. One scenario at a time on the machine (a lock
    file), as the mount points are shared and the suite runs on several workers."""
    with LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _run(script, work, timeout, private)


LOCK = Path("/tmp/auditor-tests-service-host.lock")


def _run(
    script: str, work: Path, timeout: float, private: tuple[str, ...]
) -> subprocess.CompletedProcess[str]:
    made = [p for p in private if not Path(p).exists()]
    for p in made:
        Path(p).mkdir(parents=True)
    try:
        (work / "scenario.sh").write_text(script)
        return subprocess.run(
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "--",
                sys.executable,
                "-m",
                "tests.service_host",
                str(work / "scenario.sh"),
                str(work),
                *private,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=Path(__file__).resolve().parent.parent,
        )
    finally:
        for p in reversed(made):
            with contextlib.suppress(OSError):
                Path(p).rmdir()


if __name__ == "__main__":
    sys.exit(main())
