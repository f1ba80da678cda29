"""One audit cycle: export each probe variant once on its train stack (in each format its
pairs' infer runtimes load: MindIR, ONNX, ...), load the export on every infer stack paired
with it, run the same inputs on both, compare, and collect findings.

This is how production moves a policy: build and export on the training stack, load the
exported model on the inference stack. Train stacks run in parallel, then infer stacks do;
a stack that fails (missing interpreter, crash, hang) turns into errors for its own pairs
only, and the rest of the cycle completes.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from auditor.common import tempdirs
from auditor.compare.outputs import (
    Comparator,
    MetricCheck,
    compare_output,
)
from auditor.config.groups import member
from auditor.config.selection import cycle_stacks
from auditor.config.tables import Config, PairConfig, StackConfig
from auditor.cycle import saved_outputs, unchecked
from auditor.cycle.compatibility import Compatibility
from auditor.cycle.jobs import (
    CheckError,
    CycleAborted,
    InferOutcome,
    ProbeJob,
    TrainOutcome,
    comparator_checks,
    judged,
    own_inputs,
    probe_code_error,
    rerun_checks,
    rounding,
)
from auditor.cycle.state import CycleState
from auditor.cycle.suite import ProbeSuite
from auditor.cycle.telemetry import DeviceTelemetry
from auditor.cycle.user_models import ModelsServed, ModelSuite
from auditor.extend.manager import Plugins
from auditor.extend.probe_spec import ProbeSpec
from auditor.fleet import leases, peers
from auditor.fleet import waves as fleet_waves
from auditor.history import publication
from auditor.history.leases import LeaseBook
from auditor.history.store import Store
from auditor.policy.convert import served_results
from auditor.results import (
    CONSISTENT,
    DRIFT,
    ERROR,
    INCOMPATIBLE,
    STATUS_SEVERITY,
    UNCHECKED,
    UNSUPPORTED,
    Artifact,
    CycleResult,
    Finding,
    ProbeResult,
    StackReport,
)
from auditor.rules.engine import Rule, blocked, with_remedy
from auditor.runtime import EXPORT, MINDIR, OPERATOR, ArtifactFormat, RuntimeSpec
from auditor.stacks.session import StackSession, close_sessions, reach
from auditor.stacks.transport import CONNECTIONS
from auditor.stacks.worker import StackWorker, WorkerError


@dataclass
class _Part:
    """What one part of a cycle served: the held stacks', or one serving host's."""

    done: dict[tuple[str, str], ProbeResult]
    rolled: list[Any]
    judged: list[Finding]
    models: ModelsServed
    served: list[ProbeResult]
    samples: list[Any] = field(default_factory=list)


class Cycle:
    """One cycle, composed of parts on one shared state (auditor.cycle.state): its
    compatibility checks (fingerprints, drift, rules, learned limits), its probe suite (batch
    latencies, input classes, side checks, baselines, localization, rollouts) and its model
    suite (``[models.NAME]``). The cycle itself plans the jobs, drives the two sides of every
    pair and gives each probe variant its verdict."""

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
        save_outputs: Path | None = None,
        lease_slot: str | None = None,
    ):
        """``runtimes`` and ``comparators``: by name, as the plugins provide them; None: the
        built-in ones. ``collectors`` and ``rules``: default to those of ``plugins`` (else the built-ins);
        ``history``: the store that holds earlier runs (version drift, learned MindIR limits,
        golden baselines, latency regressions). ``tamper``: rewrites every MindIR before the
        infer side loads it (tests: a perturbed artifact must be caught and localized).
        ``save_outputs``: a folder for each side's outputs (auditor.cycle.saved_outputs).
        ``lease_slot``: the ``[leases]`` slot by name (None: the period now falls in); whoever
        runs the cycle ends its leases with ``close_leases`` (auditor.cycle.audit_run does)."""
        self.config = config
        self.probes = probes
        defaults = (runtimes, comparators, collectors, rules)
        if plugins is None and any(d is None for d in defaults):
            plugins = Plugins(entry_points=False)  # the built-ins, loaded once for all four
        self.runtimes = runtimes if runtimes is not None else plugins.runtimes()
        if collectors is None or rules is None:
            assert plugins is not None
            collectors = plugins.fingerprint_collectors() if collectors is None else collectors
            rules = plugins.rules().values() if rules is None else rules
        self.comparators = comparators if comparators is not None else plugins.comparators()
        self.plugins = plugins
        """Read again at the end of the run: a plugin that did not load leaves its checks undone."""
        self.state = CycleState(
            config,
            reach(config, self.runtimes, [spec.module for spec in probes.values()], collectors),
            history,
            tamper,
            save_outputs,
        )
        self.compat = Compatibility(self.state, collectors, rules, self.runtimes)
        self.suite = ProbeSuite(self.state, self.compat.release)
        self.models = ModelSuite(self.state, self.compat, self.comparators)
        self.telemetry = DeviceTelemetry(self.state)
        self.lease_slot = lease_slot
        self._digests: dict[tuple[str, str, str, str], dict[str, str]] = {}
        """A group's consistent members' output digests so far, by (train stack, grouped stack,
        probe, variant) (auditor.fleet.peers), and the outputs of each distinct digest: the
        peers' memory grows with what the members computed differently, not with the hosts."""
        self._distinct: dict[tuple[str, str, str, str], dict[str, list[np.ndarray]]] = {}
        self._repeats: dict[tuple[str, str, str], str] = {}
        """(member, probe, variant) -> what its own rerun said, for members out of line."""
        self.shares: leases.SharedHosts | None = None
        """The serving hosts this cycle claimed ([leases] on a history database)."""

    def abort(self) -> None:
        """Stop now: kill every worker; the running jobs fail fast and the cycle raises CycleAborted."""
        self.state.abort()

    @property
    def artifacts(self) -> dict[str, bytes]:
        return self.state.artifacts

    # -- planning --------------------------------------------------------------------------
    def _jobs(self, name: str, fmt: ArtifactFormat = MINDIR) -> list[ProbeJob]:
        """One job per variant of the probe that the config selects (all by default), exported
        in ``fmt``."""
        spec, cfg = self.probes[name], self.config.probe(name)
        return [
            ProbeJob(spec, spec.variant_params(v, cfg.params), v, fmt)
            for v in spec.select_variants(cfg.variants)
        ]

    def _spec(self, stack: str) -> RuntimeSpec | None:
        return self.runtimes.get(self.config.stacks[stack].runtime)

    def _format(self, pair: PairConfig) -> ArtifactFormat:
        """What the pair's train stack exports: the format its infer runtime loads."""
        spec = self._spec(pair.infer)
        return spec.loads if spec is not None else MINDIR

    def run(self) -> CycleResult:
        started = time.time()
        pairs = self.config.pairs
        by_format = {
            (name, self._format(p).name): self._jobs(name, self._format(p))
            for p in pairs
            for name in p.probes
        }
        jobs = {(p.name, name): by_format[(name, self._format(p).name)] for p in pairs for name in p.probes}
        fleet = self.config.fleet
        sessions = self.state.sessions = {
            n: self.state.reach.session(n, self.state.register) for n in cycle_stacks(self.config)
        }
        leasing = self.config.leases.enabled and self.state.history is not None
        waves = fleet_waves.plan(self.config, sessions)
        self._publications: dict[str, publication.Publication | None] = {}
        self._parts: dict[str, _Part] = {}
        self._exported = threading.Event()
        tempdirs.reap()  # what an auditor killed with SIGKILL left behind (and its workers)
        with tempdirs.owned("auditor-cycle-") as tmp:
            self.state.tmp = Path(tmp)
            window: fleet_waves.Window | None = None
            try:
                planned = [(p, job) for p in pairs for name in p.probes for job in jobs[(p.name, name)]]
                trained: dict[str, dict[str, TrainOutcome]] = {}
                if waves.serving:
                    # Each serving host on its own, as many at once as [worker] max_hosts leaves
                    # (auditor.fleet.waves): its fingerprints and the rules now, beside the held
                    # stacks'; its loads once the exports are made; its workers ended when done.
                    window = self._window(waves, leasing, planned, trained, Path(tmp)).start()
                # The held stacks: fingerprints, one NPU sample per host, drift and the rules,
                # before anything is exported or loaded.
                samples = self._fingerprint(waves.held)
                train_plan: dict[str, dict[str, ProbeJob]] = {}
                for p in pairs:
                    for name in p.probes:
                        for job in jobs[(p.name, name)]:
                            train_plan.setdefault(p.train, {})[job.key] = job
                for stack, names in fleet.publish.items():
                    for name in names:
                        for job in self._jobs(name):
                            train_plan.setdefault(stack, {})[job.key] = job
                trained.update(
                    self.state.parallel(
                        {
                            s: (
                                (lambda s=s: self._published_stack(s, train_plan[s], Path(tmp)))
                                if fleet.is_remote(s)
                                else (lambda s=s: self._train_stack(sessions[s], train_plan[s], Path(tmp)))
                            )
                            for s in train_plan
                        }
                    )
                )
                self.compat.check_exports(trained, train_plan)
                self._exported.set()
                self._parts[""] = self._serve(waves.held, planned, trained, Path(tmp))
                self._parts[""].samples = samples
                if window is not None:
                    window.join()
                    window = None
                # the held stacks' part first, then each serving host's, in the order of their
                # names (not in the order they ended)
                parts = [self._parts[k] for k in ("", *waves.hosts) if k in self._parts]
                by_job = {k: r for part in parts for k, r in part.done.items()}
                results = [by_job[(p.name, job.key)] for p, job in planned if (p.name, job.key) in by_job]
                results += self._in_config_order([r for part in parts for r in part.models.results])
                results += [r for part in parts for r in part.served]
                rollouts = [r for part in parts for r in part.rolled]
                rollouts += [r for part in parts for r in part.models.rollouts]  # [models.NAME.rollout]
                side = [f for part in parts for f in part.judged]
                model_findings = [f for part in parts for f in part.models.findings]
                samples = [t for part in parts for t in part.samples]
            except BaseException:
                failed = None
                if window is not None:  # its hosts' parts fail fast, and it ends before their workers
                    self.state.abort()
                    with contextlib.suppress(BaseException):
                        window.join()
                    failed = window.error
                self.close_leases()  # handed back at once: another auditor takes them now
                if failed is not None and not isinstance(failed, CycleAborted):
                    raise failed from None  # a host's part failed first: the abort here followed
                raise
            finally:
                close_sessions(list(sessions.values()))
                self.state.reach.close()  # the zygotes of this cycle ([worker] warm)
                CONNECTIONS.close_all()
            self.state.check()
        shares = self.shares.shares() if self.shares is not None else None
        covered = set(waves.held) | set(waves.stacks_of(shares.mine)) if shares is not None else set(sessions)
        stacks = {
            n: stack_report(self.config.stacks[n], s, self.compat.fingerprints.get(n))
            for n, s in sessions.items()
            if n in covered  # not the hosts other auditors took ([leases])
        }
        stacks.update({n: self._remote_report(n) for n in self._publications})
        read = {n: p.summary() if p is not None else None for n, p in self._publications.items()}
        findings = self.compat.with_rule_findings(
            list(self._findings(results, stacks))
            + self.suite.findings(results, rollouts)
            + side  # each stack and probe variant judged once (ProbeSuite.side_findings)
            + peers.digest_findings(self._digests, self._distinct, self._repeats)
            + model_findings
            + self.telemetry.findings(samples)
            + self._unchecked(stacks, read)
            + (shares.findings() if shares is not None else [])
        )
        return CycleResult(
            started,
            time.time(),
            self.config.source,
            stacks,
            results,
            findings,
            learned_maxima=self.compat.learned,
            rollouts=rollouts,
            learned_operators=self.compat.learned_operators,
            publications=[self._publish(n, train_plan.get(n, {}), trained, stacks) for n in fleet.publish],
            telemetry=samples,
            read_publications=[summary for summary in read.values() if summary is not None],
            leases=None if shares is None else {**shares.to_json(), "stacks": sorted(covered)},
        )

    def _window(
        self,
        waves: fleet_waves.Waves,
        leasing: bool,
        planned: list[tuple[PairConfig, ProbeJob]],
        trained: dict[str, dict[str, TrainOutcome]],
        tmp: Path,
    ) -> fleet_waves.Window:
        """The serving hosts in flight (auditor.fleet.waves): every one, or with [leases] those
        this auditor claims (auditor.fleet.leases) as places free up."""
        shares = self._shared(waves) if leasing else None
        hosts: list[str] | None = waves.hosts

        def claim(places: int) -> list[str] | None:
            nonlocal hosts
            if shares is not None:
                return shares.claim(places)
            given, hosts = hosts, None
            return given

        def part(host: str) -> None:
            stacks = waves.stacks_of([host])
            samples = self._fingerprint(stacks)
            while not self._exported.wait(0.5):  # the held stacks are still exporting
                self.state.check()
            self.state.check()
            served = self._serve(stacks, planned, trained, tmp)
            served.samples = samples
            self._parts[host] = served
            self._release(stacks)
            if shares is not None:
                shares.served([host])

        # with [leases], [leases] claim hosts in flight at most: the others' to take meanwhile
        size = waves.size if waves.size is not None else len(waves.serving)
        if shares is not None:
            size = shares.size
        return fleet_waves.Window(size, part, claim, self.state.abort)

    def _shared(self, waves: fleet_waves.Waves) -> leases.SharedHosts:
        """The serving hosts this auditor claims ([leases], auditor.fleet.leases)."""
        history = self.state.history
        assert history is not None
        book = LeaseBook(history.engine, leases.holder_name(history.auditor_id), history.auditor_id)
        cfg = self.config.leases
        where = leases.slot(cfg, self.config.schedule, leases.utcnow(), self.lease_slot)
        shares = leases.SharedHosts(book, waves, cfg, where, self.state.check, pause=self.state.pause)
        self.shares = shares.start()
        return self.shares

    def close_leases(self, run_id: int | None = None, stored: bool = False) -> None:
        """End this cycle's leases: done with its stored run, else handed back (idempotent)."""
        if self.shares is not None:
            shares, self.shares = self.shares, None
            shares.close(run_id, stored)

    def _fingerprint(self, wave: Sequence[str]) -> list[Any]:
        """A part's fingerprints and NPU samples, then drift and the rules on every stack
        fingerprinted so far (the part's blocks are known before it loads anything)."""
        part = {n: self.state.sessions[n] for n in wave}
        self.compat.collect(part)
        samples = self.telemetry.sample(part)
        self.compat.check()
        return samples

    def _serve(
        self,
        wave: Sequence[str],
        planned: list[tuple[PairConfig, ProbeJob]],
        trained: dict[str, dict[str, TrainOutcome]],
        tmp: Path,
    ) -> _Part:
        """What ``wave`` (the held stacks, or one serving host's) serves. The probes: loads and
        runs, the train cells scoring the drawn actions, the verdicts, the members' outputs
        against their peers', then localization and rollouts (both workers of each pair alive)
        and each side's own checks; then the [models.NAME] (auditor.cycle.user_models) and the
        [stacks.X.convert] served files. The wave's outcomes end with it (a fleet's input-class
        and layer outputs would otherwise be held for the whole cycle); a group's peers keep
        their outputs."""
        here = set(wave)
        mine = [(p, job) for p, job in planned if p.infer in here]
        infer_plan: dict[str, list[tuple[PairConfig, ProbeJob]]] = {}
        for p, job in mine:
            infer_plan.setdefault(p.infer, []).append((p, job))
        sessions = self.state.sessions
        inferred: dict[str, dict[tuple[str, str], InferOutcome]] = self.state.parallel(
            {s: (lambda s=s: self._infer_stack(sessions[s], infer_plan[s], trained)) for s in infer_plan}
        )
        # What uses the held workers or the cycle's bookkeeping: one host's part at a time
        # (CycleState.held); the host's own loads and runs above, its repeats below, beside others'.
        with self.state.held:
            self.suite.behaviour(mine, inferred)  # the train cells score the drawn actions
            results = [
                self._result(p, job, trained[p.train][job.key], inferred[p.infer][(p.name, job.key)])
                for p, job in mine
            ]
            if self.state.save_outputs is not None:
                for p, job in mine:
                    self._save_sides(p, job, trained[p.train][job.key], inferred[p.infer][(p.name, job.key)])
        self._peers(mine, inferred, results, trained)
        with self.state.held:
            results, rollouts = self.suite.follow_up(mine, results, trained, inferred, tmp)
            judged = self.suite.side_findings(mine, trained, inferred)
        done = {(p.name, job.key): r for (p, job), r in zip(mine, results, strict=True)}
        models = self.models.follow_up(sessions, wave)
        served = self._served_conversions({n: sessions[n] for n in wave})
        return _Part(done, rollouts, judged, models, served)

    def _peers(
        self,
        mine: list[tuple[PairConfig, ProbeJob]],
        inferred: dict[str, dict[tuple[str, str], InferOutcome]],
        verdicts: list[ProbeResult],
        trained: dict[str, dict[str, TrainOutcome]],
    ) -> None:
        """A wave's group members' outputs, kept for the peers' comparison at the end of the
        cycle (auditor.fleet.peers), of the members whose result is consistent: a member that
        drifts is said by its drift, and a drifting output may not even repeat on its own host
        (Lite 2.0's fp16 std is memory garbage), so its bits say nothing about the host. A
        member whose outputs differ bitwise from the majority of the peers seen so far runs the
        variant again in a fresh process on its own host, while it is still open: a host that
        repeats its own bits differs from its peers beyond its own repeatability; one that does
        not is not even repeatable."""
        with self.state.held:
            odd, first, exports = self._odd_members(mine, inferred, verdicts, trained)
        sessions = self.state.sessions

        def again(stack: str) -> None:
            session = sessions[stack]

            def load(worker: StackWorker, model: str, _job: ProbeJob) -> Any:
                return self.state.load(worker, session.stack, model, exports[model])

            self._rerun(session, odd[stack], load)

        self.state.parallel({s: (lambda s=s: again(s)) for s in odd})  # on their own hosts
        with self.state.held:
            for stack, runs in odd.items():
                for _, job, scratch in runs:
                    said = (stack, job.spec.name, job.variant)
                    self._repeats[said] = peers.repeat_words(scratch.rerun, first[said])

    def _odd_members(
        self,
        mine: list[tuple[PairConfig, ProbeJob]],
        inferred: dict[str, dict[tuple[str, str], InferOutcome]],
        verdicts: list[ProbeResult],
        trained: dict[str, dict[str, TrainOutcome]],
    ) -> tuple[
        dict[str, list[tuple[str, ProbeJob, InferOutcome]]], dict[tuple[str, str, str], str], dict[str, Path]
    ]:
        """The members' digests kept; those out of line with the peers so far, what each
        runs again (model, job, its scratch outcome), its first digest, and the exports."""
        candidates = []
        for (pair, job), verdict in zip(mine, verdicts, strict=True):
            grouped = member(pair.infer)
            outcome = inferred.get(pair.infer, {}).get((pair.name, job.key))
            if grouped is None or outcome is None or outcome.outputs is None or job.rerun:
                continue
            if verdict.status != CONSISTENT:
                continue  # its drift says it
            key = (pair.train, grouped[0], job.spec.name, job.variant)
            digest = peers.output_digest(list(outcome.outputs))
            self._distinct.setdefault(key, {}).setdefault(digest, list(outcome.outputs))
            self._digests.setdefault(key, {})[pair.infer] = digest
            candidates.append((pair, job, key))
        odd: dict[str, list[tuple[str, ProbeJob, InferOutcome]]] = {}
        first: dict[tuple[str, str, str], str] = {}
        exports: dict[str, Path] = {}
        for pair, job, key in candidates:
            train = trained[pair.train][job.key]
            if pair.infer not in peers.odd_members(self._digests[key]) or train.export is None:
                continue
            if not own_inputs(job, train.inputs):  # a publication's inputs: a rerun runs the probe's own
                continue
            model = f"{pair.train}/{job.key}"
            exports[model] = train.export
            odd.setdefault(pair.infer, []).append((model, job, InferOutcome()))
            first[(pair.infer, job.spec.name, job.variant)] = self._digests[key][pair.infer]
        return odd, first, exports

    def _release(self, stacks: Sequence[str]) -> None:
        """End these stacks' workers, their hosts' warm zygotes and ssh connections (a wave is
        done, auditor.fleet.waves); a later request would start them again."""
        if not stacks:
            return
        close_sessions([self.state.sessions[n] for n in stacks])
        self.state.reach.release(stacks)

    def _in_config_order(self, results: list[ProbeResult]) -> list[ProbeResult]:
        """The models' results by model, then serving stack, as the config lists them."""
        order = {(m.name, t): i for i, m in enumerate(self.config.models.values()) for t in m.stacks}
        return sorted(results, key=lambda r: order.get((r.probe, r.infer), len(order)))

    def _unchecked(
        self, stacks: dict[str, StackReport], read: dict[str, publication.PublicationSummary | None]
    ) -> list[Finding]:
        """What the config asked for that could not be checked (auditor.cycle.unchecked)."""
        now = datetime.now(UTC).replace(tzinfo=None)
        return (
            unchecked.stack_findings(stacks)
            + unchecked.plugin_findings(self.plugins.problems if self.plugins is not None else [])
            + unchecked.publication_findings(self.config, read, now)
        )

    # -- the two sides ---------------------------------------------------------------------
    def _train_stack(
        self, session: StackSession, jobs: dict[str, ProbeJob], tmp: Path
    ) -> dict[str, TrainOutcome]:
        out: dict[str, TrainOutcome] = {}
        for key, job in jobs.items():
            self.state.check()
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
                outcome.latency = self.state.time(worker, key, inputs, job.batch)
                self.suite.run_classes(worker, key, job, outcome)
                fmt = job.format  # the path's suffix tells the worker what to write
                path = worker.workdir / f"{key}{fmt.suffix}"
                data = worker.request("export", model=key, inputs=inputs, path=str(path)).result["artifact"]
                info = fmt.read(data)
                outcome.export = self.state.stage(data, tmp, fmt.suffix)
                outcome.artifact = Artifact(info["sha256"], fmt.name, info["size"], info)
                self.state.artifacts[info["sha256"]] = data
                self.suite.train_extras(worker, key, job, outcome, tmp)
            except WorkerError as exc:
                outcome.error = exc
            except CycleAborted:
                raise
            except Exception as exc:  # the probe's own auditor-side code (a plugin's) raised
                outcome.error = probe_code_error(session.stack.name, job, exc)
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
                self.state.check()
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
        loaded: dict[str, Artifact | None] = {}  # model -> its conversion, if the stack converts
        for pair, job in jobs:
            self.state.check()
            outcome = InferOutcome()
            train = trained[pair.train][job.key]
            outcome.blocked = blocked(self.compat.findings, pair.name, job.spec.name, job.variant)
            if train.export is None or outcome.blocked is not None:
                out[(pair.name, job.key)] = outcome
                continue
            model = f"{pair.train}/{job.key}"
            try:
                worker = session.ensure()
                if model not in loaded:
                    # converted first where the stack declares its deployment's conversion
                    done = self.state.load(worker, session.stack, model, train.export)
                    loaded[model] = done.conversion
                    outcome.load_log = done.log
                outcome.conversion = loaded[model]
                inputs = train.inputs if train.inputs is not None else job.spec.make_inputs(job.params)
                outcome.outputs = worker.request("run", model=model, inputs=inputs).result["outputs"]
                outcome.latency = self.state.time(worker, model, inputs, job.batch)
                self.suite.run_classes(worker, model, job, outcome)
                if not self.config.fleet.is_remote(pair.train):  # a published train side has no cell
                    self.suite.infer_behaviour(worker, model, job, inputs, outcome)
                self.suite.infer_extras(worker, model, job, train, outcome)
            except WorkerError as exc:
                outcome.error = exc
                if exc.kind != "error":
                    loaded.clear()  # the worker was restarted: its models are gone
            except CycleAborted:
                raise
            except Exception as exc:
                outcome.error = probe_code_error(session.stack.name, job, exc)
            out[(pair.name, job.key)] = outcome
        exports = {f"{pair.train}/{job.key}": trained[pair.train][job.key].export for pair, job in jobs}
        self._rerun(
            session,
            [
                (f"{pair.train}/{job.key}", job, out[(pair.name, job.key)])
                for pair, job in jobs
                if job.rerun and out[(pair.name, job.key)].outputs is not None
            ],
            lambda worker, model, job: self.state.load(worker, session.stack, model, exports[model]),
        )
        return out

    def _served_conversions(self, sessions: dict[str, StackSession]) -> list[ProbeResult]:
        """Each converted file a stack serves against a fresh conversion of its source."""
        out: list[ProbeResult] = []
        for name, session in sessions.items():
            table = session.stack.convert
            if table is None or not table.served:
                continue
            self.state.check()
            try:
                worker = session.ensure()
            except WorkerError as exc:
                out += [
                    ProbeResult(
                        f"{name}:served",
                        name,
                        name,
                        Path(f).name,
                        "",
                        "served-conversion",
                        ERROR,
                        exc.describe(),
                    )
                    for f in sorted(table.served)
                ]
                continue
            out += served_results(worker, session.stack, self.compat.fingerprints.get(name))
        return out

    # -- split mode (auditor.history.publication) ---------------------------------------------------------
    def _published_stack(self, name: str, jobs: dict[str, ProbeJob], tmp: Path) -> dict[str, TrainOutcome]:
        """The train side of a remote stack: its latest complete publication, read from the
        history database, stands in for building and exporting here."""
        pub = publication.latest(self.state.history.engine, name) if self.state.history is not None else None
        self._publications[name] = pub
        out: dict[str, TrainOutcome] = {}
        for key, job in jobs.items():
            item = pub.item(key) if pub is not None else None
            if item is None:
                why = (
                    "there is no history database to read it from"
                    if self.state.history is None
                    else f"no complete publication of stack {name} in the history database"
                    if pub is None
                    else f"{pub.describe()} has no export of {job.spec.name} {job.variant} "
                    "with these parameters"
                )
                message = f'{name} is read from the database (source = "db") but {why}'
                out[key] = TrainOutcome(error=WorkerError(name, PUBLICATION_READ, "start", message))
                continue
            info = dict(item.mindir_info)
            out[key] = TrainOutcome(
                outputs=item.outputs,
                latency=item.latency,
                export=self.state.stage(item.mindir, tmp, job.format.suffix),
                artifact=Artifact(info.get("sha256", ""), job.format.name, len(item.mindir), info),
                inputs=item.inputs,
                rerun=item.rerun,
            )
            self.state.artifacts[out[key].artifact.sha256] = item.mindir
        return out

    def _remote_report(self, name: str) -> StackReport:
        stack, pub = self.config.stacks[name], self._publications.get(name)
        if pub is None:  # not a failure of the stack: an unchecked finding says what is missing
            return StackReport(name, stack.role, stack.runtime, stack.python, stack.device, stack.host, None)
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
                    mindir=self.state.artifacts[t.artifact.sha256],
                    mindir_info=dict(t.artifact.info),
                    inputs=job.spec.make_inputs(job.params),
                    outputs=list(t.outputs),
                    latency=t.latency,
                    rerun=list(t.rerun) if isinstance(t.rerun, list) else None,
                )
            )
        return pub

    def _save_sides(self, pair: PairConfig, job: ProbeJob, train: TrainOutcome, infer: InferOutcome) -> None:
        """Each side's outputs of one probe variant, for ``auditor compare`` (``--save-outputs``)."""
        assert self.state.save_outputs is not None
        inputs = train.inputs if train.inputs is not None else job.spec.make_inputs(job.params)
        for side, stack, outputs in (
            ("train", pair.train, train.outputs),
            ("infer", pair.infer, infer.outputs),
        ):
            if outputs is None:
                continue
            saved_outputs.write_side(
                self.state.save_outputs,
                pair=pair.name,
                probe=job.spec.name,
                variant=job.variant,
                side=side,
                stack=stack,
                inputs=inputs,
                input_names=job.spec.inputs,
                outputs=outputs,
                output_names=job.spec.outputs,
                probe_version=job.spec.version,
                dtype=job.dtype,
            )

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
            thresholds={o: asdict(self.state.tolerance(job, o)) for o in job.spec.outputs},
            conversion=infer.conversion,
            samples=job.batch,
        )
        if train.error is not None:
            if train.error.op == EXPORT and train.error.kind == "error":
                # an operator its exporter cannot write in this format: the train runtime's forms
                spec = self._spec(pair.train)
                found = spec.explain(f"{train.error.message}\n{train.error.log}", EXPORT) if spec else None
                if found is not None and found.kind == OPERATOR:
                    return ProbeResult(
                        status=UNSUPPORTED,
                        message=f"unsupported operator: {found.operator} ({pair.train} cannot export this "
                        f"variant to {job.format.title}: {found.words})",
                        log=train.error.log,
                        **base,
                    )
            # A source = "db" stack without its publication: nothing to compare, not a failure.
            status = UNCHECKED if train.error.op == PUBLICATION_READ else ERROR
            return ProbeResult(
                status=status, message=f"train side: {train.error.describe()}", log=train.error.log, **base
            )
        if infer.blocked is not None:
            status = UNSUPPORTED if infer.blocked.kind == UNSUPPORTED else INCOMPATIBLE
            return ProbeResult(status=status, message=with_remedy(infer.blocked), **base)
        if infer.error is not None:
            if infer.error.op not in ("load", "run"):  # a later request (timing, input classes...)
                return ProbeResult(
                    status=ERROR, message=f"infer side: {infer.error.describe()}", log=infer.error.log, **base
                )
            info = train.artifact.info if train.artifact else None
            d = self.compat.diagnose(pair.infer, infer.error, info, infer.load_log)
            return ProbeResult(status=d.status, message=d.text(), log=infer.error.log, **base)
        assert train.outputs is not None and infer.outputs is not None
        names = list(job.spec.outputs)
        if len(infer.outputs) != len(train.outputs):
            return ProbeResult(
                status=ERROR,
                message=f"train side gave {len(train.outputs)} outputs, infer side {len(infer.outputs)}",
                **base,
            )
        names += [f"output{i}" for i in range(len(names), len(train.outputs))]
        try:
            envelopes = rounding(job, train.inputs)
        except _CheckError as exc:
            return ProbeResult(status=ERROR, message=str(exc), **base)
        comparisons = tuple(
            compare_output(n, t, i, self.state.tolerance(job, n), envelopes.get(n))
            for n, t, i in zip(names, train.outputs, infer.outputs, strict=True)
        )
        by_name = (dict(zip(names, train.outputs, strict=True)), dict(zip(names, infer.outputs, strict=True)))
        drawn = infer.behaviour
        if drawn is not None and drawn.train is not None:  # both models on the same drawn actions
            by_name[0][drawn.output], by_name[1][drawn.output] = drawn.train, drawn.infer
        try:
            checks = (
                self._rerun_checks(names, train, infer)
                + self._comparator_checks(job, *by_name, envelopes)
                + self.suite.class_checks(job, names, train, infer)
            )
        except _CheckError as exc:
            return ProbeResult(status=ERROR, message=str(exc), outputs=comparisons, **base)
        return judged(base, comparisons, checks)

    def _comparator_checks(
        self,
        job: ProbeJob,
        train: dict[str, np.ndarray],
        infer: dict[str, np.ndarray],
        envelopes: dict[str, np.ndarray],
    ) -> list[MetricCheck]:
        cfg = self.config.probe(job.spec.name)
        return comparator_checks(job, self.comparators, cfg, train, infer, envelopes)

    @staticmethod
    def _rerun_checks(names: list[str], train: TrainOutcome, infer: InferOutcome) -> list[MetricCheck]:
        """Each side's outputs against its own rerun in a fresh process: must be identical."""
        checks: list[MetricCheck] = []
        for side, outcome in (("train", train), ("infer", infer)):
            if outcome.rerun is None or outcome.outputs is None:
                continue
            if isinstance(outcome.rerun, WorkerError):
                raise _CheckError(f"{side} side, rerun in a fresh process: {outcome.rerun.describe()}")
            checks += rerun_checks(side, names, outcome.outputs, outcome.rerun)
        return checks

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
            yield Finding(
                r.status,
                STATUS_SEVERITY[r.status],
                r.pair,
                f"{r.pair}/{r.probe}/{r.variant}/{r.status}",
                r.message,
                {"probe": r.probe, "variant": r.variant},
                **(drift_cause(r) if r.status == DRIFT else {}),
            )


def drift_cause(r: ProbeResult) -> dict[str, Any]:
    """A drift's cause: the pair, the probe and what is out of tolerance (its outputs, else its
    probe-wide checks), so that variants drifting in the same outputs are one finding."""
    failing = [c.output for c in r.outputs if not c.passed]
    failing += [c.output.partition("@")[0] for c in r.checks if not c.passed and c.output and c.output != "*"]
    if not failing:
        failing = [c.metric for c in r.checks if not c.passed]
    what = list(dict.fromkeys(failing))
    return {
        "cause": f"{r.pair}/{r.probe}/drift/{'+'.join(what)}",
        "summary": f"{r.probe} drifts in {', '.join(what) or 'its outputs'}",
        "place": (r.pair, r.variant),
        "example": f"[{r.variant}] {r.message}",
    }


PUBLICATION_READ = "read publication"
"""The request a source = "db" stack's train side stands for: reading its publication."""

_CheckError = CheckError


def stack_report(stack: StackConfig, session: StackSession, fp: dict[str, Any] | None) -> StackReport:
    """What the run keeps of a stack: its fingerprint (or why there is none) and every
    problem its worker had."""
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
