"""The cycle's compatibility checks: each stack's fingerprint, its version drift against the
history, the rules on the fingerprints (once every worker is up, before any probe) and on
the exported artifacts (after export, before any load), and what the runtimes taught this
cycle about themselves (the highest MindIR version they read, operators they cannot run).

A finding that blocks a probe variant is its result, reported once; the load is skipped
(auditor.rules.engine.blocked). Model probes ask the same rules about users' files.
"""

from __future__ import annotations

import bisect
import json
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from auditor.cycle import causes
from auditor.cycle.state import CycleState
from auditor.fingerprint import collect as fingerprint
from auditor.fingerprint.drift import diff as drift_diff
from auditor.fingerprint.drift import drift_finding
from auditor.results import (
    INCOMPATIBLE,
    UNSUPPORTED,
    Artifact,
    Finding,
    LearnedMaximum,
    LearnedOperator,
    fingerprint_digest,
)
from auditor.rules import deployed
from auditor.rules.engine import ExportedModel, Rule, RuleContext, blocked, run_rules
from auditor.rules.operator_support import coverage, learned_failures, operator_limits, target_of
from auditor.rules.operator_support import learn as learn_operator
from auditor.runtime import RuntimeSpec
from auditor.stacks.failures import Diagnosis, diagnose
from auditor.stacks.session import StackSession
from auditor.stacks.worker import WorkerError


