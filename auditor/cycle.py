"""One audit cycle: export each probe once on its train stack, load the MindIR on every infer
stack paired with it, run the same inputs on both, compare, and collect findings.

This is how production moves a policy: build and export on the training stack, load the
exported MindIR on the inference stack. Train stacks run in parallel, then infer stacks do;
a stack that fails (missing interpreter, crash, hang) turns into errors for its own pairs
only, and the rest of the cycle completes.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from auditor.compare import OutputComparison, compare_output
from auditor.config import Config, PairConfig, StackConfig
from auditor.mindir import read_info
from auditor.probe import ProbeSpec
from auditor.results import (
    CONSISTENT,
    DRIFT,
    ERROR,
    INCOMPATIBLE,
    Artifact,
    CycleResult,
    Finding,
    Latency,
    ProbeResult,
    StackReport,
)
from auditor.runtime import RuntimeSpec
from auditor.stack_worker import StackWorker, WorkerError, worker_packages

MINDIR_REJECTION = re.compile(
    r"maximum mind ?ir version:\s*(\d+).*?support the mind ?ir version:\s*(\d+)", re.IGNORECASE | re.DOTALL
)


class CycleAborted(Exception):
    """The cycle was stopped from outside (signal, Ctrl-C) before it finished."""


@dataclass(frozen=True)
class ProbeJob:
    """One probe with its resolved parameters; several pairs may share one export."""

    spec: ProbeSpec
    params: dict[str, Any]

    @property
    def key(self) -> str:
        digest = hashlib.sha256(repr(sorted(self.params.items())).encode()).hexdigest()[:10]
        return f"{self.spec.name}-{digest}"

    @property
    def variant(self) -> str:
        return {"float32": "fp32", "float16": "fp16"}.get(str(self.params.get("dtype")), "default")

    @property
    def batch(self) -> int:
        return int(self.params.get("batch", 1))


@dataclass
class TrainOutcome:
    outputs: list[np.ndarray] | None = None
    latency: Latency | None = None
    mindir: Path | None = None
    artifact: Artifact | None = None
    error: WorkerError | None = None


@dataclass
class InferOutcome:
    outputs: list[np.ndarray] | None = None
    latency: Latency | None = None
    error: WorkerError | None = None


class _Session:
    """A stack's worker for the cycle, restarted after a crash or timeout so that one bad
    request costs one job, not the whole stack. A failure to start is remembered: it would
    only fail the same way again."""

    def __init__(
        self,
        stack: StackConfig,
        config: Config,
        register: Callable[[StackWorker], None],
        packages: list[tuple[str, str]],
        runtime_class: str | None = None,
    ):
        self.stack, self.config, self.register, self.packages = stack, config, register, packages
        self.runtime_class = runtime_class
        self.worker: StackWorker | None = None
        self.start_error: WorkerError | None = None
        self.hello: dict[str, Any] | None = None

    def ensure(self) -> StackWorker:
        if self.start_error is not None:
            raise self.start_error
        if self.worker is None or not self.worker.alive:
            if self.worker is not None:
                self.worker.close()
            worker = StackWorker(
                self.stack,
                self.config.worker.start_timeout,
                self.config.worker.request_timeout,
                self.packages,
                self.runtime_class,
            )
            self.register(worker)
            try:
                self.hello = worker.start()
            except WorkerError as exc:
                worker.close()
                self.start_error = exc
                raise
            self.worker = worker
        return self.worker

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()


class Cycle:
    def __init__(
        self,
        config: Config,
        probes: dict[str, ProbeSpec],
        runtimes: dict[str, RuntimeSpec] | None = None,
    ):
        self.config = config
        self.probes = probes
        self.runtimes = runtimes or {}
        self._workers: list[StackWorker] = []
        self._lock = threading.Lock()
        self._aborted = threading.Event()
        self._sessions: dict[str, _Session] = {}
        self.artifacts: dict[str, bytes] = {}

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
    def _job(self, name: str) -> ProbeJob:
        spec = self.probes[name]
        return ProbeJob(spec, spec.params(self.config.probe(name).params))

    def run(self) -> CycleResult:
        started = time.time()
        pairs = self.config.pairs
        jobs = {name: self._job(name) for p in pairs for name in p.probes}
        packages = worker_packages(
            [spec.module for spec in self.probes.values()]
            + [r.worker_class.partition(":")[0] for r in self.runtimes.values()]
        )
        sessions = self._sessions = {
            n: _Session(s, self.config, self._register, packages, self._runtime_class(s.runtime))
            for n, s in self.config.stacks.items()
            if any(n in (p.train, p.infer) for p in pairs)
        }
        with tempfile.TemporaryDirectory(prefix="auditor-cycle-") as tmp:
            try:
                train_plan: dict[str, dict[str, ProbeJob]] = {}
                for p in pairs:
                    for name in p.probes:
                        train_plan.setdefault(p.train, {})[jobs[name].key] = jobs[name]
                trained = self._parallel(
                    {
                        s: (lambda s=s: self._train_stack(sessions[s], train_plan[s], Path(tmp)))
                        for s in train_plan
                    }
                )
                infer_plan: dict[str, list[tuple[PairConfig, ProbeJob]]] = {}
                for p in pairs:
                    for name in p.probes:
                        infer_plan.setdefault(p.infer, []).append((p, jobs[name]))
                inferred = self._parallel(
                    {
                        s: (lambda s=s: self._infer_stack(sessions[s], infer_plan[s], trained))
                        for s in infer_plan
                    }
                )
            finally:
                for session in sessions.values():
                    session.close()
            self._check()
        results = [
            self._result(p, jobs[name], trained[p.train][jobs[name].key], inferred[p.infer][(p.name, name)])
            for p in pairs
            for name in p.probes
        ]
        stacks = {n: self._stack_report(self.config.stacks[n], s) for n, s in sessions.items()}
        findings = list(self._findings(results, stacks))
        return CycleResult(started, time.time(), self.config.source, stacks, results, findings)

    def _runtime_class(self, runtime: str) -> str | None:
        spec = self.runtimes.get(runtime)
        return spec.worker_class if spec else None

    def _parallel(self, tasks: dict[str, Callable[[], Any]]) -> dict[str, Any]:
        with ThreadPoolExecutor(max_workers=self.config.worker.parallel, thread_name_prefix="stack") as pool:
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
        self, session: _Session, jobs: dict[str, ProbeJob], tmp: Path
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
                data = worker.request(
                    "export", model=key, inputs=inputs, path=str(worker.workdir / f"{key}.mindir")
                ).result["mindir"]
                info = read_info(data)
                path = tmp / f"{info.sha256}.mindir"
                path.write_bytes(data)
                outcome.mindir = path
                outcome.artifact = Artifact(info.sha256, "mindir", info.size, asdict(info))
                self.artifacts[info.sha256] = data
            except WorkerError as exc:
                outcome.error = exc
            out[key] = outcome
        return out

    def _infer_stack(
        self,
        session: _Session,
        jobs: list[tuple[PairConfig, ProbeJob]],
        trained: dict[str, dict[str, TrainOutcome]],
    ) -> dict[tuple[str, str], InferOutcome]:
        out: dict[tuple[str, str], InferOutcome] = {}
        loaded: set[str] = set()
        for pair, job in jobs:
            self._check()
            outcome = InferOutcome()
            train = trained[pair.train][job.key]
            if train.mindir is None:
                out[(pair.name, job.spec.name)] = outcome
                continue
            model = f"{pair.train}/{job.key}"
            try:
                worker = session.ensure()
                if model not in loaded:
                    worker.request("load", model=model, path=str(train.mindir))
                    loaded.add(model)
                inputs = job.spec.make_inputs(job.params)
                outcome.outputs = worker.request("run", model=model, inputs=inputs).result["outputs"]
                outcome.latency = self._time(worker, model, inputs, job.batch)
            except WorkerError as exc:
                outcome.error = exc
                if exc.kind != "error":
                    loaded.clear()  # the worker was restarted: its models are gone
            out[(pair.name, job.spec.name)] = outcome
        return out

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
        probe_cfg = self.config.probe(job.spec.name)
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
            thresholds={o: asdict(probe_cfg.tolerance_for(o)) for o in job.spec.outputs},
        )
        if train.error is not None:
            return ProbeResult(
                status=ERROR, message=f"train side: {train.error.describe()}", log=train.error.log, **base
            )
        if infer.error is not None:
            rejection = MINDIR_REJECTION.search(f"{infer.error.message}\n{infer.error.log}")
            if rejection and infer.error.kind == "error":
                return ProbeResult(
                    status=INCOMPATIBLE,
                    message=self._rejection_message(
                        pair, train, int(rejection.group(1)), int(rejection.group(2))
                    ),
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
            compare_output(n, t, i, probe_cfg.tolerance_for(n))
            for n, t, i in zip(names, train.outputs, infer.outputs, strict=True)
        )
        failed = [c for c in comparisons if not c.passed]
        if failed:
            parts = [_failure_text(c) for c in failed]
            return ProbeResult(status=DRIFT, message="; ".join(parts), outputs=comparisons, **base)
        return ProbeResult(
            status=CONSISTENT, message="all outputs within tolerance", outputs=comparisons, **base
        )

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

    def _stack_report(self, stack: StackConfig, session: _Session) -> StackReport:
        fp = None
        if session.hello is not None:
            fp = {k: v for k, v in session.hello.items() if k != "pid"}
        return StackReport(
            stack.name,
            stack.role,
            stack.runtime,
            stack.python,
            stack.device,
            stack.host,
            fp,
            session.start_error.describe() if session.start_error else None,
        )

    def _findings(self, results: list[ProbeResult], stacks: dict[str, StackReport]) -> Iterable[Finding]:
        for s in stacks.values():
            if s.error:
                yield Finding("stack-unavailable", "error", s.name, f"{s.name}/stack-unavailable", s.error)
        for r in results:
            if r.status == CONSISTENT:
                continue
            severity = {DRIFT: "warning", INCOMPATIBLE: "critical", ERROR: "error"}[r.status]
            yield Finding(
                r.status,
                severity,
                r.pair,
                f"{r.pair}/{r.probe}/{r.variant}/{r.status}",
                r.message,
                {"probe": r.probe, "variant": r.variant},
            )


def _failure_text(c: OutputComparison) -> str:
    if c.shape_mismatch:
        return f"{c.output}: shape differs ({c.shape_mismatch})"
    m = c.metrics
    return (
        f"{c.output}: {c.failing}/{c.total} elements out of tolerance "
        f"(max abs {m['max_abs']:.3g}, max rel {m['max_rel']:.3g}, would pass at atol {m['min_atol']:.3g})"
    )
