"""The probes of a cycle (built-in and plugin): each variant (a ``ProbeJob``) is a policy whose
training network is its cell, built from its seeded weights on every train stack that pairs
it, and whose served model is that cell's export.

On a train stack each variant is built, run on its own inputs, timed, run on every input class
and with its layers exposed (the hidden nodes, exported for the serving sides too), exported
once per format its pairs' serving runtimes load and at the other batch sizes it is timed or
stepped at, and, where its repeatability decides, built and run again in a process started
cold. Each (train stack, variant) is then one ``ProbeAudit``, served by its pairs' infer stacks
through the one pipeline (auditor.cycle.serving); what this module adds is who the sides are
and how a probe's inner values are exposed (its cell built with ``expose_layers``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from auditor.config.tables import PairConfig
from auditor.cycle.held import Stacks
from auditor.cycle.serving import Audit, Served, Serving, code_error, run_classes, run_hidden
from auditor.cycle.state import CycleState
from auditor.policy import episodes, latency, localize
from auditor.policy.env_process import EnvProcess
from auditor.policy.side import Side
from auditor.policy.subject import RATIOS, REFERENCE, ProbeJob, Subject
from auditor.policy.verdict import Settings, Sides
from auditor.results import ERROR, UNCHECKED, UNSUPPORTED, Artifact, CycleAborted, ProbeResult, RolloutResult
from auditor.runtime import EXPORT, OPERATOR, RuntimeSpec
from auditor.stacks.worker import WorkerError

PUBLICATION_READ = "read publication"
"""The request a source = "db" stack's train side stands for: reading its publication."""
TAPS = "@taps"
"""The suffix of a probe's model built with its hidden layers exposed."""


def rollout_job(state: CycleState, job: ProbeJob) -> bool:
    r = state.config.rollout
    return bool(r.enabled and job.spec.name == r.probe and job.variant == r.variant)


def other_batches(state: CycleState, job: ProbeJob) -> list[int]:
    """The batch sizes a job is exported at besides its own: the configured latency batches,
    the serving side's throughput sweep, and batch 1 for the rollout's step-by-step calls."""
    batches = list(state.config.latency.batches) + list(state.config.latency.sweep)
    if rollout_job(state, job):
        batches.append(1)
    return latency.extra_batches(batches, job.batch, job.params)


def train_stack(
    state: CycleState, stacks: Stacks, stack: str, jobs: Mapping[str, tuple[ProbeJob, Subject]], tmp: Path
) -> dict[str, Side]:
    """Every variant of ``jobs`` (by key) on train stack ``stack``: its reference side, with
    what the serving sides load."""
    out: dict[str, Side] = {}
    for key, (job, subject) in jobs.items():
        state.check()
        side = out[key] = Side()
        if subject.problem is not None:
            side.error = code_error(stack, subject, subject.problem)
            continue
        try:
            try:
                with stacks.use(stack) as worker:
                    _train(state, worker, key, job, subject, side, tmp)
            except WorkerError as exc:
                if not exc.lost:
                    raise
                # lost with its warm zygote, not by what it was asked: built once more, and said
                side = out[key] = Side(notes=[f"built again on a fresh worker: {exc.message}"])
                with stacks.use(stack) as worker:
                    _train(state, worker, key, job, subject, side, tmp)
        except WorkerError as exc:
            side.error = exc
        except CycleAborted:
            raise
        except Exception as exc:  # the probe's own auditor-side code (a plugin's) raised
            side.error = code_error(stack, subject, exc)
    again = [(key, subject, out[key]) for key, (_, subject) in jobs.items() if REFERENCE in subject.repeat]
    rerun_built(state, stacks, stack, [(k, s, side) for k, s, side in again if side.ran])
    return out


def _train(
    state: CycleState, worker: Any, key: str, job: ProbeJob, subject: Subject, side: Side, tmp: Path
) -> None:
    assert subject.network is not None
    subject.network.build(worker, key)
    side.outputs = worker.request("run", model=key, inputs=subject.inputs).result["outputs"]
    side.latency = state.time(worker, key, subject.inputs, subject.batch)
    run_classes(worker, key, subject, side, state.check)
    fmt = job.format  # the path's suffix tells the worker what to write
    data = worker.request(
        "export", model=key, inputs=subject.inputs, path=str(worker.workdir / f"{key}{fmt.suffix}")
    )
    data = data.result["artifact"]
    info = fmt.read(data)
    side.export = state.stage(data, tmp, fmt.suffix)
    side.artifact = Artifact(info["sha256"], fmt.name, info["size"], info)
    state.artifacts[info["sha256"]] = data
    if subject.hidden is not None and not _layers(state, worker, key, job, subject, side, tmp):
        return  # the worker is gone, and the built model with it
    for b in other_batches(state, job):
        state.check()
        try:
            inputs = subject.inputs_at(b) if subject.inputs_at is not None else None
            if inputs is None:
                continue
        except Exception as exc:  # a probe may not support every batch size
            side.notes.append(f"batch {b}: the probe cannot make inputs: {exc}")
            continue
        try:
            if b in state.config.latency.batches:
                side.latencies.append(state.time(worker, key, inputs, b))
            path = worker.workdir / f"{key}@b{b}{fmt.suffix}"
            data = worker.request("export", model=key, inputs=inputs, path=str(path)).result["artifact"]
            side.batch_exports[b] = state.stage(data, tmp, fmt.suffix)
        except WorkerError as exc:
            side.notes.append(f"batch {b}: {exc.describe()}")
            if exc.kind != "error":
                return


