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

Each side's outputs are also checked alone, as a probe's are: an output the graph returns
straight from a bounded operator (a tanh head, a softmax) must stay in its mathematical
range on every side that ran the file (auditor.policy.invariants.from_graph); a breach is a
finding of that model whatever the other side computed.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from auditor.compare import input_classes
from auditor.compare.golden import Golden, GoldenError, read_golden
from auditor.compare.outputs import Comparator, MetricCheck, compare_output
from auditor.compare.verdicts import Tolerance
from auditor.config.tables import PairConfig
from auditor.config.thresholds import DTYPE_TOLERANCES
from auditor.config.user_models import ModelConfig
from auditor.cycle import saved_outputs
from auditor.cycle.compatibility import Compatibility
from auditor.cycle.jobs import CycleAborted, judged, rerun_checks
from auditor.cycle.state import CycleState
from auditor.policy import classes as model_classes
from auditor.policy import invariants, latency, model_rollout
from auditor.policy import taps as model_localize
from auditor.policy.env_process import EnvProcess
from auditor.policy.localize import Localization
from auditor.policy.model_file import (
    ModelInputError,
    build_network,
    check_golden_inputs,
    computes_in,
    model_inputs,
    other_formats,
    read_model,
)
from auditor.results import (
    CONSISTENT,
    DRIFT,
    ERROR,
    INCOMPATIBLE,
    UNCHECKED,
    UNSUPPORTED,
    Artifact,
    Finding,
    ProbeResult,
    RolloutResult,
)
from auditor.rules.engine import ExportedModel, blocked, run_rules, with_remedy
from auditor.stacks.worker import WorkerError
from auditor.worker.mindir import MindIRInfo, output_dependencies

VARIANT = "model"


@dataclass
class _Side:
    outputs: list[np.ndarray] | None = None
    latency: Any = None
    error: WorkerError | None = None
    blocked: Finding | None = None
    load_log: str = ""
    conversion: Artifact | None = None
    rerun: list[np.ndarray] | WorkerError | None = None
    """The same file and inputs in a fresh worker process of the stack (repeatability)."""
    classes: dict[str, list[np.ndarray]] = field(default_factory=dict)
    """Input class -> its outputs (auditor.policy.classes)."""
    class_errors: dict[str, str] = field(default_factory=dict)
    """Input class -> why it did not run."""


@dataclass
class _Plan:
    model: ModelConfig
    data: bytes = b""
    info: MindIRInfo | None = None
    inputs: list[np.ndarray] = field(default_factory=list)
    golden: Golden | None = None
    error: str | None = None
    classes: list[input_classes.ClassBatch] = field(default_factory=list)
    """The input classes' batches (auditor.policy.classes)."""
    dependencies: tuple[tuple[str, ...], ...] | None = None
    """Per output, the file's inputs it is computed from (auditor.worker.mindir)."""
    tapped: model_localize.Tapped | str | None = None
    """The copy returning the inner values, or why there is none (made when one drifts)."""
    ruled: bool = False
    """Whether the artifact rules ran on the file for a first wave of serving stacks."""
    reference: _Side | None = None
    """The reference side, run once for every wave of serving stacks (auditor.fleet.waves)."""


def pair_name(model: ModelConfig, target: str) -> str:
    return f"{model.name}:{model.reference_label}->{target}"


@dataclass
class ModelsServed:
    """What the models served on some stacks (one part of a cycle, auditor.fleet.waves)."""

    results: list[ProbeResult] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    """The ranges the models' graphs imply, broken on a side (each side alone)."""
    rollouts: list[RolloutResult] = field(default_factory=list)
    """``[models.NAME.rollout]``: each model's episodes, reference against each serving stack."""


