"""What `auditor fix` repairs, and how one candidate is exported, served and audited: a probe's
float16 variant on one pair, or a ``[models.NAME]`` with its training network, each judged by
a cycle of the user's own config narrowed to it.

A candidate is a per-cell precision plan (auditor.worker.precision): the network built with
float32 weights, computing in float16 except the cells kept in float32. A probe variant's runs
through the cycle as the variant itself would; a model's training network is exported with it
on its train stack and served in place of the model's file, judged against that same training
network. The same tolerances, comparators, PPO checks, invariants, trainer correction (and
rollout where the config rolls it out) apply: only the precision differs, so a pass means what
a cycle's pass means. A candidate that passes is then built again by the serving stack after
it freed it, as a server replacing its model does (`reloaded`).
"""

from __future__ import annotations

import dataclasses
import functools
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from auditor.config.selection import Selection, narrow
from auditor.config.tables import Config, ConvertTable
from auditor.config.thresholds import ProbeConfig
from auditor.config.user_models import ModelConfig
from auditor.cycle.cycle import Cycle
from auditor.extend.manager import Plugins
from auditor.extend.probe_spec import ProbeSpec
from auditor.policy.model_file import ModelPlan, plan_model
from auditor.policy.subject import training_network
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
class Target:
    """What is fixed on serving stack ``stack``; its kinds say how a candidate is made."""

    config: Config
    plugins: Plugins
    stack: str

    kind = ""
    label = ""
    train = ""

    def narrowed(self) -> Config:  # pragma: no cover - each kind's
        raise NotImplementedError

    def inputs(self) -> list[np.ndarray]:  # pragma: no cover - each kind's
        raise NotImplementedError

    def cells(self) -> list[dict[str, Any]]:  # pragma: no cover - each kind's
        raise NotImplementedError

    def _cycle(self, plan: dict[str, Any] | None, tmp: Path) -> tuple[Config, dict[str, ProbeSpec]]:
        raise NotImplementedError  # pragma: no cover - each kind's

    def _mine(self, r: ProbeResult) -> bool:
        raise NotImplementedError  # pragma: no cover - each kind's

    def describe(self) -> dict[str, Any]:
        """What --json says the target is."""
        return {"kind": self.kind, "train": self.train, "stack": self.stack}

    def conversion(self) -> ConvertTable | None:
        """The MindSpore Lite conversion the serving stack runs before it serves (None: none)."""
        return self.config.stacks[self.stack].convert

    def converting(self, cfg: Config, weight_fp16: bool) -> Config:
        """``cfg`` with the serving stack's conversion storing weights in float16 or not."""
        stack = cfg.stacks[self.stack]
        table = dataclasses.replace(stack.convert, weight_fp16=weight_fp16)
        return dataclasses.replace(
            cfg, stacks={**cfg.stacks, self.stack: dataclasses.replace(stack, convert=table)}
        )

    def audit(self, plan: dict[str, Any] | None, weight_fp16: bool | None = None) -> Candidate:
        """Export, serve and audit with ``plan`` (None: as configured): one cycle;
        ``weight_fp16``: the serving stack's conversion with that setting instead of its own."""
        with tempfile.TemporaryDirectory(prefix="auditor-fix-") as tmp:
            cfg, specs = self._cycle(plan, Path(tmp))
            if weight_fp16 is not None and self.conversion() is not None:
                cfg = self.converting(cfg, weight_fp16)
            cycle = Cycle(
                cfg, specs, self.plugins.runtimes(), self.plugins.comparators(), plugins=self.plugins
            )
            out = cycle.run()
        result = next((r for r in out.results if self._mine(r)), None)
        data = None
        if result is not None and result.artifact is not None:
            data = cycle.artifacts.get(result.artifact.sha256)
        candidate = Candidate(plan, result, out, data)
        if candidate.passed and data is not None:
            candidate.reload = self.reloaded(data)
        return candidate

    def reloaded(self, data: bytes) -> str | None:
        """Load the served bytes in one serving worker, run the inputs, free the model and load
        and run it again, as a server replacing its model does: None when both compute the same
        bits, else what differs. A cycle loads an export once per process (MindSpore Lite 2.0
        builds a float16-cast export whose constant fold of a float32 + float16 Add fails from
        freed memory once an earlier model was freed)."""
        fmt = self.plugins.runtimes()[self.config.stacks[self.stack].runtime].loads
        inputs = self.inputs()
        cfg = self.narrowed()
        with tempfile.TemporaryDirectory(prefix="auditor-fix-") as tmp:
            path = Path(tmp) / f"candidate{fmt.suffix}"
            path.write_bytes(data)
            with self._reach(cfg) as stacks, stacks.worker(self.stack) as worker:
                worker.start()
                sent = data if worker.is_remote else None
                outputs = []
                for model in ("first", "second"):
                    worker.request("load", model=model, path=str(path), mindir=sent)
                    outputs.append(worker.request("run", model=model, inputs=inputs).result["outputs"])
                    worker.request("unload", model=model)
        differ = [
            str(i)
            for i, (a, b) in enumerate(zip(outputs[0], outputs[1], strict=False))
            if a.shape != b.shape or not np.array_equal(a, b, equal_nan=True)
        ]
        if not differ and len(outputs[0]) == len(outputs[1]):
            return None
        return (
            f"built again after it was freed in one {self.stack} process, it computes other values "
            f"(outputs {', '.join(differ)}): a server replacing its model would serve them"
        )

    def _reach(self, cfg: Config) -> Any:
        return reach(cfg, self.plugins.runtimes(), self._modules())

    def _modules(self) -> list[str]:
        return []


