"""A user's ``[models.NAME]`` in a cycle: the file is served, its reference side is its training
network (the user's factory and checkpoint, PyNative on a train stack), a reference stack
running the same file, or a golden ``.npz``.

Each model's plan (auditor.policy.model_file) and reference side are made once per cycle, by
the first part that serves it; the artifact rules run on the file against each part's serving
stacks before any load (a blocking finding is the result). The model is then one
``ModelAudit``, served through the one pipeline (auditor.cycle.serving) like a probe variant;
what this module adds is who the sides are and how a file's inner values are exposed (a copy
that also returns them, auditor.policy.taps). The results are ordinary ``ProbeResult`` rows
(pair ``NAME:REFERENCE->STACK``, variant ``model``, the file's digest as the version).
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from auditor.config.user_models import ModelConfig
from auditor.cycle.compatibility import Compatibility
from auditor.cycle.held import Stacks
from auditor.cycle.serving import Audit, Served, Serving, run_chunks, run_classes
from auditor.cycle.state import CycleState
from auditor.policy import episodes
from auditor.policy import taps as tapping
from auditor.policy.env_process import EnvProcess
from auditor.policy.localize import Localization
from auditor.policy.model_file import ModelPlan, other_formats, plan_model
from auditor.policy.side import Side
from auditor.policy.subject import MODEL_VARIANT, RATIOS, Subject, from_model
from auditor.policy.verdict import Settings, Sides
from auditor.results import ERROR, UNCHECKED, Artifact, CycleAborted, Finding, ProbeResult, RolloutResult
from auditor.rules.engine import file_rules
from auditor.stacks.worker import WorkerError


def pair_name(model: ModelConfig, target: str) -> str:
    return f"{model.name}:{model.reference_label}->{target}"


class ModelAudit(Audit):
    """A user's model file against its reference, served by the stacks the config names."""

    def __init__(
        self, plan: ModelPlan, subject: Subject, reference: Side, state: CycleState, hidden: Path | None
    ):
        model, info = plan.model, plan.info
        assert info is not None
        super().__init__(
            f"model/{model.name}/{info.sha256[:12]}",
            subject,
            reference,
            {t: pair_name(model, t) for t in model.stacks},
            Served(Path(model.path).resolve(), model.convert, hidden),
            model.reference_stack,
            f"network/{model.name}" if model.train is not None else "",
        )
        if model.train is None:
            self.reference_model = self.key  # the reference stack loads the same file
        self.reference_takes_any_batch = model.train is not None
        self.plan, self.model, self.state = plan, model, state

    @property
    def source(self) -> str:
        return f"file:{self.subject.version}"

    @property
    def reference_name(self) -> str:
        return self.model.reference_label

    def golden_source(self, role: str) -> str:
        return self.source

    def settings(self, target: str) -> Settings:
        return Settings({RATIOS: self.state.config.ppo.options()})

    def identity(self, target: str) -> dict[str, Any]:
        return model_identity(self.plan, target)

    def words(self, target: str) -> Sides:
        model = self.model
        which = model.train.describe() if model.train is not None else f"stack {model.reference}"
        return Sides(f"reference {which}", target, model.path, f"the reference ({model.reference_label})")

    def artifact_info(self) -> dict[str, Any] | None:
        return asdict(self.plan.info) if self.plan.info is not None else None

    def save_meta(self) -> tuple[str, str, dict[str, Any]]:
        return (
            "reference",
            self.model.reference_label,
            {"model_sha256": self.plan.info.sha256 if self.plan.info else None},
        )

    # -- a drift's first divergent layer: the file's copy that returns its inner values -------
    def localize(self, run: Serving, target: str, result: ProbeResult) -> Localization:
        """Localized once per file, reference, inputs that drifted and serving runtime release
        (a fleet's hosts serving the same file on the same release share it)."""
        inputs, where = self._drifted_inputs(result)
        key = ("localize", self.key, self.model.reference_label, where, run.release(target))
        return run.once(key, lambda: self._localize(run, target, result, inputs, where), lambda found: True)

    def _localize(
        self, run: Serving, target: str, result: ProbeResult, inputs: list[np.ndarray], where: str
    ) -> Localization:
        model = self.model
        if model.golden is not None:
            return Localization(
                None,
                f"{tapping.NOT_RUN}a golden holds outputs only: name a reference stack or the "
                "training network to localize",
            )
        if (model.convert or self.state.config.stacks[target].convert) is not None:
            return Localization(
                None,
                f"{tapping.NOT_RUN}{target} serves a conversion; the copy that returns the "
                "inner values is loaded unconverted and would not show the conversion's effect",
            )
        copy = run.once(("tapped", self.key), lambda: tapping.tapped(self.plan.data), lambda found: True)
        if isinstance(copy, str):
            return Localization(None, copy)
        names = self.subject.names(len(result.outputs))
        tap_id = f"model/{model.name}/taps"
        assert self.state.tmp is not None and self.reference_stack is not None
        path = tapping.stage(copy, self.state.tmp)
        chunk = self.subject.chunk
        try:
            with run.stacks.use(target, self.reference_stack) as (worker, ref_worker):
                worker.request("load", model=tap_id, path=str(path))
                served = run_chunks(worker, tap_id, inputs, chunk)
                if model.train is not None:
                    got = ref_worker.request("layers", model=self.reference_model, inputs=inputs)
                    found = tapping.against_network(
                        copy, got.result["layers"], served, self.subject.tolerance
                    )
                else:
                    ref_worker.request("load", model=tap_id, path=str(path))
                    ref = run_chunks(ref_worker, tap_id, inputs, chunk)
                    found = tapping.against_stack(copy, names, ref, served, self.subject.tolerance)
        except WorkerError as exc:
            return Localization(
                None, f"localization rerun failed: {exc.stack}: {exc.message}", error=exc.message
            )
        except ValueError as exc:
            return Localization(None, f"localization rerun failed: {exc}", error=str(exc))
        return replace(found, message=f"{found.message} (on the {where} inputs)")

    def _drifted_inputs(self, result: ProbeResult) -> tuple[list[np.ndarray], str]:
        """The model's own inputs when an output drifted on them, else the first input class
        whose comparison failed."""
        if any(not c.passed for c in result.outputs):
            return self.subject.inputs, "model's own"
        classes = {b.name: b for b in self.subject.classes}
        for c in result.checks:
            cls = (c.output or "").partition("@")[2]
            if not c.passed and cls in classes:
                return classes[cls].inputs, cls
        return self.subject.inputs, "model's own"

    # -- episodes: the reference side and each serving stack drive the environment -------------
    def no_rollout(self) -> str:
        return f"no [models.{self.model.name}.rollout]"

    def roll_out(self, run: Serving, targets: Sequence[str]) -> list[RolloutResult]:
        """``[models.NAME.rollout]``: the reference side against each serving stack that ran the
        file, in one environment process."""
        model, subject = self.model, self.subject
        if model.rollout is None:
            return []
        settings = episodes.of_model(model.rollout, self.state.config.rollout)
        out = []
        with EnvProcess() as envs:
            self.state.register(envs)
            for t in targets:
                self.state.check()
                base = dict(
                    pair=pair_name(model, t),
                    train=model.reference_stack or t,  # a stack: the history keys rollouts by host
                    infer=t,
                    probe=model.name,
                    variant=MODEL_VARIANT,
                )
                keep = {
                    **base,
                    "env": settings.env,
                    "action_atol": settings.action_atol,
                    "return_atol": settings.return_atol,
                }
                if model.golden is not None:
                    why = (
                        f"the reference is a golden file ({model.golden}): it holds outputs of fixed "
                        "inputs and cannot act in an environment; set reference = STACK or train = "
                        "{ factory = ... } to roll the model out"
                    )
                    out.append(episodes.not_rolled(keep, why))
                    continue
                try:
                    plan = episodes.plan(
                        settings,
                        subject.head,
                        self.settings(t).apply(RATIOS, subject.head_options),
                        subject.inputs,
                        list(subject.input_names),
                        list(subject.names(len(self.reference.outputs or ()))),
                    )
                except episodes.NotRolled as exc:
                    out.append(episodes.not_rolled(keep, str(exc)))
                    continue
                assert self.reference_stack is not None
                try:
                    with run.stacks.use(self.reference_stack, t) as (ref_worker, worker):
                        reference = episodes.worker_run(ref_worker, self.reference_model)
                        served = episodes.worker_run(worker, self.key)
                        act_dim = plan.row(self.reference.outputs or [], plan.action_at).shape[1]
                        out.append(
                            episodes.roll_out(
                                plan,
                                envs=envs,
                                base=base,
                                reference=episodes.Model(reference, reference),
                                served=episodes.Model(served, served),
                                act_dim=act_dim,
                                who=f"model {model.name}",
                            )
                        )
                except WorkerError as exc:
                    out.append(episodes.not_rolled(keep, exc.describe()))
        return out


