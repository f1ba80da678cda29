"""One finding per cause: the findings of a cycle that share a cause become one finding that
says where it holds.

A runtime that masks NaN does so in every variant it runs, and a stack that shares its
kernels with another shows the same defect there too; reported once per stack, variant and
input class, one cause fills a screen and opens as many alerts. Each finding that knows its
cause (``Finding.cause``, with its ``summary`` and ``place``) is therefore merged with the
others of that cause:

    NaN masked to -10 by obs_normalizer (normalized) on ms210, ms210-graph, ms20, lite20 (fp32, fp16)

The merged finding's key is the cause (the alert follows it); its details are the first
finding's, plus ``where``: every place with its own message (values, counts, input classes).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import replace

from auditor.alerts.engine import severity_rank
from auditor.config.groups import generalized, member, ranges
from auditor.results import Finding

MAX_SUBJECT = 255
"""The length of the findings table's subject column."""


def group(findings: Iterable[Finding]) -> list[Finding]:
    """``findings`` with those of one cause merged, each where its cause first appeared;
    findings without a cause are kept as they are, but for those that say the same of two
    hosts or more, host names aside (``host_causes``)."""
    order: list[Finding | str] = []
    by_cause: dict[str, list[Finding]] = {}
    for f in host_causes(list(findings)):
        if not f.cause:
            order.append(f)
            continue
        if f.cause not in by_cause:
            by_cause[f.cause] = []
            order.append(f.cause)
        by_cause[f.cause].append(f)
    return [merge(by_cause[item]) if isinstance(item, str) else item for item in order]


def host_causes(findings: list[Finding]) -> list[Finding]:
    """Findings of no cause of their own, each about one host (a group's member stack, or a
    host its text starts with: "host infer-03: ..."), that say the same of two hosts or more,
    host names aside, as one cause: a CANN tree all hosts share, an npu-smi that fails alike,
    said once with ``{host}`` and where it holds (first), however many hosts it hits."""
    keyed: dict[tuple[str, str, str, str], list[int]] = {}
    said: dict[int, tuple[str, str, str]] = {}
    for i, f in enumerate(findings):
        if f.cause or (member(f.subject) is None and not f.message.startswith(f"host {f.subject}")):
            continue
        found = generalized(f.message)
        if found is not None:
            said[i] = found
            keyed.setdefault((f.kind, f.severity, found[0], found[2]), []).append(i)
    out = list(findings)
    for (kind, _, who, text), members in keyed.items():
        if len(members) < 2:
            continue
        summary = _OWN_PLACE.sub("", text, count=1)
        for i in members:
            f = findings[i]
            out[i] = replace(
                f,
                details={**f.details, "where_first": True},
                cause=f"{kind}/{who}/{text}"[:MAX_KEY],
                summary=summary,
                place=(f.subject, ""),
            )
    return out


_OWN_PLACE = re.compile(r"^(?:stack )?(?:\S+@\{host\}|host \{host\})(?: on host \{host\})?: ")
"""The host's own name at the head of a text, which the merged finding says where it holds."""
MAX_KEY = 255


def merge(found: Sequence[Finding]) -> Finding:
    """One finding for findings of the same cause."""
    first = found[0]
    places = list(dict.fromkeys(f.place for f in found))
    by_summary: dict[str, list[tuple[str, str]]] = {}
    for f in found:
        at = by_summary.setdefault(f.summary or f.message, [])
        if f.place not in at:
            at.append(f.place)
    if first.details.get("where_first"):  # a host's failure: where it holds comes first
        message = "; ".join(f"{where(at, hosts=True)}: {summary}" for summary, at in by_summary.items())
    else:
        message = "; ".join(f"{summary} on {where(at)}" for summary, at in by_summary.items())
    if first.example:
        message += f"; e.g. {first.example}"
    subjects = list(dict.fromkeys(p[0] for p in places))
    probes = {f.details.get("probe") for f in found}
    if len(subjects) == 1:
        subject = subjects[0]
    elif len(probes) == 1 and None not in probes:
        subject = str(probes.pop())
    else:
        subject = ", ".join(subjects)
    return Finding(
        first.kind,
        max((f.severity for f in found), key=severity_rank),
        subject[:MAX_SUBJECT],
        first.cause,
        message,
        {
            **first.details,
            **_blocks(found),
            "cause": first.cause,
            "where": [{"subject": f.place[0], "variant": f.place[1], "message": f.message} for f in found],
        },
        first.cause,
        first.summary,
        places[0] if len(places) == 1 else ("", ""),
        first.example,
    )


def _blocks(found: Sequence[Finding]) -> dict[str, list]:
    """The results every place of a rule's cause stopped (``details["blocks"]``), so that each
    stopped result, not only the first place's, points at the one finding."""
    blocks = [b for f in found for b in f.details.get("blocks") or ()]
    return {"blocks": list({repr(sorted(b.items())): b for b in blocks}.values())} if blocks else {}


def where(places: Sequence[tuple[str, str]], hosts: bool = False) -> str:
    """ "ms210, ms20 (fp32, fp16) and lite20 (fp16)": subjects that share their variants
    together, in the order they came; a group's members as their group stack and host ranges
    ("lite20 on infer-[01:12]"), where its first member came, wherever the others did.
    ``hosts``: the other subjects are hosts, said as their ranges too."""
    own: dict[str, list[str]] = {}
    for subject, variant in places:
        seen = own.setdefault(subject, [])
        if variant and variant not in seen:
            seen.append(variant)
    families: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for subject, vs in own.items():
        if (m := member(subject)) is not None:
            families.setdefault((m[0], tuple(vs)), []).append(m[1])
    variants: dict[str, list[str]] = {}
    for subject, vs in own.items():
        m = member(subject)
        if m is None:
            variants[subject] = vs
            continue
        family = families[(m[0], tuple(vs))]
        if family[0] == m[1]:  # the group's entry, once
            variants[f"{m[0]} on {ranges(family)}" if len(family) > 1 else subject] = vs
    together: dict[tuple[str, ...], list[str]] = {}
    for subject, vs in variants.items():
        together.setdefault(tuple(vs), []).append(subject)
    if hosts:  # the subjects are host names: their ranges ("infer-[01:12]")
        together = {
            vs: [ranges([s for s in subjects if " on " not in s]), *(s for s in subjects if " on " in s)]
            for vs, subjects in together.items()
        }
        together = {vs: [s for s in subjects if s] for vs, subjects in together.items()}
    return " and ".join(
        ", ".join(subjects) + (f" ({', '.join(vs)})" if vs else "") for vs, subjects in together.items()
    )
