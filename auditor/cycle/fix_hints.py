"""Which drifts `auditor fix` can address, said where the drift is: a probe's float16 variant,
or a model whose served file computes in float16 and that has a training network. The command
that searches the fix, and the newest fix already found for the policy on that pair (from the
history: `auditor history --fixes`), so the report says a fixed export exists."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from auditor.config.tables import Config
from auditor.extend.probe_spec import ProbeSpec
from auditor.history import fixes
from auditor.history.store import Store
from auditor.results import DRIFT, ProbeResult

FLOAT16 = "float16"


def command(r: ProbeResult, config: Config, probes: Mapping[str, ProbeSpec]) -> str | None:
    """The `auditor fix` command for result ``r``, or None when fix cannot address it."""
    if r.status != DRIFT:
        return None
    model = config.models.get(r.probe)
    if model is not None:
        info = r.artifact.info if r.artifact is not None else {}
        if model.train is None or FLOAT16 not in (info.get("compute_dtypes") or ()):
            return None
        return f"auditor fix {r.probe} --stack {r.infer}"
    spec = probes.get(r.probe)
    if spec is None or r.variant not in spec.variants:
        return None
    if spec.variant_params(r.variant, config.probe(r.probe).params).get("dtype") != FLOAT16:
        return None
    return f"auditor fix {r.probe} --stack {r.infer} --train {r.train} --variant {r.variant}"


def hint(
    results: list[ProbeResult], config: Config, probes: Mapping[str, ProbeSpec], history: Store | None
) -> list[ProbeResult]:
    """``results`` with ``fix`` set on each drift fix can address."""
    wanted = {i: c for i, r in enumerate(results) if (c := command(r, config, probes)) is not None}
    if not wanted:
        return results
    keys = {
        i: (results[i].probe, _variant(results[i], config), results[i].train, results[i].infer)
        for i in wanted
    }
    found: dict[fixes.Key, fixes.StoredFix] = {}
    if history is not None:
        try:
            with history.engine.connect() as conn:
                found = fixes.latest_found(conn, keys.values())
        except Exception:  # an older database without the table: the command is still said
            found = {}
    out = list(results)
    for i, cmd in wanted.items():
        fix = found.get(keys[i])
        available = None
        if fix is not None:
            available = {"id": fix.id, "cells": fix.cells, "sha256": fix.sha256, "at": str(fix.created_at)}
        out[i] = dataclasses.replace(results[i], fix={"command": cmd, "available": available})
    return out


def _variant(r: ProbeResult, config: Config) -> str:
    return "" if r.probe in config.models else r.variant


def action(r: ProbeResult) -> dict[str, str]:
    """A drift finding's ``action`` (what to do) where fix can address it: the fixed export
    already found, else the command; nothing otherwise."""
    if r.fix is None:
        return {}
    found = r.fix.get("available")
    if found:
        return {"action": f"serve the fixed export of auditor fix {found['id']} (auditor history --fixes)"}
    return {"action": f"search the cells to keep in float32: {r.fix['command']}"}
