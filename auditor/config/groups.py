"""Host groups: a fleet described once (``[groups.NAME]``), as Ansible describes one.

    [groups.infer]
    hosts = ["infer-[01:12]", "10.0.0.5"]   # Ansible-style ranges: [01:12], [0:20:5], [a:f]
    ssh = "auditor@{host}"                   # any [hosts.NAME] key, {host} substituted
    # command = ["docker", "exec", "-i", "{host}"]

    [stacks.lite20]
    group = "infer"                          # one stack per host: lite20@infer-01, ...
    role = "infer"
    runtime = "mindspore-lite"
    python = "/opt/stacks/lite20/bin/python" # {host} is substituted here too

The group is expanded in the document before it is validated, so everything after the config
(the cycle, the history, the reports, ``--host``) sees ordinary hosts and stacks: a host table
per group member, a stack ``NAME@HOST`` per member for each grouped stack, and a pair per member
for each pair naming a grouped stack (both sides in the same group: member by member). A
model's ``stacks`` naming a grouped stack name every member; ``[rollout] pairs`` likewise.

Why a document rewrite and not a new kind of stack: every check, message and command already
speaks of hosts and stacks; a member is exactly one of each, named so that a person can tell
the group (``lite20@infer-07``). What cannot be expanded (an unknown group, a bad range, a
member that collides with a ``[hosts.NAME]``) is a config error with its key path.
"""

from __future__ import annotations

import copy
import os
import re
import string
from collections.abc import Callable, Sequence
from typing import Any

import yaml

RANGE_RE = re.compile(r"\[([^\[\]]*)\]")
NUMERIC = re.compile(r"^(\d+):(\d+)(?::(\d+))?$")
ALPHA = re.compile(r"^([a-z]):([a-z])(?::(\d+))?$")
MEMBER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
MAX_MEMBERS = 4096
SEP = "@"
"""Between a grouped stack's name and its member host: ``lite20@infer-07``."""


def member(name: str) -> tuple[str, str] | None:
    """(grouped stack, host) of a member's stack name (``lite20@infer-07``), else None."""
    base, sep, host = name.partition(SEP)
    return (base, host) if sep and base and host else None


_NUMBERED = re.compile(r"^(.*?)(\d+)(\D*)$")


def ranges(hosts: Sequence[str]) -> str:
    """Host names said in the ranges they were written in: ``infer-[01:12]``,
    ``infer-[01:03,05,07:12]``; names that share no numbered pattern are listed as they are.
    The inverse of ``[groups.NAME] hosts`` patterns, for reports (a list never grows with the
    fleet where the hosts are a range)."""
    found = {h: _NUMBERED.match(h) for h in dict.fromkeys(hosts)}
    padded: dict[tuple[str, str], int] = {}  # a zero-padded family's width ("09" and "10": 2)
    for m in found.values():
        if m is not None and m.group(2).startswith("0") and len(m.group(2)) > 1:
            padded.setdefault((m.group(1), m.group(3)), len(m.group(2)))
    families: dict[tuple[str, str, int], list[int]] = {}
    order: list[tuple[str, str, int] | str] = []
    for host, m in found.items():
        if m is None:
            order.append(host)
            continue
        head, digits, tail = m.groups()
        width = padded.get((head, tail), 0)
        width = width if len(digits) == width else 0
        key = (head, tail, width)
        if key not in families:
            families[key] = []
            order.append(key)
        families[key].append(int(digits))
    out = []
    for item in order:
        if isinstance(item, str):
            out.append(item)
            continue
        head, tail, width = item
        numbers = sorted(set(families[item]))
        if len(numbers) == 1:
            out.append(f"{head}{str(numbers[0]).zfill(width)}{tail}")
            continue
        runs: list[list[int]] = []
        for n in numbers:
            if runs and n == runs[-1][-1] + 1:
                runs[-1].append(n)
            else:
                runs.append([n])
        spec = ",".join(
            str(r[0]).zfill(width) if len(r) == 1 else f"{str(r[0]).zfill(width)}:{str(r[-1]).zfill(width)}"
            for r in runs
        )
        out.append(f"{head}[{spec}]{tail}")
    return ", ".join(out)


MEMBER_IN_TEXT = r"[A-Za-z0-9_.:-]+@[A-Za-z0-9_.-]+"
"""A member's stack name (``lite20@infer-07``) inside a text."""
_HOST_WORDS = re.compile(r"^host ([A-Za-z0-9_.-]+)\b")