class Compatibility:
    def __init__(
        self,
        state: CycleState,
        collectors: Sequence[str],
        rules: Iterable[Rule],
        runtimes: dict[str, RuntimeSpec],
    ):
        self.state = state
        self.collectors = list(collectors)
        self.rules = list(rules)
        self.runtimes = runtimes
        self.fingerprints: dict[str, dict[str, Any]] = {}
        self.seen: list[str] = []
        """The stacks fingerprinted so far (a document or not), in the config's order."""
        self.learned: list[LearnedMaximum] = []
        self.learned_operators: list[LearnedOperator] = []
        self.known_maxima: dict[tuple[str, str], LearnedMaximum] = {}
        self._checked: list[Finding] = []
        """Drift and the rules' findings on every stack seen (and, once exported, the artifacts)."""
        self._added: list[Finding] = []
        self._drifts: dict[str, list[Finding]] = {}
        self._exported: list[ExportedModel] = []
        self._maxima_read = False
        self._lock = threading.RLock()
        """Its own bookkeeping, read and written by every host's part (no caller takes it)."""

    @property
    def findings(self) -> list[Finding]:
        """The rules' and drift's findings of this cycle (model probes add theirs)."""
        with self._lock:
            return self._checked + self._added

    def add(self, findings: Iterable[Finding]) -> None:
        """Findings of the rules on other files (a model's): once per key, however many parts
        ask for the same; kept in the config's order of the stacks they name (hosts' parts
        end in any order)."""
        rank = {n: i for i, n in enumerate(self.state.config.stacks)}

        def at(f: Finding) -> int:  # a stack, a pair "...->STACK", else first
            return rank.get(f.subject, rank.get(f.subject.rpartition("->")[2], -1))

        with self._lock:
            keys = {f.key for f in self.findings}
            for f in findings:
                if f.key not in keys:
                    keys.add(f.key)
                    bisect.insort_right(self._added, f, key=at)

    # -- before any probe: fingerprints, drift, the rules on them --------------------------------
    def collect(self, sessions: dict[str, StackSession]) -> None:
        """Fingerprint these stacks (added to those collected before: a cycle's parts,
        auditor.cycle.part, collect part by part)."""
        found = self.state.parallel({n: (lambda s=s: self._fingerprint(s)) for n, s in sessions.items()})
        with self._lock:  # other hosts' parts read them (the rules, a model's rules)
            self.fingerprints.update({k: v for k, v in found.items() if v is not None})
            # in the config's order: hosts in flight side by side are fingerprinted in any order
            order = {n: i for i, n in enumerate(self.state.config.stacks)}
            self.seen = sorted({*self.seen, *sessions}, key=lambda n: (order.get(n, len(order)), n))

    def check(self) -> None:
        """Drift and the rules, on every stack fingerprinted so far (and the artifact rules once
        there are exports). Each part of a cycle checks again after its fingerprints: a
        part's blocks are known before it loads anything, and the last check, on every stack,
        is the cycle's (a rule across stacks, the group's peers, sees them all)."""
        with self._lock:
            self._check()

    def _check(self) -> None:
        state = self.state
        if state.history is not None and not self._maxima_read:
            self.known_maxima = state.history.mindir_limits()
            self._maxima_read = True
        for n in self.seen:
            if n not in self._drifts:
                self._drifts[n] = self._drift(n)
        found = [f for n in self.seen for f in self._drifts[n]]
        context = self.context()
        found += run_rules([r for r in self.rules if not r.needs_artifacts], context)
        found += deployed.deployed_rule_findings(
            context.stacks,
            context.fingerprints,
            self.rules,
            self.known_maxima,
            context.operator_limits,
            self.runtimes,
        )
        if self._exported:
            found += run_rules(self.artifact_rules(), self.context(self._exported))
        self._checked = found

    def _fingerprint(self, session: StackSession) -> dict[str, Any] | None:
        """The stack's fingerprint document; a collection that fails keeps the runtime section
        and says why in ``fingerprint_error`` (for the rules; drift is not judged on such a
        document, and it is not stored: the stack's report carries the error instead)."""
        self.state.check()
        try:
            worker = session.ensure()
        except WorkerError:
            return None  # the start error is the stack's result
        try:
            config = self.state.config
            return fingerprint.collect(
                worker, session.stack, self.collectors, secrets=config.secrets, files=config.files
            )
        except WorkerError as exc:
            return {
                "runtime": {k: v for k, v in (session.hello or {}).items() if k != "pid"},
                "fingerprint_error": exc.describe(),
            }

    def _drift(self, name: str) -> list[Finding]:
        """The stack's changes since its previous fingerprint: its served model files', then
        the rest's."""
        history = self.state.history
        document, stack = self.fingerprints.get(name), self.state.config.stacks[name]
        if history is None or document is None or "fingerprint_error" in document:
            return []
        previous = history.previous_fingerprint(stack.host, name)
        if previous is None:
            # Moved to another host: what the stack was last time, wherever, is the baseline.
            elsewhere = history.fingerprint_history(name)
            previous = history.previous_fingerprint(elsewhere[-1][2], name) if elsewhere else None
        if previous is None:
            return []
        run_id, digest, before = previous
        now = fingerprint_digest(document)
        if digest == now:
            return []
        found = list(deployed.model_drift(name, before, document, run_id, stack.model_drift_severity))
        changes = drift_diff(deployed.without_models(before), deployed.without_models(document))
        return [*found, drift_finding(name, changes, run_id, digest, now)] if changes else found

    def release(self, stack: str) -> str:
        """The stack's runtime and its framework's versions, as one key: a fleet's hosts on one
        release share what is the same for each (a localization of the same file)."""
        framework = (self.fingerprints.get(stack) or {}).get("framework")
        return json.dumps([self.state.config.stacks[stack].runtime, framework], sort_keys=True, default=str)

    def known_operators(self) -> list[LearnedOperator]:
        """Operators earlier runs learned a runtime cannot run (from the history)."""
        history = self.state.history
        return list(history.operator_limits()) if history is not None else []

    def context(
        self,
        exported: list[ExportedModel] | None = None,
        stacks: dict[str, Any] | None = None,
        fingerprints: dict[str, Any] | None = None,
        pairs: tuple[Any, ...] | None = None,
    ) -> RuleContext:
        """What a rule sees: by default the cycle's stacks fingerprinted so far (and those it
        does not start: a ``source = "db"`` stack), their fingerprints and their pairs."""
        config = self.state.config
        if stacks is None:
            unseen = set(self.state.sessions) - set(self.seen)
            stacks = {n: s for n, s in config.stacks.items() if n not in unseen}
        if fingerprints is None:
            fingerprints = {n: self.fingerprints.get(n) for n in self.seen}
        if pairs is None:
            pairs = tuple(p for p in config.pairs if p.train in stacks and p.infer in stacks)
        return RuleContext(
            stacks,
            fingerprints,
            pairs,
            exported or [],
            self.known_maxima,
            operator_limits(stacks, fingerprints, self.runtimes),
            dict(self.runtimes),
        )

    # -- after export, before any load: the rules on the exported artifacts ----------------------
    def check_exports(
        self, exported: dict[str, dict[str, Artifact | None]], plan: dict[str, dict[str, Any]]
    ) -> None:
        """The artifact rules, from now on part of every check: ``exported`` (stack -> job key
        -> its export, None where none was made) of the probe jobs of ``plan``."""
        self._exported = [
            ExportedModel(stack, job.spec.name, job.variant, artifact.info, job.format.name)
            for stack, jobs in plan.items()
            for key, job in jobs.items()
            if (artifact := exported[stack][key]) is not None
        ]
        self.check()

    def artifact_rules(self) -> list[Rule]:
        return [r for r in self.rules if r.needs_artifacts]

    # -- what a runtime said about itself ---------------------------------------------------------
    def _hello(self, stack: str) -> dict[str, Any]:
        session = self.state.sessions.get(stack)
        return (session.hello or {}) if session is not None else {}

    def learn(self, infer: str, maximum: int, message: str) -> None:
        """A runtime refused a file and said the highest version of its format it reads:
        remember it for later runs."""
        hello = self._hello(infer)
        package, version = hello.get("runtime_package"), hello.get("runtime_version")
        if not package or not version:
            return
        with self.state.lock:
            if not any((x.package, x.version) == (package, version) for x in self.learned):
                self.learned.append(LearnedMaximum(str(package), str(version), maximum, message))

    def diagnose(
        self, infer: str, error: WorkerError, info: dict[str, Any] | None, load_log: str = ""
    ) -> Diagnosis:
        """What a failed load or first call on ``infer`` means (auditor.stacks.failures), named
        with the operator the runtime's measured table knows when its words do not; what it
        teaches (the highest version of its format, an operator it cannot run) is remembered."""
        hello, stack = self._hello(infer), self.state.config.stacks[infer]
        package, version = hello.get("runtime_package"), hello.get("runtime_version")
        spec = self.runtimes.get(stack.runtime)
        known = coverage(
            spec.operator_tables if spec else (), package, version, target_of(stack), info or {}
        ).known_failures()
        learned = learned_failures(
            [*self.known_operators(), *self.learned_operators], package, version, target_of(stack)
        )
        known = {**learned, **known}
        d = diagnose(error, spec, version, info, load_log, known, target_of(stack), package=package)
        if d.maximum is not None:
            self.learn(infer, d.maximum, d.words)
        found = learn_operator(stack, hello, d)
        with self.state.lock:
            if found is not None and found not in self.learned_operators:
                self.learned_operators.append(found)
        return d

    # -- the findings, each reported once ------------------------------------------------------
    def with_rule_findings(self, findings: list[Finding]) -> list[Finding]:
        """Stack errors, then the rules' findings, then the probes' (one finding per key: a
        variant a rule blocked is reported by the rule's finding only), with the findings of
        one cause merged into one that says where it holds (auditor.cycle.causes)."""

        def reported_by_a_rule(f: Finding) -> bool:
            probe, variant = f.details.get("probe"), f.details.get("variant")
            return (
                f.kind in (INCOMPATIBLE, UNSUPPORTED)
                and probe is not None
                and blocked(self.findings, f.subject, probe, variant) is not None
            )

        keys = {f.key for f in self.findings}
        stack_kinds = ("stack-unavailable", "worker-failure")
        first = [f for f in findings if f.kind in stack_kinds]
        rest = [
            f
            for f in findings
            if f.kind not in stack_kinds and f.key not in keys and not reported_by_a_rule(f)
        ]
        return causes.group(first + self.findings + rest)
