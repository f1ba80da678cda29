"""The host out of line: a group's members (``lite20@infer-01`` ... from ``[groups.NAME]``,
auditor.config.groups) compared fact by fact with their peers.

Members of a group are meant to be identical. Change over time singles out a host that changed;
a host that differs from its peers from its first audit only shows against them. So each fact
of a member's fingerprint that should be the same across the fleet (the OS and kernel, the
framework and runtime packages, the CPU model and its numerics features (FMA, AVX-512, AMX:
the kernels a runtime picks), CANN, the NPU driver and firmware, npu-smi, the runtime's
release, the numerics environment, the deployed model files' digests) is compared with the
value most members have. A member whose value differs from a strict majority's is out of line,
with the value, the majority's, and how many agree. Without a strict majority (a fleet half
upgraded) nothing is singled out: the report shows the split through each member's drift.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from auditor.config.groups import member, ranges
from auditor.results import Finding

MIN_MEMBERS = 3
"""Fewer members have no majority that can single one out."""

FACTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("OS", ("host", "os_release", "PRETTY_NAME")),
    ("kernel", ("host", "kernel")),
    ("CPU", ("host", "cpu_model")),
    ("CPU numerics features", ("host", "cpu_numerics")),
    ("CANN", ("cann", "version")),
    ("NPU driver", ("driver", "version")),
    ("NPU firmware", ("firmware", "version")),
    ("npu-smi", ("npu_smi", "tool_version")),
    ("runtime release", ("runtime", "runtime_version")),
    ("numpy", ("runtime", "numpy")),
)
"""Facts by name and where the fingerprint holds them; the framework packages, the environment
and the deployed models are added per key (``package mindspore-lite``, ``env X``, ``model F``)."""


@dataclass(frozen=True)
class OutOfLine:
    """One fact of one member that differs from its group's majority."""

    member: str
    fact: str
    value: str
    majority: str
    agree: int
    total: int

    def describe(self) -> str:
        return f"{self.fact} {self.value} where {self.agree} of {self.total} have {self.majority}"


def _get(doc: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(doc, Mapping):
            return None
        doc = doc.get(key)
    return doc


def facts(fingerprint: Mapping[str, Any]) -> dict[str, str]:
    """The facts a member shares with its peers, as text (a fact the fingerprint does not
    hold is left out, not compared)."""
    out = {name: str(v) for name, path in FACTS if (v := _get(fingerprint, path)) is not None}
    for name, version in (_get(fingerprint, ("packages", "framework")) or {}).items():
        if version is not None:
            out[f"package {name}"] = str(version)
    for name, value in (fingerprint.get("environment") or {}).items():
        out[f"env {name}"] = str(value)
    models = fingerprint.get("models")
    files = models.get("files") if isinstance(models, Mapping) else None
    for path, entry in (files or {}).items():  # the deployed model files (the models collector)
        if isinstance(entry, Mapping):
            digest = str(entry.get("sha256") or "unreadable")[:12]
            out[f"model {os.path.basename(str(path))}"] = digest
    return out


def groups(names: list[str]) -> dict[str, list[str]]:
    """Members by their grouped stack (``lite20`` -> ``lite20@infer-01``, ...)."""
    out: dict[str, list[str]] = {}
    for name in names:
        if (grouped := member(name)) is not None:
            out.setdefault(grouped[0], []).append(name)
    return out


def out_of_line(fingerprints: Mapping[str, Mapping[str, Any]]) -> list[OutOfLine]:
    """Each member's facts that differ from a strict majority of its peers (the members given,
    all of one group, each with its fingerprint)."""
    if len(fingerprints) < MIN_MEMBERS:
        return []
    known = {m: facts(fp) for m, fp in fingerprints.items()}
    for fs in known.values():  # a variable set, or a model file deployed, on some members only
        for fact in {f for other in known.values() for f in other if f.startswith(("env ", "model "))}:
            fs.setdefault(fact, "(unset)" if fact.startswith("env ") else "(absent)")
    return _odd(known)


def _odd(known: Mapping[str, Mapping[str, str]]) -> list[OutOfLine]:
    """Per fact, the members whose value differs from a strict majority's."""
    found = []
    for fact in sorted({f for fs in known.values() for f in fs}):
        values = Counter(fs[fact] for fs in known.values() if fact in fs)
        total = sum(values.values())
        majority, agree = values.most_common(1)[0]
        if agree * 2 <= total or agree == total:
            continue
        found += [
            OutOfLine(m, fact, fs[fact], majority, agree, total)
            for m, fs in known.items()
            if fact in fs and fs[fact] != majority
        ]
    return found


def output_digest(outputs: list[Any]) -> str:
    """What a member computed, bitwise: the digest of every output's dtype, shape and bytes."""
    h = hashlib.sha256()
    for x in outputs:
        a = np.ascontiguousarray(np.asarray(x))
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:12]


def odd_members(digests: Mapping[str, str]) -> set[str]:
    """The members (of one group, on one export) whose output digest differs from a strict
    majority's (none below ``MIN_MEMBERS``)."""
    if len(digests) < MIN_MEMBERS:
        return set()
    return {o.member for o in _odd({m: {"outputs": d} for m, d in digests.items()})}


def repeat_words(rerun: Any, first: str) -> str:
    """What a member's own rerun (a fresh process, same file and inputs) says about its odd
    outputs: ``repeats``, ``differs`` (the host does not repeat itself), or why it failed."""
    if rerun is None:
        return "not rerun"
    if not isinstance(rerun, list):
        describe = getattr(rerun, "describe", None)
        return f"rerun failed: {describe() if callable(describe) else rerun}"
    return "repeats" if output_digest(rerun) == first else "differs"