def generalized(text: str) -> tuple[str, str, str] | None:
    """(who, host, the text with the host's name as ``{host}``) when ``text`` is about one
    host: it names exactly one group member (who: its group stack), or it starts with
    ``host NAME`` (who: ``host``). Else None. Texts that say the same of several hosts are
    one cause (the cycle's findings, the reports' lines)."""
    found = {m for name in re.findall(MEMBER_IN_TEXT, text) if (m := member(name)) is not None}
    start = _HOST_WORDS.match(text)
    if start is not None and {h for _, h in found} <= {start.group(1)}:  # "host X: ... lite20@X ..."
        base, host = "host", start.group(1)
        text = "host {host}" + text[start.end() :]
    elif len(found) == 1:
        base, host = found.pop()
        text = text.replace(f"{base}{SEP}{host}", f"{base}{SEP}{{host}}")
    else:
        return None
    return base, host, re.sub(rf"(?<![\w.-]){re.escape(host)}(?![\w-])", "{host}", text)


Error = Callable[[str, str], None]


def expand_pattern(pattern: str) -> list[str]:
    """The host names of one pattern, Ansible's way: each ``[start:end(:step)]`` (numbers, kept
    zero-padded to the start's width; or single letters) is every value in order; several
    ranges multiply. ValueError says what is wrong."""
    match = RANGE_RE.search(pattern)
    if match is None:
        if "[" in pattern or "]" in pattern:
            raise ValueError(f"{pattern!r}: an unclosed or nested range")
        return [pattern]
    head, spec, tail = pattern[: match.start()], match.group(1), pattern[match.end() :]
    number, alpha = NUMERIC.match(spec), ALPHA.match(spec)
    if number is not None:
        start, end, step = int(number.group(1)), int(number.group(2)), int(number.group(3) or 1)
        width = len(number.group(1)) if number.group(1).startswith("0") else 0
        values = [str(i).zfill(width) for i in range(start, end + 1, step)] if step > 0 else []
    elif alpha is not None:
        letters = string.ascii_lowercase
        start, end, step = (
            letters.index(alpha.group(1)),
            letters.index(alpha.group(2)),
            int(alpha.group(3) or 1),
        )
        values = [letters[i] for i in range(start, end + 1, step)] if step > 0 else []
    else:
        raise ValueError(f"{pattern!r}: [{spec}] is not a range (write [01:12], [0:20:5] or [a:f])")
    if not values:
        raise ValueError(f"{pattern!r}: [{spec}] is empty (the start is after the end, or the step is 0)")
    out: list[str] = []
    for value in values:
        out += expand_pattern(head + value + tail)
        if len(out) > MAX_MEMBERS:
            raise ValueError(f"{pattern!r}: more than {MAX_MEMBERS} hosts")
    return out