class ModelSuite:
    """The model probes of a cycle, a part the cycle composes: on its shared state (sessions,
    timing, the artifacts kept) and its compatibility checks (rules, learned limits)."""

    def __init__(self, state: CycleState, compat: Compatibility, comparators: Mapping[str, Comparator]):
        self.state, self.compat = state, compat
        self.comparators = comparators
        """By name: ``importance_ratios`` judges a model that declares its ``policy``."""
        self._localizations: dict[tuple[str, ...], Localization] = {}
        """Localizations made this cycle (auditor.policy.taps), by file and release."""
        self._plans: dict[str, _Plan] = {}
        """Each model's plan, made on its first wave of serving stacks."""

    def _plan_model(self, model: ModelConfig) -> _Plan:
        plan = _Plan(model)
        limits = self.state.config.files.limits  # every file read through auditor.worker.files
        try:
            plan.data, plan.info = read_model(model.path, limits, other_formats(self.compat.runtimes))
            missing = model.train.missing() if model.train is not None else None
            if missing is not None:
                raise ModelInputError(f"models.{model.name}.{missing}")
            if (
                model.train is not None
                and model.train.checkpoint
                and not Path(model.train.checkpoint).is_file()
            ):
                raise ModelInputError(
                    f"models.{model.name}.train.checkpoint: {model.train.checkpoint}: no such file"
                )
            if model.golden:
                plan.golden = read_golden(model.golden, limits)
                plan.inputs = plan.golden.inputs
                check_golden_inputs(model, plan.info, plan.golden)
            else:
                plan.inputs, _ = model_inputs(model, plan.info, limits)
            plan.classes = model_classes.batches(model, plan.info, plan.inputs, self._input_names(plan))
            plan.dependencies = output_dependencies(plan.data)
        except (ModelInputError, GoldenError) as exc:
            plan.error = str(exc)
        return plan

    @staticmethod
    def _input_names(plan: _Plan) -> list[str]:
        names = [spec.name for spec in plan.model.inputs]
        return names or [t.name for t in ((plan.info.inputs if plan.info else None) or ())]

    def follow_up(self, sessions: dict[str, Any], serving: Iterable[str] | None = None) -> ModelsServed:
        """Every model on its serving stacks among ``serving`` (None: all of them); a cycle's
        parts (auditor.fleet.waves) each call this, and each model's plan, rules and reference
        side are made on the first."""
        out = ModelsServed()
        wave = None if serving is None else set(serving)
        for model in self.state.config.models.values():
            targets = [t for t in model.stacks if wave is None or t in wave]
            if not targets:
                continue
            self.state.check()
            with self.state.held:  # made once, by the first host's part that serves the model
                if model.name not in self._plans:
                    self._plans[model.name] = self._plan_model(model)
                plan = self._plans[model.name]
            try:
                out.results += self._run_model(plan, sessions, targets, out)
            except CycleAborted:
                raise
            except Exception as exc:  # a case no check foresaw fails this model, not the cycle
                said = f"the auditor failed on {model.path}: {type(exc).__name__}: {exc}"
                log = traceback.format_exc()
                out.results += [
                    ProbeResult(status=ERROR, message=said, log=log, **self._model_base(plan, t))
                    for t in targets
                ]
        return out

    def _model_rules(self, plan: _Plan, targets: list[str]) -> list[Finding]:
        """The artifact rules on the file, each of ``targets`` (serving stacks) paired with
        the file's producer."""
        model, info = plan.model, plan.info
        assert info is not None
        train = f"{model.name}:{model.reference_label}"
        fingerprints = {n: self.compat.fingerprints.get(n) for n in targets}
        fingerprints[train] = {"framework": {"mindspore": {"version": info.model_version}}}
        context = self.compat.context(
            [ExportedModel(train, model.name, VARIANT, asdict(info))],
            stacks={n: self.state.config.stacks[n] for n in targets},
            fingerprints=fingerprints,
            pairs=tuple(self._rule_pair(model, t) for t in targets),
        )
        return run_rules(self.compat.artifact_rules(), context)

    @staticmethod
    def _rule_pair(model: ModelConfig, target: str) -> Any:

        return PairConfig(f"{model.name}:{model.reference_label}", target, (model.name,))

    def _run_model(
        self, plan: _Plan, sessions: dict[str, Any], targets: list[str], out: ModelsServed
    ) -> list[ProbeResult]:
        """The model's results on ``targets``; its side checks' findings and rollouts go to ``out``."""
        model = plan.model
        if plan.error is not None:  # nothing was run: the model is unchecked, and the result says why
            return [self._model_failed(model, t, plan, plan.error, UNCHECKED) for t in targets]
        assert plan.info is not None
        with self.state.held:
            first, plan.ruled = not plan.ruled, True  # this model's first wave
            findings = self._model_rules(plan, targets)  # on the wave's stacks, fingerprinted by now
            self.compat.add(findings)
        self.state.artifacts[plan.info.sha256] = plan.data
        model_id = f"model/{model.name}/{plan.info.sha256[:12]}"
        path = str(Path(model.path).resolve())
        batch = int(plan.inputs[0].shape[0]) if plan.inputs and plan.inputs[0].ndim else 1

        def run_on(stack: str, serving: bool = True) -> _Side:
            side = _Side()
            try:
                worker = sessions[stack].ensure()
                if serving:  # converted first: the model's [models.N.convert], else the stack's
                    done = self.state.load(worker, sessions[stack].stack, model_id, Path(path), model.convert)
                    side.conversion, side.load_log = done.conversion, done.log
                else:
                    side.load_log = worker.request("load", model=model_id, path=path).log
                side.outputs = worker.request("run", model=model_id, inputs=plan.inputs).result["outputs"]
                side.latency = self.state.time(worker, model_id, plan.inputs, batch)
                side.classes, side.class_errors = model_classes.run(worker, model_id, plan.classes, batch)
            except WorkerError as exc:
                side.error = exc
            return side

        with self.state.held:  # the reference side once, on a held stack (auditor.fleet.waves)
            if plan.reference is None:
                plan.reference = self._reference(plan, sessions, batch, run_on)
            reference = plan.reference
        todo: dict[str, Any] = {}
        sides: dict[str, _Side] = {}
        for t in targets:
            stopper = blocked(findings, self._rule_pair(model, t).name, model.name, VARIANT)
            if stopper is not None:
                sides[t] = _Side(blocked=stopper)
            elif reference.error is None:
                todo[t] = lambda t=t: run_on(t)
        sides.update(self.state.parallel(todo) if todo else {})
        # Repeatability, as the probes' reruns: each serving side again in a fresh process.
        again = {
            t: (lambda t=t: self._rerun(sessions[t], model, model_id, Path(path), plan.inputs))
            for t, side in sides.items()
            if side.outputs is not None
        }
        for t, rerun in (self.state.parallel(again) if again else {}).items():
            sides[t].rerun = rerun
        judged = {model.reference_label: reference, **sides} if first else sides  # the reference once
        out.findings += self._side_checks(plan, judged)
        results = [self._model_result(plan, t, reference, sides.get(t, _Side())) for t in targets]
        with self.state.held:  # the reference's worker again: localization, episodes
            results = [  # where a drifting model first diverges (auditor.policy.taps)
                replace(r, localization=self._localized(plan, sessions, r)) if r.status == DRIFT else r
                for r in results
            ]
            if model.rollout is not None:
                rolled = [r.infer for r in results if r.status in (CONSISTENT, DRIFT)]
                out.rollouts += self._roll_out(plan, sessions, model_id, reference, rolled)
        return results

    def _reference(
        self, plan: _Plan, sessions: dict[str, Any], batch: int, run_on: Callable[..., _Side]
    ) -> _Side:
        """The model's reference side: its training network, its reference stack, or its golden."""
        model = plan.model
        if model.train is not None:
            return self._train_network(model, sessions, plan.inputs, batch, plan.classes)
        if model.reference:
            return run_on(model.reference, serving=False)
        assert plan.golden is not None
        reference = _Side()
        reference.outputs = plan.golden.outputs
        return reference

    def _localized(self, plan: _Plan, sessions: dict[str, Any], result: ProbeResult) -> Localization:
        """Localized once per file, reference, inputs that drifted and serving runtime release
        (a fleet's hosts serving the same file on the same release share it)."""
        inputs, where = self._drifted_inputs(plan, result)
        release = self.compat.release(result.infer)
        key = (plan.info.sha256 if plan.info else "", plan.model.reference_label, where, release)
        if key not in self._localizations:
            self._localizations[key] = self._localize(plan, sessions, result, inputs, where)
        return self._localizations[key]

    def _localize(
        self,
        plan: _Plan,
        sessions: dict[str, Any],
        result: ProbeResult,
        inputs: list[np.ndarray],
        where: str,
    ) -> Localization:
        """The first divergent layer of a drifting result: the file's copy that returns its inner
        values, on the serving stack and on the reference, on the inputs that drifted."""
        model, target = plan.model, result.infer
        if model.golden is not None:
            return Localization(
                None,
                f"{model_localize.NOT_RUN}a golden holds outputs only: name a reference stack or the "
                "training network to localize",
            )
        if (model.convert or self.state.config.stacks[target].convert) is not None:
            return Localization(
                None,
                f"{model_localize.NOT_RUN}{target} serves a conversion; the copy that returns the "
                "inner values is loaded unconverted and would not show the conversion's effect",
            )
        if plan.tapped is None:
            plan.tapped = model_localize.tapped(plan.data)
        if isinstance(plan.tapped, str):
            return Localization(None, plan.tapped)
        copy = plan.tapped
        batch = model_classes.file_batch(plan.inputs)
        names = self._output_names(plan, len(result.outputs))
        inside = computes_in(plan.info)

        def tolerance_for(name: str) -> Tolerance:
            return model.tolerance_for(name, None, inside)

        tap_id = f"model/{model.name}/taps"
        assert self.state.tmp is not None
        path = model_localize.stage(copy, self.state.tmp)
        try:
            worker = sessions[target].ensure()
            worker.request("load", model=tap_id, path=str(path))
            served = model_classes.run_chunks(worker, tap_id, inputs, batch)
            if model.train is not None:
                network = sessions[model.train.stack].ensure()
                layers = network.request("layers", model=f"network/{model.name}", inputs=inputs).result[
                    "layers"
                ]
                found = model_localize.against_network(copy, layers, served, tolerance_for)
            else:
                assert model.reference is not None
                ref_worker = sessions[model.reference].ensure()
                ref_worker.request("load", model=tap_id, path=str(path))
                ref = model_classes.run_chunks(ref_worker, tap_id, inputs, batch)
                found = model_localize.against_stack(copy, names, ref, served, tolerance_for)
        except WorkerError as exc:
            return Localization(
                None, f"localization rerun failed: {exc.stack}: {exc.message}", error=exc.message
            )
        except ValueError as exc:
            return Localization(None, f"localization rerun failed: {exc}", error=str(exc))
        return replace(found, message=f"{found.message} (on the {where} inputs)")

    @staticmethod
    def _drifted_inputs(plan: _Plan, result: ProbeResult) -> tuple[list[np.ndarray], str]:
        """The model's own inputs when an output drifted on them, else the first input class
        whose comparison failed."""
        if any(not c.passed for c in result.outputs):
            return plan.inputs, "model's own"
        classes = {b.name: b for b in plan.classes}
        for c in result.checks:
            cls = (c.output or "").partition("@")[2]
            if not c.passed and cls in classes:
                return classes[cls].inputs, cls
        return plan.inputs, "model's own"

    def _roll_out(
        self, plan: _Plan, sessions: dict[str, Any], model_id: str, reference: _Side, targets: list[str]
    ) -> list[RolloutResult]:
        """``[models.NAME.rollout]``: the reference side against each serving stack that ran the
        file, in one environment process (auditor.policy.model_rollout)."""
        model = plan.model
        assert model.rollout is not None and plan.info is not None
        input_names = self._input_names(plan)
        names = self._output_names(plan, len(reference.outputs or ()))
        base = dict(probe=model.name, variant=VARIANT, env=model.rollout.env)
        try:
            how = model_rollout.plan(
                model, model.rollout, self.state.config.rollout, plan.inputs, input_names, names
            )
        except model_rollout.NotRolled as exc:
            defaults = self.state.config.rollout
            return [
                RolloutResult(
                    pair=pair_name(model, t),
                    train=model.reference_stack or t,  # a stack: the history keys rollouts by host
                    infer=t,
                    status=ERROR,
                    message=f"rollout not run: {exc}",
                    action_atol=_given(model.rollout.action_atol, defaults.action_atol),
                    return_atol=_given(model.rollout.return_atol, defaults.return_atol),
                    **base,
                )
                for t in targets
            ]
        assert reference.outputs is not None
        act_dim = how.row(reference.outputs, how.action_at).shape[1]
        reference_stack = model.reference_stack
        assert reference_stack is not None
        reference_id = f"network/{model.name}" if model.train is not None else model_id
        out = []
        with EnvProcess() as envs:
            self.state.register(envs)
            for t in targets:
                self.state.check()
                try:
                    ref_run = model_rollout.worker_run(sessions[reference_stack].ensure(), reference_id)
                    served_run = model_rollout.worker_run(sessions[t].ensure(), model_id)
                except WorkerError as exc:
                    out.append(
                        RolloutResult(
                            pair=pair_name(model, t),
                            train=reference_stack,
                            infer=t,
                            status=ERROR,
                            message=f"rollout not run: {exc.describe()}",
                            action_atol=how.action_atol,
                            return_atol=how.return_atol,
                            **base,
                        )
                    )
                    continue
                out.append(
                    model_rollout.roll_out(
                        how,
                        envs=envs,
                        pair=pair_name(model, t),
                        reference=model.reference_label,
                        target=t,
                        probe=model.name,
                        variant=VARIANT,
                        reference_run=ref_run,
                        served_run=served_run,
                        act_dim=act_dim,
                    )
                )
        return out

    def _rerun(
        self, session: Any, model: ModelConfig, model_id: str, path: Path, inputs: list[np.ndarray]
    ) -> list[np.ndarray] | WorkerError:
        """The served file (converted as served) on the same inputs in a fresh worker process."""
        fresh = session.fresh()
        try:
            worker = fresh.ensure()
            self.state.load(worker, session.stack, model_id, path, model.convert)
            return list(worker.request("run", model=model_id, inputs=inputs).result["outputs"])
        except WorkerError as exc:
            return exc
        finally:
            fresh.close()
            session.problems.extend(fresh.problems)

    def _side_checks(self, plan: _Plan, sides: dict[str, _Side]) -> list[Finding]:
        """Each side's outputs alone, on the model's own inputs and every input class: the
        ranges the file's graph implies, and a NaN input row that comes out finite in an output
        computed from that input (auditor.policy.classes)."""
        model, info = plan.model, plan.info
        if info is None:
            return []
        sources = info.output_sources or ()
        outputs = next((s.outputs for s in sides.values() if s.outputs is not None), None)
        if outputs is None:
            return []
        count = len(sources) or len(outputs)
        names = self._output_names(plan, count)
        input_names = self._input_names(plan)
        varied = model_classes.varied_index(model, plan.inputs, input_names)
        declared = invariants.from_graph(sources, names)
        if varied is not None and model.nan_hazard:
            file_inputs = [t.name for t in (info.inputs or ())]
            varied_name = file_inputs[varied] if varied < len(file_inputs) else input_names[varied]
            propagates = model_classes.propagating(names, outputs, plan.dependencies, varied_name)
            declared = replace(declared, propagates=propagates)
        if not declared.invariants and not declared.propagates:
            return []
        recorded = any(spec.generator == "npz" for spec in model.inputs)
        label = "golden" if plan.golden is not None else "recorded" if recorded else input_classes.RANDOM
        batches = {b.name: b for b in plan.classes}
        found: list[Finding] = []
        for stack, side in sides.items():
            if side.outputs is None or len(side.outputs) != count:
                continue  # the graph does not say which output is which
            runs = [invariants.SideRun(label, list(plan.inputs), [np.asarray(o) for o in side.outputs])]
            runs += [
                invariants.SideRun(cls, batches[cls].inputs, [np.asarray(o) for o in out])
                for cls, out in side.classes.items()
                if cls in batches and len(out) == count
            ]
            found += _one_per_cause(
                invariants.check_side(
                    stack,
                    model.name,
                    VARIANT,
                    declared,
                    names,
                    input_names,
                    varied if varied is not None else 0,
                    runs,
                    hazards=model.nan_hazard,
                    infinities=False,
                )
            )
        return found

    def _train_network(
        self,
        model: ModelConfig,
        sessions: dict[str, Any],
        inputs: list[np.ndarray],
        batch: int,
        classes: list[input_classes.ClassBatch],
    ) -> _Side:
        """The reference outputs of the training network: the user's factory builds it in
        PyNative on the train stack, its checkpoint loaded, and it runs the same inputs."""
        assert model.train is not None
        network, side = model.train, _Side()
        model_id = f"network/{model.name}"
        try:
            worker = sessions[network.stack].ensure()
            build_network(worker, network, model_id)
            side.outputs = worker.request("run", model=model_id, inputs=inputs).result["outputs"]
            side.latency = self.state.time(worker, model_id, inputs, batch)
            side.classes, side.class_errors = model_classes.run(worker, model_id, classes, batch)
        except WorkerError as exc:
            side.error = exc
        except OSError as exc:  # the checkpoint went away since the plan
            side.error = WorkerError(network.stack, "network", "error", f"{network.checkpoint}: {exc}")
        return side

    def _save_sides(self, plan: _Plan, target: str, names: list[str], reference: Any, served: Any) -> None:
        """Both sides of a model result, for ``auditor compare`` (``audit --save-outputs``)."""
        assert self.state.save_outputs is not None
        model = plan.model
        input_names = self._input_names(plan)
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
            train=model.reference_stack or target,
            infer=target,
            probe=model.name,
            probe_version=info.sha256[:12] if info else "unreadable",
            variant=VARIANT,
            artifact=Artifact(info.sha256, "mindir", info.size, asdict(info)) if info else None,
            thresholds={o: asdict(model.tolerance_for(o, None, computes_in(info))) for o in names},
            samples=int(plan.inputs[0].shape[0]) if plan.inputs and plan.inputs[0].ndim else 0,
        )

    def _output_names(self, plan: _Plan, count: int) -> list[str]:
        names = list(plan.model.output_names or (plan.golden.output_names if plan.golden else ()))
        return names + [f"output{i}" for i in range(len(names), count)]

    def _model_failed(
        self, model: ModelConfig, target: str, plan: _Plan, message: str, status: str = ERROR
    ) -> ProbeResult:
        return ProbeResult(status=status, message=message, **self._model_base(plan, target))

    def _model_result(self, plan: _Plan, target: str, reference: _Side, side: _Side) -> ProbeResult:
        model = plan.model
        base = self._model_base(plan, target)
        base["train_latency"] = reference.latency
        base["infer_latency"] = side.latency
        base["throughput"] = latency.throughput([side.latency])
        base["conversion"] = side.conversion
        if side.blocked is not None:
            status = UNSUPPORTED if side.blocked.kind == UNSUPPORTED else INCOMPATIBLE
            return ProbeResult(status=status, message=with_remedy(side.blocked), **base)
        if reference.error is not None:
            which = model.train.describe() if model.train is not None else f"stack {model.reference}"
            return ProbeResult(
                status=ERROR,
                message=f"reference {which}: {reference.error.describe()}",
                log=reference.error.log,
                **base,
            )
        if side.error is not None:
            err = side.error
            if err.op not in ("load", "run"):  # timing after the outputs came
                return ProbeResult(status=ERROR, message=f"{target}: {err.describe()}", log=err.log, **base)
            info = asdict(plan.info) if plan.info is not None else None
            d = self.compat.diagnose(target, err, info, side.load_log)
            return ProbeResult(status=d.status, message=f"{model.path}: {d.text()}", log=err.log, **base)
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
        inside = computes_in(plan.info)
        tolerances = {n: model.tolerance_for(n, d, inside) for n, d in zip(names, dtypes, strict=False)}
        base["thresholds"] = {o: asdict(t) for o, t in tolerances.items()}
        comparisons = tuple(
            compare_output(n, np.asarray(r), np.asarray(g), tolerances[n])
            for n, r, g in zip(names, reference.outputs, side.outputs, strict=False)
        )
        stale = fp16_note(model, plan.info, comparisons, dtypes)
        if (
            plan.golden is not None
            and plan.info is not None
            and plan.golden.model_sha256 not in (None, plan.info.sha256)
        ):
            stale += (
                f" (the golden was recorded for another file, sha256 {str(plan.golden.model_sha256)[:12]}; "
                f"this one is {plan.info.sha256[:12]}: re-record it if the model was retrained on purpose)"
            )
        if isinstance(side.rerun, WorkerError):
            return ProbeResult(
                status=ERROR,
                message=f"{target}, rerun in a fresh process: {side.rerun.describe()}",
                log=side.rerun.log,
                outputs=comparisons,
                **base,
            )
        repeat = rerun_checks("infer", names, side.outputs, side.rerun) if side.rerun is not None else []
        # The input classes, as the probes': compared where both sides ran them; a class the
        # serving stack could not run is a failing check (a runtime that fails on NaN input).
        fp16 = inside is not None or any(d in DTYPE_TOLERANCES for d in dtypes)
        repeat += input_classes.pair_checks(
            names, reference.classes, side.classes, tolerances.__getitem__, swept_limit=not fp16
        )
        repeat += [
            MetricCheck(
                "class_run", 1.0, False, 0.0, f"@{cls}", f"{target} did not run the {cls} inputs: {why}"
            )
            for cls, why in side.class_errors.items()
        ]
        if reference.class_errors:
            base["log"] = "\n".join(
                f"input class {cls}: the reference ({model.reference_label}) did not run it: {why}"
                for cls, why in reference.class_errors.items()
            )
        try:
            checks = tuple(repeat) + self._policy_checks(model, names, reference.outputs, side.outputs)
        except ValueError as exc:  # what the run shows of the declared policy (an output it lacks)
            return ProbeResult(
                status=ERROR,
                message=f"models.{model.name}.policy: {exc}",
                outputs=comparisons,
                **base,
            )
        return judged(base, comparisons, checks, stale)

    def _policy_checks(
        self, model: ModelConfig, names: list[str], reference: list[Any], served: list[Any]
    ) -> tuple[MetricCheck, ...]:
        """A declared policy's importance ratios (auditor.compare.ratios), the reference as the
        train side, from the distributions' parameters in float64."""
        if model.policy is None:
            return ()
        comparator = self.comparators.get("importance_ratios")
        if comparator is None:
            raise ValueError("no loaded plugin provides the importance_ratios comparator")
        ref = {n: np.asarray(x) for n, x in zip(names, reference, strict=False)}
        out = {n: np.asarray(x) for n, x in zip(names, served, strict=False)}
        return tuple(comparator.compare(ref, out, dict(model.policy)))


