"""Model probes: a user's exported MindIR (``[models.NAME]``) audited like a probe in the cycle.

A probe's "build" step is "read the file": there is nothing to export, so the reference
outputs come either from a golden ``.npz`` (auditor.compare.golden) or from a reference stack that
loads the same file, and every serving stack loads the file and runs the same inputs. The
results are ordinary ``ProbeResult`` rows (pair ``NAME:REFERENCE->STACK``, variant
``model``, the file's digest as the probe version), so history, trend, alerts and the report
treat them like any probe's. Before a load, the artifact rules (MindIR version, operator
support) run on the file against each serving stack; a blocking finding is the result.

A bad file, input spec, ``.npz`` or golden fails that model's results only, with a message
naming the file and the problem.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from auditor.compare.golden import Golden, GoldenError, read_golden
from auditor.compare.outputs import compare_output, failure_text
from auditor.config.tables import Config, PairConfig
from auditor.config.user_models import ModelConfig
from auditor.cycle import saved_outputs
from auditor.cycle.compatibility import Compatibility
from auditor.cycle.preflight import ModelInputError, read_model, seeded_inputs
from auditor.cycle.state import CycleState
from auditor.results import (
    CONSISTENT,
    DRIFT,
    ERROR,
    INCOMPATIBLE,
    UNSUPPORTED,
    Artifact,
    Finding,
    ProbeResult,
)
from auditor.rules.engine import ExportedModel, blocked, run_rules
from auditor.stacks.failures import meaning
from auditor.stacks.worker import WorkerError
from auditor.worker.mindir import MindIRInfo

VARIANT = "model"


def model_inputs(model: ModelConfig, info: MindIRInfo) -> tuple[list[np.ndarray], list[str]]:
    """The inputs of one run and their names, from the model's specs (else from the file's own
    signature); ModelInputError says which input and what is wrong."""
    declared = list(info.inputs or ())
    where = f"models.{model.name}"
    if not model.inputs:
        if not declared:
            raise ModelInputError(f"{model.path}: declares no inputs; list them in [[{where}.inputs]]")
        return seeded_inputs(declared, model.seed), [t.name for t in declared]
    if declared and len(model.inputs) != len(declared):
        raise ModelInputError(
            f"{where}.inputs lists {len(model.inputs)} input(s), but {model.path} takes {len(declared)}: "
            + ", ".join(f"{t.name}{list(t.shape)} {t.dtype}" for t in declared)
        )
    rng = np.random.RandomState(model.seed)
    npz: dict[str, dict[str, np.ndarray]] = {}
    out = []
    for i, spec in enumerate(model.inputs):
        label = f"{where}.inputs[{i}] ({spec.name})"
        if declared:
            d = declared[i]
            fits = len(d.shape) == len(spec.shape) and all(
                a < 0 or a == b for a, b in zip(d.shape, spec.shape, strict=False)
            )
            if not fits:
                raise ModelInputError(
                    f"{label}: shape {list(spec.shape)} does not fit {model.path}'s input "
                    f"{d.name} {list(d.shape)}"
                )
            if d.dtype != spec.dtype:
                raise ModelInputError(
                    f"{label}: dtype {spec.dtype}, but {model.path}'s input {d.name} is {d.dtype}"
                )
        dtype = np.dtype(spec.dtype)
        if spec.generator == "normal":
            x = rng.normal(spec.mean, spec.std, size=spec.shape)
        elif spec.generator == "uniform":
            x = rng.uniform(spec.low, spec.high, size=spec.shape)
        else:
            x = _recorded(spec.npz, spec.key or spec.name, spec.shape, label, npz)
        out.append(np.ascontiguousarray(np.asarray(x).astype(dtype)))
    return out, [s.name for s in model.inputs]


def _recorded(
    path: str, key: str, shape: tuple[int, ...], label: str, cache: dict[str, dict[str, np.ndarray]]
) -> np.ndarray:
    if path not in cache:
        try:
            with np.load(path, allow_pickle=False) as z:
                cache[path] = {k: z[k] for k in z.files}
        except FileNotFoundError:
            raise ModelInputError(f"{label}: {path}: no such file") from None
        except Exception as exc:  # numpy raises OSError, ValueError, BadZipFile, EOFError...
            raise ModelInputError(
                f"{label}: {path}: not a readable .npz ({type(exc).__name__}: {exc})"
            ) from None
    arrays = cache[path]
    if key not in arrays:
        raise ModelInputError(
            f"{label}: {path} has no array {key!r} (it has: {', '.join(sorted(arrays)) or 'none'})"
        )
    x = arrays[key]
    if tuple(x.shape) != tuple(shape):
        raise ModelInputError(
            f"{label}: {path}[{key!r}] has shape {list(x.shape)}, the spec says {list(shape)}"
        )
    return x


@dataclass
class _Side:
    outputs: list[np.ndarray] | None = None
    latency: Any = None
    error: WorkerError | None = None
    blocked: Finding | None = None


@dataclass
class _Plan:
    model: ModelConfig
    data: bytes = b""
    info: MindIRInfo | None = None
    inputs: list[np.ndarray] = field(default_factory=list)
    golden: Golden | None = None
    error: str | None = None


def model_stacks(config: Config) -> set[str]:
    """Every stack a model probe runs on (serving stacks and reference stacks)."""
    names: set[str] = set()
    for m in config.models.values():
        names.update(m.stacks)
        if m.reference:
            names.add(m.reference)
    return names


def pair_name(model: ModelConfig, target: str) -> str:
    return f"{model.name}:{model.reference_label}->{target}"


class ModelSuite:
    """The model probes of a cycle, a part the cycle composes: on its shared state (sessions,
    timing, the artifacts kept) and its compatibility checks (rules, learned limits)."""

    def __init__(self, state: CycleState, compat: Compatibility):
        self.state, self.compat = state, compat

    def _plan_model(self, model: ModelConfig) -> _Plan:
        plan = _Plan(model)
        try:
            plan.data, plan.info = read_model(model.path)
            if model.golden:
                plan.golden = read_golden(model.golden)
                plan.inputs = plan.golden.inputs
                _check_golden_inputs(model, plan.info, plan.golden)
            else:
                plan.inputs, _ = model_inputs(model, plan.info)
        except (ModelInputError, GoldenError) as exc:
            plan.error = str(exc)
        return plan

    def follow_up(self, sessions: dict[str, Any]) -> list[ProbeResult]:
        results: list[ProbeResult] = []
        for model in self.state.config.models.values():
            self.state.check()
            results += self._run_model(self._plan_model(model), sessions)
        return results

    def _model_rules(self, plan: _Plan) -> list[Finding]:
        """The artifact rules on the file, each serving stack paired with the file's producer."""
        model, info = plan.model, plan.info
        assert info is not None
        train = f"{model.name}:{model.reference_label}"
        fingerprints = {n: self.compat.fingerprints.get(n) for n in model.stacks}
        fingerprints[train] = {"framework": {"mindspore": {"version": info.model_version}}}
        context = self.compat.context(
            [ExportedModel(train, model.name, VARIANT, asdict(info))],
            stacks={n: self.state.config.stacks[n] for n in model.stacks},
            fingerprints=fingerprints,
            pairs=tuple(self._rule_pair(model, t) for t in model.stacks),
        )
        return run_rules(self.compat.artifact_rules(), context)

    @staticmethod
    def _rule_pair(model: ModelConfig, target: str) -> Any:

        return PairConfig(f"{model.name}:{model.reference_label}", target, (model.name,))

    def _run_model(self, plan: _Plan, sessions: dict[str, Any]) -> list[ProbeResult]:
        model = plan.model
        if plan.error is not None:
            return [self._model_failed(model, t, plan, plan.error) for t in model.stacks]
        assert plan.info is not None
        findings = self._model_rules(plan)
        self.compat.findings += findings
        self.state.artifacts[plan.info.sha256] = plan.data
        model_id = f"model/{model.name}/{plan.info.sha256[:12]}"
        path = str(Path(model.path).resolve())
        batch = int(plan.inputs[0].shape[0]) if plan.inputs and plan.inputs[0].ndim else 1

        def run_on(stack: str) -> _Side:
            side = _Side()
            try:
                worker = sessions[stack].ensure()
                worker.request("load", model=model_id, path=path)
                side.outputs = worker.request("run", model=model_id, inputs=plan.inputs).result["outputs"]
                side.latency = self.state.time(worker, model_id, plan.inputs, batch)
            except WorkerError as exc:
                side.error = exc
            return side

        reference = _Side()
        if model.reference:
            reference = run_on(model.reference)
        else:
            assert plan.golden is not None
            reference.outputs = plan.golden.outputs
        todo: dict[str, Any] = {}
        sides: dict[str, _Side] = {}
        for t in model.stacks:
            stopper = blocked(findings, self._rule_pair(model, t).name, model.name, VARIANT)
            if stopper is not None:
                sides[t] = _Side(blocked=stopper)
            elif reference.error is None:
                todo[t] = lambda t=t: run_on(t)
        sides.update(self.state.parallel(todo) if todo else {})
        return [self._model_result(plan, t, reference, sides.get(t, _Side())) for t in model.stacks]

    def _save_sides(self, plan: _Plan, target: str, names: list[str], reference: Any, served: Any) -> None:
        """Both sides of a model result, for ``auditor compare`` (``audit --save-outputs``)."""
        assert self.state.save_outputs is not None
        model = plan.model
        input_names = [spec.name for spec in model.inputs] or [t.name for t in (plan.info.inputs or ())]
        sha = plan.info.sha256 if plan.info else None
        for side, stack, outputs in (
            ("reference", model.reference_label, reference),
            ("infer", target, served),
        ):
            saved_outputs.write_side(
                self.state.save_outputs,
                pair=pair_name(model, target),
                probe=model.name,
                variant=VARIANT,
                side=side,
                stack=stack,
                inputs=plan.inputs,
                input_names=input_names,
                outputs=list(outputs),
                output_names=names,
                model_sha256=sha,
            )

    def _model_base(self, plan: _Plan, target: str) -> dict[str, Any]:
        model, info = plan.model, plan.info
        names = self._output_names(plan, 0)
        return dict(
            pair=pair_name(model, target),
            train=model.reference or target,
            infer=target,
            probe=model.name,
            probe_version=info.sha256[:12] if info else "unreadable",
            variant=VARIANT,
            artifact=Artifact(info.sha256, "mindir", info.size, asdict(info)) if info else None,
            thresholds={o: asdict(model.tolerance_for(o)) for o in names},
            samples=int(plan.inputs[0].shape[0]) if plan.inputs and plan.inputs[0].ndim else 0,
        )

    def _output_names(self, plan: _Plan, count: int) -> list[str]:
        names = list(plan.model.output_names or (plan.golden.output_names if plan.golden else ()))
        return names + [f"output{i}" for i in range(len(names), count)]

    def _model_failed(self, model: ModelConfig, target: str, plan: _Plan, message: str) -> ProbeResult:
        return ProbeResult(status=ERROR, message=message, **self._model_base(plan, target))

    def _model_result(self, plan: _Plan, target: str, reference: _Side, side: _Side) -> ProbeResult:
        model = plan.model
        base = self._model_base(plan, target)
        base["train_latency"] = reference.latency
        base["infer_latency"] = side.latency
        if side.blocked is not None:
            status = UNSUPPORTED if side.blocked.kind == UNSUPPORTED else INCOMPATIBLE
            return ProbeResult(status=status, message=side.blocked.message, **base)
        if reference.error is not None:
            return ProbeResult(
                status=ERROR,
                message=f"reference stack {model.reference}: {reference.error.describe()}",
                log=reference.error.log,
                **base,
            )
        if side.error is not None:
            err = side.error
            failure = meaning(self.compat.runtimes.get(self.state.config.stacks[target].runtime), err)
            if failure is not None and failure.status == INCOMPATIBLE:
                if failure.maximum is not None:
                    self.compat.learn(target, failure.maximum, failure.words)
                return ProbeResult(
                    status=INCOMPATIBLE,
                    message=f"{target} cannot load {model.path}: {failure.words}",
                    log=err.log,
                    **base,
                )
            if failure is not None:
                self.compat.learn_operator(target, failure)
                return ProbeResult(
                    status=UNSUPPORTED,
                    message=f"unsupported operator: {failure.operator} ({target} cannot run {model.path})",
                    log=err.log,
                    **base,
                )
            return ProbeResult(status=ERROR, message=f"{target}: {err.describe()}", log=err.log, **base)
        assert reference.outputs is not None and side.outputs is not None
        if len(reference.outputs) != len(side.outputs):
            return ProbeResult(
                status=ERROR,
                message=f"the reference ({model.reference_label}) has {len(reference.outputs)} outputs, "
                f"{target} gave {len(side.outputs)}",
                **base,
            )
        names = self._output_names(plan, len(side.outputs))
        if self.state.save_outputs is not None:
            self._save_sides(plan, target, names, reference.outputs, side.outputs)
        dtypes = [str(np.asarray(r).dtype) for r in reference.outputs]
        base["thresholds"] = {
            o: asdict(model.tolerance_for(o, d)) for o, d in zip(names, dtypes, strict=False)
        }
        comparisons = tuple(
            compare_output(n, np.asarray(r), np.asarray(g), model.tolerance_for(n, d))
            for n, r, g, d in zip(names, reference.outputs, side.outputs, dtypes, strict=False)
        )
        stale = ""
        if (
            plan.golden is not None
            and plan.info is not None
            and plan.golden.model_sha256 not in (None, plan.info.sha256)
        ):
            stale = (
                f" (the golden was recorded for another file, sha256 {str(plan.golden.model_sha256)[:12]}; "
                f"this one is {plan.info.sha256[:12]}: re-record it if the model was retrained on purpose)"
            )
        failed = [c for c in comparisons if not c.passed]
        if failed:
            return ProbeResult(
                status=DRIFT,
                message="; ".join(failure_text(c) for c in failed) + stale,
                outputs=comparisons,
                **base,
            )
        return ProbeResult(
            status=CONSISTENT, message="all outputs within tolerance" + stale, outputs=comparisons, **base
        )


def _check_golden_inputs(model: ModelConfig, info: MindIRInfo, golden: Golden) -> None:
    declared = list(info.inputs or ())
    if declared and len(declared) != len(golden.inputs):
        raise ModelInputError(
            f"{model.golden}: holds {len(golden.inputs)} input(s), {model.path} takes {len(declared)}"
        )
    for i, (d, x) in enumerate(zip(declared, golden.inputs, strict=False)):
        fits = len(d.shape) == x.ndim and all(a < 0 or a == b for a, b in zip(d.shape, x.shape, strict=False))
        if not fits or str(x.dtype) != d.dtype:
            raise ModelInputError(
                f"{model.golden}: input_{i} is {list(x.shape)} {x.dtype}, {model.path}'s input {d.name} "
                f"is {list(d.shape)} {d.dtype}"
            )
