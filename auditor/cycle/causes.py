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

from collections.abc import Iterable, Sequence

from auditor.alerts.engine import severity_rank
from auditor.results import Finding

MAX_SUBJECT = 255
"""The length of the findings table's subject column."""


def group(findings: Iterable[Finding]) -> list[Finding]:
    """``findings`` with those of one cause merged, each where its cause first appeared;
    findings without a cause are kept as they are."""
    order: list[Finding | str] = []
    by_cause: dict[str, list[Finding]] = {}
    for f in findings:
        if not f.cause:
            order.append(f)
            continue
        if f.cause not in by_cause:
            by_cause[f.cause] = []
            order.append(f.cause)
        by_cause[f.cause].append(f)
    return [merge(by_cause[item]) if isinstance(item, str) else item for item in order]


def merge(found: Sequence[Finding]) -> Finding:
    """One finding for findings of the same cause."""
    first = found[0]
    places = list(dict.fromkeys(f.place for f in found))
    by_summary: dict[str, list[tuple[str, str]]] = {}
    for f in found:
        at = by_summary.setdefault(f.summary or f.message, [])
        if f.place not in at:
            at.append(f.place)
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


def where(places: Sequence[tuple[str, str]]) -> str:
    """ "ms210, ms20 (fp32, fp16) and lite20 (fp16)": subjects that share their variants
    together, in the order they came."""
    variants: dict[str, list[str]] = {}
    for subject, variant in places:
        seen = variants.setdefault(subject, [])
        if variant and variant not in seen:
            seen.append(variant)
    together: dict[tuple[str, ...], list[str]] = {}
    for subject, vs in variants.items():
        together.setdefault(tuple(vs), []).append(subject)
    return " and ".join(
        ", ".join(subjects) + (f" ({', '.join(vs)})" if vs else "") for vs, subjects in together.items()
    )
