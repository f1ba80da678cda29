"""The systemd unit of ``auditor daemon``, its hardening drop-in, and where they go.

The unit is what the daemon needs to behave as a managed service: ``Type=notify`` (it says
READY=1 once scheduled), ``ExecReload`` sends SIGHUP (config reload), a watchdog it feeds,
``Restart=on-failure``, a state directory for the history database and the lock, and a
dedicated user. Hardening is a separate drop-in because every option in it can break a real
installation (NPU device nodes, stacks under home directories, ...): each one says what it
would break, so an operator can delete the lines that do not fit the host.
"""

from __future__ import annotations

import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

UNIT_NAME = "auditor.service"
DROP_IN_NAME = "hardening.conf"
DEFAULT_CONFIG = "/etc/auditor/auditor.toml"
DEFAULT_UNIT_DIR = "/etc/systemd/system"


@dataclass(frozen=True)
class UnitOptions:
    exec_path: str
    config: str = DEFAULT_CONFIG
    user: str = "auditor"
    group: str | None = None
    watchdog_sec: int = 120
    stop_timeout_sec: int = 90


def default_exec() -> str:
    """The ``auditor`` executable of this installation (the venv's, when run from one)."""
    beside = Path(sys.executable).parent / "auditor"
    if beside.is_file():
        return str(beside)
    found = shutil.which("auditor")
    return str(Path(found).resolve()) if found else str(beside)


def unit_text(o: UnitOptions) -> str:
    exec_start = " ".join(shlex.quote(a) for a in (o.exec_path, "--config", o.config, "daemon"))
    group = o.group or o.user
    return f"""\
# {UNIT_NAME}: the auditor daemon (training/inference consistency audits on a schedule).
# Written by `auditor service print`. Hardening options are in {UNIT_NAME}.d/{DROP_IN_NAME}.

[Unit]
Description=auditor: training/inference consistency auditor for RL policies
After=network-online.target
Wants=network-online.target

[Service]
# The daemon sends READY=1 when its schedule is set, STATUS= after each cycle, and WATCHDOG=1.
Type=notify
NotifyAccess=main
ExecStart={exec_start}
# SIGHUP re-reads the config: a valid one applies from the next cycle, a bad one is logged and ignored.
ExecReload=/bin/kill -HUP $MAINPID
Restart=on-failure
RestartSec=10s
# The main loop pings every WatchdogSec/2, independently of how long a cycle takes.
WatchdogSec={o.watchdog_sec}
# SIGTERM lets the running cycle finish for [daemon] stop_timeout seconds (default 30), then
# aborts it; keep this above stop_timeout + 20 s.
TimeoutStopSec={o.stop_timeout_sec}
KillMode=mixed
User={o.user}
Group={group}
# /var/lib/auditor (history database, lock) and /var/cache/auditor (the stacks, by default),
# created for the service user. XDG_* point the auditor's defaults there.
StateDirectory=auditor
CacheDirectory=auditor
ConfigurationDirectory=auditor
Environment=XDG_STATE_HOME=%S XDG_CACHE_HOME=%C PYTHONUNBUFFERED=1
WorkingDirectory=-%S/auditor

[Install]
WantedBy=multi-user.target
"""