def _layers(
    state: CycleState, worker: Any, key: str, job: ProbeJob, subject: Subject, side: Side, tmp: Path
) -> bool:
    """The cell built again with its layers exposed, run on the own inputs and every class, and
    exported for the serving sides. False: the worker is gone."""
    assert subject.network is not None
    model = f"{key}{TAPS}"
    try:
        subject.network.build(worker, model, layers=True)
        run_hidden(worker, model, None, subject, side, state.check, load=False)
        path = worker.workdir / f"{model}{job.format.suffix}"
        data = worker.request("export", model=model, inputs=subject.inputs, path=str(path)).result["artifact"]
        side.hidden_export = state.stage(data, tmp, job.format.suffix)
    except WorkerError as exc:
        side.notes.append(f"hidden layers: {exc.describe()}")
        return exc.kind == "error"
    return True


def rerun_built(
    state: CycleState, stacks: Stacks, stack: str, runs: Sequence[tuple[str, Subject, Side]]
) -> None:
    """The networks built and run again in one process of ``stack`` started cold."""
    if not runs:
        return
    session = stacks.session(stack)
    fresh = session.fresh(cold=True)
    try:
        for key, subject, side in runs:
            state.check()
            side.rerun_words = "a cold process"
            try:
                worker = fresh.ensure()
                assert subject.network is not None
                subject.network.build(worker, key)
                side.rerun = worker.request("run", model=key, inputs=subject.inputs).result["outputs"]
            except WorkerError as exc:
                side.rerun = exc
    finally:
        fresh.close()
        session.problems.extend(fresh.problems)