@dataclass
class ProbeTarget(Target):
    """A probe variant served by ``stack`` from ``train``, in ``config``."""

    probe: str = ""
    variant: str = ""
    train: str = ""
    kind = "probe"

    @classmethod
    def of(
        cls, config: Config, plugins: Plugins, probe: str, stack: str, variant: str | None, train: str | None
    ) -> ProbeTarget:
        """The target the command names, checked: FixError says what does not exist or is ambiguous."""
        specs = plugins.probes()
        if probe not in specs:
            raise FixError(
                f"no probe or [models] entry {probe!r} (probes: {', '.join(sorted(specs))}; "
                f"models: {', '.join(config.models) or 'none'})"
            )
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
        return cls(config, plugins, stack, probe, variant, train)

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
    def label(self) -> str:  # type: ignore[override]
        return f"{self.probe} [{self.variant}] {self.train} → {self.stack}"

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "probe": self.probe, "variant": self.variant}

    def _modules(self) -> list[str]:
        return [self.spec.module]

    def inputs(self) -> list[np.ndarray]:
        return self.spec.make_inputs(self.params)

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

    def _cycle(self, plan: dict[str, Any] | None, tmp: Path) -> tuple[Config, dict[str, ProbeSpec]]:
        spec = self.spec
        if plan is not None:
            spec = dataclasses.replace(spec, precision={self.variant: dict(plan)})
        return self.narrowed(), {self.probe: spec}

    def _mine(self, r: ProbeResult) -> bool:
        return r.probe == self.probe and r.variant == self.variant and r.pair == self.pair

    def cells(self) -> list[dict[str, Any]]:
        """The network's cells in graph order (auditor.worker.precision.units), on the train
        stack's worker, built as the candidates are (float32 weights cast to float16)."""
        spec, params = self.spec, self.params
        build = {**params, "dtype": "float32"}
        with self._reach(self.narrowed()) as stacks, stacks.worker(self.train) as worker:
            worker.start()
            worker.request(
                "build",
                model="fix",
                probe={"module": spec.module, "params": build, "precision": {"compute": FLOAT16, "keep": []}},
                weights=spec.make_weights(build),
            )
            reply = worker.request("cells", model="fix", inputs=self.inputs())
            return list(reply.result["cells"])


