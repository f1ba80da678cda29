"""Where stacks live: ``[hosts.NAME]`` tables and the ``host`` key of a stack.

A stack runs on the auditor's own machine (``host = "local"``, the default) or on a named
host reached with the system OpenSSH client (``ssh = "user@server"``) or with any argv
prefix that runs a command there with stdin/stdout attached (``command = ["docker",
"exec", "-i", "box"]``). A stack's ``python``, ``ascend_root``, ``system_root``,
``npu_smi`` and ``env`` are paths and values on its host.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

LOCAL = "local"
HOST_KEYS = {"ssh", "port", "identity_file", "options", "command", "connect_timeout", "parallel"}
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_OPTION_RE = re.compile(r"^[A-Za-z][A-Za-z0-9]*[ =].+$")


@dataclass(frozen=True)
class HostConfig:
    """One ``[hosts.NAME]`` table. Exactly one of ``ssh`` and ``command`` is set."""

    name: str
    ssh: str | None = None
    """``[user@]server`` for the OpenSSH client (an alias of ~/.ssh/config works too)."""
    port: int | None = None
    identity_file: str | None = None
    options: tuple[str, ...] = ()
    """Extra ``-o`` options for ssh, e.g. ``"UserKnownHostsFile=/etc/auditor/known_hosts"``."""
    command: tuple[str, ...] = ()
    """An argv prefix that runs the rest of the argv on the host (``kubectl exec -i pod --``)."""
    connect_timeout: float = 10.0
    """Seconds ssh may take to connect and authenticate (``ConnectTimeout``)."""
    parallel: int | None = None
    """How many of this host's stacks are driven at once (default: ``[worker] parallel``)."""

    @property
    def transport(self) -> str:
        return "ssh" if self.ssh else "command"

    def describe(self) -> str:
        """The host as a person identifies it in a message: name and how it is reached."""
        if self.ssh:
            port = f" port {self.port}" if self.port else ""
            return f"host {self.name} (ssh {self.ssh}{port})"
        return f"host {self.name} (command {' '.join(self.command)})"


def parse_hosts(
    doc: Mapping[str, Any],
    stacks: Mapping[str, Any],
    error: Callable[[str, str], None],
    expand: Callable[[str], str] = lambda s: s,
) -> dict[str, HostConfig]:
    """The ``[hosts]`` section; every problem goes to ``error(path, message)``. Also checks
    that each stack's ``host`` names ``local`` or a configured host."""
    raw = doc.get("hosts", {})
    hosts: dict[str, HostConfig] = {}
    if not isinstance(raw, dict):
        error("hosts", f"must be a table of [hosts.NAME] tables, not {type(raw).__name__}")
        raw = {}
    for name, h in raw.items():
        path = f"hosts.{name}"
        if not isinstance(h, dict):
            error(path, "must be a table")
            continue
        if name == LOCAL:
            error(path, "'local' is the auditor's own machine and needs no table; pick another name")
            continue
        if not _NAME_RE.match(name):
            error(path, "host names use letters, digits, '.', '_' and '-'")
        for unknown in sorted(set(h) - HOST_KEYS):
            error(f"{path}.{unknown}", f"unknown key (expected one of: {', '.join(sorted(HOST_KEYS))})")
        host = _host(name, h, path, error, expand)
        if host is not None:
            hosts[name] = host
    for sname, s in stacks.items():
        where = getattr(s, "host", LOCAL)
        if where != LOCAL and where not in hosts and where not in raw:
            known = ", ".join(["local", *sorted(raw)]) if isinstance(raw, dict) else "local"
            error(f"stacks.{sname}.host", f"no [hosts.{where}] table (known hosts: {known})")
    return hosts


def _host(
    name: str, h: dict, path: str, error: Callable[[str, str], None], expand: Callable[[str], str]
) -> HostConfig | None:
    ok = True

    def typed(key: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
        nonlocal ok
        if key not in h:
            return default
        value = h[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            names = " or ".join(k.__name__ for k in kinds)
            error(f"{path}.{key}", f"must be {names}, not {type(value).__name__} {value!r}")
            ok = False
            return default
        return value

    ssh = typed("ssh", str)
    command = typed("command", list)
    if ssh is not None and command is not None:
        error(path, "set either ssh or command, not both")
        ok = False
    elif ssh is None and command is None and ok:
        error(path, 'set ssh = "user@server" or command = [argv prefix]')
        ok = False
    if ssh is not None and (not ssh.strip() or ssh.startswith("-") or any(c.isspace() for c in ssh)):
        error(f"{path}.ssh", f"must be [user@]server without spaces, not {ssh!r}")
        ok = False
    words: list[str] = []
    for i, w in enumerate(command or []):
        if not isinstance(w, str) or not w:
            error(f"{path}.command[{i}]", "must be a non-empty string")
            ok = False
        else:
            words.append(w)
    if command is not None and not command:
        error(f"{path}.command", "must name the program to run (e.g. ['docker', 'exec', '-i', 'box'])")
        ok = False
    port = typed("port", int)
    if port is not None and not 0 < port < 65536:
        error(f"{path}.port", f"must be a TCP port (1-65535), not {port}")
        ok = False
    identity = typed("identity_file", str)
    options: list[str] = []
    for i, o in enumerate(typed("options", list, [])):
        if not isinstance(o, str) or not _OPTION_RE.match(o):
            error(f"{path}.options[{i}]", f"must be an ssh option 'Name=value', not {o!r}")
            ok = False
        else:
            options.append(o)
    timeout = typed("connect_timeout", (int, float), HostConfig.connect_timeout)
    if not math.isfinite(timeout) or timeout <= 0:
        error(f"{path}.connect_timeout", f"must be a number of seconds above 0, not {timeout!r}")
        ok = False
    parallel = typed("parallel", int)
    if parallel is not None and parallel <= 0:
        error(f"{path}.parallel", f"must be greater than 0, not {parallel}")
        ok = False
    if command is not None and (port is not None or identity is not None or options):
        error(path, "port, identity_file and options belong to ssh hosts, not command hosts")
        ok = False
    if not ok:
        return None
    return HostConfig(
        name=name,
        ssh=ssh,
        port=port,
        identity_file=expand(identity) if identity else None,
        options=tuple(options),
        command=tuple(words),
        connect_timeout=float(timeout),
        parallel=parallel,
    )


def per_host_limits(
    tasks: Mapping[str, Callable[[], Any]],
    stacks: Mapping[str, Any],
    hosts: Mapping[str, HostConfig],
    parallel: int,
) -> tuple[int, dict[str, Callable[[], Any]]]:
    """Run stacks of different hosts side by side, at most ``parallel`` (or the host's own
    ``parallel``) at a time on each host: the pool size for ``tasks`` (by stack name) and
    the tasks wrapped to hold their host's slot. A fleet of N hosts then takes about as long
    as one host, not N times as long."""
    host_of = {name: getattr(stacks.get(name), "host", LOCAL) for name in tasks}
    limit = {h: (hosts[h].parallel if h in hosts else None) or parallel for h in host_of.values()}
    slots = {h: threading.BoundedSemaphore(n) for h, n in limit.items()}
    counts: dict[str, int] = {}
    for h in host_of.values():
        counts[h] = counts.get(h, 0) + 1
    size = max(1, sum(min(limit[h], n) for h, n in counts.items()))

    def held(name: str, fn: Callable[[], Any]) -> Callable[[], Any]:
        def run() -> Any:
            with slots[host_of[name]]:
                return fn()

        return run

    return size, {name: held(name, fn) for name, fn in tasks.items()}
