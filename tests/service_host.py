"""A host on which the auditor is installed as a service, for the tests: run a scenario in a
private mount namespace (``unshare --mount``), so that what an installation writes (the unit in
/etc/systemd/system, the config in /etc/auditor, the unit's state and cache directories) is
seen by that scenario only and is gone when it ends, whatever happens.

The namespace also gives the view of a host where the service user can reach the reference
stacks: the stacks are where the README's install step puts them (/var/cache/auditor/stacks,
a bind mount of this machine's stacks), and the Pythons the venvs were made with (under
/root/.pyenv here) can be entered: /root is a folder of mode 0711 that holds only .pyenv and
.cache. Nothing else of the machine changes.

``python -m tests.service_host SCRIPT`` (as root) sets the namespace up and runs SCRIPT with
bash inside it; the test reads what SCRIPT prints.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
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
    return None


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def setup_view(work: Path, private: tuple[str, ...] = PRIVATE) -> None:
    """Inside the namespace: the private directories, the stacks where the README puts them,
    and a /root the service user can enter to reach the interpreters."""
    home = Path.home()
    keep = {name: home / name for name in (".pyenv", ".cache") if (home / name).exists()}
    for name, path in keep.items():
        (work / name).mkdir(parents=True, exist_ok=True)
        _mount("--bind", str(path), str(work / name))
    _mount("-t", "tmpfs", "-o", "mode=0711", "tmpfs", str(home))
    for name in keep:
        (home / name).mkdir()
        _mount("--bind", str(work / name), str(home / name))
    for path in private:
        _mount("-t", "tmpfs", "-o", "mode=0755", "tmpfs", path)
    Path("/var/cache/auditor/stacks").mkdir()
    _mount("--bind", str(stacks_dir()), "/var/cache/auditor/stacks")


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
