"""The probe suite's part of an audit cycle, beyond "export, load, run, compare" (auditor.cycle.cycle):

- latency at every batch of ``[latency] batches`` (auditor.policy.latency): while a train stack has
  a probe built it times it at each batch and exports a MindIR with that input shape; the
  infer stack loads and times each;
- then, while *both* sides' workers of every pair are still alive (after the infer phase,
  before the cycle closes them), a follow-up phase that uses the train stack's built cell
  and the infer stack's loaded MindIR together:
  - divergence localization of each drifting variant (auditor.policy.localize);
  - closed-loop and open-loop rollouts (auditor.policy.rollout), step by step on batch-1 models;
- importance ratios (auditor.compare.ratios): right after the infer side's own run, actions
  drawn from its policy are scored by its model, then (``behaviour``, once every infer side
  is done) by the train side's built cell: each side's in-graph log-probabilities of the
  same drawn actions, as a PPO update computes its ratios;
- the probe's input classes (auditor.compare.input_classes): right after each side's own run, the
  same model runs one batch per class (sweeps through saturation, extreme magnitudes, fp16
  edges, NaN/Inf); the pair is compared per class (checks ``output@class``) and each side's
  outputs are checked alone (auditor.policy.invariants: invariants and NaN/Inf hazards), even when
  the other side could not run;
- and, from the history database, golden baselines (auditor.policy.baseline) and latency
  regressions (auditor.policy.latency).

A part of the cycle (auditor.cycle.cycle composes it), on the cycle's shared state
(auditor.cycle.state).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from auditor.compare import input_classes, ratios
from auditor.compare.outputs import MetricCheck
from auditor.config.tables import PairConfig
from auditor.cycle.jobs import Behaviour, InferOutcome, ProbeJob, TrainOutcome
from auditor.cycle.state import CycleState
from auditor.history.baselines import Key, inputs_digest, load_goldens
from auditor.policy import baseline, invariants, latency, localize, rollout
from auditor.policy.env_process import EnvError, EnvProcess
from auditor.results import CONSISTENT, DRIFT, ERROR, Finding, ProbeResult
from auditor.stacks.worker import StackWorker, WorkerError

TAPS = "@taps"
"""The suffix of a probe's model built with its hidden layers exposed (the side checks')."""


class ProbeSuite:
    """The probe suite's parts of one cycle, on the cycle's shared state."""

    def __init__(self, state: CycleState, release: Callable[[str], str]):
        """``release``: a stack's runtime release as a key (Compatibility.release)."""
        self.state = state
        self.release = release
        self._batches: dict[str, list[input_classes.ClassBatch]] = {}
        self._sides_judged: set[tuple[str, str]] = set()
        self._declared_inputs: dict[str, tuple[invariants.Declared, list[np.ndarray]]] = {}
        self._references: dict[tuple[str, str], dict[str, np.ndarray] | None] = {}
        """The side checks' declared invariants, inputs and float64 references, by job (and
        input class): the same for every stack judged."""
        self._golden_table: dict[Key, baseline.Golden] | None = None
        self._localizations: dict[tuple[str, str, str], localize.Localization | None] = {}
        """By train stack, probe variant and serving release: a fleet's hosts on one release
        share the localization of one export."""

    def class_batches(self, job: ProbeJob) -> list[input_classes.ClassBatch]:
        """The job's input-class batches, made once per cycle (every side runs the same ones;
        the layer sweeps are solved from the weights)."""
        with self.state.lock:
            made = self._batches.get(job.key)
        if made is None:
            made = input_classes.class_batches(job.spec, job.params)
            with self.state.lock:
                made = self._batches.setdefault(job.key, made)
        return made

    def batches(self, job: ProbeJob) -> list[int]:
        """The batch sizes a job is exported at besides its own: the configured latency
        batches, the serving side's throughput sweep, and batch 1 for the rollout's
        step-by-step calls."""
        batches = list(self.state.config.latency.batches) + list(self.state.config.latency.sweep)
        if self.rollout_job(job):
            batches.append(1)
        return latency.extra_batches(batches, job.batch, job.params)

    def timed_on_serving_side(self, batch: int) -> bool:
        cfg = self.state.config.latency
        return batch in cfg.batches or batch in cfg.sweep

    def rollout_job(self, job: ProbeJob) -> bool:
        r = self.state.config.rollout
        return bool(r.enabled and job.spec.name == r.probe and job.variant == r.variant)

    # -- train side, right after the probe's own export --------------------------------------
    def train_extras(
        self, worker: StackWorker, key: str, job: ProbeJob, outcome: TrainOutcome, tmp: Path
    ) -> None:
        if not self._train_layers(worker, key, job, outcome, tmp):
            return  # the worker is gone, and the built model with it
        for b in self.batches(job):
            self.state.check()
            try:
                inputs = job.spec.make_inputs(latency.batch_params(job.params, b))
            except Exception as exc:  # a probe may not support every batch size
                outcome.suite_errors.append(f"batch {b}: the probe cannot make inputs: {exc}")
                continue
            try:
                if b in self.state.config.latency.batches:
                    outcome.latencies.append(self.state.time(worker, key, inputs, b))
                path = worker.workdir / f"{key}@b{b}{job.format.suffix}"
                data = worker.request("export", model=key, inputs=inputs, path=str(path)).result["artifact"]
                outcome.batch_exports[b] = self.state.stage(data, tmp, job.format.suffix)
            except WorkerError as exc:
                outcome.suite_errors.append(f"batch {b}: {exc.describe()}")
                if exc.kind != "error":
                    return  # the worker is gone, and the built model with it

    # -- infer side, right after the probe's own run -----------------------------------------
    def infer_extras(
        self, worker: StackWorker, model: str, job: ProbeJob, train: TrainOutcome, outcome: InferOutcome
    ) -> None:
        if not self._infer_layers(worker, model, job, train, outcome):
            return
        for b, path in sorted(train.batch_exports.items()):
            self.state.check()
            name = latency.batch_model(model, b)
            try:
                # the served model at this batch: converted like the probe's own, if the stack converts
                self.state.load(worker, worker.stack, name, path)
                outcome.batch_models[b] = name
                if self.timed_on_serving_side(b):
                    inputs = job.spec.make_inputs(latency.batch_params(job.params, b))
                    outcome.latencies.append(self.state.time(worker, name, inputs, b))
            except WorkerError as exc:
                outcome.suite_errors.append(f"batch {b}: {exc.describe()}")
                if exc.kind != "error":
                    return

    # -- importance ratios: both models score actions drawn from the infer side ------------
    def _ratio_policy(self, job: ProbeJob) -> tuple[ratios.Policy, dict[str, Any]] | None:
        """The policy of a probe that judges importance ratios with its in-graph log-probability
        (options: the probe's, then the config's), else None."""
        name = "importance_ratios"
        if name not in job.spec.comparators:
            return None
        options = {
            **job.spec.comparator_defaults(job.params).get(name, {}),
            **self.state.config.probe(job.spec.name).comparator_options(name, job.variant, job.dtype),
        }
        policy = ratios.Policy.from_options(options)
        return (policy, options) if policy.in_graph() else None

    def infer_behaviour(
        self, worker: StackWorker, model: str, job: ProbeJob, inputs: list[np.ndarray], outcome: InferOutcome
    ) -> None:
        """Draw actions from this side's policy (its outputs on ``inputs``) and run its model on
        them. Where this is not done (or the train side cannot score them), the comparator
        judges the ratios from the distributions' parameters."""
        if outcome.outputs is None or job.rerun:
            return
        try:
            found = self._ratio_policy(job)
            if found is None:
                return
            policy, options = found
            k, seed = ratios.sampling(options)
            dist = ratios.distribution(policy, dict(zip(job.spec.outputs, outcome.outputs, strict=False)))
            draws = ratios.draw(dist, k, seed)
            batches = ratios.behaviour_inputs(policy, list(job.spec.inputs), inputs, draws)
            at = list(job.spec.outputs).index(str(policy.logp))
        except Exception as exc:  # the comparator says what is wrong with its options
            outcome.suite_errors.append(f"importance ratios: not drawn: {exc}")
            return
        try:
            logps = [worker.request("run", model=model, inputs=x).result["outputs"][at] for x in batches]
        except WorkerError as exc:
            outcome.suite_errors.append(f"importance ratios: {exc.describe()}")
            return
        outcome.behaviour = Behaviour(
            f"{policy.logp}{ratios.BEHAVIOUR}", batches, np.stack([np.asarray(x) for x in logps])
        )

    def behaviour(
        self,
        planned: list[tuple[PairConfig, ProbeJob]],
        inferred: dict[str, dict[tuple[str, str], InferOutcome]],
    ) -> None:
        """The train side's cell on every infer side's drawn actions, each train stack in
        parallel (a train stack read from the database has no cell: its ratios come from the
        distributions' parameters)."""
        by_train: dict[str, list[tuple[ProbeJob, InferOutcome]]] = {}
        for pair, job in planned:
            infer = inferred.get(pair.infer, {}).get((pair.name, job.key))
            if infer is not None and infer.behaviour is not None and pair.train in self.state.sessions:
                by_train.setdefault(pair.train, []).append((job, infer))

        def score(stack: str) -> None:
            for job, infer in by_train[stack]:
                self.state.check()
                assert infer.behaviour is not None
                at = list(job.spec.outputs).index(infer.behaviour.output.partition("@")[0])
                # One call for all k draws: a train stack's cell takes any batch (as a trainer's
                # update scores a minibatch of any size), where the served file has a fixed one.
                batches = infer.behaviour.inputs
                joined = [np.concatenate(parts) for parts in zip(*batches, strict=True)]
                try:
                    worker = self.state.sessions[stack].ensure()
                    logp = worker.request("run", model=job.key, inputs=joined).result["outputs"][at]
                except WorkerError as exc:
                    infer.suite_errors.append(f"importance ratios, on {stack}: {exc.describe()}")
                    continue
                infer.behaviour.train = np.asarray(logp).reshape(infer.behaviour.infer.shape)

        self.state.parallel({s: (lambda s=s: score(s)) for s in by_train})

    # -- hidden layers: both sides run the probe with its layers exposed ----------------------
    def _train_layers(
        self, worker: StackWorker, key: str, job: ProbeJob, outcome: TrainOutcome, tmp: Path
    ) -> bool:
        """When the probe checks its hidden layers (an invariant names one, or its float64
        reference judges their NaN/Inf), build it with its layers exposed, run it on its own
        inputs and every input class, and export it for the infer sides. False: the worker died."""
        try:
            declared = invariants.declared(job.spec, job.params)
        except Exception:
            return True  # the side checks report the probe's broken declarations
        if not declared.checks_layers:
            return True
        model = f"{key}{TAPS}"
        inputs = job.spec.make_inputs(job.params)
        try:
            worker.request(
                "build",
                model=model,
                probe={"module": job.spec.module, "params": job.params, "expose_layers": True},
                weights=job.spec.make_weights(job.params),
            )
            self._run_layers(worker, model, job, inputs, outcome, len(declared.layers))
            path = worker.workdir / f"{model}{job.format.suffix}"
            data = worker.request("export", model=model, inputs=inputs, path=str(path)).result["artifact"]
            outcome.layers_export = self.state.stage(data, tmp, job.format.suffix)
        except WorkerError as exc:
            outcome.suite_errors.append(f"hidden layers: {exc.describe()}")
            return exc.kind == "error"
        return True

    def _infer_layers(
        self, worker: StackWorker, model: str, job: ProbeJob, train: TrainOutcome, outcome: InferOutcome
    ) -> bool:
        """Load the train side's layers-exposed export and run it like the probe itself."""
        if train.layers_export is None:
            return True
        name = f"{model}{TAPS}"
        try:
            worker.request("load", model=name, path=str(train.layers_export))
            inputs = train.inputs if train.inputs is not None else job.spec.make_inputs(job.params)
            count = len(invariants.declared(job.spec, job.params).layers)
            self._run_layers(worker, name, job, inputs, outcome, count)
        except WorkerError as exc:
            outcome.suite_errors.append(f"hidden layers: {exc.describe()}")
            return exc.kind == "error"
        return True

    def _run_layers(
        self,
        worker: StackWorker,
        model: str,
        job: ProbeJob,
        inputs: list[np.ndarray],
        outcome: TrainOutcome | InferOutcome,
        count: int,
    ) -> None:
        """outcome.layers[class] = the layers' outputs (they follow the probe's own outputs)."""
        runs = [(input_classes.RANDOM, inputs)] + [(c, b.inputs) for c, (b, _) in outcome.classes.items()]
        for name, x in runs:
            self.state.check()
            out = worker.request("run", model=model, inputs=x).result["outputs"]
            if len(out) != len(job.spec.outputs) + count:
                outcome.suite_errors.append(
                    f"hidden layers: {len(out)} outputs, expected {len(job.spec.outputs)} and {count} layers"
                )
                return
            outcome.layers[name] = list(out[len(job.spec.outputs) :])

    # -- input classes: both sides, right after the probe's own run ----------------------------
    def run_classes(
        self, worker: StackWorker, model: str, job: ProbeJob, outcome: TrainOutcome | InferOutcome
    ) -> None:
        """Run the model on every input class's batch; outcome.classes[name] = outputs."""
        try:
            batches = self.class_batches(job)
        except Exception as exc:  # a probe's class_inputs hook or INPUT_CLASSES is broken
            outcome.suite_errors.append(f"input classes: the probe cannot make them: {exc}")
            return
        for batch in batches:
            self.state.check()
            try:
                result = worker.request("run", model=model, inputs=batch.inputs).result["outputs"]
            except WorkerError as exc:
                outcome.suite_errors.append(f"input class {batch.name}: {exc.describe()}")
                if exc.kind != "error":
                    return
                continue
            outcome.classes[batch.name] = (batch, result)

    def class_checks(
        self, job: ProbeJob, names: list[str], train: TrainOutcome, infer: InferOutcome
    ) -> list[MetricCheck]:
        """The pair compared on each input class (auditor.compare.input_classes.pair_checks).
        Variants drawing from the framework's seeded random ops are left out: their
        generator state moves on with every call."""
        if job.rerun:
            return []
        return input_classes.pair_checks(
            names,
            {c: outputs for c, (_, outputs) in train.classes.items()},
            {c: outputs for c, (_, outputs) in infer.classes.items()},
            lambda name: self.state.tolerance(job, name),
        )

    def side_findings(
        self,
        planned: list[tuple[PairConfig, ProbeJob]],
        trained: dict[str, dict[str, TrainOutcome]],
        inferred: dict[str, dict[tuple[str, str], InferOutcome]],
    ) -> list[Finding]:
        """Invariants and NaN/Inf hazards of every stack's outputs, each side alone (a stack
        shared by several pairs is checked once per probe variant). Each finding names its
        cause and place; the cycle reports a cause once (auditor.cycle.causes)."""
        found: dict[str, Finding] = {}
        for pair, job in planned:
            train = trained.get(pair.train, {}).get(job.key)
            infer = inferred.get(pair.infer, {}).get((pair.name, job.key))
            for stack, outcome in ((pair.train, train), (pair.infer, infer)):
                if outcome is None or outcome.outputs is None or (stack, job.key) in self._sides_judged:
                    continue
                self._sides_judged.add((stack, job.key))  # once per cycle, whatever the waves
                for f in self._side_checks(stack, job, outcome):
                    found.setdefault(f.key, f)
        return list(found.values())

    def _side_checks(self, stack: str, job: ProbeJob, outcome: TrainOutcome | InferOutcome) -> list[Finding]:
        spec = job.spec
        cfg = self.state.config.probe(spec.name)
        try:
            declared, inputs = self._declared(job)
            index = input_classes.varied_index(spec)
            batches = [(input_classes.RANDOM, inputs, list(outcome.outputs or []))] + [
                (name, batch.inputs, list(outputs)) for name, (batch, outputs) in outcome.classes.items()
            ]
            runs = [
                invariants.SideRun(
                    name,
                    inputs,
                    outputs + list(outcome.layers.get(name, [])),
                    self._reference(job, declared, name, inputs),
                )
                for name, inputs, outputs in batches
            ]
            inv_opts = cfg.comparator_options(invariants.INVARIANTS, job.variant, job.dtype)
            hazard_opts = cfg.comparator_options(invariants.HAZARD, job.variant, job.dtype)
            return invariants.check_side(
                stack,
                spec.name,
                job.variant,
                declared,
                list(spec.outputs) + list(declared.layers),
                list(spec.inputs),
                index,
                runs,
                float(hazard_opts.get("max_share", 0.0)),
                invariants=bool(inv_opts.get("enabled", True)),
                hazards=bool(hazard_opts.get("enabled", True)),
            )
        except Exception as exc:
            return [
                Finding(
                    "probe-error",
                    "error",
                    stack,
                    f"{stack}/{spec.name}/{job.variant}/invariants",
                    f"probe {spec.name} [{job.variant}]: its invariants cannot be checked: "
                    f"{type(exc).__name__}: {exc}",
                    {"probe": spec.name, "variant": job.variant},
                )
            ]

    def _declared(self, job: ProbeJob) -> tuple[invariants.Declared, list[np.ndarray]]:
        """The job's declared invariants and its own inputs, made once per cycle (every stack
        that ran it, a fleet's hosts included, is judged on the same)."""
        if job.key not in self._declared_inputs:
            self._declared_inputs[job.key] = (
                invariants.declared(job.spec, job.params),
                job.spec.make_inputs(job.params),
            )
        return self._declared_inputs[job.key]

    def _reference(
        self, job: ProbeJob, declared: invariants.Declared, name: str, inputs: list[np.ndarray]
    ) -> dict[str, np.ndarray] | None:
        """The probe's float64 reference of one input class, evaluated once per cycle."""
        key = (job.key, name)
        if key not in self._references:
            weights = job.spec.make_weights(job.params)
            self._references[key] = invariants.reference_outputs(declared, job.params, weights, inputs)
        return self._references[key]

    # -- follow-up phase: both workers of each pair alive ------------------------------------
    def follow_up(
        self,
        planned: list[tuple[PairConfig, ProbeJob]],
        results: list[ProbeResult],
        trained: dict[str, dict[str, TrainOutcome]],
        inferred: dict[str, dict[tuple[str, str], InferOutcome]],
        tmp: Path,
    ) -> tuple[list[ProbeResult], list[rollout.RolloutResult]]:
        goldens = self._goldens()
        out: list[ProbeResult] = []
        rollouts: list[rollout.RolloutResult] = []
        for (pair, job), r in zip(planned, results, strict=True):
            self.state.check()
            train = trained[pair.train][job.key]
            infer = inferred[pair.infer][(pair.name, job.key)]
            served = latency.throughput([infer.latency, *infer.latencies])
            updates: dict[str, Any] = {
                "train_latencies": tuple(train.latencies),
                "infer_latencies": tuple(infer.latencies),
                "throughput": served,
                "saturation_batch": latency.saturation_batch(served, self.state.config.latency.saturation),
            }
            errors = [f"{pair.train} {e}" for e in train.suite_errors] + [
                f"{pair.infer} {e}" for e in infer.suite_errors
            ]
            if errors:
                updates["log"] = "\n".join(filter(None, [r.log, "other batch sizes:", *errors]))
            # Localization and rollouts drive both workers; a train stack read from the database
            # (split mode, auditor.history.publication) has none here.
            both = pair.train in self.state.sessions and pair.infer in self.state.sessions
            if both and r.status == DRIFT and train.outputs is not None and infer.outputs is not None:
                if self.state.config.stacks[pair.infer].convert is None:
                    updates["localization"] = self._localized(pair, job, tmp)
                else:  # the layers are exported unconverted: they would not show the conversion's effect
                    updates["localization"] = localize.Localization(
                        None,
                        f"localization not run: {pair.infer} serves a conversion "
                        f"([stacks.{pair.infer}.convert]), the layers are exported unconverted",
                    )
            if goldens is not None and (train.outputs is not None or infer.outputs is not None):
                updates["baseline"] = self._baseline(pair, job, r, train, infer, goldens)
            r = replace(r, **updates)
            out.append(r)
            rolls = both and self.rollout_job(job) and self._rollout_pair(pair)
            if rolls and r.status in (CONSISTENT, DRIFT):
                rollouts.append(self._rollout(pair, job, infer))
        return out, rollouts

    def _goldens(self) -> dict[Key, baseline.Golden] | None:
        """The history's goldens, read once per cycle (every host's part asks; none change
        while a cycle runs: ``golden record`` is a command of its own)."""
        if self.state.history is None:
            return None
        if self._golden_table is None:
            self._golden_table = load_goldens(self.state.history.engine)
        return self._golden_table

    def _rollout_pair(self, pair: PairConfig) -> bool:
        selected = self.state.config.rollout.pairs
        return not selected or pair.name in selected

    def _localized(self, pair: PairConfig, job: ProbeJob, tmp: Path) -> localize.Localization | None:
        """Localized once per export and serving release (a rerun that failed is tried again
        on the next host); None: the probe exposes no layers."""
        key = (pair.train, job.key, self.release(pair.infer))
        if key in self._localizations:
            return self._localizations[key]
        found = self._localize(pair, job, tmp)
        if found is None or found.error is None:
            self._localizations[key] = found
        return found

    def _localize(self, pair: PairConfig, job: ProbeJob, tmp: Path) -> localize.Localization | None:
        try:
            train_worker = self.state.sessions[pair.train].ensure()
            infer_worker = self.state.sessions[pair.infer].ensure()
        except WorkerError as exc:
            return localize.Localization(None, f"localization not run: {exc.describe()}", error=exc.message)
        return localize.localize(
            train_worker=train_worker,
            infer_worker=infer_worker,
            module=job.spec.module,
            params=job.params,
            weights=job.spec.make_weights(job.params),
            inputs=job.spec.make_inputs(job.params),
            outputs=list(job.spec.outputs),
            model=f"{pair.train}/{job.key}@layers",
            suffix=job.format.suffix,
            stage=lambda data: self.state.stage(data, tmp, job.format.suffix),
            tolerance_for=lambda name: self.state.tolerance(job, name),
            error_types=(WorkerError,),
        )

    def _baseline(
        self,
        pair: PairConfig,
        job: ProbeJob,
        r: ProbeResult,
        train: TrainOutcome,
        infer: InferOutcome,
        goldens: dict[Key, baseline.Golden],
    ) -> tuple[baseline.BaselineCheck, ...]:
        inputs_sha = inputs_digest(job.spec.make_inputs(job.params))
        checks = []
        sides = (
            ("train", pair.train, "", train.outputs, None),
            ("infer", pair.infer, pair.train, infer.outputs, r),
        )
        for side, stack, source, outputs, with_metrics in sides:
            if outputs is None:
                continue
            names = list(job.spec.outputs) + [
                f"output{i}" for i in range(len(job.spec.outputs), len(outputs))
            ]
            host = self.state.config.stacks[stack].host
            check, blob = baseline.check(
                goldens.get((host, stack, job.spec.name, job.variant, source)),
                side=side,
                stack=stack,
                source=source,
                probe_version=job.spec.version,
                inputs_sha256=inputs_sha,
                names=names,
                outputs=outputs,
                tolerance_for=lambda name: self.state.tolerance(job, name),
                pair_metrics={c.output: dict(c.metrics) for c in with_metrics.outputs}
                if with_metrics
                else None,
            )
            if check.status == baseline.NEW:
                self.state.artifacts.setdefault(check.outputs_sha256, blob)
            checks.append(check)
        return tuple(checks)

    def _rollout(self, pair: PairConfig, job: ProbeJob, infer: InferOutcome) -> rollout.RolloutResult:
        # One environment process for the checks and every episode, always closed; an abort
        # of the cycle kills it with the workers.
        with EnvProcess() as envs:
            self.state.register(envs)
            return self._rollout_in(envs, pair, job, infer)

    def _rollout_in(
        self, envs: EnvProcess, pair: PairConfig, job: ProbeJob, infer: InferOutcome
    ) -> rollout.RolloutResult:
        cfg = self.state.config.rollout
        base = dict(
            pair=pair.name,
            train=pair.train,
            infer=pair.infer,
            probe=job.spec.name,
            variant=job.variant,
            env=cfg.env,
            action_atol=cfg.action_atol,
            return_atol=cfg.return_atol,
        )
        try:
            problem = rollout.check_spaces(
                cfg.env, job.params.get("obs_dim"), job.params.get("act_dim"), envs
            )
        except EnvError as exc:
            return rollout.RolloutResult(
                status=ERROR, message=f"rollout not run: {exc.describe()}", log=exc.log, **base
            )
        if problem is None and "obs" not in job.spec.inputs:
            problem = f"probe {job.spec.name} has no input named 'obs' (inputs: {', '.join(job.spec.inputs)})"
        if problem is None and 1 not in infer.batch_models:
            problem = f"{pair.infer} has no batch-1 model of {job.spec.name} [{job.variant}] to step with"
        if problem is not None:
            return rollout.RolloutResult(status=ERROR, message=f"rollout not run: {problem}", **base)
        outputs = list(job.spec.outputs)
        index = (
            outputs.index("action")
            if "action" in outputs
            else outputs.index("mean")
            if "mean" in outputs
            else 0
        )
        template = job.spec.make_inputs(latency.batch_params(job.params, 1))
        obs_at = job.spec.inputs.index("obs")

        def inputs(obs: np.ndarray) -> list[np.ndarray]:
            x = list(template)
            x[obs_at] = np.asarray(obs, dtype=template[obs_at].dtype).reshape(template[obs_at].shape)
            return x

        try:
            train_worker = self.state.sessions[pair.train].ensure()
            infer_worker = self.state.sessions[pair.infer].ensure()
        except WorkerError as exc:
            return rollout.RolloutResult(status=ERROR, message=f"rollout not run: {exc.describe()}", **base)
        train_policy = rollout.worker_policy(train_worker, job.key, index, inputs)
        infer_policy = rollout.worker_policy(infer_worker, infer.batch_models[1], index, inputs)
        sampler = None
        if cfg.mode == "sampled":
            try:
                sampler, picks = self._sampler(pair, job, train_worker, infer_worker)
            except ValueError as exc:
                return rollout.RolloutResult(status=ERROR, message=f"rollout not run: {exc}", **base)
            train_policy = rollout.worker_policy(train_worker, job.key, picks, inputs)
            infer_policy = rollout.worker_policy(infer_worker, infer.batch_models[1], picks, inputs)
        return rollout.rollout(
            **base,
            seeds=cfg.seeds,
            steps=cfg.steps,
            train_policy=train_policy,
            infer_policy=infer_policy,
            error_types=(WorkerError,),
            envs=envs,
            sampler=sampler,
            limits=rollout.SampledLimits(cfg.clip_epsilon, cfg.max_ppo_clip_share, cfg.min_ess),
        )

    def _sampler(
        self, pair: PairConfig, job: ProbeJob, train_worker: StackWorker, infer_worker: StackWorker
    ) -> tuple[rollout.Sampler, tuple[int, int]]:
        """Sampled mode: the probe's policy (its importance_ratios options: a Gaussian or tanh
        head whose cell scores given actions), the outputs a step reads (mean, std), and the
        two scorers of an episode's steps: each side's model at the probe's own batch, the
        steps in batches of it (the last one padded), as a PPO update scores a rollout batch.
        ValueError says why the probe cannot be sampled."""
        found = self._ratio_policy(job)
        if found is None:
            raise ValueError(
                f"probe {job.spec.name} declares no policy whose cell scores given actions "
                "(importance_ratios with logp and actions) to sample from"
            )
        policy, _ = found
        if policy.kind not in ("gaussian", "tanh") or policy.std is None:
            raise ValueError(f"sampled episodes draw from a Gaussian (mean, std) policy, not {policy.kind!r}")
        outputs, inputs = list(job.spec.outputs), list(job.spec.inputs)
        picks = (outputs.index(policy.mean), outputs.index(policy.std))
        logp = outputs.index(str(policy.logp))
        obs_at, act_at = inputs.index("obs"), inputs.index(str(policy.actions))
        template = job.spec.make_inputs(job.params)
        batch = int(template[obs_at].shape[0])

        def scorer(worker: StackWorker, model: str) -> rollout.Scorer:
            def score(states: np.ndarray, actions: np.ndarray) -> np.ndarray:
                out = []
                for start in range(0, len(states), batch):
                    n = min(batch, len(states) - start)
                    x = list(template)
                    for at, rows in ((obs_at, states), (act_at, actions)):
                        part = rows[start : start + n]
                        padded = np.concatenate([part, np.repeat(part[-1:], batch - n, axis=0)])
                        x[at] = padded.astype(template[at].dtype).reshape(template[at].shape)
                    got = worker.request("run", model=model, inputs=x).result["outputs"][logp]
                    out.append(np.asarray(got).reshape(-1)[:n])
                return np.concatenate(out)

            return score

        scale = float(job.params.get("max_action", 1.0)) if policy.kind == "tanh" else 1.0
        sampler = rollout.Sampler(
            policy.kind,
            scale,
            score_train=scorer(train_worker, job.key),
            score_infer=scorer(infer_worker, f"{pair.train}/{job.key}"),
            clip_epsilon=self.state.config.rollout.clip_epsilon,
        )
        return sampler, picks

    # -- findings ----------------------------------------------------------------------------
    def findings(self, results: list[ProbeResult], rollouts: list[rollout.RolloutResult]) -> list[Finding]:
        found = list(baseline.findings(results)) + rollout.findings(rollouts)
        if self.state.history is not None:
            hosts = {n: s.host for n, s in self.state.config.stacks.items()}
            found += latency.regressions(results, self.state.history.engine, self.state.config.latency, hosts)
        return found
