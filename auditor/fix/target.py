"""What `auditor fix` repairs, and how one candidate is exported, served and audited: a probe
variant on one pair, judged by a cycle of the user's own config narrowed to it.

A candidate is a per-cell precision plan (auditor.worker.precision): the variant's network
built with float32 weights, computing in float16 except the cells kept in float32. It runs
through the cycle as the variant itself would (the same tolerances, comparators, PPO checks,
invariants, trainer correction, rollout where the config rolls the variant out): only the
network's precision differs, so a pass means what a cycle's pass means.
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from auditor.config.selection import Selection, narrow
from auditor.config.tables import Config
from auditor.config.thresholds import ProbeConfig
from auditor.cycle.cycle import Cycle
from auditor.extend.manager import Plugins
from auditor.extend.probe_spec import ProbeSpec
from auditor.results import CONSISTENT, CycleResult, ProbeResult
from auditor.stacks.session import reach

FLOAT16 = "float16"


class FixError(ValueError):
    """What was asked cannot be searched: the message says what is wrong and what there is."""


@dataclass
class Candidate:
    """One candidate audited: its plan (None: the variant as configured), the cycle's result of
    it, and the served bytes (the export the serving stack loaded)."""

    plan: dict[str, Any] | None
    result: ProbeResult | None
    cycle: CycleResult
    data: bytes | None = None
    reload: str | None = None
    """Why the export computes differently when the serving stack loads it a second time in
    one process (a server's reload), or None when it computes the same."""

    @property
    def passed(self) -> bool:
        return self.result is not None and self.result.status == CONSISTENT and self.reload is None

    @property
    def score(self) -> float:
        """How far from passing: failed outputs and checks, and the reload (inf: nothing was
        compared)."""
        r = self.result
        if r is None or not (r.outputs or r.checks):
            return float("inf")
        failed = sum(not o.passed for o in r.outputs) + sum(not c.passed for c in r.checks)
        return float(failed + (self.reload is not None))


@dataclass
class ProbeTarget:
    """A probe variant served by ``stack`` from ``train``, in ``config``."""

    config: Config
    plugins: Plugins
    probe: str
    variant: str
    train: str
    stack: str

    @classmethod
    def of(
        cls, config: Config, plugins: Plugins, probe: str, stack: str, variant: str | None, train: str | None
    ) -> ProbeTarget:
        """The target the command names, checked: FixError says what does not exist or is ambiguous."""
        specs = plugins.probes()
        if probe not in specs:
            raise FixError(f"no probe or [models] entry {probe!r} (probes: {', '.join(sorted(specs))})")
        spec = specs[probe]
        pairs = [p for p in config.pairs if probe in p.probes and p.infer == stack]
        if not pairs:
            serving = sorted({p.infer for p in config.pairs if probe in p.probes})
            raise FixError(
                f"no pair serves {probe} on stack {stack!r} in {config.source} "
                f"(its serving stacks: {', '.join(serving) or 'none'})"
            )
        if train is None:
            if len(pairs) > 1:
                raise FixError(
                    f"{probe} reaches {stack} from {len(pairs)} train stacks "
                    f"({', '.join(p.train for p in pairs)}): choose one with --train"
                )
            train = pairs[0].train
        elif train not in {p.train for p in pairs}:
            raise FixError(
                f"no pair {train}->{stack} runs {probe} (pairs serving it on {stack}: "
                f"{', '.join(p.name for p in pairs)})"
            )
        cfg = config.probe(probe)
        if variant is None:
            halves = [v for v in spec.variants if spec.variant_params(v, cfg.params).get("dtype") == FLOAT16]
            if len(halves) != 1:
                raise FixError(
                    f"{probe} has {len(halves) or 'no'} float16 variants"
                    f"{': ' + ', '.join(halves) if halves else ''}: choose one with --variant"
                )
            variant = halves[0]
        if variant not in spec.variants:
            raise FixError(f"{probe} has no variant {variant!r} (its variants: {', '.join(spec.variants)})")
        params = spec.variant_params(variant, cfg.params)
        if "dtype" not in params:
            raise FixError(
                f"{probe} has no dtype parameter: its network cannot be built in float32 and "
                "cast per cell, so there is nothing to search"
            )
        if params["dtype"] != FLOAT16:
            raise FixError(
                f"{probe} [{variant}] computes in {params['dtype']}: `auditor fix` searches which "
                "cells to keep in float32 in a float16 policy (choose a float16 variant)"
            )
        return cls(config, plugins, probe, variant, train, stack)

    @property
    def spec(self) -> ProbeSpec:
        return self.plugins.probes()[self.probe]

    @property
    def params(self) -> dict[str, Any]:
        return self.spec.variant_params(self.variant, self.config.probe(self.probe).params)

    @property
    def pair(self) -> str:
        return f"{self.train}->{self.stack}"

    @property
    def label(self) -> str:
        return f"{self.probe} [{self.variant}] {self.train} → {self.stack}"

    def narrowed(self) -> Config:
        """The user's config with this pair, probe and variant only: no telemetry, the rollout
        only where it rolls this variant out."""
        cfg = narrow(self.config, Selection(pairs=(self.pair,), probes=(self.probe,))).config
        table = cfg.probes.get(self.probe) or ProbeConfig(self.probe)
        probes = {**cfg.probes, self.probe: dataclasses.replace(table, variants=(self.variant,))}
        rollout = cfg.rollout
        if rollout.enabled and not (
            rollout.probe == self.probe
            and rollout.variant == self.variant
            and (not rollout.pairs or self.pair in rollout.pairs)
        ):
            rollout = dataclasses.replace(rollout, enabled=False)
        elif rollout.enabled:
            rollout = dataclasses.replace(rollout, pairs=(self.pair,))
        telemetry = dataclasses.replace(cfg.telemetry, enabled=False)
        return dataclasses.replace(cfg, probes=probes, rollout=rollout, telemetry=telemetry)

    def audit(self, plan: dict[str, Any] | None) -> Candidate:
        """Export, serve and audit the variant with ``plan`` (None: as configured): one cycle."""
        spec = self.spec
        if plan is not None:
            spec = dataclasses.replace(spec, precision={self.variant: dict(plan)})
        cycle = Cycle(
            self.narrowed(),
            {self.probe: spec},
            self.plugins.runtimes(),
            self.plugins.comparators(),
            plugins=self.plugins,
        )
        out = cycle.run()
        result = next(
            (
                r
                for r in out.results
                if r.probe == self.probe and r.variant == self.variant and r.pair == self.pair
            ),
            None,
        )
        data = None
        if result is not None and result.artifact is not None:
            data = cycle.artifacts.get(result.artifact.sha256)
        candidate = Candidate(plan, result, out, data)
        if candidate.passed and data is not None:
            candidate.reload = self.reloaded(data)
        return candidate

    def reloaded(self, data: bytes) -> str | None:
        """Load the served bytes in one serving worker, run the variant's inputs, free the
        model and load and run it again, as a server replacing its model does: None when both
        compute the same bits, else what differs. A cycle loads an export once per process
        (MindSpore Lite 2.0 builds a float16-cast export whose constant fold of a float32 +
        float16 Add fails from freed memory once an earlier model was freed)."""
        spec, fmt = self.spec, self.plugins.runtimes()[self.config.stacks[self.stack].runtime].loads
        inputs = spec.make_inputs(self.params)
        with tempfile.TemporaryDirectory(prefix="auditor-fix-") as tmp:
            path = Path(tmp) / f"candidate{fmt.suffix}"
            path.write_bytes(data)
            cfg = self.narrowed()
            with (
                reach(cfg, self.plugins.runtimes(), [spec.module]) as stacks,
                stacks.worker(self.stack) as worker,
            ):
                worker.start()
                sent = data if worker.is_remote else None
                outputs = []
                for model in ("first", "second"):
                    worker.request("load", model=model, path=str(path), mindir=sent)
                    outputs.append(worker.request("run", model=model, inputs=inputs).result["outputs"])
                    worker.request("unload", model=model)
        differ = [
            name
            for name, a, b in zip(spec.outputs, outputs[0], outputs[1], strict=False)
            if a.shape != b.shape or not np.array_equal(a, b, equal_nan=True)
        ]
        if not differ:
            return None
        return (
            f"loaded a second time in one {self.stack} process, it computes other values of "
            f"{', '.join(differ)} (a server that reloads the model would serve them)"
        )

    def cells(self) -> list[dict[str, Any]]:
        """The network's cells in graph order (auditor.worker.precision.units), on the train
        stack's worker, built as the candidates are (float32 weights cast to float16)."""
        spec, params = self.spec, self.params
        build = {**params, "dtype": "float32"}
        cfg = self.narrowed()
        with (
            reach(cfg, self.plugins.runtimes(), [spec.module]) as stacks,
            stacks.worker(self.train) as worker,
        ):
            worker.start()
            worker.request(
                "build",
                model="fix",
                probe={"module": spec.module, "params": build, "precision": {"compute": FLOAT16, "keep": []}},
                weights=spec.make_weights(build),
            )
            reply = worker.request("cells", model="fix", inputs=spec.make_inputs(params))
            return list(reply.result["cells"])