def model_key(model: ModelConfig) -> str:
    """A model's results sort by this key in a cycle (the config's order)."""
    return f"model/{model.name}"


def model_identity(plan: ModelPlan, target: str) -> dict[str, Any]:
    model, info = plan.model, plan.info
    return dict(
        pair=pair_name(model, target),
        train=model.reference_stack or target,
        infer=target,
        probe=model.name,
        probe_version=info.sha256[:12] if info else "unreadable",
        variant=MODEL_VARIANT,
        artifact=Artifact(info.sha256, "mindir", info.size, asdict(info)) if info else None,
        samples=int(plan.inputs[0].shape[0]) if plan.inputs and plan.inputs[0].ndim else 0,
    )


class Models:
    """The ``[models.NAME]`` of a cycle: each model's plan, rules and reference side made once,
    by the first part that serves it; every part's audits."""

    def __init__(self, state: CycleState, stacks: Stacks, compat: Compatibility, serving: Serving):
        self.state, self.stacks, self.compat, self.serving = state, stacks, compat, serving
        self._lock = threading.Lock()
        self._plans: dict[str, ModelPlan] = {}
        self._audits: dict[str, ModelAudit | str] = {}

    def audits(self, wave: set[str] | None) -> tuple[list[ModelAudit], dict[tuple[str, str], ProbeResult]]:
        """Every model served on stacks among ``wave`` (None: all of them), and the results of
        those that cannot be audited (a file, input, checkpoint or golden that cannot serve: the
        result says why), by (model key, serving stack)."""
        audits: list[ModelAudit] = []
        failed: dict[tuple[str, str], ProbeResult] = {}
        for model in self.state.config.models.values():
            targets = [t for t in model.stacks if wave is None or t in wave]
            if not targets:
                continue
            self.state.check()
            try:
                audit = self._audit(model, targets)
            except CycleAborted:
                raise
            except Exception as exc:  # a case no check foresaw fails this model, not the cycle
                said = f"the auditor failed on {model.path}: {type(exc).__name__}: {exc}"
                audit = f"{said}\n{traceback.format_exc()}"
            if isinstance(audit, ModelAudit):
                audits.append(audit)
                continue
            said, _, log = audit.partition("\n")
            plan = self._plans.get(model.name, ModelPlan(model))
            status = UNCHECKED if plan.error is not None else ERROR
            thresholds = {o: asdict(model.tolerance_for(o)) for o in model.output_names}
            for t in targets:
                failed[(model_key(model), t)] = ProbeResult(
                    status=status, message=said, log=log, thresholds=thresholds, **model_identity(plan, t)
                )
        return audits, failed

    def _audit(self, model: ModelConfig, targets: list[str]) -> ModelAudit | str:
        with self._lock:
            if model.name not in self._plans:
                others = other_formats(self.compat.runtimes)
                self._plans[model.name] = plan_model(model, self.state.config.files.limits, others)
            plan = self._plans[model.name]
        if plan.error is not None:  # nothing was run: the model is unchecked, and the result says why
            return plan.error
        self.compat.add(self._rules(plan, targets))  # on the part's stacks, fingerprinted by now
        assert plan.info is not None
        self.state.artifacts[plan.info.sha256] = plan.data
        made = self.serving.once(("model", model.name), lambda: self._made(plan), lambda found: True)
        return made

    def _made(self, plan: ModelPlan) -> ModelAudit:
        """The model's audit and its reference side, once per cycle."""
        subject = from_model(plan)
        hidden = None
        if subject.hidden is not None and subject.hidden.copy is not None:
            assert self.state.tmp is not None
            hidden = self.state.stage(subject.hidden.copy, self.state.tmp)
        audit = ModelAudit(plan, subject, Side(), self.state, hidden)
        audit.reference = self._reference(audit)
        return audit

    def _reference(self, audit: ModelAudit) -> Side:
        """The model's reference side: its training network, its reference stack, or its golden."""
        model, subject = audit.model, audit.subject
        side = Side()
        if model.golden is not None:
            assert subject.golden is not None
            side.outputs = subject.golden.outputs
            return side
        stack = model.reference_stack
        assert stack is not None
        try:
            with self.stacks.use(stack) as worker:
                if model.train is not None:
                    assert subject.network is not None
                    subject.network.build(worker, audit.reference_model)
                    side.outputs = worker.request(
                        "run", model=audit.reference_model, inputs=subject.inputs
                    ).result["outputs"]
                    side.latency = self.state.time(
                        worker, audit.reference_model, subject.inputs, subject.batch
                    )
                    run_classes(
                        worker, audit.reference_model, replace(subject, chunk=None), side, self.state.check
                    )
                    if subject.hidden is not None:
                        side.hidden_note = "hidden nodes are checked on the stacks that run the file"
                else:
                    self.serving.serve_on(worker, stack, audit, side, {}, reference=True)
        except WorkerError as exc:
            side.error = exc
        except OSError as exc:  # the checkpoint went away since the plan
            checkpoint = model.train.checkpoint if model.train is not None else ""
            side.error = WorkerError(stack, "network", "error", f"{checkpoint}: {exc}")
        return side

    def _rules(self, plan: ModelPlan, targets: list[str]) -> list[Finding]:
        """Every rule on the file, each of ``targets`` (serving stacks) paired with the file's
        producer: the evaluation ``auditor check`` makes of the same file (auditor.rules.engine)."""
        model, info = plan.model, plan.info
        assert info is not None
        return file_rules(
            self.compat.rules,
            f"{model.name}:{model.reference_label}",
            model.name,
            MODEL_VARIANT,
            asdict(info),
            {n: self.state.config.stacks[n] for n in targets},
            {n: self.compat.fingerprints.get(n) for n in targets},
            self.compat.known_maxima,
            dict(self.compat.runtimes),
        )