def _one_per_cause(found: list[Finding]) -> list[Finding]:
    """One NaN-masking finding per side of a model: a MindIR says which outputs a NaN input
    must reach, not where on the way it is lost, so the outputs that lose it are one cause,
    said in the first output's finding (its key and cause), the others named in it."""
    action = (
        "a bad observation would become a valid-looking action in production: check inputs for "
        "NaN/Inf before the model, or set nan_hazard = false in its [models.NAME] if the graph maps "
        "NaN on purpose"
    )
    found = [
        replace(f, details={**f.details, "action": action}) if f.kind == "nan-hazard" else f for f in found
    ]
    masked = [f for f in found if f.kind == "nan-hazard"]
    if len(masked) < 2:
        return found
    first, others = masked[0], masked[1:]
    also = [str(f.details.get("output")) for f in others]
    words = f"; the same input rows come out finite in {', '.join(also)} too"
    merged = replace(
        first,
        message=first.message + words,
        summary=first.summary + f" (and {', '.join(also)})",
        details={**first.details, "also": also},
    )
    return [merged if f is first else f for f in found if not any(f is o for o in others)]


def _given(value: float | None, default: float) -> float:
    return default if value is None else value


def fp16_note(
    model: ModelConfig, info: MindIRInfo | None, comparisons: tuple[Any, ...], dtypes: list[str]
) -> str:
    """What a result says of a file that computes in fp16 inside: that it does, which
    thresholds judged its wider outputs, and the tolerance that would pass each of them."""
    if computes_in(info) is None or info is None:
        return ""
    wide = [
        (c, d)
        for c, d in zip(comparisons, dtypes, strict=False)
        if d not in DTYPE_TOLERANCES and not c.shape_mismatch
    ]
    ops = ", ".join((info.float16_ops or ())[:6])
    text = f" (the file computes in float16 inside: {ops} in float16"
    if not wide:
        return text + ")"
    judged = [
        f"{c.output} ({d}) with {'your thresholds' if model.user_set(c.output) else 'the float16 thresholds'}"
        + (
            f", passes at atol {c.metrics['min_atol']:.3g} or rtol {c.metrics['min_rtol']:.3g}"
            if c.passed
            else ""
        )
        for c, d in wide
    ]
    return text + "; judged " + "; ".join(judged) + ")"
