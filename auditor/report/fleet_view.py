"""A group of hosts on one screen. A group's members are stacks named ``BASE@HOST``
(auditor.config.groups); a report that gave each member its own lines would grow with the
fleet and bury the one host that behaves differently. Here:

- the members' pair blocks that say the same (the same statuses, the same failures, the
  same causes; numbers aside) are one block: a consistent one counts its hosts, a failing one
  is shown for its first host and names the others (the first few, then how many more);
- the members' stacks that are fine are one entry per group stack;
- identical lines of several hosts (NPU telemetry) are one line naming the hosts;
- a list of members in a finding's text names the group stack and its hosts, the ones
  left out when most are in it.

Everything here works on names and rendered words, after the results are judged: nothing is
decided by it, only said in fewer lines.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from auditor.config.groups import MEMBER_IN_TEXT, SEP, generalized, member, ranges
from auditor.history.queries import Series
from auditor.results import worst

SHOWN = 4
"""Hosts named before "and N more"."""
LIST_ALL = "auditor hosts list --failing"
"""The command that lists every host that fails or is out of line (auditor.cli.hosts)."""

T = TypeVar("T")


def some(hosts: Sequence[str], most: int = SHOWN) -> str:
    """infer-01, infer-02, infer-03, infer-04 and 9 more."""
    if len(hosts) <= most + 1:
        return ", ".join(hosts[:-1]) + (" and " if len(hosts) > 1 else "") + hosts[-1] if hosts else ""
    return f"{', '.join(hosts[:most])} and {len(hosts) - most} more"


def named(hosts: Sequence[str]) -> str:
    """Hosts in as few words as they allow: their ranges (``infer-[01:03,05:12]``) where those
    are short, else the first few and how many more."""
    said = ranges(hosts)
    return said if len(said) <= RANGES_WIDTH else some(hosts)


RANGES_WIDTH = 60
"""Ranges longer than this (hosts with no pattern) are said as the first few and a count."""


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def fold(
    items: Sequence[T],
    family: Callable[[T], tuple[Hashable, str] | None],
    signature: Callable[[T], Hashable],
) -> list[tuple[T, list[str]]]:
    """Each item with the hosts of the members it stands for (its own first). ``family``: the
    key of the items that are members of one group stack (and the member's host), None for an
    item of no group; ``signature``: what must be equal for two members to be said as one.
    The order is kept: a folded item stands where its first member stood."""
    keyed: dict[tuple[Hashable, Hashable], list[tuple[T, str]]] = {}
    order: list[tuple[Hashable, Hashable] | T] = []
    for item in items:
        fam = family(item)
        if fam is None:
            order.append(item)
            continue
        key = (fam[0], signature(item))
        if key not in keyed:
            keyed[key] = []
            order.append(key)
        keyed[key].append((item, fam[1]))
    out: list[tuple[T, list[str]]] = []
    for entry in order:
        if isinstance(entry, tuple) and entry in keyed:
            members = keyed[entry]
            out.append((members[0][0], [host for _, host in members]))
        else:
            out.append((entry, []))  # type: ignore[arg-type]
    return out


def hosts_of(names: Iterable[str]) -> dict[str, list[str]]:
    """Group stack -> its members' hosts, as they come."""
    out: dict[str, list[str]] = {}
    for name in names:
        m = member(name)
        if m is not None:
            out.setdefault(m[0], []).append(m[1])
    return out


_NAME = MEMBER_IN_TEXT
_RUN = re.compile(rf"{_NAME}(?:(?:, | and |, and ){_NAME})+")


def members_in_words(text: str, groups: Mapping[str, Sequence[str]]) -> str:
    """A run of two or more member names in ``text`` ("lite20@infer-01, lite20@infer-02,
    ...") said as the group stack and its hosts: "every lite20 host (32)", "31 of 32 lite20
    hosts (all but infer-07)", or "3 lite20 hosts (infer-[01:02,05])"."""

    def said(match: re.Match[str]) -> str:
        names = re.findall(_NAME, match.group(0))
        by_base: dict[str, list[str]] = {}
        for name in names:
            m = member(name)
            if m is None:
                return match.group(0)
            by_base.setdefault(m[0], []).append(m[1])
        parts = []
        for base, hosts in by_base.items():
            every = list(groups.get(base, ()))
            left = [h for h in every if h not in set(hosts)]
            if every and not left:
                parts.append(f"every {base} host ({len(every)})")
            elif every and len(left) <= SHOWN and len(hosts) > len(left):
                parts.append(f"{len(hosts)} of {len(every)} {base} hosts (all but {named(left)})")
            else:
                parts.append(f"{len(hosts)} {base} hosts ({named(hosts)})")
        return "; ".join(parts)

    return _RUN.sub(said, text)


def stacks_folded(stacks: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The run's stacks with each group stack's members that are fine as one entry (``name``
    "lite20", ``host`` "31 hosts"), and those with one problem (host names aside) as one entry
    (``host`` "infer-[04,09]", the problem with ``{host}``)."""

    def family(s: Mapping[str, Any]) -> tuple[Hashable, str] | None:
        m = member(s["name"])
        return (m[0], m[1]) if m is not None else None

    def problem(s: Mapping[str, Any]) -> str:
        """The member's problem with its own host's name as ``{host}``."""
        m = member(s["name"])
        text = s["problem"] or ""
        return re.sub(rf"(?<![\w.-]){re.escape(m[1])}(?![\w-])", "{host}", text) if m else text

    def signature(s: Mapping[str, Any]) -> Hashable:
        return ("ok", s["version"], s["runtime"]) if s["state"] == "ok" else (s["state"], problem(s))

    out = []
    for s, hosts in fold(list(stacks), family, signature):
        if len(hosts) > 1:
            base = member(s["name"])
            assert base is not None
            if s["state"] == "ok":
                s = {**s, "name": base[0], "host": plural(len(hosts), "host")}
            else:
                s = {**s, "name": base[0], "host": named(hosts), "problem": problem(s)}
        out.append(dict(s))
    return out


def texts_folded(texts: Sequence[str], least: int = 2) -> list[tuple[str, list[int]]]:
    """Texts that say the same of ``least`` or more hosts, host names aside, as one: "lite20 on
    infer-[01:32]: ... {host}/policy.mindir ...", "32 hosts (infer-[01:32]): NPU telemetry
    not read ...". Each resulting text with the indices of the texts it stands for (order
    kept)."""
    keys = [generalized(t) for t in texts]
    counts: dict[tuple[str, str], list[int]] = {}
    for i, k in enumerate(keys):
        if k is not None:
            counts.setdefault((k[0], k[2]), []).append(i)
    out: list[tuple[str, list[int]]] = []
    for i, (text, k) in enumerate(zip(texts, keys, strict=True)):
        same = counts.get((k[0], k[2]), []) if k is not None else []
        if k is None or len(same) < least:
            out.append((text, [i]))
        elif same[0] == i:
            hosts = [keys[j][1] for j in same]  # type: ignore[index]
            if k[0] == "host":
                out.append((k[2].replace("host {host}", f"{len(hosts)} hosts ({named(hosts)})", 1), same))
            else:
                words = f"{k[0]} on {named(hosts)}"
                out.append((k[2].replace(f"{k[0]}{SEP}{{host}}", words), same))
    return out


def blocks_folded(
    blocks: Mapping[str, str], same: Callable[[str, str], str] = lambda text, host: text
) -> list[str]:
    """Per stack (by name) its block of text, a group's members whose blocks say the same as
    one block: the first member's, its name and host as ``BASE on RANGES`` / ``{host}``, with
    how many members it stands for (``--members`` shows each). What must be equal is the block
    with the member's host as ``{host}`` and timings left out, as ``same(text, host)`` further
    reduces it (a fingerprint drops the machine's own name and id). A member that differs in
    anything else, and every other stack, is shown as it is."""
    alike: dict[tuple[str, str], list[str]] = {}
    order: list[tuple[str, str] | str] = []
    for name, text in blocks.items():
        m = member(name)
        if m is None:
            order.append(name)
            continue
        key = (m[0], _TIMING.sub("{t} s", same(_host_as_token(text, m[1]), m[1])))
        if key not in alike:
            alike[key] = []
            order.append(key)
        alike[key].append(m[1])
    out = []
    for item in order:
        if isinstance(item, str):
            out.append(blocks[item])
            continue
        base, _ = item
        hosts = alike[item]
        first = blocks[f"{base}{SEP}{hosts[0]}"]
        if len(hosts) == 1:
            out.append(first)
            continue
        title, nl, rest = same(_host_as_token(first, hosts[0]), hosts[0]).partition("\n")
        title = title.replace(f"{base}{SEP}{{host}}", f"{base} on {ranges(hosts)}", 1)
        out.append(f"{title}  [{len(hosts)} members alike; --members shows each]{nl}{rest}")
    return out


_TIMING = re.compile(r"\b\d+(?:\.\d+)? s\b")


def _host_as_token(text: str, host: str) -> str:
    return re.sub(rf"(?<![\w.-]){re.escape(host)}(?![\w-])", "{host}", text)


# -- the HTML report: a group's members' series as one ------------------------------------------
Key = tuple[str, str, str]
"""(pair, probe, variant)."""


def family_keys(keys: Iterable[Key]) -> dict[Key, Key]:
    """Each member pair's key -> its group's key (``ms20->lite20@* (32 hosts)``, probe,
    variant), for the groups of two members or more; other keys are left out."""
    families: dict[Key, list[Key]] = {}
    for key in dict.fromkeys(keys):  # a key once, however many outputs came with it
        train, _, infer = key[0].rpartition("->")
        m = member(infer)
        if m is not None and train:
            families.setdefault((f"{train}->{m[0]}{SEP}*", key[1], key[2]), []).append(key)
    out: dict[Key, Key] = {}
    for (pair, probe, variant), members in families.items():
        if len(members) > 1:
            for key in members:
                out[key] = (f"{pair} ({len(members)} hosts)", probe, variant)
    return out


def fold_statuses(
    statuses: Mapping[Key, list[tuple[int, Any, str]]], families: Mapping[Key, Key]
) -> dict[Key, list[tuple[int, Any, str]]]:
    """Per key its runs' statuses; a group's members' as one key, each run's worst status."""
    out: dict[Key, dict[int, tuple[Any, list[str]]]] = {}
    for key, points in statuses.items():
        runs = out.setdefault(families.get(key, key), {})
        for run, at, status in points:
            runs.setdefault(run, (at, []))[1].append(status)
    return {
        key: [(run, at, worst(sts) or "") for run, (at, sts) in sorted(runs.items())]
        for key, runs in out.items()
    }


def fold_series(series: Iterable[Series], families: Mapping[Key, Key], how: str) -> list[Series]:
    """A group's members' series of one output as one: per run, the ``max`` or ``min`` (the
    worst member, as the metric goes: NaN counts as the worst) or the ``median`` of the members'
    values; other series as they are."""
    kept: list[Series] = []
    merged: dict[tuple[Key, str], dict[int, list[tuple[Any, float, str]]]] = {}
    first: dict[tuple[Key, str], Series] = {}
    for s in series:
        fam = families.get(s.key[:3])
        if fam is None:
            kept.append(s)
            continue
        runs = merged.setdefault((fam, s.output), {})
        first.setdefault((fam, s.output), s)
        for run, at, value, status in s.points:
            runs.setdefault(run, []).append((at, value, status))
    for (fam, output), runs in merged.items():
        like = first[(fam, output)]
        points = []
        for run, values in sorted(runs.items()):
            nums = [v for _, v, _ in values]
            if how in ("max", "min"):  # the worst member: NaN counts as the worst
                value = math.nan if any(math.isnan(v) for v in nums) else (max if how == "max" else min)(nums)
            else:
                value = statistics.median(nums)
            points.append((run, values[0][0], value, worst(st for _, _, st in values) or ""))
        infer = f"{like.infer.partition(SEP)[0]}{SEP}*" if like.infer else like.infer
        kept.append(Series(fam[0], fam[1], fam[2], output, like.metric, like.train, infer, points))
    return kept