class ProbeAudit(Audit):
    """A probe variant exported by one train stack, served by its pairs' infer stacks."""

    def __init__(
        self,
        job: ProbeJob,
        subject: Subject,
        train: str,
        trained: Side,
        pairs: Sequence[PairConfig],
        state: CycleState,
        runtimes: Mapping[str, RuntimeSpec],
        has_cell: bool,
    ):
        super().__init__(
            f"{train}/{job.key}",
            subject,
            trained,
            {p.infer: p.name for p in pairs},
            Served(trained.export, None, trained.hidden_export, dict(trained.batch_exports)),
            train if has_cell else None,  # a train stack read from the database has no cell
            job.key,
        )
        self.job, self.train = job, train
        self.pairs = {p.infer: p for p in pairs}
        self.state, self.runtimes = state, runtimes

    @property
    def source(self) -> str:
        return self.train

    @property
    def reference_name(self) -> str:
        return self.train  # a publication's outputs are the train stack's too

    def settings(self, target: str) -> Settings:
        ppo, pair = self.state.config.ppo, self.pairs.get(target)
        own = {RATIOS: {"trainer": pair.trainer}} if pair is not None and pair.trainer else {}
        return Settings({RATIOS: ppo.options()}, own)

    def identity(self, target: str) -> dict[str, Any]:
        spec = self.job.spec
        return dict(
            pair=self.pairs[target].name,
            train=self.train,
            infer=target,
            probe=spec.name,
            probe_version=spec.version,
            variant=self.job.variant,
            artifact=self.reference.artifact,
            samples=self.job.batch,
        )

    def words(self, target: str) -> Sides:
        return Sides("train side", "infer side")

    def artifact_info(self) -> dict[str, Any] | None:
        return self.reference.artifact.info if self.reference.artifact else None

    def reference_failure(self, error: WorkerError) -> tuple[str, str] | None:
        if error.op == EXPORT and error.kind == "error":
            # an operator its exporter cannot write in this format: the train runtime's forms
            spec = self.runtimes.get(self.state.config.stacks[self.train].runtime)
            found = spec.explain(f"{error.message}\n{error.log}", EXPORT) if spec else None
            if found is not None and found.kind == OPERATOR:
                return UNSUPPORTED, (
                    f"unsupported operator: {found.operator} ({self.train} cannot export this variant to "
                    f"{self.job.format.title}: {found.words})"
                )
        # A source = "db" stack without its publication: nothing to compare, not a failure.
        status = UNCHECKED if error.op == PUBLICATION_READ else ERROR
        return status, f"train side: {error.describe()}"

    def save_meta(self) -> tuple[str, str, dict[str, Any]]:
        return "train", self.train, {"probe_version": self.job.spec.version, "dtype": self.job.dtype}

    # -- a drift's first divergent layer: the cell built again with its layers exposed --------
    def localize(self, run: Serving, target: str, result: ProbeResult) -> localize.Localization | None:
        if self.reference_stack is None:
            return None
        if self.state.config.stacks[target].convert is not None:
            # the layers are exported unconverted: they would not show the conversion's effect
            return localize.Localization(
                None,
                f"localization not run: {target} serves a conversion "
                f"([stacks.{target}.convert]), the layers are exported unconverted",
            )
        return run.once(
            ("localize", self.train, self.job.key, run.release(target)),
            lambda: self._localize(run, target),
            lambda found: found is None or found.error is None,  # a failed rerun: the next host tries
        )

    def _localize(self, run: Serving, target: str) -> localize.Localization | None:
        job, tmp = self.job, self.state.tmp
        assert tmp is not None and self.subject.network is not None
        try:
            with run.stacks.use(self.train, target) as (train_worker, infer_worker):
                return localize.localize(
                    train_worker=train_worker,
                    infer_worker=infer_worker,
                    module=job.spec.module,
                    params=job.params,
                    weights=self.subject.network.payload["weights"],
                    inputs=self.subject.inputs,
                    outputs=list(job.spec.outputs),
                    model=f"{self.train}/{job.key}@layers",
                    suffix=job.format.suffix,
                    stage=lambda data: self.state.stage(data, tmp, job.format.suffix),
                    tolerance_for=lambda name: self.subject.tolerance(name),
                    error_types=(WorkerError,),
                )
        except WorkerError as exc:
            return localize.Localization(None, f"localization not run: {exc.describe()}", error=exc.message)

    # -- episodes: the cell and the batch-1 export step by step ------------------------------
    def no_rollout(self) -> str:
        cfg = self.state.config.rollout
        if not cfg.enabled:
            return "[rollout] enabled = false"
        if self.reference_stack is None:
            return "the train side is read from a publication: it cannot act"
        return f"[rollout] drives {cfg.probe} [{cfg.variant}] (and its pairs: [rollout] pairs)"

    def roll_out(self, run: Serving, targets: Sequence[str]) -> list[RolloutResult]:
        cfg = self.state.config.rollout
        if self.reference_stack is None or not rollout_job(self.state, self.job):
            return []
        chosen = [t for t in targets if not cfg.pairs or self.pairs[t].name in cfg.pairs]
        out = []
        for t in chosen:
            # One environment process for the checks and every episode, always closed; an abort
            # of the cycle kills it with the workers.
            with EnvProcess() as envs:
                self.state.register(envs)
                out.append(self._roll(run, envs, t))
        return out

    def _roll(self, run: Serving, envs: EnvProcess, target: str) -> RolloutResult:
        job, subject, cfg = self.job, self.subject, self.state.config.rollout
        base = dict(
            pair=self.pairs[target].name,
            train=self.train,
            infer=target,
            probe=job.spec.name,
            variant=job.variant,
        )
        tanh = subject.head is not None and subject.head.kind == "tanh"
        settings = episodes.of_config(
            cfg, subject.output_names, float(job.params.get("max_action", 1.0)), tanh
        )
        keep = {**base, "env": cfg.env, "action_atol": cfg.action_atol, "return_atol": cfg.return_atol}
        if subject.inputs_at is None:
            return episodes.not_rolled(keep, f"probe {job.spec.name} has no batch parameter to step with")
        step_inputs = subject.inputs_at(1)
        try:
            plan = episodes.plan(
                settings,
                subject.head,
                self.settings(target).apply(RATIOS, subject.head_options),
                step_inputs,
                list(subject.input_names),
                list(subject.output_names),
                subject.inputs,
            )
        except episodes.NotRolled as exc:
            return episodes.not_rolled(keep, str(exc))
        if 1 not in (self.served.batches or {}):
            return episodes.not_rolled(
                keep, f"{target} has no batch-1 model of {job.spec.name} [{job.variant}] to step with"
            )
        try:
            with run.stacks.use(self.train, target) as (train_worker, infer_worker):
                reference = episodes.Model(
                    episodes.worker_run(train_worker, job.key), episodes.worker_run(train_worker, job.key)
                )
                served = episodes.Model(
                    episodes.worker_run(infer_worker, latency.batch_model(self.key, 1)),
                    episodes.worker_run(infer_worker, self.key),
                )
                act_dim = plan.row(self.reference.outputs or [], plan.action_at).shape[1]
                return episodes.roll_out(
                    plan,
                    envs=envs,
                    base=base,
                    reference=reference,
                    served=served,
                    act_dim=act_dim,
                    who=f"probe {job.spec.name}",
                )
        except WorkerError as exc:
            return episodes.not_rolled(keep, exc.describe())
