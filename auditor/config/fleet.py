"""Split-mode settings of the stacks (``[stacks.X] source`` and ``[stacks.X] publish``).

A training host and an inference host in networks that cannot reach each other each run an
auditor on one shared history database:

- the train side: ``[stacks.ms20] publish = ["ppo_policy"]`` exports those probes' variants on
  ms20 every cycle and publishes the MindIR, the inputs and ms20's outputs in the database
  (no pair needed for that);
- the infer side: ``[stacks.ms20] source = "db"`` (role train, no python) stands for the
  remote ms20; its pairs (``ms20 -> lite20``) load the latest complete publication of ms20 on
  the local infer stacks and compare with the published outputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

SOURCES = ("local", "db")


class _Errors(Protocol):
    def error(self, path: str, message: str) -> None: ...


@dataclass(frozen=True)
class FleetConfig:
    remote: frozenset[str] = frozenset()
    """Train stacks whose exports come from the history database (``source = "db"``)."""
    publish: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Train stack -> the probes whose exports it publishes every cycle."""

    def is_remote(self, stack: str) -> bool:
        return stack in self.remote


def is_remote(raw: Any) -> bool:
    """Whether a raw ``[stacks.X]`` table says ``source = "db"`` (it then needs no python)."""
    return isinstance(raw, dict) and raw.get("source") == "db"


def parse(c: _Errors, stacks_doc: Any, known_probes: Any = None) -> FleetConfig:
    """Read ``source`` and ``publish`` of every ``[stacks.X]`` and check what needs more than one
    key (their types and values are checked by the config schema); errors go to ``c``."""
    remote: set[str] = set()
    publish: dict[str, tuple[str, ...]] = {}
    if not isinstance(stacks_doc, dict):
        return FleetConfig()
    for name, s in stacks_doc.items():
        if not isinstance(s, dict):
            continue
        path = f"stacks.{name}"
        source = s.get("source", "local")
        if source == "db":
            if s.get("role") != "train":
                c.error(f"{path}.source", "only a train stack can come from the database (its publications)")
            if "publish" in s:
                c.error(f"{path}.publish", "a stack read from the database cannot publish")
            remote.add(name)
        elif "max_publication_age" in s:
            c.error(
                f"{path}.max_publication_age",
                'only a stack read from the database (source = "db") has publications to age',
            )
        if "publish" in s and source != "db":
            probes = s["publish"]
            if not isinstance(probes, list) or not all(isinstance(p, str) for p in probes):
                continue  # the schema says what is wrong
            if probes and s.get("role") != "train":
                c.error(f"{path}.publish", "only a train stack exports, so only a train stack publishes")
            for i, p in enumerate(probes):
                if known_probes is not None and p not in known_probes:
                    known = ", ".join(sorted(known_probes))
                    c.error(f"{path}.publish[{i}]", f"unknown probe {p!r} (known: {known})")
            if probes:
                publish[name] = tuple(probes)
    return FleetConfig(frozenset(remote), publish)


__all__ = ["FleetConfig", "is_remote", "parse"]