def _path(value: Any, base: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("must be the path of an Ansible inventory file (INI)")
    return os.path.join(base, os.path.expanduser(value))


def inventory_hosts(path: str, group: str) -> list[str]:
    """The host patterns of ``group`` in an Ansible inventory, INI or YAML (``.yml``,
    ``.yaml``): its own hosts (``infer-[01:12] ansible_user=x`` gives ``infer-[01:12]``) and
    its child groups', in order. Variables (host variables, ``:vars``, ``vars:``) are not read:
    the group table says how hosts are reached. A documented subset of Ansible's inventory,
    without ansible-core (a large dependency, and its plugins run code): no dynamic inventory
    scripts or plugins, no ``host_vars``/``group_vars`` folders. ValueError names the file, the
    line or the group."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    if path.endswith((".yml", ".yaml")):
        hosts, children = _yaml_groups(path, text)
    else:
        hosts, children = _ini_groups(path, text.splitlines())

    def collect(name: str, seen: tuple[str, ...]) -> list[str]:
        if name in seen:
            raise ValueError(f"{path}: group {name} contains itself ({' -> '.join((*seen, name))})")
        if name not in hosts and name not in children:
            known = ", ".join(sorted(set(hosts) | set(children))) or "none"
            raise ValueError(f"{path} has no group {name!r} (groups: {known})")
        out = list(hosts.get(name, []))
        for child in children.get(name, []):
            out += [h for h in collect(child, (*seen, name)) if h not in out]
        return out

    return collect(group, ())


Groups = tuple[dict[str, list[str]], dict[str, list[str]]]
"""Each group's own host patterns, and its child groups."""


def _ini_groups(path: str, lines: list[str]) -> Groups:
    """``[group]`` host lines (the first word of each) and ``[group:children]`` lines."""
    hosts: dict[str, list[str]] = {}
    children: dict[str, list[str]] = {}
    section: tuple[str, str] | None = None
    for number, raw in enumerate(lines, 1):
        line = "" if raw.lstrip().startswith(("#", ";")) else raw.split(" #", 1)[0].strip()
        if not line:
            continue
        if line.startswith("["):
            if not line.endswith("]"):
                raise ValueError(f"{path}:{number}: {raw.strip()!r} is not a [section] line")
            name, _, kind = line[1:-1].partition(":")
            section = (name, kind)
            if kind == "children":
                children.setdefault(name, [])
            elif kind != "vars":
                hosts.setdefault(name, [])
            continue
        if section is None:  # hosts before any section: Ansible's "ungrouped"
            section = ("ungrouped", "")
            hosts.setdefault("ungrouped", [])
        name, kind = section
        if kind == "vars":
            continue
        (children if kind == "children" else hosts)[name].append(line.split()[0])
    return hosts, children


def _yaml_groups(path: str, text: str) -> Groups:
    """Ansible's YAML inventory: top-level groups (``all``, ...), each a mapping with
    ``hosts`` (host pattern -> its variables), ``children`` (group name -> group) and
    ``vars``; a group met in several places is one group (Ansible merges them)."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ValueError(f"{path}{where}: not YAML: {getattr(exc, 'problem', None) or exc}") from None
    if doc is None:
        return {}, {}
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: an inventory is a mapping of groups (all: ...), not {type(doc).__name__}")
    hosts: dict[str, list[str]] = {}
    children: dict[str, list[str]] = {}

    def walk(name: str, node: Any, trail: str) -> None:
        hosts.setdefault(name, [])
        children.setdefault(name, [])
        if node is None:
            return
        if not isinstance(node, dict):
            raise ValueError(f"{path}: {trail} must be a mapping (hosts:, children:, vars:)")
        unknown = sorted(set(node) - {"hosts", "children", "vars"})
        if unknown:
            raise ValueError(
                f"{path}: {trail} has {', '.join(map(str, unknown))}: a group has hosts, children, vars"
            )
        own = node.get("hosts") or {}
        if not isinstance(own, dict):
            raise ValueError(f"{path}: {trail}.hosts must map each host to its variables (or nothing)")
        hosts[name] += [str(h) for h in own if str(h) not in hosts[name]]
        kids = node.get("children") or {}
        if not isinstance(kids, dict):
            raise ValueError(f"{path}: {trail}.children must map each child group's name to the group")
        for child, sub in kids.items():
            if str(child) not in children[name]:
                children[name].append(str(child))
            walk(str(child), sub, f"{trail}.children.{child}")

    for name, node in doc.items():
        walk(str(name), node, str(name))
    return hosts, children


def _substitute(value: Any, host: str) -> Any:
    """``value`` with ``{host}`` replaced in every string, inside lists and tables too."""
    if isinstance(value, str):
        return value.replace("{host}", host)
    if isinstance(value, list):
        return [_substitute(v, host) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, host) for k, v in value.items()}
    return value


def members(doc: dict[str, Any], error: Error, base: str = ".") -> dict[str, list[str]]:
    """Each group's member hosts, in order, from ``[groups.NAME] hosts``."""
    groups = doc.get("groups")
    if groups is None:
        return {}
    if not isinstance(groups, dict):
        error("groups", "must be a table of [groups.NAME] tables")
        return {}
    out: dict[str, list[str]] = {}
    owner: dict[str, str] = {}
    for name, table in groups.items():
        path = f"groups.{name}"
        if not isinstance(table, dict):
            error(path, "must be a table")
            continue
        if not MEMBER_RE.match(name):
            error(path, "group names use letters, digits, '.', '_' and '-'")
            continue
        patterns = table.get("hosts")
        if "inventory" in table:
            if "hosts" in table:
                error(path, "set either hosts or inventory, not both")
                continue
            try:
                patterns = inventory_hosts(_path(table["inventory"], base), str(table.get("group", name)))
            except ValueError as exc:
                error(f"{path}.inventory", str(exc))
                continue
        if not isinstance(patterns, list) or not patterns or not all(isinstance(p, str) for p in patterns):
            said = (
                "is required"
                if patterns is None
                else f"must be a list of host names and patterns, not {patterns!r}"
            )
            error(f"{path}.hosts", f'{said}: the group\'s hosts, e.g. ["infer-[01:12]", "10.0.0.5"]')
            continue
        found: list[str] = []
        for i, pattern in enumerate(patterns):
            try:
                names = expand_pattern(pattern)
            except ValueError as exc:
                error(f"{path}.hosts[{i}]", str(exc))
                continue
            for host in names:
                if not MEMBER_RE.match(host):
                    error(
                        f"{path}.hosts[{i}]", f"{host!r} is not a host name (letters, digits, '.', '_', '-')"
                    )
                elif host in found or host in owner:
                    error(
                        f"{path}.hosts[{i}]", f"host {host} is listed twice (also in {owner.get(host, name)})"
                    )
                else:
                    found.append(host)
                    owner[host] = name
        out[name] = found
    return out


def expand(
    doc: dict[str, Any], error: Error, base: str = ".", origin: dict[str, str] | None = None
) -> dict[str, Any]:
    """The document with its groups expanded into ordinary hosts, stacks and pairs (the input
    is not changed); problems are reported through ``error(path, message)``; ``base``: the
    config file's folder (a relative ``inventory`` is read from there); ``origin``: filled
    with each member host's group."""
    groups = members(doc, error, base)
    stacks = doc.get("stacks") if isinstance(doc.get("stacks"), dict) else {}
    grouped = {
        name: table.get("group")
        for name, table in stacks.items()
        if isinstance(table, dict) and "group" in table
    }
    if not groups and not grouped:
        return doc
    out = copy.deepcopy(doc)
    out.pop("groups", None)
    hosts = out.setdefault("hosts", {}) if isinstance(out.get("hosts", {}), dict) else {}
    for name, table in (doc.get("groups") or {}).items():
        if name not in groups or not isinstance(table, dict):
            continue
        keys = {k: v for k, v in table.items() if k not in ("hosts", "inventory", "group")}
        for host in groups[name]:
            if host in hosts:
                error(f"groups.{name}.hosts", f"host {host} also has a [hosts.{host}] table: name it once")
                continue
            hosts[host] = _substitute(keys, host)
            if origin is not None:
                origin[host] = name
    # a group whose table is there but made no members said why already: its stacks stay as
    # written, so that no second, false line follows (no such table, no pairs)
    tables = doc.get("groups") if isinstance(doc.get("groups"), dict) else {}
    failed = {g for g in tables if not groups.get(g)}
    expanded: dict[str, list[str]] = {}
    for name, group in grouped.items():
        path = f"stacks.{name}.group"
        if isinstance(group, str) and group in failed:
            continue
        if not isinstance(group, str) or group not in groups:
            error(path, f"no [groups.{group}] table (groups: {', '.join(groups) or 'none'})")
            continue
        if "host" in stacks[name]:
            error(f"stacks.{name}", "set either host or group, not both")
            continue
        table = {k: v for k, v in stacks[name].items() if k != "group"}
        del out["stacks"][name]
        expanded[name] = []
        for host in groups[group]:
            member = f"{name}{SEP}{host}"
            out["stacks"][member] = {**_substitute(table, host), "host": host, "group": group}
            expanded[name].append(member)
    if expanded:
        _pairs(out, expanded, grouped, error)
        _models(out, expanded, error)
    return out


def _pairs(
    out: dict[str, Any], expanded: dict[str, list[str]], grouped: dict[str, Any], error: Error
) -> None:
    pairs = out.get("pairs")
    if not isinstance(pairs, list):
        return
    made: list[Any] = []
    renamed: dict[str, list[str]] = {}
    for i, pair in enumerate(pairs):
        if not isinstance(pair, dict):
            made.append(pair)
            continue
        train, infer = pair.get("train"), pair.get("infer")
        sides = [s for s in (train, infer) if s in expanded]
        if not sides:
            made.append(pair)
            continue
        if len(sides) == 2 and grouped[train] != grouped[infer]:
            error(f"pairs[{i}]", f"{train} and {infer} are stacks of two groups: pair them within one group")
            continue
        hosts = [m.partition(SEP)[2] for m in expanded[sides[0]]]
        names = []
        for host in hosts:
            t = f"{train}{SEP}{host}" if train in expanded else train
            n = f"{infer}{SEP}{host}" if infer in expanded else infer
            made.append({**pair, "train": t, "infer": n})
            names.append(f"{t}->{n}")
        renamed[f"{train}->{infer}"] = names
    out["pairs"] = made
    rollout = out.get("rollout")
    if isinstance(rollout, dict) and isinstance(rollout.get("pairs"), list):
        rollout["pairs"] = [m for p in rollout["pairs"] for m in renamed.get(p, [p])]


def _models(out: dict[str, Any], expanded: dict[str, list[str]], error: Error) -> None:
    models = out.get("models")
    if not isinstance(models, dict):
        return
    for name, table in models.items():
        if not isinstance(table, dict):
            continue
        if isinstance(table.get("stacks"), list):
            table["stacks"] = [m for s in table["stacks"] for m in expanded.get(s, [s])]
        if table.get("reference") in expanded:
            error(f"models.{name}.reference", f"{table['reference']} is a group's stack: name one member")
        train = table.get("train")
        if isinstance(train, dict) and train.get("stack") in expanded:
            error(f"models.{name}.train.stack", f"{train['stack']} is a group's stack: name one member")
