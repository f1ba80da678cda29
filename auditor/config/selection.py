"""Narrowing a run to part of the config, the way an inventory is limited: ``--stack``,
``--pair``, ``--probe``, ``--model``, ``--host`` (each repeatable), shared by ``audit``,
``check``, ``golden record``, ``fingerprint`` and ``history``.

A cycle's units of work are a probe on a pair and a model on a serving stack. A unit is
selected when it is *where* the selectors say (``--stack``: a stack of the unit, ``--host``: a
host of one of its stacks, ``--pair``: its pair, ``TRAIN->INFER`` or a model's
``NAME:REFERENCE->STACK``) and is *what* they say (``--probe`` or ``--model``: its probe or
model; the two name what to run, so they add up). Several values of one selector match any
of them; different selectors must all hold.

``narrow`` turns a config into the config of the selected units only (its pairs with their
selected probes, its models on their selected stacks, the stacks those need, and no split-mode
publication: a narrowed run must not stand for a whole one), and ``Scope`` says what such a
run covered, so that it is stored as narrowed and resolves no alert about what it did not run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from auditor.config.fleet import FleetConfig
from auditor.config.tables import Config

KINDS = ("stack", "pair", "probe", "model", "host", "group")


class SelectionError(ValueError):
    """A selector that names nothing in the config (or the history), or a selection that
    matches no unit of work: the message names the values there are."""


@dataclass(frozen=True)
class Selection:
    """The selectors as given; every tuple empty: the whole config."""

    stacks: tuple[str, ...] = ()
    pairs: tuple[str, ...] = ()
    probes: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    """``--group``: the members of these ``[groups.NAME]`` (a host selector for a whole group)."""

    @property
    def empty(self) -> bool:
        return not any(getattr(self, f"{k}s") for k in KINDS)

    def values(self, kind: str) -> tuple[str, ...]:
        return getattr(self, f"{kind}s")

    def to_json(self) -> dict[str, list[str]]:
        """The selectors given (kind -> values), for the run row and JSON output."""
        return {k: list(self.values(k)) for k in KINDS if self.values(k)}

    def describe(self) -> str:
        """As typed: ``--stack lite20 --probe ppo_policy``."""
        return " ".join(f"--{k} {v}" for k in KINDS for v in self.values(k))


@dataclass(frozen=True)
class Universe:
    """The names selectors are checked against: a config's, or what a history recorded."""

    stacks: Mapping[str, str]
    """Stack -> its host."""
    pairs: Iterable[str]
    probes: Iterable[str]
    models: Iterable[str]
    source: str = "the config"
    groups: Mapping[str, str] = field(default_factory=dict)
    """Member stack -> its group."""

    @classmethod
    def of(cls, config: Config) -> Universe:
        pairs = [p.name for p in config.pairs] + [
            model_pair(m.name, m.reference_label, t) for m in config.models.values() for t in m.stacks
        ]
        probes = {name for p in config.pairs for name in p.probes} | {
            name for names in config.fleet.publish.values() for name in names
        }
        return cls(
            {n: s.host for n, s in config.stacks.items()},
            pairs,
            sorted(probes),
            list(config.models),
            config.source,
            {n: s.group for n, s in config.stacks.items() if s.group},
        )

    def known(self, kind: str) -> list[str]:
        if kind == "stack":
            return list(self.stacks)
        if kind == "host":
            return sorted(set(self.stacks.values()))
        if kind == "group":
            return sorted(set(self.groups.values()))
        return list(getattr(self, f"{kind}s"))


def model_pair(model: str, reference: str, target: str) -> str:
    """A model's pair name in results (auditor.cycle.user_models.pair_name)."""
    return f"{model}:{reference}->{target}"


def validate(selection: Selection, universe: Universe) -> None:
    """Every selector value must name something; SelectionError lists each one that does not,
    with what there is."""
    problems = []
    for kind in KINDS:
        known = universe.known(kind)
        for value in selection.values(kind):
            if value not in known:
                shown = ", ".join(known[:20]) + (", …" if len(known) > 20 else "")
                problems.append(
                    f"--{kind} {value}: no {kind} {value!r} in {universe.source} (known: {shown or 'none'})"
                )
    if problems:
        raise SelectionError("; ".join(problems))


