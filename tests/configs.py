"""Test configs: the shipped auditor.toml narrowed to what a test needs, parsed as the auditor
parses it. One builder for the whole suite instead of a copy per test file, so a change to the
config's layout or to parse() is made here once.

Imports only ``auditor`` and the standard library: tests/conftest.py and every test module can
import it without a circle.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from auditor.config.load import parse
from auditor.config.tables import Config
from auditor.extend.manager import builtin_probes
from auditor.extend.probe_spec import ProbeSpec
from auditor.runtime import RuntimeSpec

FP32_POLICY = {"ppo_policy": ["fp32"]}
"""One variant of the PPO policy: one result per pair, and a quarter of its exports."""

DAEMON_SECTIONS = ("schedule", "alerts", "prometheus", "daemon")
"""What only `auditor daemon` reads: a test driving a Cycle leaves them to their defaults."""


def catalog(probes: Mapping[str, ProbeSpec]) -> dict[str, dict[str, Any]]:
    """parse()'s ``known_probes`` and ``probe_variants`` for these probes, computed as `auditor`
    computes them from its plugins: probe names, parameters (types inferred from the defaults)
    and variants are checked against them. `auditor` also passes ``param_schemas``; the tests
    never did, and a test config's parameters are valid ones."""
    return {
        "known_probes": {n: p.default_params for n, p in probes.items()},
        "probe_variants": {n: p.variants for n, p in probes.items()},
    }


def probes_with(*fixtures: str) -> dict[str, ProbeSpec]:
    """The built-in probes and these test probes of tests/probe_fixtures (probes that misbehave
    on purpose inside a stack worker)."""
    return {**builtin_probes(), **{n: ProbeSpec.from_module(f"probe_fixtures.{n}") for n in fixtures}}


def narrow(
    doc: Mapping[str, Any],
    *,
    stacks: Mapping[str, Any] | None = None,
    hosts: Mapping[str, Any] | None = None,
    pairs: Sequence[Mapping[str, Any]] | None = None,
    probe_tables: Mapping[str, Any] | None = None,
    variants: Mapping[str, Sequence[str]] | None = None,
    latency: Mapping[str, Any] | None = None,
    rollout: Mapping[str, Any] | None = None,
    worker: Mapping[str, Any] | None = None,
    storage: Mapping[str, Any] | None = None,
    telemetry: Mapping[str, Any] | None = None,
    drop: Iterable[str] = (),
) -> dict[str, Any]:
    """A deep copy of ``doc`` (never the caller's: ``default_doc`` is shared by the session) cut
    down for one test. ``stacks``, ``hosts``, ``pairs`` and ``probe_tables`` ([probes]) replace
    their section; ``latency``, ``rollout``, ``worker``, ``storage`` and ``telemetry`` update
    theirs key by key; ``variants`` selects the variants each named probe runs; the sections in
    ``drop`` are removed (their defaults apply). None leaves a section as it is."""
    dropped = set(drop)
    out = {k: v for k, v in doc.items() if k not in dropped}
    replaced = dict(stacks=stacks, hosts=hosts, pairs=pairs, probes=probe_tables)
    updated = dict(latency=latency, rollout=rollout, worker=worker, storage=storage, telemetry=telemetry)
    for section, table in replaced.items():
        if table is not None:
            out[section] = table
    for section, keys in updated.items():
        if keys is not None:
            out[section] = {**out.get(section, {}), **keys}
    if variants is not None:
        tables = dict(out.get("probes", {}))
        for name, chosen in variants.items():
            tables[name] = {**tables.get(name, {}), "variants": list(chosen)}
        out["probes"] = tables
    return copy.deepcopy(out)


def build(
    doc: Mapping[str, Any],
    probes: Mapping[str, ProbeSpec] | None = None,
    *,
    source: str = "<test>",
    runtimes: Mapping[str, RuntimeSpec] | None = None,
    **narrowing: Any,
) -> Config:
    """``doc`` narrowed (``narrowing``: the keywords of narrow()) and parsed as from ``source``.
    With ``probes``, probe names, parameters and variants are checked against them (catalog());
    without, parse() skips every probe check. ``runtimes`` are the runtimes to check stacks and
    pairs against (None: not checked)."""
    known = catalog(probes) if probes is not None else {}
    return parse(narrow(doc, **narrowing), source, runtimes=runtimes, **known)