REPEATS = {
    "repeats": "its own rerun in a process started cold gives the same bits: the difference is the host's, "
    "beyond its own repeatability",
    "differs": "its own rerun in a process started cold differs from its first run: this host does not even "
    "repeat itself",
}


def digest_findings(
    digests: Mapping[tuple[str, str, str, str], Mapping[str, str]],
    distinct: Mapping[tuple[str, str, str, str], Mapping[str, list[Any]]],
    repeats: Mapping[tuple[str, str, str], str] | None = None,
) -> list[Finding]:
    """Members whose outputs differ bitwise from a strict majority of their peers' on the same
    export and inputs: ``digests`` maps (train stack, grouped stack, probe, variant) to each
    member's output digest, ``distinct`` to the outputs of each distinct digest (a cycle keeps
    one copy of what its peers computed alike, not one per host). Same file, same inputs, same
    runtime release: expected bitwise equal, so a difference is the host's (its CPU, its
    libraries, its memory), even within tolerance of the reference. ``repeats``: (member, probe,
    variant) -> what the member's own rerun said (``repeat_words``), where the peers seen by
    then could tell."""
    found = []
    for (train, base, probe, variant), members in digests.items():
        if len(members) < MIN_MEMBERS:
            continue
        for odd in _odd({m: {"outputs": d} for m, d in members.items()}):
            peer = next(m for m, d in members.items() if d == odd.majority)
            outputs = distinct[(train, base, probe, variant)]
            diff = _max_abs(outputs[odd.value], outputs[odd.majority])
            again = (repeats or {}).get((odd.member, probe, variant))
            tail = f"; {REPEATS.get(again, again)}" if again else ""
            found.append(
                Finding(
                    "out-of-line",
                    "warning",
                    odd.member,
                    f"{odd.member}/out-of-line/{probe}/{variant}",
                    f"{odd.member} computes {probe} [{variant}] differently from its peers: its outputs of "
                    f"{train}'s export differ bitwise from those of {odd.agree} of {odd.total} members of "
                    f"{base} ({_how_far(diff)} from {peer}){tail}",
                    {
                        "group_stack": base,
                        "train": train,
                        "probe": probe,
                        "variant": variant,
                        "digest": odd.value,
                        "majority": odd.majority,
                        "agree": odd.agree,
                        "total": odd.total,
                        "max_abs": diff,
                        "rerun": again,
                    },
                )
            )
    return found


def _max_abs(a: list[Any], b: list[Any]) -> float:
    """The largest difference; inf where the shapes differ or a NaN stands against a number."""
    worst = 0.0
    for x, y in zip(a, b, strict=False):
        x64, y64 = np.asarray(x, np.float64), np.asarray(y, np.float64)
        if x64.shape != y64.shape or not np.array_equal(np.isnan(x64), np.isnan(y64)):
            return float("inf")
        with np.errstate(invalid="ignore"):
            d = np.abs(x64 - y64)
        finite = d[~np.isnan(d)]
        worst = max(worst, float(finite.max()) if finite.size else 0.0)
    return worst


def _how_far(diff: float) -> str:
    if diff == 0:
        return "the same numbers: other NaN payloads or signed zeros"
    if np.isinf(diff):
        return "NaN, Inf or shapes where the peer has numbers"
    return f"max abs {diff:.3g}"


def host_not_runtime(
    findings: list[Finding], served: Mapping[tuple[str, str, str], set[str]]
) -> list[Finding]:
    """A property of the runtime (an invariant it breaks) broken by some members of a group
    while a strict majority of the members that served the same policy keep it is the hosts'
    own, not the runtime's: its remedy names those hosts instead of the runtime's maintainers.
    ``served``: (group stack, probe, variant) -> the members whose results of it came back."""

    def places_of(f: Finding) -> list[tuple[str, str]]:
        said = [(w.get("subject", ""), w.get("variant", "")) for w in f.details.get("where") or ()]
        return said or [(f.subject, str(f.details.get("variant", "")))]

    def invariant(f: Finding) -> tuple[Any, ...]:
        return (f.details.get("probe"), f.details.get("output"), f.details.get("check"))

    breakers: dict[tuple[Any, ...], set[str]] = {}  # whoever breaks the same invariant, merged or not
    for f in findings:
        if f.kind == "invariant":
            breakers.setdefault(invariant(f), set()).update(s for s, _ in places_of(f))
    out = []
    for f in findings:
        if f.kind != "invariant":
            out.append(f)
            continue
        places = places_of(f)
        bases = {m[0] for s, _ in places if (m := member(s)) is not None}
        probe = str(f.details.get("probe", ""))
        if len(bases) != 1 or any(member(s) is None for s, _ in places):
            out.append(f)
            continue
        base = bases.pop()
        breaking = {s for s in breakers[invariant(f)] if (m := member(s)) is not None and m[0] == base}
        peers_ = set().union(*(served.get((base, probe, v), set()) for _, v in places))
        keep = peers_ - breaking
        if len(keep) * 2 <= len(peers_):  # no majority keeps it: the runtime's, as said
            out.append(f)
            continue
        hosts = ranges(sorted(m[1] for s in {s for s, _ in places} if (m := member(s)) is not None))
        action = (
            f"{hosts} break{'s' if len(breaking) == 1 else ''} it where {len(keep)} of {len(peers_)} "
            f"{base} hosts keep it on the same file: the host's own, not the runtime's (its CPU features, "
            "libraries or memory): compare its fingerprint with its peers' (auditor hosts list --failing), "
            "and take it out of serving until it is in line"
        )
        out.append(replace(f, details={**f.details, "action": action, "peers_keep": len(keep)}))
    return out