@dataclass(frozen=True)
class Scope:
    """What a narrowed run covered: its pairs (with models' pairs), stacks and probes or
    models. Stored with the run; None stands for a whole run."""

    selectors: dict[str, list[str]]
    pairs: tuple[str, ...]
    stacks: tuple[str, ...]
    probes: tuple[str, ...]
    """Probes and models run."""

    def to_json(self) -> dict[str, Any]:
        return {
            "selectors": self.selectors,
            "pairs": list(self.pairs),
            "stacks": list(self.stacks),
            "probes": list(self.probes),
        }

    @classmethod
    def from_json(cls, doc: Any) -> Scope | None:
        if not isinstance(doc, dict):
            return None
        return cls(
            dict(doc.get("selectors") or {}),
            tuple(doc.get("pairs") or ()),
            tuple(doc.get("stacks") or ()),
            tuple(doc.get("probes") or ()),
        )

    @classmethod
    def within(cls, config: Config, stacks: Iterable[str], selectors: dict[str, list[str]]) -> Scope:
        """A run of ``config`` that reached only ``stacks`` (and its ``source = "db"`` ones):
        the pairs and models' pairs among them, every probe and model."""
        covered = set(stacks) | set(config.fleet.remote)
        pairs = tuple(p.name for p in config.pairs if p.train in covered and p.infer in covered)
        pairs += tuple(
            model_pair(m.name, m.reference_label, t)
            for m in config.models.values()
            for t in m.stacks
            if t in covered
        )
        probes = sorted({x for p in config.pairs for x in p.probes} | set(config.models))
        return cls(selectors, pairs, tuple(n for n in config.stacks if n in covered), tuple(probes))

    def covers(self, subject: str, details: Mapping[str, Any]) -> bool:
        """Whether a finding about ``subject`` (a pair or a stack) with ``details`` was checked
        by this run: its subject was covered, and so were its probe and, for an infer stack's
        finding about another stack's export, that pair."""
        probe = details.get("probe")
        if probe is not None and probe not in self.probes:
            return False
        source = details.get("source")
        if source and subject in self.stacks and f"{source}->{subject}" not in self.pairs:
            return False
        places = [w.get("subject") for w in details.get("where") or () if isinstance(w, Mapping)]
        subjects = [p for p in places if p] or [subject]
        return all(s in self.pairs or s in self.stacks for s in subjects)


@dataclass
class Narrowed:
    config: Config
    scope: Scope | None
    """None: the selection was empty, the whole config runs."""
    skipped: list[str] = field(default_factory=list)


def narrow(config: Config, selection: Selection) -> Narrowed:
    """The config of the selected units only, and what it covers. SelectionError when a
    selector names nothing in the config, or the selectors together match nothing."""
    if selection.empty:
        return Narrowed(config, None)
    validate(selection, Universe.of(config))
    host_of = {n: s.host for n, s in config.stacks.items()}
    group_of = {n: s.group for n, s in config.stacks.items()}
    what = bool(selection.probes or selection.models)

    def where(stacks: Iterable[str], pair: str) -> bool:
        names = list(stacks)
        if selection.stacks and not set(names) & set(selection.stacks):
            return False
        if selection.hosts and not {host_of.get(n) for n in names} & set(selection.hosts):
            return False
        if selection.groups and not {group_of.get(n) for n in names} & set(selection.groups):
            return False
        return not selection.pairs or pair in selection.pairs

    pairs = []
    for p in config.pairs:
        probes = tuple(x for x in p.probes if not what or x in selection.probes)
        if probes and where((p.train, p.infer), p.name):
            pairs.append(dataclasses.replace(p, probes=probes))  # its trainer too
    models = {}
    for m in config.models.values():
        if what and m.name not in selection.models:
            continue
        # the reference side: a stack running the file, the training network's stack, or a golden
        ref = [m.reference_stack] if m.reference_stack else []
        targets = tuple(t for t in m.stacks if where([t, *ref], model_pair(m.name, m.reference_label, t)))
        if targets:
            models[m.name] = dataclasses.replace(m, stacks=targets)
    used = {n for p in pairs for n in (p.train, p.infer)}
    used |= {
        n for m in models.values() for n in (*m.stacks, *([m.reference_stack] if m.reference_stack else []))
    }
    if not what and not selection.pairs:  # a stack (or a host) named alone: its own watch too
        used |= {
            n
            for n in config.stacks
            if n in selection.stacks or host_of[n] in selection.hosts or group_of[n] in selection.groups
        }
    if not used:
        raise SelectionError(
            f"{selection.describe()} select nothing in {config.source}: no pair or model matches them all"
        )
    stacks = {n: s for n, s in config.stacks.items() if n in used}
    fleet = FleetConfig(config.fleet.remote & frozenset(stacks), {})
    narrowed = dataclasses.replace(config, stacks=stacks, pairs=tuple(pairs), models=models, fleet=fleet)
    scope = Scope(
        selection.to_json(),
        tuple(p.name for p in pairs)
        + tuple(model_pair(m.name, m.reference_label, t) for m in models.values() for t in m.stacks),
        tuple(stacks),
        tuple(sorted({x for p in pairs for x in p.probes} | set(models))),
    )
    skipped = [f"split-mode publication of {n}" for n in config.fleet.publish if n in stacks]
    return Narrowed(narrowed, scope, skipped)


def cycle_stacks(config: Config) -> list[str]:
    """The stacks a cycle of ``config`` starts a worker for, in the config's order: the stacks of
    its pairs, of its models (serving, reference, training network), those watching served files
    and those that publish; not a split-mode stack read from the database (``source = "db"``)."""
    used = {n for p in config.pairs for n in (p.train, p.infer)}
    for model in config.models.values():
        used.update(model.stacks)
        if model.reference_stack:
            used.add(model.reference_stack)
    return [
        name
        for name, stack in config.stacks.items()
        if (name in used or stack.models or name in config.fleet.publish) and not config.fleet.is_remote(name)
    ]