@dataclass
class ModelTarget(Target):
    """A ``[models.NAME]`` with a training network (``train = { factory, checkpoint }``): its
    candidates are that network exported by its train stack with a plan, served on ``stack``
    in place of the model's file."""

    model: ModelConfig | None = None
    kind = "model"

    @classmethod
    def of(cls, config: Config, plugins: Plugins, name: str, stack: str) -> ModelTarget:
        model = config.models[name]
        if model.train is None:
            raise FixError(
                f"[models.{name}] has no train = {{ factory, checkpoint }}: `auditor fix` exports the "
                "policy's training network with each candidate precision, and there is none to export"
            )
        if stack not in model.stacks:
            raise FixError(
                f"[models.{name}] is not served on {stack!r} (its stacks: {', '.join(model.stacks)})"
            )
        return cls(config, plugins, stack, model)

    @property
    def name(self) -> str:
        assert self.model is not None
        return self.model.name

    @property
    def train(self) -> str:  # type: ignore[override]
        assert self.model is not None and self.model.train is not None
        return self.model.train.stack

    @property
    def label(self) -> str:  # type: ignore[override]
        return f"models.{self.name} (trained on {self.train}) → {self.stack}"

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "model": self.name}

    def conversion(self) -> ConvertTable | None:
        assert self.model is not None
        return self.model.convert or super().conversion()

    def converting(self, cfg: Config, weight_fp16: bool) -> Config:
        model = cfg.models[self.name]
        if model.convert is None:
            return super().converting(cfg, weight_fp16)
        table = dataclasses.replace(model.convert, weight_fp16=weight_fp16)
        return dataclasses.replace(
            cfg, models={**cfg.models, self.name: dataclasses.replace(model, convert=table)}
        )

    def narrowed(self) -> Config:
        """The user's config with this model on this stack only, no telemetry."""
        cfg = narrow(self.config, Selection(models=(self.name,), stacks=(self.stack,))).config
        return dataclasses.replace(cfg, telemetry=dataclasses.replace(cfg.telemetry, enabled=False))

    @functools.cached_property
    def plan(self) -> ModelPlan:
        """The model's file, inputs and golden, read once for every candidate."""
        assert self.model is not None
        out = plan_model(self.model, self.config.files.limits)
        if out.error is not None:
            raise FixError(f"[models.{self.name}]: {out.error}")
        return out

    def inputs(self) -> list[np.ndarray]:
        return list(self.plan.inputs)

    def _network(self, worker: Any, plan: dict[str, Any]) -> None:
        assert self.model is not None and self.model.train is not None
        net = training_network(self.model.train)
        net = dataclasses.replace(net, payload={**net.payload, "precision": dict(plan)})
        net.build(worker, "fix")

    def export(self, plan: dict[str, Any]) -> bytes:
        """The training network exported by its train stack with ``plan``: MindIR bytes."""
        cfg = self.narrowed()
        with self._reach(cfg) as stacks, stacks.worker(self.train) as worker:
            worker.start()
            self._network(worker, plan)
            reply = worker.request(
                "export", model="fix", inputs=self.inputs(), path=str(worker.workdir / "fix.mindir")
            )
            return bytes(reply.result["artifact"])

    def _cycle(self, plan: dict[str, Any] | None, tmp: Path) -> tuple[Config, dict[str, ProbeSpec]]:
        cfg = self.narrowed()
        if plan is None:
            return cfg, {}
        path = tmp / f"{self.name}.mindir"
        path.write_bytes(self.export(plan))
        models = {self.name: dataclasses.replace(cfg.models[self.name], path=str(path))}
        return dataclasses.replace(cfg, models=models), {}

    def _mine(self, r: ProbeResult) -> bool:
        return r.probe == self.name and r.infer == self.stack

    def cells(self) -> list[dict[str, Any]]:
        """The training network's cells in graph order, built as the candidates are."""
        with self._reach(self.narrowed()) as stacks, stacks.worker(self.train) as worker:
            worker.start()
            self._network(worker, {"compute": FLOAT16, "keep": []})
            return list(worker.request("cells", model="fix", inputs=self.inputs()).result["cells"])
