"""One audit cycle: export each probe variant once on its train stack, load the MindIR on every
infer stack paired with it, run the same inputs on both, compare, and collect findings.

This is how production moves a policy: build and export on the training stack, load the
exported MindIR on the inference stack. Train stacks run in parallel, then infer stacks do;
a stack that fails (missing interpreter, crash, hang) turns into errors for its own pairs
only, and the rest of the cycle completes.
"""

from __future__ import annotations

import hashlib
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from auditor.common import tempdirs
from auditor.compare.outputs import (
    Comparator,
    MetricCheck,
    Tolerance,
    check_text,
    compare_output,
    failure_text,
)
from auditor.config.tables import Config, PairConfig, StackConfig
from auditor.cycle.suite import ProbeSuite
from auditor.cycle.user_models import ModelSuite, model_stacks
from auditor.extend.manager import Plugins
from auditor.extend.probe_spec import ProbeSpec, dtype_variant_name
from auditor.extend.runtime_spec import RuntimeSpec
from auditor.fingerprint import collect as fingerprint
from auditor.fingerprint.drift import diff as drift_diff
from auditor.fingerprint.drift import drift_finding
from auditor.history import publication
from auditor.results import (
    CONSISTENT,
    DRIFT,
    ERROR,
    INCOMPATIBLE,
    UNSUPPORTED,
    Artifact,
    CycleResult,
    Finding,
    Latency,
    LearnedMaximum,
    LearnedOperator,
    ProbeResult,
    StackReport,
    fingerprint_digest,
)
from auditor.rules import deployed
from auditor.rules.engine import ExportedModel, Rule, RuleContext, blocked, run_rules
from auditor.rules.operator_support import learn as learn_operator
from auditor.rules.operator_support import operator_limits
from auditor.stacks.failures import MINDIR_REJECTION, unsupported_operator
from auditor.stacks.session import StackSession, close_sessions, reach
from auditor.stacks.transport import CONNECTIONS
from auditor.stacks.worker import StackWorker, WorkerError
from auditor.worker.mindir import read_info

if TYPE_CHECKING:
    from auditor.history.store import Store


class CycleAborted(Exception):
    """The cycle was stopped from outside (signal, Ctrl-C) before it finished."""


@dataclass(frozen=True)
class ProbeJob:
    """One variant of a probe with its resolved parameters: one export, which several pairs
    may share. ``variant`` defaults to the name of the params' dtype ("fp32", ...)."""

    spec: ProbeSpec
    params: dict[str, Any]
    variant: str = ""

    def __post_init__(self) -> None:
        if not self.variant:
            object.__setattr__(self, "variant", dtype_variant_name(self.params))

    @property
    def key(self) -> str:
        digest = hashlib.sha256(repr(sorted(self.params.items())).encode()).hexdigest()[:10]
        return f"{self.spec.name}-{self.variant}-{digest}"

    @property
    def dtype(self) -> str | None:
        dtype = self.params.get("dtype")
        return str(dtype) if dtype is not None else None

    @property
    def batch(self) -> int:
        return int(self.params.get("batch", 1))

    @property
    def rerun(self) -> bool:
        """Whether this variant is run again in a fresh worker process, to check repeatability."""
        return self.variant in self.spec.rerun


@dataclass
class TrainOutcome:
    outputs: list[np.ndarray] | None = None
    latency: Latency | None = None
    mindir: Path | None = None
    artifact: Artifact | None = None
    error: WorkerError | None = None
    inputs: list[np.ndarray] | None = None
    """The inputs the outputs belong to, when they came from a publication (split mode)."""
    rerun: list[np.ndarray] | WorkerError | None = None
    """Outputs of the same build and inputs in a fresh worker process (jobs with ``rerun``)."""
    # probe suite (auditor.cycle.suite): other batch sizes
    latencies: list[Latency] = field(default_factory=list)
    batch_mindirs: dict[int, Path] = field(default_factory=dict)
    suite_errors: list[str] = field(default_factory=list)
    classes: dict[str, tuple[Any, list[np.ndarray]]] = field(default_factory=dict)
    """Input class -> (its batch, the outputs) (auditor.compare.input_classes)."""


