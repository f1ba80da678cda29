"""One audit cycle: every probe variant exported on each train stack that pairs it and every
``[models.NAME]`` file, served on the stacks that serve them, compared, judged and stored.

This is how production moves a policy: build and export on the training stack, load the
exported model (or the user's file) on the inference stack. The stacks every part needs are
held for the cycle; the train stacks export in parallel; then the held stacks' part and each
serving host's part serve every policy through one pipeline (auditor.cycle.serving). A stack
that fails (missing interpreter, crash, hang) turns into errors for its own results only, and
the rest of the cycle completes.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from auditor.common import blas, tempdirs
from auditor.compare.outputs import Comparator
from auditor.config.groups import generalized, member
from auditor.config.selection import cycle_stacks
from auditor.config.tables import Config, PairConfig, StackConfig
from auditor.cycle import fix_hints, probes, unchecked
from auditor.cycle.compatibility import Compatibility
from auditor.cycle.held import Stacks
from auditor.cycle.models import Models
from auditor.cycle.part import Part, PartResult
from auditor.cycle.probes import PUBLICATION_READ, ProbeAudit
from auditor.cycle.serving import Serving
from auditor.cycle.state import CycleState
from auditor.cycle.telemetry import DeviceTelemetry
from auditor.extend.manager import Plugins
from auditor.extend.probe_spec import ProbeSpec
from auditor.fleet import peers
from auditor.fleet import window as fleet_window
from auditor.history import publication
from auditor.history.store import Store
from auditor.policy import baseline, latency, rollout
from auditor.policy.side import Side
from auditor.policy.subject import ProbeJob, Subject, broken_probe, from_probe
from auditor.queue.cycles import CycleId
from auditor.queue.fence import Fence
from auditor.queue.jobs import JobQueue
from auditor.queue.shared import SharedCycle
from auditor.queue.watch import Watched
from auditor.results import (
    CONSISTENT,
    DRIFT,
    ERROR,
    STATUS_SEVERITY,
    Artifact,
    CycleAborted,
    CycleResult,
    Finding,
    ProbeResult,
    RolloutResult,
    StackReport,
)
from auditor.rules.engine import Rule
from auditor.runtime import MINDIR, ArtifactFormat, RuntimeSpec
from auditor.stacks.session import StackSession, close_sessions, reach
from auditor.stacks.transport import CONNECTIONS
from auditor.stacks.worker import WorkerError


class Cycle:
    """One cycle: it plans the probe variants and models to audit, holds the stacks every part
    needs (auditor.cycle.held), makes the train sides (auditor.cycle.probes) and the models'
    references (auditor.cycle.models), and has each part (the held stacks, then every serving
    host, auditor.fleet.window) serve them through the one pipeline (auditor.cycle.serving);
    its compatibility checks (fingerprints, drift, rules, learned limits) run on every part."""

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
        shared: CycleId | None = None,
        handover: Watched | None = None,
    ):
        """``runtimes`` and ``comparators``: by name, as the plugins provide them; None: the
        built-in ones. ``collectors`` and ``rules``: default to those of ``plugins`` (else the built-ins);
        ``history``: the store that holds earlier runs (version drift, learned MindIR limits,
        golden baselines, latency regressions). ``tamper``: rewrites every MindIR before the
        infer side loads it (tests: a perturbed artifact must be caught and localized).
        ``save_outputs``: a folder for each side's outputs (auditor.cycle.saved_outputs).
        ``shared``: with ``[queue]``, the cycle whose serving hosts this one shares with the
        other auditors (auditor.queue); whoever runs the cycle stores its hosts with ``fence``
        and ends its part of the queue with ``close_queue`` (auditor.cycle.audit_run does);
        ``handover``: a follow-up run's worker on the queue with the hosts it took."""
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
        self.telemetry = DeviceTelemetry(self.state)
        self.shared = shared
        self.handover = handover
        self._subjects: dict[str, Subject] = {}
        self.shares: SharedCycle | None = None
        """The serving hosts this cycle took ([queue] on a PostgreSQL history)."""
        self.covered_hosts: list[str] = []
        """The serving hosts whose results this cycle holds ([queue]: those it took)."""

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

    def subject(self, job: ProbeJob) -> Subject:
        """The probe variant as a policy under audit, made once per cycle."""
        if job.key not in self._subjects:
            cfg = self.config.probe(job.spec.name)
            try:
                self._subjects[job.key] = from_probe(job, cfg)
            except Exception as exc:  # the probe's own auditor-side code (a plugin's) raised
                self._subjects[job.key] = broken_probe(job, cfg, exc)
        return self._subjects[job.key]

    def run(self) -> CycleResult:
        with blas.one_thread():  # the auditor's own numpy work gains nothing from more (auditor.common.blas)
            return self._run()

    def _run(self) -> CycleResult:
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
        sharing = self.shared is not None and self.state.history is not None
        hosts = fleet_window.plan(self.config, sessions)
        self.stacks = Stacks(sessions, set(hosts.held))
        compat = self.compat
        self.serving = Serving(
            self.state,
            self.stacks,
            self.comparators,
            lambda: compat.findings,
            compat.diagnose,
            compat.release,
        )
        self.models = Models(self.state, self.stacks, compat, self.serving)
        self._audits: list[ProbeAudit] = []
        self._publications: dict[str, publication.Publication | None] = {}
        self._parts: dict[str, PartResult] = {}
        self._exported = threading.Event()
        tempdirs.reap()  # what an auditor killed with SIGKILL left behind (and its workers)
        with tempdirs.owned("auditor-cycle-") as tmp:
            self.state.tmp = Path(tmp)
            window: fleet_window.Window | None = None
            try:
                planned = [(p, job) for p in pairs for name in p.probes for job in jobs[(p.name, name)]]
                if hosts.serving:
                    # Each serving host on its own, as many at once as [worker] max_hosts leaves
                    # (auditor.fleet.window): its fingerprints and the rules now, beside the held
                    # stacks'; its loads once the exports are made; its workers ended when done.
                    window = self._window(hosts, sharing).start()
                # The held stacks: fingerprints, one NPU sample per host, drift and the rules,
                # before anything is exported or loaded.
                held = self._part(hosts.held).fingerprint()
                train_plan: dict[str, dict[str, ProbeJob]] = {}
                for p, job in planned:
                    train_plan.setdefault(p.train, {})[job.key] = job
                for stack, names in fleet.publish.items():
                    for name in names:
                        for job in self._jobs(name):
                            train_plan.setdefault(stack, {})[job.key] = job
                todo = {
                    s: {k: (j, self.subject(j)) for k, j in plan.items()} for s, plan in train_plan.items()
                }

                def train(s: str) -> dict[str, Side]:
                    if fleet.is_remote(s):
                        return self._published_stack(s, train_plan[s], Path(tmp))
                    return probes.train_stack(self.state, self.stacks, s, todo[s], Path(tmp))

                trained: dict[str, dict[str, Side]] = self.state.parallel(
                    {s: (lambda s=s: train(s)) for s in train_plan}
                )
                exported = {
                    s: {k: side.artifact for k, side in sides.items()} for s, sides in trained.items()
                }
                self.compat.check_exports(exported, train_plan)
                self._audits = self._probe_audits(planned, trained)
                self._exported.set()
                self._parts[""] = held.serve()
                if window is not None:
                    window.join()
                    window = None
                if self.shares is not None:
                    self.shares.release_foreign()
                # the held stacks' part first, then each serving host's, in the order of their
                # names (not in the order they ended)
                parts = [self._parts[k] for k in ("", *hosts.hosts) if k in self._parts]
                by_key = {k: r for part in parts for k, r in part.served.results.items()}
                results = [
                    by_key[(f"{p.train}/{job.key}", p.infer)]
                    for p, job in planned
                    if (f"{p.train}/{job.key}", p.infer) in by_key
                ]
                models = [r for part in parts for r in part.failed.values()]
                models += [r for k, r in by_key.items() if k[0].startswith("model/")]
                results += self._in_config_order(models)
                results += [r for part in parts for r in part.conversions]
                rollouts = [r for part in parts for r in part.served.rollouts]
                side = [f for part in parts for f in part.served.findings]
                samples = [t for part in parts for t in part.samples]
            except BaseException:
                failed = None
                if window is not None:  # its hosts' parts fail fast, and it ends before their workers
                    self.state.abort()
                    with contextlib.suppress(BaseException):
                        window.join()
                    failed = window.error
                self.close_queue(give_back=True)  # another auditor takes its hosts now
                if failed is not None and not isinstance(failed, CycleAborted):
                    raise failed from None  # a host's part failed first: the abort here followed
                raise
            finally:
                close_sessions(list(sessions.values()))
                self.state.reach.close()  # the zygotes of this cycle ([worker] warm)
                CONNECTIONS.close_all()
            self.state.check()
        shares = self.shares.shares() if self.shares is not None else None
        covered = set(hosts.held) | set(hosts.stacks_of(shares.mine)) if shares is not None else set(sessions)
        self.covered_hosts = sorted(shares.mine) if shares is not None else []
        stacks = {
            n: stack_report(self.config.stacks[n], s, self.compat.fingerprints.get(n))
            for n, s in sessions.items()
            if n in covered  # not the hosts other auditors took ([queue])
        }
        stacks.update({n: self._remote_report(n) for n in self._publications})
        read = {n: p.summary() if p is not None else None for n, p in self._publications.items()}
        serving = self.serving
        results = fix_hints.hint(results, self.config, self.probes, self.state.history)
        findings = self.compat.with_rule_findings(
            list(self._findings(results, stacks))
            + self._suite_findings(results, rollouts)
            + side  # each stack and policy judged once (auditor.policy.alone)
            + peers.digest_findings(serving.digests, serving.distinct, serving.repeats)
            + self.telemetry.findings(samples)
            + self._unchecked(stacks, read)
            + (shares.findings() if shares is not None else [])
        )
        served: dict[tuple[str, str, str], set[str]] = {}
        for r in results:  # which members served each policy: whose peers keep its properties
            if (m := member(r.infer)) is not None and r.status != ERROR:
                served.setdefault((m[0], r.probe, r.variant), set()).add(r.infer)
        findings = peers.host_not_runtime(findings, served)
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
            shared=None if shares is None else {**shares.to_json(), "stacks": sorted(covered)},
        )

    def _probe_audits(
        self, planned: list[tuple[PairConfig, ProbeJob]], trained: dict[str, dict[str, Side]]
    ) -> list[ProbeAudit]:
        """One audit per (train stack, probe variant), served by its pairs' infer stacks."""
        grouped: dict[tuple[str, str], list[PairConfig]] = {}
        jobs: dict[tuple[str, str], ProbeJob] = {}
        for p, job in planned:
            grouped.setdefault((p.train, job.key), []).append(p)
            jobs[(p.train, job.key)] = job
        return [
            ProbeAudit(
                jobs[(train, key)],
                self.subject(jobs[(train, key)]),
                train,
                trained[train][key],
                pairs,
                self.state,
                self.runtimes,
                has_cell=not self.config.fleet.is_remote(train),
            )
            for (train, key), pairs in grouped.items()
        ]

    def _suite_findings(self, results: list[ProbeResult], rollouts: list[RolloutResult]) -> list[Finding]:
        """Goldens, episodes and latency regressions, each said once."""
        found = list(baseline.findings(results)) + rollout.findings(rollouts)
        if self.state.history is not None:
            hosts = {n: s.host for n, s in self.config.stacks.items()}
            found += latency.regressions(results, self.state.history.engine, self.config.latency, hosts)
        return found

    def _part(self, stacks: Sequence[str], host: str = "") -> Part:
        return Part(
            stacks,
            self.state,
            self.compat,
            self.telemetry,
            self.serving,
            self.models,
            lambda: self._audits,
            host,
        )

    def _window(self, hosts: fleet_window.HostPlan, sharing: bool) -> fleet_window.Window:
        """The serving hosts in flight (auditor.fleet.window): every one, or with [queue] those
        this auditor takes from the cycle's queue (auditor.queue.shared) as places free up."""
        shares = self._shared(hosts) if sharing else None
        given: list[str] | None = hosts.hosts

        def claim(places: int) -> list[str] | None:
            nonlocal given
            if shares is not None:
                return shares.claim(places)
            out, given = given, None
            return out

        def part(host: str) -> None:
            self._parts[host] = self._part(hosts.stacks_of([host]), host).run(self._exported)

        # with [queue], [queue] claim hosts in flight at most: the others' to take meanwhile
        size = hosts.size if hosts.size is not None else len(hosts.serving)
        if shares is not None:
            size = shares.size
        return fleet_window.Window(size, part, claim, self.state.abort)

    def _shared(self, hosts: fleet_window.HostPlan) -> SharedCycle:
        """This auditor's share of the cycle's serving hosts ([queue], auditor.queue.shared)."""
        history, cycle = self.state.history, self.shared
        assert history is not None and cycle is not None
        cfg = self.config.queue
        given = self.handover
        if given is not None and given.queue is not None:
            queue, taken = given.queue, given.taken
            given.queue = None  # the shares' now: closed with them
        else:
            queue, taken = JobQueue(history.url, cfg.heartbeat).open(), []
        self.shares = SharedCycle(
            queue, cycle, hosts, cfg, history.auditor_id, history.engine, self.state.check, taken
        )
        self.shares.join()
        return self.shares

    def fence(self) -> Fence | None:
        """What the store checks in its transaction before it writes this run ([queue])."""
        return self.shares.fence(self.covered_hosts) if self.shares is not None else None

    def close_queue(self, give_back: bool = False) -> None:
        """Leave the cycle's queue (idempotent): ``give_back`` puts the jobs still held back
        first (the run was not stored: another auditor takes them now)."""
        if self.shares is not None:
            shares, self.shares = self.shares, None
            try:
                if give_back:
                    shares.give_back()
            finally:
                shares.queue.close()
        elif self.handover is not None and self.handover.queue is not None:  # never served: no window
            queue, self.handover.queue = self.handover.queue, None
            try:
                queue.retry([j.id for j in self.handover.taken], queue.worker_id)
            finally:
                queue.close()

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

    # -- split mode (auditor.history.publication) ---------------------------------------------------------
    def _published_stack(self, name: str, jobs: dict[str, ProbeJob], tmp: Path) -> dict[str, Side]:
        """The train side of a remote stack: its latest complete publication, read from the
        history database, stands in for building and exporting here."""
        pub = publication.latest(self.state.history.engine, name) if self.state.history is not None else None
        self._publications[name] = pub
        out: dict[str, Side] = {}
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
                out[key] = Side(error=WorkerError(name, PUBLICATION_READ, "start", message))
                continue
            info = dict(item.mindir_info)
            out[key] = Side(
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
        trained: dict[str, dict[str, Side]],
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

    def _findings(self, results: list[ProbeResult], stacks: dict[str, StackReport]) -> Iterable[Finding]:
        for s in stacks.values():
            if s.error:
                yield Finding(
                    "stack-unavailable",
                    "error",
                    s.name,
                    f"{s.name}/stack-unavailable",
                    s.error,
                    **_host_cause("stack-unavailable", s.name, s.error.splitlines()[0]),
                )
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
                {"probe": r.probe, "variant": r.variant, **fix_hints.action(r)},
                **(drift_cause(r) if r.status == DRIFT else {}),
            )


def _host_cause(kind: str, stack: str, text: str) -> dict[str, Any]:
    """A group member's failure as a cause its peers can share (one finding, with ``{host}``,
    however many members it hits: auditor.cycle.causes); nothing for another stack."""
    said = generalized(text) if member(stack) is not None else None
    if said is None:
        return {}
    summary = re.sub(r"^stack \S+(?: on host \S+)?: ", "", said[2], count=1)  # the place says it
    return {
        "details": {"where_first": True},
        "cause": f"{kind}/{said[0]}/{said[2]}",
        "summary": summary,
        "place": (stack, ""),
    }


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