HARDENING = f"""\
# {UNIT_NAME}.d/{DROP_IN_NAME}: sandboxing for the auditor daemon.
# Written by `auditor service print --hardening`. Each option says what it would break;
# delete (or comment out) the ones that do not fit this host, then `systemctl daemon-reload`.

[Service]
# Everything but /dev, /proc, /sys and the service's own directories is read-only.
# Breaks: a jsonl alert sink or a [storage] SQLite file outside /var/lib/auditor (add
# ReadWritePaths=/that/dir), stacks that write into their own venv at run time.
ProtectSystem=strict

# /home, /root and /run/user are read-only for the service.
# Breaks: stack interpreters or venvs under a home directory are still readable, but a
# stack that writes there (caches, ~/.mindspore) fails; use "tmpfs" or "yes" only when
# nothing the stacks need lives under /home.
ProtectHome=read-only

# A private /tmp and /var/tmp (the cycles' exported MindIR files live there).
# Breaks: nothing the auditor needs; other programs cannot see its temporary files.
PrivateTmp=yes

# No privilege gain through setuid binaries or file capabilities.
# Breaks: an exec alert sink that calls sudo or another setuid program.
NoNewPrivileges=yes

# A private /dev without physical devices.
# Breaks: NPUs and GPUs. On Ascend hosts the stacks need /dev/davinci*, /dev/davinci_manager,
# /dev/devmm_svm and /dev/hisi_hdc: delete this line there (or list them with DeviceAllow=).
PrivateDevices=yes

# Kernel tunables (/proc/sys, /sys), modules and the kernel log are off limits.
# Breaks: npu-smi and driver tools that read /sys or the kernel log for health information
# may report less; the fingerprint records what they could not read.
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes

# No clock changes, no hostname changes, no realtime scheduling, no personality changes.
# Breaks: nothing the auditor does.
ProtectClock=yes
ProtectHostname=yes
RestrictRealtime=yes
LockPersonality=yes
RestrictSUIDSGID=yes

# Only local sockets and IP. Breaks: alert sinks or plugins speaking other protocols
# (netlink, raw sockets); the Prometheus endpoint and webhooks need only AF_INET/AF_INET6.
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6

# No new namespaces. Breaks: stacks started through container tools (podman, bwrap).
RestrictNamespaces=yes

# System calls of ordinary services only, for the native architecture.
# Breaks: runtimes that use unusual system calls (some NPU drivers' user-space libraries):
# if a stack worker dies with SIGSYS, delete these two lines.
SystemCallArchitectures=native
SystemCallFilter=@system-service

# No capabilities at all. Breaks: npu-smi on hosts where it needs CAP_SYS_ADMIN, a
# Prometheus port below 1024.
CapabilityBoundingSet=
AmbientCapabilities=

# Files the service creates are private to its user (the history database holds your
# models' exported MindIR). Breaks: other users reading /var/lib/auditor directly.
UMask=0077

# Not enabled: MindSpore's graph compiler and some runtimes map writable+executable memory,
# which this would forbid (the stack workers would crash at start):
#MemoryDenyWriteExecute=yes
"""


def hardening_text() -> str:
    return HARDENING


def install(
    options: UnitOptions,
    root: Path = Path("/"),
    unit_dir: str = DEFAULT_UNIT_DIR,
    hardening: bool = True,
) -> list[Path]:
    """Write the unit (and the drop-in) under ``root`` + ``unit_dir``; the paths written."""
    base = root / unit_dir.lstrip("/")
    base.mkdir(parents=True, exist_ok=True)
    unit = base / UNIT_NAME
    unit.write_text(unit_text(options))
    unit.chmod(0o644)
    written = [unit]
    if hardening:
        drop_in_dir = base / f"{UNIT_NAME}.d"
        drop_in_dir.mkdir(exist_ok=True)
        drop_in = drop_in_dir / DROP_IN_NAME
        drop_in.write_text(hardening_text())
        drop_in.chmod(0o644)
        written.append(drop_in)
    return written


def next_steps(options: UnitOptions, root: Path, written: list[Path], systemd: bool = True) -> str:
    """What to do after ``service install``; ``systemd``: the machine runs systemd (else the
    unit is proved by hand: docs/service.md "Without systemd")."""
    lines = ["Written:"] + [f"  {p}" for p in written]
    if root != Path("/"):
        lines.append(f"(under --root {root}: package these files; run the steps below on the target host)")
    checked = root == Path("/")
    lines += [
        "",
        "Next:",
        (
            f"  1. checked: user {options.user} can run {options.exec_path}, read {options.config} and "
            "what it names, and write the history database (`auditor service check` again after changes)"
            if checked
            else f"  1. on the target host: auditor service check --user {options.user} --config "
            f"{options.config}"
        ),
        "  2. systemctl daemon-reload && systemctl enable --now auditor",
        "  3. journalctl -u auditor -f; systemctl status auditor shows the last cycle's outcome",
        "     systemctl reload auditor re-reads the config",
    ]
    if not systemd:
        lines += [
            "This machine does not run systemd (no /run/systemd/system): to prove the unit here, run its",
            f'ExecStart as {options.user} in its environment (docs/service.md, "Without systemd"):',
            *(f"  {line}" for line in by_hand(options)),
        ]
    return "\n".join(lines) + "\n"


def by_hand(options: UnitOptions) -> list[str]:
    """The unit run without systemd, from its own lines: the directories systemd makes for it,
    then ExecStart as its user, in its environment and working directory."""
    unit: dict[str, str] = {}
    for line in unit_text(options).splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith(("#", "[")):
            unit.setdefault(key, value)
    places = {"%S": "/var/lib", "%C": "/var/cache"}

    def expand(text: str) -> str:
        for key, value in places.items():
            text = text.replace(key, value)
        return text

    user, state, cache = unit["User"], unit["StateDirectory"], unit["CacheDirectory"]
    where, env = expand(unit["WorkingDirectory"].lstrip("-")), expand(unit["Environment"])
    return [
        f"install -d -o {user} -g {user} /var/lib/{state} /var/cache/{cache}",
        f"cd {where} && sudo -u {user} env {env} {unit['ExecStart']}",
    ]