@dataclass
class InferOutcome:
    outputs: list[np.ndarray] | None = None
    latency: Latency | None = None
    error: WorkerError | None = None
    rerun: list[np.ndarray] | WorkerError | None = None
    blocked: Finding | None = None
    """A rule's finding that made loading pointless (the load was not attempted)."""
    # probe suite (auditor.cycle.suite): other batch sizes
    latencies: list[Latency] = field(default_factory=list)
    batch_models: dict[int, str] = field(default_factory=dict)
    suite_errors: list[str] = field(default_factory=list)
    classes: dict[str, tuple[Any, list[np.ndarray]]] = field(default_factory=dict)


class Cycle(ProbeSuite, ModelSuite):
    def __init__(
        self,
        config: Config,
        probes: dict[str, ProbeSpec],
        runtimes: dict[str, RuntimeSpec] | None = None,
        comparators: dict[str, Comparator] | None = None,
        plugins: Plugins | None = None,
        collectors: Sequence[str] | None = None,
        rules: Iterable[Rule] | None = None,
        history: Store | None = None,
        tamper: Callable[[bytes], bytes] | None = None,
    ):
        """``comparators``: by name, as the plugins provide them; None: the built-in ones.
        ``collectors`` and ``rules``: default to those of ``plugins`` (else the built-ins);
        ``history``: the store that holds earlier runs (version drift, learned MindIR limits,
        golden baselines, latency regressions). ``tamper``: rewrites every MindIR before the
        infer side loads it (tests: a perturbed artifact must be caught and localized)."""
        self.tamper = tamper
        self.config = config
        self.probes = probes
        self.runtimes = runtimes or {}
        if plugins is None and (comparators is None or collectors is None or rules is None):
            plugins = Plugins(entry_points=False)  # the built-ins, loaded once for all three
        self.comparators = comparators if comparators is not None else plugins.comparators()
        self._workers: list[StackWorker] = []
        self._lock = threading.Lock()
        self._aborted = threading.Event()
        self._sessions: dict[str, StackSession] = {}
        self.artifacts: dict[str, bytes] = {}
        self._init_rules(plugins, collectors, rules, history)
        self.reach = reach(
            config,
            {n: r.worker_class for n, r in self.runtimes.items()},
            [spec.module for spec in self.probes.values()],
            self.collectors,
        )

    def _register(self, worker: StackWorker) -> None:
        with self._lock:
            if self._aborted.is_set():
                raise CycleAborted("cycle aborted")
            self._workers.append(worker)

    def abort(self) -> None:
        """Stop now: kill every worker; the running jobs fail fast and the cycle raises CycleAborted."""
        self._aborted.set()
        with self._lock:
            workers = list(self._workers)
        for w in workers:
            w.kill()

    def _check(self) -> None:
        if self._aborted.is_set():
            raise CycleAborted("cycle aborted")

    # -- planning --------------------------------------------------------------------------
    def _jobs(self, name: str) -> list[ProbeJob]:
        """One job per variant of the probe that the config selects (all by default)."""
        spec, cfg = self.probes[name], self.config.probe(name)
        return [
            ProbeJob(spec, spec.variant_params(v, cfg.params), v) for v in spec.select_variants(cfg.variants)
        ]

    def run(self) -> CycleResult:
        started = time.time()
        pairs = self.config.pairs
        jobs = {name: self._jobs(name) for p in pairs for name in p.probes}
        fleet = self.config.fleet
        sessions = self._sessions = {
            n: self.reach.session(n, self._register)
            for n, s in self.config.stacks.items()
            if (
                any(n in (p.train, p.infer) for p in pairs)
                or n in model_stacks(self.config)
                or s.models
                or n in fleet.publish
            )
            and not fleet.is_remote(n)
        }
        self._publications: dict[str, publication.Publication | None] = {}
        tempdirs.reap()  # what an auditor killed with SIGKILL left behind (and its workers)
        with tempdirs.owned("auditor-cycle-") as tmp:
            try:
                self._fingerprint_and_check(sessions)
                train_plan: dict[str, dict[str, ProbeJob]] = {}
                for p in pairs:
                    for name in p.probes:
                        for job in jobs[name]:
                            train_plan.setdefault(p.train, {})[job.key] = job
                for stack, names in fleet.publish.items():
                    for name in names:
                        for job in self._jobs(name):
                            train_plan.setdefault(stack, {})[job.key] = job
                trained = self._parallel(
                    {
                        s: (
                            (lambda s=s: self._published_stack(s, train_plan[s], Path(tmp)))
                            if fleet.is_remote(s)
                            else (lambda s=s: self._train_stack(sessions[s], train_plan[s], Path(tmp)))
                        )
                        for s in train_plan
                    }
                )
                self._check_exports(trained, train_plan)
                infer_plan: dict[str, list[tuple[PairConfig, ProbeJob]]] = {}
                for p in pairs:
                    for name in p.probes:
                        for job in jobs[name]:
                            infer_plan.setdefault(p.infer, []).append((p, job))
                inferred = self._parallel(
                    {
                        s: (lambda s=s: self._infer_stack(sessions[s], infer_plan[s], trained))
                        for s in infer_plan
                    }
                )
                planned = [(p, job) for p in pairs for name in p.probes for job in jobs[name]]
                results = [
                    self._result(p, job, trained[p.train][job.key], inferred[p.infer][(p.name, job.key)])
                    for p, job in planned
                ]
                # Probe suite: localization and rollouts need both workers of each pair alive.
                results, rollouts = self._suite_follow_up(planned, results, trained, inferred, Path(tmp))
                results += self._model_follow_up(sessions)  # [models.NAME] (auditor.cycle.user_models)
            finally:
                close_sessions(list(sessions.values()))
                CONNECTIONS.close_all()
            self._check()
        stacks = {n: self._stack_report(self.config.stacks[n], s) for n, s in sessions.items()}
        stacks.update({n: self._remote_report(n) for n in self._publications})
        findings = self._with_rule_findings(
            list(self._findings(results, stacks))
            + self._suite_findings(results, rollouts)
            + self._side_findings(planned, trained, inferred)
        )
        return CycleResult(
            started,
            time.time(),
            self.config.source,
            stacks,
            results,
            findings,
            learned_maxima=self.learned,
            rollouts=rollouts,
            learned_operators=self.learned_operators,
            publications=[self._publish(n, train_plan.get(n, {}), trained, stacks) for n in fleet.publish],
        )

    def _parallel(self, tasks: dict[str, Callable[[], Any]]) -> dict[str, Any]:
        """Run each stack's task; ``[worker] parallel`` (or a host's own) limits each host."""
        size, tasks = self.reach.parallel(tasks)
        with ThreadPoolExecutor(max_workers=size, thread_name_prefix="stack") as pool:
            futures = {name: pool.submit(fn) for name, fn in tasks.items()}
            try:
                return {name: f.result() for name, f in futures.items()}
            except BaseException:
                # Ctrl-C, SIGTERM or a bug: kill the workers first, or leaving this block would
                # wait for every running request to reach its deadline.
                self.abort()
                raise

    # -- the two sides ---------------------------------------------------------------------
    def _train_stack(
        self, session: StackSession, jobs: dict[str, ProbeJob], tmp: Path
    ) -> dict[str, TrainOutcome]:
        out: dict[str, TrainOutcome] = {}
        for key, job in jobs.items():
            self._check()
            outcome = TrainOutcome()
            try:
                worker = session.ensure()
                inputs = job.spec.make_inputs(job.params)
                worker.request(
                    "build",
                    model=key,
                    probe={"module": job.spec.module, "params": job.params},
                    weights=job.spec.make_weights(job.params),
                )
                outcome.outputs = worker.request("run", model=key, inputs=inputs).result["outputs"]
                outcome.latency = self._time(worker, key, inputs, job.batch)
                self._suite_classes(worker, key, job, outcome)
                data = worker.request(
                    "export", model=key, inputs=inputs, path=str(worker.workdir / f"{key}.mindir")
                ).result["mindir"]
                info = read_info(data)
                outcome.mindir = self._stage_mindir(data, tmp)
                outcome.artifact = Artifact(info.sha256, "mindir", info.size, asdict(info))
                self.artifacts[info.sha256] = data
                self._suite_train(worker, key, job, outcome, tmp)
            except WorkerError as exc:
                outcome.error = exc
            except CycleAborted:
                raise
            except Exception as exc:  # the probe's own auditor-side code (a plugin's) raised
                outcome.error = _probe_code_error(session.stack.name, job, exc)
            out[key] = outcome
        self._rerun(
            session,
            [(key, job, out[key]) for key, job in jobs.items() if job.rerun and out[key].outputs is not None],
            lambda worker, key, job: worker.request(
                "build",
                model=key,
                probe={"module": job.spec.module, "params": job.params},
                weights=job.spec.make_weights(job.params),
            ),
        )
        return out

    def _rerun(
        self,
        session: StackSession,
        runs: list[tuple[str, ProbeJob, TrainOutcome | InferOutcome]],
        prepare: Callable[[StackWorker, str, ProbeJob], Any],
    ) -> None:
        """Run jobs again in a fresh worker process of the same stack (one for all of them):
        a seeded random op must give the same numbers in every process, not only within one."""
        if not runs:
            return
        fresh = session.fresh()
        try:
            for model, job, outcome in runs:
                self._check()
                try:
                    worker = fresh.ensure()
                    prepare(worker, model, job)
                    inputs = job.spec.make_inputs(job.params)
                    outcome.rerun = worker.request("run", model=model, inputs=inputs).result["outputs"]
                except WorkerError as exc:
                    outcome.rerun = exc
        finally:
            fresh.close()
            session.problems.extend(fresh.problems)

    def _infer_stack(
        self,
        session: StackSession,
        jobs: list[tuple[PairConfig, ProbeJob]],
        trained: dict[str, dict[str, TrainOutcome]],
    ) -> dict[tuple[str, str], InferOutcome]:
        out: dict[tuple[str, str], InferOutcome] = {}
        loaded: set[str] = set()
        for pair, job in jobs:
            self._check()
            outcome = InferOutcome()
            train = trained[pair.train][job.key]
            outcome.blocked = blocked(self.rule_findings, pair.name, job.spec.name, job.variant)
            if train.mindir is None or outcome.blocked is not None:
                out[(pair.name, job.key)] = outcome
                continue
            model = f"{pair.train}/{job.key}"
            try:
                worker = session.ensure()
                if model not in loaded:
                    worker.request("load", model=model, path=str(train.mindir))
                    loaded.add(model)
                inputs = train.inputs if train.inputs is not None else job.spec.make_inputs(job.params)
                outcome.outputs = worker.request("run", model=model, inputs=inputs).result["outputs"]
                outcome.latency = self._time(worker, model, inputs, job.batch)
                self._suite_classes(worker, model, job, outcome)
                self._suite_infer(worker, model, job, train, outcome)
            except WorkerError as exc:
                outcome.error = exc
                if exc.kind != "error":
                    loaded.clear()  # the worker was restarted: its models are gone
            except CycleAborted:
                raise
            except Exception as exc:
                outcome.error = _probe_code_error(session.stack.name, job, exc)
            out[(pair.name, job.key)] = outcome
        mindirs = {f"{pair.train}/{job.key}": trained[pair.train][job.key].mindir for pair, job in jobs}
        self._rerun(
            session,
            [
                (f"{pair.train}/{job.key}", job, out[(pair.name, job.key)])
                for pair, job in jobs
                if job.rerun and out[(pair.name, job.key)].outputs is not None
            ],
            lambda worker, model, job: worker.request("load", model=model, path=str(mindirs[model])),
        )
        return out

    # -- split mode (auditor.history.publication) ---------------------------------------------------------
    def _published_stack(self, name: str, jobs: dict[str, ProbeJob], tmp: Path) -> dict[str, TrainOutcome]:
        """The train side of a remote stack: its latest complete publication, read from the
        history database, stands in for building and exporting here."""
        pub = publication.latest(self.history.engine, name) if self.history is not None else None
        self._publications[name] = pub
        out: dict[str, TrainOutcome] = {}
        for key, job in jobs.items():
            item = pub.item(key) if pub is not None else None
            if item is None:
                why = (
                    "there is no history database to read it from"
                    if self.history is None
                    else f"no complete publication of stack {name} in the history database"
                    if pub is None
                    else f"{pub.describe()} has no export of {job.spec.name} {job.variant} "
                    "with these parameters"
                )
                message = f'{name} is read from the database (source = "db") but {why}'
                out[key] = TrainOutcome(error=WorkerError(name, "read publication", "start", message))
                continue
            info = dict(item.mindir_info)
            out[key] = TrainOutcome(
                outputs=item.outputs,
                latency=item.latency,
                mindir=self._stage_mindir(item.mindir, tmp),
                artifact=Artifact(info.get("sha256", ""), "mindir", len(item.mindir), info),
                inputs=item.inputs,
                rerun=item.rerun,
            )
            self.artifacts[out[key].artifact.sha256] = item.mindir
        return out

    def _remote_report(self, name: str) -> StackReport:
        stack, pub = self.config.stacks[name], self._publications.get(name)
        if pub is None:
            error = f"no complete publication of stack {name} in the history database"
            return StackReport(
                name, stack.role, stack.runtime, stack.python, stack.device, stack.host, None, error
            )
        return StackReport(
            name, stack.role, stack.runtime, stack.python, stack.device, pub.host, pub.fingerprint
        )

    def _publish(
        self,
        name: str,
        jobs: dict[str, ProbeJob],
        trained: dict[str, dict[str, TrainOutcome]],
        stacks: dict[str, StackReport],
    ) -> publication.PublicationSet:
        """What ``name`` publishes this run: every variant it exported (failed ones are left out)."""
        report = stacks[name]
        pub = publication.PublicationSet(name, report.host, report.fingerprint)
        for key, job in jobs.items():
            t = trained.get(name, {}).get(key)
            if t is None or t.outputs is None or t.artifact is None:
                continue
            if t.artifact.sha256 not in self.artifacts:
                continue
            pub.items.append(
                publication.PublishedItem(
                    job_key=key,
                    probe=job.spec.name,
                    probe_version=job.spec.version,
                    variant=job.variant,
                    mindir=self.artifacts[t.artifact.sha256],
                    mindir_info=dict(t.artifact.info),
                    inputs=job.spec.make_inputs(job.params),
                    outputs=list(t.outputs),
                    latency=t.latency,
                    rerun=list(t.rerun) if isinstance(t.rerun, list) else None,
                )
            )
        return pub

    def _time(self, worker: StackWorker, model: str, inputs: list[np.ndarray], batch: int) -> Latency:
        lat = self.config.latency
        ns = worker.request(
            "time", model=model, inputs=inputs, warmup=lat.warmup, iterations=lat.iterations
        ).result["ns"]
        return Latency.from_ns(ns, batch)

    # -- verdicts --------------------------------------------------------------------------
    def _result(
        self, pair: PairConfig, job: ProbeJob, train: TrainOutcome, infer: InferOutcome
    ) -> ProbeResult:
        base = dict(
            pair=pair.name,
            train=pair.train,
            infer=pair.infer,
            probe=job.spec.name,
            probe_version=job.spec.version,
            variant=job.variant,
            train_latency=train.latency,
            infer_latency=infer.latency,
            artifact=train.artifact,
            thresholds={o: asdict(self._tolerance(job, o)) for o in job.spec.outputs},
        )
        if train.error is not None:
            return ProbeResult(
                status=ERROR, message=f"train side: {train.error.describe()}", log=train.error.log, **base
            )
        if infer.blocked is not None:
            status = UNSUPPORTED if infer.blocked.kind == UNSUPPORTED else INCOMPATIBLE
            return ProbeResult(status=status, message=infer.blocked.message, **base)
        if infer.error is not None:
            rejection = MINDIR_REJECTION.search(f"{infer.error.message}\n{infer.error.log}")
            if rejection and infer.error.kind == "error":
                self._learn(pair.infer, int(rejection.group(1)), rejection.group(0))
                return ProbeResult(
                    status=INCOMPATIBLE,
                    message=self._rejection_message(
                        pair, train, int(rejection.group(1)), int(rejection.group(2))
                    ),
                    log=infer.error.log,
                    **base,
                )
            operator = unsupported_operator(infer.error)
            if operator is not None:
                self._learn_operator(pair.infer, infer.error)
                return ProbeResult(
                    status=UNSUPPORTED,
                    message=f"unsupported operator: {operator} ({pair.infer} cannot run this variant)",
                    log=infer.error.log,
                    **base,
                )
            return ProbeResult(
                status=ERROR, message=f"infer side: {infer.error.describe()}", log=infer.error.log, **base
            )
        assert train.outputs is not None and infer.outputs is not None
        names = list(job.spec.outputs)
        if len(infer.outputs) != len(train.outputs):
            return ProbeResult(
                status=ERROR,
                message=f"train side gave {len(train.outputs)} outputs, infer side {len(infer.outputs)}",
                **base,
            )
        names += [f"output{i}" for i in range(len(names), len(train.outputs))]
        comparisons = tuple(
            compare_output(n, t, i, self._tolerance(job, n))
            for n, t, i in zip(names, train.outputs, infer.outputs, strict=True)
        )
        by_name = (dict(zip(names, train.outputs, strict=True)), dict(zip(names, infer.outputs, strict=True)))
        try:
            checks = (
                self._rerun_checks(names, train, infer)
                + self._comparator_checks(job, *by_name)
                + self._class_checks(job, names, train, infer)
            )
        except _CheckError as exc:
            return ProbeResult(status=ERROR, message=str(exc), outputs=comparisons, **base)
        for c in checks:
            if c.limit is not None:
                base["thresholds"].setdefault(c.output or "*", {})[c.metric] = c.limit
        failed = [c for c in comparisons if not c.passed]
        failed_checks = [c for c in checks if not c.passed]
        if failed or failed_checks:
            parts = [failure_text(c) for c in failed] + [check_text(c) for c in failed_checks]
            return ProbeResult(
                status=DRIFT, message="; ".join(parts), outputs=comparisons, checks=tuple(checks), **base
            )
        return ProbeResult(
            status=CONSISTENT,
            message="all outputs within tolerance",
            outputs=comparisons,
            checks=tuple(checks),
            **base,
        )

    def _tolerance(self, job: ProbeJob, output: str) -> Tolerance:
        return self.config.probe(job.spec.name).tolerance_for(output, job.variant, job.dtype)

    def _comparator_checks(
        self, job: ProbeJob, train: dict[str, np.ndarray], infer: dict[str, np.ndarray]
    ) -> list[MetricCheck]:
        """The probe's comparators, each with its options for this variant and dtype."""
        probe_cfg = self.config.probe(job.spec.name)
        defaults = job.spec.comparator_defaults(job.params)
        checks: list[MetricCheck] = []
        for name in job.spec.comparators:
            comparator = self.comparators.get(name)
            if comparator is None:
                raise _CheckError(
                    f"probe {job.spec.name} uses comparator {name!r}, which no loaded plugin provides "
                    f"(loaded: {', '.join(sorted(self.comparators)) or 'none'})"
                )
            options = {**defaults.get(name, {}), **probe_cfg.comparator_options(name, job.variant, job.dtype)}
            try:
                found = comparator.compare(train, infer, options)
            except Exception as exc:
                raise _CheckError(
                    f"comparator {name} failed on probe {job.spec.name} [{job.variant}] "
                    f"(options from probes.{job.spec.name}.comparators.{name}): {type(exc).__name__}: {exc}"
                ) from exc
            checks.extend(found)
        return checks

    @staticmethod
    def _rerun_checks(names: list[str], train: TrainOutcome, infer: InferOutcome) -> list[MetricCheck]:
        """Each side's outputs against its own rerun in a fresh process: must be identical."""
        checks: list[MetricCheck] = []
        for side, outcome in (("train", train), ("infer", infer)):
            if outcome.rerun is None or outcome.outputs is None:
                continue
            if isinstance(outcome.rerun, WorkerError):
                raise _CheckError(f"{side} side, rerun in a fresh process: {outcome.rerun.describe()}")
            for n, first, again in zip(names, outcome.outputs, outcome.rerun, strict=False):
                c = compare_output(n, first, again, Tolerance(0.0, 0.0))
                checks.append(
                    MetricCheck(
                        f"{side}_rerun_max_abs",
                        c.metrics["max_abs"],
                        c.passed,
                        0.0,
                        n,
                        "" if c.passed else f"{side} side gives other numbers in a fresh process",
                        "<=",
                    )
                )
        return checks

    def _rejection_message(self, pair: PairConfig, train: TrainOutcome, supported: int, exported: int) -> str:
        info = train.artifact.info if train.artifact else {}
        producer = info.get("model_version") or self._hello_version(pair.train) or "?"
        runtime = self.config.stacks[pair.infer].runtime
        version = self._hello_version(pair.infer) or "?"
        file_version = info.get("mind_ir_version", exported)
        return (
            f"{pair.infer} ({runtime} {version}) cannot load the MindIR exported by {pair.train} "
            f"(MindSpore {producer}): the file has MindIR version {file_version}, "
            f"the runtime reads at most version {supported}"
        )

    def _hello_version(self, stack: str) -> str | None:
        session = self._sessions.get(stack)
        return (session.hello or {}).get("runtime_version") if session else None

    def _stack_report(self, stack: StackConfig, session: StackSession) -> StackReport:
        fp = self.fingerprints.get(stack.name)
        problems = list(session.problems)
        if fp is not None and "fingerprint_error" in fp:
            # Not stored: a partial document would read as a change of the stack, and the
            # next drift check must compare against the last good fingerprint.
            problems.insert(0, f"fingerprint not taken: {fp['fingerprint_error']}")
            fp = None
        elif fp is None and session.hello is not None and session.start_error is None and not problems:
            fp = {"runtime": {k: v for k, v in session.hello.items() if k != "pid"}}
        return StackReport(
            stack.name,
            stack.role,
            stack.runtime,
            stack.python,
            stack.device,
            stack.host,
            fp,
            session.start_error.describe() if session.start_error else None,
            tuple(problems),
        )

    def _findings(self, results: list[ProbeResult], stacks: dict[str, StackReport]) -> Iterable[Finding]:
        for s in stacks.values():
            if s.error:
                yield Finding("stack-unavailable", "error", s.name, f"{s.name}/stack-unavailable", s.error)
            if s.problems:
                yield Finding(
                    "worker-failure",
                    "error",
                    s.name,
                    f"{s.name}/worker-failure",
                    "\n".join(s.problems),
                    {"count": len(s.problems)},
                )
        for r in results:
            if r.status == CONSISTENT:
                continue
            severity = {DRIFT: "warning", UNSUPPORTED: "warning", INCOMPATIBLE: "critical", ERROR: "error"}[
                r.status
            ]
            yield Finding(
                r.status,
                severity,
                r.pair,
                f"{r.pair}/{r.probe}/{r.variant}/{r.status}",
                r.message,
                {"probe": r.probe, "variant": r.variant},
            )

    # -- fingerprints, compatibility rules and version drift ---------------------------------
    # (auditor.rules.engine, auditor.fingerprint.drift). Rules on the fingerprints run once every worker is
    # up, before any probe; rules on the exported MindIR run after export, before any load. A
    # finding that blocks a probe variant is its result, reported once; the load is skipped.

    def _init_rules(
        self,
        plugins: Plugins | None,
        collectors: Sequence[str] | None,
        rules: Iterable[Rule] | None,
        history: Store | None,
    ) -> None:
        if collectors is None or rules is None:
            assert plugins is not None  # __init__ loaded the built-ins
            collectors = plugins.fingerprint_collectors() if collectors is None else collectors
            rules = plugins.rules().values() if rules is None else rules
        self.collectors: list[str] = list(collectors)
        self.rules: list[Rule] = list(rules)
        self.history = history
        self.fingerprints: dict[str, dict[str, Any]] = {}
        self.rule_findings: list[Finding] = []
        self.learned: list[LearnedMaximum] = []
        self.learned_operators: list[LearnedOperator] = []
        self._known_maxima: dict[tuple[str, str], LearnedMaximum] = {}

    def _fingerprint_and_check(self, sessions: dict[str, StackSession]) -> None:
        self.fingerprints = {
            k: v
            for k, v in self._parallel(
                {n: (lambda s=s: self._fingerprint(s)) for n, s in sessions.items()}
            ).items()
            if v is not None
        }
        self.rule_findings = []
        self.rule_findings += [f for n in sessions if (f := self._drift(n)) is not None]
        if self.history is not None:
            self._known_maxima = self.history.mindir_limits()
        context = self._context()
        self.rule_findings += run_rules([r for r in self.rules if not r.needs_artifacts], context)
        self.rule_findings += deployed.deployed_rule_findings(
            context.stacks, context.fingerprints, self.rules, self._known_maxima, context.operator_limits
        )

    def _fingerprint(self, session: StackSession) -> dict[str, Any] | None:
        """The stack's fingerprint document; a collection that fails keeps the runtime section
        and says why in ``fingerprint_error`` (for the rules; drift is not judged on such a
        document, and it is not stored: the stack's report carries the error instead)."""
        self._check()
        try:
            worker = session.ensure()
        except WorkerError:
            return None  # the start error is the stack's result
        try:
            return fingerprint.collect(worker, session.stack, self.collectors, secrets=self.config.secrets)
        except WorkerError as exc:
            return {
                "runtime": {k: v for k, v in (session.hello or {}).items() if k != "pid"},
                "fingerprint_error": exc.describe(),
            }

    def _drift(self, name: str) -> Finding | None:
        document, stack = self.fingerprints.get(name), self.config.stacks[name]
        if self.history is None or document is None or "fingerprint_error" in document:
            return None
        previous = self.history.previous_fingerprint(stack.host, name)
        if previous is None:
            # Moved to another host: what the stack was last time, wherever, is the baseline.
            elsewhere = self.history.fingerprint_history(name)
            previous = self.history.previous_fingerprint(elsewhere[-1][2], name) if elsewhere else None
        if previous is None:
            return None
        run_id, digest, before = previous
        now = fingerprint_digest(document)
        if digest == now:
            return None
        self.rule_findings += deployed.model_drift(name, before, document, run_id)
        changes = drift_diff(deployed.without_models(before), deployed.without_models(document))
        return drift_finding(name, changes, run_id, digest, now) if changes else None

    def _context(self, exported: list[ExportedModel] | None = None) -> RuleContext:
        return RuleContext(
            dict(self.config.stacks),
            {n: self.fingerprints.get(n) for n in self._sessions},
            tuple(self.config.pairs),
            exported or [],
            self._known_maxima,
            operator_limits(self.config.stacks, self.fingerprints, self.runtimes, self._known_operators()),
        )

    def _check_exports(
        self, trained: dict[str, dict[str, TrainOutcome]], plan: dict[str, dict[str, ProbeJob]]
    ) -> None:
        exported = [
            ExportedModel(stack, job.spec.name, job.variant, outcome.artifact.info)
            for stack, jobs in plan.items()
            for key, job in jobs.items()
            if (outcome := trained[stack][key]).artifact is not None
        ]
        artifact_rules = [r for r in self.rules if r.needs_artifacts]
        self.rule_findings += run_rules(artifact_rules, self._context(exported))

    def _learn(self, infer: str, maximum: int, message: str) -> None:
        """A runtime refused a MindIR and said its maximum: remember it for later runs."""
        hello = (self._sessions[infer].hello or {}) if infer in self._sessions else {}
        package, version = hello.get("runtime_package"), hello.get("runtime_version")
        if not package or not version:
            return
        with self._lock:
            if not any((x.package, x.version) == (package, version) for x in self.learned):
                self.learned.append(LearnedMaximum(str(package), str(version), maximum, message))

    def _learn_operator(self, infer: str, error: WorkerError) -> None:
        """A runtime failed to load a node it has no kernel for: remember the operator."""
        hello = (self._sessions[infer].hello or {}) if infer in self._sessions else {}
        found = learn_operator(self.config.stacks[infer], hello, f"{error.message}\n{error.log}")
        with self._lock:
            if found is not None and found not in self.learned_operators:
                self.learned_operators.append(found)

    def _with_rule_findings(self, findings: list[Finding]) -> list[Finding]:
        """Stack errors, then the rules' findings, then the probes' (one finding per key: a
        variant a rule blocked is reported by the rule's finding only)."""

        def reported_by_a_rule(f: Finding) -> bool:
            probe, variant = f.details.get("probe"), f.details.get("variant")
            return (
                f.kind in (INCOMPATIBLE, UNSUPPORTED)
                and probe is not None
                and blocked(self.rule_findings, f.subject, probe, variant) is not None
            )

        keys = {f.key for f in self.rule_findings}
        stack_kinds = ("stack-unavailable", "worker-failure")
        first = [f for f in findings if f.kind in stack_kinds]
        rest = [
            f
            for f in findings
            if f.kind not in stack_kinds and f.key not in keys and not reported_by_a_rule(f)
        ]
        return first + self.rule_findings + rest


class _CheckError(Exception):
    """A comparator or a rerun could not produce its checks: the result is an error."""


def _probe_code_error(stack: str, job: ProbeJob, exc: Exception) -> WorkerError:
    """A probe's auditor-side code (make_inputs, make_weights) raised: an error for this job
    only, with the traceback, like a failure inside the worker."""
    return WorkerError(
        stack,
        "probe",
        "error",
        f"probe {job.spec.name} ({job.spec.module}) raised {type(exc).__name__}: {exc}",
        traceback="".join(traceback.format_exception(exc)),
        error_type=type(exc).__name__,
    )
