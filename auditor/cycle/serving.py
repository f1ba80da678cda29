"""One pipeline for every policy a cycle audits: a built-in probe variant exported by a train
stack and a user's ``[models.NAME]`` file are served, compared, judged alone, localized,
rerun, rolled out and held to their goldens by the same code.

An ``Audit`` is one policy (auditor.policy.subject) against one reference side, served by some
stacks: a probe variant against the train stack that exported it (one audit per train stack),
a model against its training network, reference stack or golden. What differs between them is
how the reference side was made and how the served model's inner values are exposed; the
subclasses in auditor.cycle.probes and auditor.cycle.models say that, and nothing else.

For the stacks of one part of a cycle (the held stacks, or one serving host's): each stack
loads every audit it serves (converted as it serves it), runs the policy's own inputs, times
them, runs every input class and the hidden nodes, and draws actions from its own policy; each
stack's repeating audits are run again in one process started cold; the reference side scores
the drawn actions; then each verdict (auditor.policy.verdict), the group members' outputs
against their peers, localization of a drift, goldens, episodes, and each side alone
(auditor.policy.alone).
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from auditor.compare import ratios
from auditor.compare.outputs import Comparator
from auditor.config.groups import member
from auditor.config.tables import ConvertTable
from auditor.cycle import saved_outputs
from auditor.cycle.held import Stacks
from auditor.cycle.state import CycleState
from auditor.fleet import peers
from auditor.history.baselines import Key, inputs_digest, load_goldens
from auditor.policy import baseline, checks, latency
from auditor.policy import classes as file_classes
from auditor.policy.alone import Alone
from auditor.policy.localize import Localization
from auditor.policy.side import Behaviour, Side
from auditor.policy.subject import REFERENCE, SERVED, Subject, same_inputs
from auditor.policy.verdict import Settings, Sides, judge
from auditor.results import CONSISTENT, DRIFT, ERROR, CycleAborted, Finding, ProbeResult, RolloutResult
from auditor.rules.engine import blocked
from auditor.stacks.failures import Diagnosis
from auditor.stacks.worker import StackWorker, WorkerError

HIDDEN_ROWS = 4096
"""A class's rows whose hidden nodes are judged at most (its outputs are judged on every row): a
vectorized environment's batch of 32,768 would hold 134 MB of a 2 x 64-unit network's hidden
values per side, and beyond a few thousand rows the classes repeat (the layer sweeps their
solved rows, the generic classes their pools of values)."""
COLD = "a cold process"
"""How a repeatability rerun's process starts: the interpreter anew, not a fork of the zygote
that computed the first result (same address layout, hash seed and heap)."""


@dataclass(frozen=True)
class Served:
    """What a serving stack loads of an audit's policy."""

    path: Path | None
    """The export or the file (None: nothing to load, the reference failed)."""
    convert: ConvertTable | None = None
    """The model's own conversion (None: the stack's ``[stacks.X.convert]``)."""
    hidden: Path | None = None
    """The model that also returns the hidden nodes (the exposed export, the tapped copy)."""
    batches: Mapping[int, Path] = field(default_factory=dict)
    """The export at other batch sizes (latency, the rollout's batch-1 steps)."""


class Audit:
    """One policy against one reference side, served by ``targets`` (stack -> pair name).
    Subclasses say who the sides are and how the reference exposes its inner values."""

    def __init__(
        self,
        key: str,
        subject: Subject,
        reference: Side,
        targets: Mapping[str, str],
        served: Served,
        reference_stack: str | None,
        reference_model: str,
    ):
        self.key = key
        """The served model's id in a worker; unique in the cycle."""
        self.subject = subject
        self.reference = reference
        self.targets = dict(targets)
        self.served = served
        self.reference_stack = reference_stack
        """The stack whose worker holds the reference model (None: a golden, a publication)."""
        self.reference_model = reference_model

    reference_takes_any_batch = True
    """Whether the reference model runs any batch (a network) or the file's (a stack loading it)."""

    @property
    def reference_name(self) -> str:
        """The reference side's name where it is judged alone: its stack, or "golden"."""
        return self.reference_stack or self.words("").reference_label

    # -- what a subclass says -------------------------------------------------------------------
    @property
    def source(self) -> str:
        """Where the served model comes from, in results and goldens: the exporting train
        stack, or the file."""
        raise NotImplementedError

    def identity(self, target: str) -> dict[str, Any]:
        """A result's identity on ``target``: pair, train, infer, probe, version, variant,
        artifact, samples."""
        raise NotImplementedError

    def words(self, target: str) -> Sides:
        raise NotImplementedError

    def reference_failure(self, error: WorkerError) -> tuple[str, str] | None:
        return None

    def artifact_info(self) -> dict[str, Any] | None:
        """What the served file says of itself (a serving side's failure is read with it)."""
        return None

    def golden_source(self, role: str) -> str:
        """Where a side's golden comes from: "" for the reference side, the source for a
        serving side (a serving stack's golden is kept per exporting train stack or file)."""
        return "" if role == REFERENCE else self.source

    def scorer(self) -> str | None:
        """The stack whose model scores the serving sides' drawn actions (None: nothing can,
        the importance ratios come from the distributions' parameters)."""
        return self.reference_stack if self.subject.in_graph else None

    def localize(self, run: Serving, target: str, result: ProbeResult) -> Localization | None:
        return None

    def roll_out(self, run: Serving, targets: Sequence[str]) -> list[RolloutResult]:
        return []

    def no_rollout(self) -> str:
        """Why ``roll_out`` gives no episodes for this policy, where it gives none."""
        return "no environment"

    def settings(self, target: str) -> Settings:
        """The comparator options from beyond the policy on ``target`` (a kind says which:
        ``[ppo]`` under the policy's own, a pair's ``trainer`` over them); none here."""
        return Settings()

    def judge(
        self,
        target: str,
        served: Side,
        comparators: Mapping[str, Comparator],
        diagnose: Callable[[str, WorkerError, dict[str, Any] | None, str], Diagnosis],
    ) -> ProbeResult:
        """The verdict on ``target``'s side against the reference (auditor.policy.verdict)."""
        return judge(
            self.subject,
            self.reference,
            served,
            self.identity(target),
            comparators,
            self.words(target),
            lambda err, log: diagnose(target, err, self.artifact_info(), log),
            self.reference_failure,
            self.settings(target),
        )

    def save_meta(self) -> tuple[str, str, dict[str, Any]]:
        """How ``auditor compare`` files name the reference side and its stack, and what else
        they record (``audit --save-outputs``, auditor.cycle.saved_outputs)."""
        raise NotImplementedError


@dataclass
class PartServed:
    """What a part of a cycle served: results by (audit, target), findings, episodes."""

    results: dict[tuple[str, str], ProbeResult] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    rollouts: list[RolloutResult] = field(default_factory=list)


class Serving:
    """The serving pipeline of one cycle, on its shared state; every part calls ``serve``."""

    def __init__(
        self,
        state: CycleState,
        stacks: Stacks,
        comparators: Mapping[str, Comparator],
        blocks: Callable[[], list[Finding]],
        diagnose: Callable[[str, WorkerError, dict[str, Any] | None, str], Diagnosis],
        release: Callable[[str], str],
    ):
        self.state, self.stacks = state, stacks
        self.comparators = comparators
        self.blocks = blocks
        """The rules' findings so far (a block stops a load)."""
        self.diagnose = diagnose
        self.release = release
        """A stack's runtime release as a key (a fleet's hosts on one release share a localization)."""
        self.alone = Alone()
        self._lock = threading.Lock()
        self._goldens: dict[Key, baseline.Golden] | None = None
        self._memo: dict[tuple[Any, ...], Any] = {}
        self.digests: dict[tuple[str, str, str, str], dict[str, str]] = {}
        """A group's consistent members' output digests, by (source, grouped stack, policy,
        variant) (auditor.fleet.peers), and the outputs of each distinct digest: the peers'
        memory grows with what the members computed differently, not with the hosts."""
        self.distinct: dict[tuple[str, str, str, str], dict[str, list[np.ndarray]]] = {}
        self.repeats: dict[tuple[str, str, str], str] = {}
        """(member, policy, variant) -> what its own rerun said, for members out of line."""

    def once(self, key: tuple[Any, ...], make: Callable[[], Any], keep: Callable[[Any], bool] = bool) -> Any:
        """``make()`` once per key this cycle (a fleet's hosts share it); a result ``keep``
        refuses (a localization whose rerun failed) is made again next time."""
        with self._lock:
            if key in self._memo:
                return self._memo[key]
        made = make()
        if keep(made):
            with self._lock:
                made = self._memo.setdefault(key, made)
        return made

    # -- one part --------------------------------------------------------------------------------
    def serve(self, audits: Sequence[Audit], wave: Sequence[str]) -> PartServed:
        """Every audit on the stacks of ``wave`` that serve it."""
        here = set(wave)
        todo = {s: [a for a in audits if s in a.targets] for s in wave}
        todo = {s: mine for s, mine in todo.items() if mine}
        sides: dict[str, dict[str, Side]] = self.state.parallel(
            {s: (lambda s=s: self._serve_stack(s, todo[s])) for s in todo}
        )
        self.state.parallel({s: (lambda s=s: self._repeat(s, todo[s], sides[s])) for s in todo})
        self._score([(a, sides[s][a.key]) for s, mine in todo.items() for a in mine])
        out = PartServed()
        for audit in audits:
            targets = [t for t in audit.targets if t in here]
            if not targets:
                continue
            self.state.check()
            out.results.update(
                self._follow_up(audit, targets, {t: sides[t][audit.key] for t in targets}, out)
            )
        return out

    # -- each stack: load, run, time, classes, hidden nodes, drawn actions -----------------------
    def _serve_stack(self, stack: str, audits: list[Audit]) -> dict[str, Side]:
        out: dict[str, Side] = {}
        loaded: dict[str, Any] = {}  # model -> its conversion, if the stack converts
        for audit in audits:
            self.state.check()
            side = Side()
            out[audit.key] = side
            pair = audit.targets[stack]
            side.blocked = blocked(self.blocks(), pair, audit.subject.name, audit.subject.variant)
            if audit.served.path is None or side.blocked is not None:
                continue
            try:
                try:
                    with self.stacks.use(stack) as worker:
                        self.serve_on(worker, stack, audit, side, loaded)
                except WorkerError as exc:
                    if not exc.lost:
                        raise
                    # Lost with its warm zygote, not by what it was asked: served once more on
                    # a fresh worker (its models gone with it), and said.
                    loaded.clear()
                    side = out[audit.key] = Side(notes=[f"served again on a fresh worker: {exc.message}"])
                    with self.stacks.use(stack) as worker:
                        self.serve_on(worker, stack, audit, side, loaded)
            except WorkerError as exc:
                side.error = exc
                if exc.kind != "error":
                    loaded.clear()  # the worker was restarted: its models are gone
            except CycleAborted:
                raise
            except Exception as exc:  # the policy's own auditor-side code (a plugin's) raised
                side.error = code_error(stack, audit.subject, exc)
        return out

    def serve_on(
        self,
        worker: StackWorker,
        stack: str,
        audit: Audit,
        side: Side,
        loaded: dict[str, Any],
        reference: bool = False,
    ) -> None:
        """Load the audit's model on ``worker`` as the stack serves it (through its conversion,
        if it declares one) and run it: its own inputs, timed, every input class, its hidden
        nodes, and actions drawn from its policy. ``reference``: the stack is the reference
        (a model's reference stack): the file unconverted, no draws, no other batches."""
        subject, model = audit.subject, audit.key
        convert = not reference
        if model not in loaded:
            if convert:
                done = self.state.load(
                    worker, self.stacks.session(stack).stack, model, audit.served.path, audit.served.convert
                )
                loaded[model], side.load_log = done.conversion, done.log
            else:
                side.load_log = worker.request("load", model=model, path=str(audit.served.path)).log
                loaded[model] = None
        side.conversion = loaded[model]
        inputs = audit.reference.inputs if audit.reference.inputs is not None else subject.inputs
        side.outputs = worker.request("run", model=model, inputs=inputs).result["outputs"]
        side.latency = self.state.time(worker, model, inputs, subject.batch)
        run_classes(worker, model, subject, side, self.state.check)
        if not reference and audit.scorer() is not None and audit.reference.inputs is None:
            draw(worker, model, subject, inputs, side)
        if subject.hidden is not None and audit.served.hidden is not None:
            if convert and self._converts(stack, audit):
                side.hidden_note = "hidden nodes run on the file unconverted (the stack serves a conversion)"
            run_hidden(worker, f"{model}@taps", audit.served.hidden, subject, side, self.state.check)
        for b, path in sorted(audit.served.batches.items() if not reference else ()):
            self.state.check()
            name = latency.batch_model(model, b)
            try:
                self.state.load(worker, self.stacks.session(stack).stack, name, path)
                side.batch_models[b] = name
                if self.timed_on_serving_side(b):
                    batch_inputs = subject.inputs_at(b)
                    side.latencies.append(self.state.time(worker, name, batch_inputs, b))
            except WorkerError as exc:
                side.notes.append(f"batch {b}: {exc.describe()}")
                if exc.kind != "error":
                    return

    def _converts(self, stack: str, audit: Audit) -> bool:
        return (audit.served.convert or self.stacks.session(stack).stack.convert) is not None

    def timed_on_serving_side(self, batch: int) -> bool:
        cfg = self.state.config.latency
        return batch in cfg.batches or batch in cfg.sweep

    # -- repeatability: each stack's repeating audits again, in one process started cold ---------
    def _repeat(self, stack: str, audits: list[Audit], sides: dict[str, Side]) -> None:
        runs = [(a, sides[a.key]) for a in audits if SERVED in a.subject.repeat and sides[a.key].ran]
        self.rerun(stack, runs)

    def rerun(self, stack: str, runs: list[tuple[Audit, Side]]) -> None:
        """The audits' served models on the same inputs in one worker process of ``stack``
        started cold (its interpreter anew, not forked from the zygote that computed the first
        result); each side's ``rerun`` is set to the outputs or the error."""
        if not runs:
            return
        session = self.stacks.session(stack)
        fresh = session.fresh(cold=True)
        try:
            for audit, side in runs:
                self.state.check()
                side.rerun_words = COLD
                try:
                    worker = fresh.ensure()
                    self.state.load(worker, session.stack, audit.key, audit.served.path, audit.served.convert)
                    inputs = (
                        audit.reference.inputs if audit.reference.inputs is not None else audit.subject.inputs
                    )
                    side.rerun = list(worker.request("run", model=audit.key, inputs=inputs).result["outputs"])
                except WorkerError as exc:
                    side.rerun = exc
        finally:
            fresh.close()
            session.problems.extend(fresh.problems)

    # -- importance ratios: the reference scores every serving side's drawn actions --------------
    def _score(self, served: list[tuple[Audit, Side]]) -> None:
        """The reference side's model on every serving side's drawn actions, each reference
        stack in parallel (one call for all k draws where its model takes any batch, as a
        trainer's update scores a minibatch of any size; in the file's batch otherwise)."""
        by_stack: dict[str, list[tuple[Audit, Side]]] = {}
        for audit, side in served:
            stack = audit.scorer()
            if side.behaviour is not None and stack is not None and stack in self.stacks:
                by_stack.setdefault(stack, []).append((audit, side))

        def score(stack: str) -> None:
            for audit, side in by_stack[stack]:
                self.state.check()
                drawn = side.behaviour
                assert drawn is not None
                at = audit.subject.names(len(side.outputs or ())).index(drawn.output.partition("@")[0])
                try:
                    with self.stacks.use(stack) as worker:
                        if audit.reference_takes_any_batch:
                            joined = [np.concatenate(parts) for parts in zip(*drawn.inputs, strict=True)]
                            got = worker.request("run", model=audit.reference_model, inputs=joined).result[
                                "outputs"
                            ]
                            logp = np.asarray(got[at])
                        else:
                            logp = np.stack(
                                [
                                    np.asarray(
                                        worker.request("run", model=audit.reference_model, inputs=x).result[
                                            "outputs"
                                        ][at]
                                    )
                                    for x in drawn.inputs
                                ]
                            )
                except WorkerError as exc:
                    side.notes.append(f"importance ratios, on {stack}: {exc.describe()}")
                    continue
                drawn.train = logp.reshape(drawn.infer.shape)

        self.state.parallel({s: (lambda s=s: score(s)) for s in by_stack})

    # -- after both sides: verdicts, peers, localization, goldens, episodes, each side alone -----
    def _follow_up(
        self, audit: Audit, targets: list[str], sides: dict[str, Side], out: PartServed
    ) -> dict[tuple[str, str], ProbeResult]:
        subject = audit.subject
        results: dict[str, ProbeResult] = {}
        for t in targets:
            results[t] = self._judge(audit, t, sides[t])
            if self.state.save_outputs is not None and audit.reference.ran and sides[t].ran:
                self._save(audit, t, sides[t])
        self._peers(audit, targets, sides, results)
        goldens = self._golden_table()
        for t in targets:
            self.state.check()
            results[t] = self._completed(audit, t, sides[t], results[t], goldens)
        rolled = [t for t in targets if results[t].status in (CONSISTENT, DRIFT)]
        episodes = audit.roll_out(self, rolled) if rolled else []
        out.rollouts += episodes
        for t in targets:
            mine = [e for e in episodes if e.infer == t]
            done: bool | str = bool(mine) or audit.no_rollout()
            if t not in rolled:
                done = "the policy did not run on this stack"
            elif mine and mine[0].status == ERROR:
                done = mine[0].message
            results[t] = replace(results[t], coverage=self._coverage(audit, t, sides[t], results[t], done))
        out.findings += self.alone.findings(
            subject.key, subject, {audit.reference_name: audit.reference, **{t: sides[t] for t in targets}}
        )
        return {(audit.key, t): r for t, r in results.items()}

    def _judge(self, audit: Audit, target: str, side: Side) -> ProbeResult:
        """The verdict on ``target``'s side, judged once per cycle for every serving side that
        computed the same bits under the same settings (a fleet's identical hosts): a consistent
        verdict is the same for each but for whose it is."""
        key = _judge_key(audit, target, side)
        if key is None:
            return audit.judge(target, side, self.comparators, self.diagnose)
        found = self.once(
            key,
            lambda: audit.judge(target, side, self.comparators, self.diagnose),
            keep=lambda r: r.status == CONSISTENT,
        )
        return replace(
            found, **audit.identity(target), infer_latency=side.latency, conversion=side.conversion
        )

    def _coverage(
        self, audit: Audit, target: str, side: Side, r: ProbeResult, rolled: bool | str
    ) -> dict[str, str]:
        """Which checks ran on this result, and why the others did not (auditor.policy.checks)."""
        return checks.covered(
            audit.subject,
            audit.reference,
            side,
            r,
            reference_runs=audit.reference_stack is not None,
            converts=self._converts(target, audit),
            history=self.state.history is not None,
            rolled=rolled,
        )

    def _save(self, audit: Audit, target: str, served: Side) -> None:
        """Each side's outputs of one result, for ``auditor compare`` (``audit --save-outputs``)."""
        assert self.state.save_outputs is not None
        side_name, label, meta = audit.save_meta()
        subject, reference = audit.subject, audit.reference
        names = subject.names(len(reference.outputs or ()))
        inputs = reference.inputs if reference.inputs is not None else subject.inputs
        pair = audit.identity(target)["pair"]
        for side, stack, outputs in (
            (side_name, label, reference.outputs),
            ("infer", target, served.outputs),
        ):
            if outputs is None:
                continue
            saved_outputs.write_side(
                self.state.save_outputs,
                pair=pair,
                probe=subject.name,
                variant=subject.variant,
                side=side,
                stack=stack,
                inputs=inputs,
                input_names=list(subject.input_names),
                outputs=list(outputs),
                output_names=names,
                **meta,
            )

    def _completed(
        self,
        audit: Audit,
        target: str,
        side: Side,
        r: ProbeResult,
        goldens: dict[Key, baseline.Golden] | None,
    ) -> ProbeResult:
        """The result with its latencies, notes, localization and goldens."""
        reference = audit.reference
        served = latency.throughput([side.latency, *side.latencies])
        updates: dict[str, Any] = {
            "train_latencies": tuple(reference.latencies),
            "infer_latencies": tuple(side.latencies),
            "throughput": served,
            "saturation_batch": latency.saturation_batch(served, self.state.config.latency.saturation),
        }
        source = audit.reference_stack or audit.words(target).reference_label
        notes = [f"{source} {n}" for n in reference.notes] + [f"{target} {n}" for n in side.notes]
        notes += [
            f"input class {cls}: the reference ({source}) did not run it: {why}"
            for cls, why in reference.class_errors.items()
        ]
        if audit.subject.class_problem:
            notes.append(f"input classes: {audit.subject.class_problem}")
        for s, where in ((reference, source), (side, target)):
            if s.hidden_note:
                notes.append(f"{where}: {s.hidden_note}")
        if audit.subject.hidden_problem:
            notes.append(audit.subject.hidden_problem)
        if notes:
            updates["log"] = "\n".join(filter(None, [r.log, *notes]))
        if r.status == DRIFT and reference.ran and side.ran:
            updates["localization"] = audit.localize(self, target, r)
        if goldens is not None and (reference.ran or side.ran):
            updates["baseline"] = self._baseline(audit, target, r, side, goldens)
        return replace(r, **updates)

    def _golden_table(self) -> dict[Key, baseline.Golden] | None:
        """The history's goldens, read once per cycle (every part asks; none change while a
        cycle runs: ``golden record`` is a command of its own)."""
        if self.state.history is None:
            return None
        return self.once(("goldens",), lambda: load_goldens(self.state.history.engine), lambda found: True)

    def _baseline(
        self, audit: Audit, target: str, r: ProbeResult, side: Side, goldens: dict[Key, baseline.Golden]
    ) -> tuple[baseline.BaselineCheck, ...]:
        subject = audit.subject
        inputs_sha = inputs_digest(subject.inputs)
        checks = []
        sides = (
            ("train", audit.reference_stack, audit.golden_source(REFERENCE), audit.reference, None),
            ("infer", target, audit.golden_source(SERVED), side, r),
        )
        for role, stack, source, s, with_metrics in sides:
            if stack is None or s.outputs is None:
                continue
            names = subject.names(len(s.outputs))
            host = self.state.config.stacks[stack].host
            check, blob = baseline.check(
                goldens.get((host, stack, subject.name, subject.variant, source)),
                side=role,
                stack=stack,
                source=source,
                probe_version=subject.version,
                inputs_sha256=inputs_sha,
                names=names,
                outputs=s.outputs,
                tolerance_for=lambda name: subject.tolerance(name),
                pair_metrics={c.output: dict(c.metrics) for c in with_metrics.outputs}
                if with_metrics
                else None,
            )
            if check.status == baseline.NEW:
                self.state.artifacts.setdefault(check.outputs_sha256, blob)
            checks.append(check)
        return tuple(checks)

    # -- a group's members against their peers ---------------------------------------------------
    def _peers(
        self, audit: Audit, targets: list[str], sides: dict[str, Side], results: dict[str, ProbeResult]
    ) -> None:
        """A part's group members' outputs, kept for the peers' comparison at the end of the
        cycle (auditor.fleet.peers), of the members whose result is consistent: a member that
        drifts is said by its drift, and a drifting output may not even repeat on its own host.
        A member whose outputs differ bitwise from the majority of the peers seen so far runs
        the policy again in a process started cold on its own host, while it is still open: a
        host that repeats its own bits differs from its peers beyond its own repeatability; one
        that does not is not even repeatable."""
        subject = audit.subject
        if subject.stochastic:
            return
        odd: dict[str, str] = {}
        with self._lock:
            for t in targets:
                grouped, side = member(t), sides[t]
                if grouped is None or side.outputs is None or results[t].status != CONSISTENT:
                    continue
                key = (audit.source, grouped[0], subject.name, subject.variant)
                digest = peers.output_digest(list(side.outputs))
                self.distinct.setdefault(key, {}).setdefault(digest, list(side.outputs))
                self.digests.setdefault(key, {})[t] = digest
            for t in targets:
                grouped = member(t)
                if grouped is None or sides[t].outputs is None or results[t].status != CONSISTENT:
                    continue
                key = (audit.source, grouped[0], subject.name, subject.variant)
                own = audit.reference.inputs is None or same_inputs(audit.reference.inputs, subject.inputs)
                if own and audit.served.path is not None and t in peers.odd_members(self.digests[key]):
                    odd[t] = self.digests[key][t]
        if not odd:
            return
        scratch = {t: Side(outputs=sides[t].outputs) for t in odd}
        self.state.parallel({t: (lambda t=t: self.rerun(t, [(audit, scratch[t])])) for t in odd})
        with self._lock:
            for t, first in odd.items():
                self.repeats[(t, subject.name, subject.variant)] = peers.repeat_words(scratch[t].rerun, first)


def code_error(stack: str, subject: Subject, exc: BaseException) -> WorkerError:
    """A policy's auditor-side code (make_inputs, make_weights, a hook) raised: an error for
    this policy only, with the traceback, like a failure inside the worker."""
    return WorkerError(
        stack,
        "probe",
        "error",
        f"{subject.kind} {subject.name} ({subject.module}) raised {type(exc).__name__}: {exc}"
        if subject.module
        else f"{subject.kind} {subject.name} raised {type(exc).__name__}: {exc}",
        traceback="".join(traceback.format_exception(exc)),
        error_type=type(exc).__name__,
    )


def run_chunks(worker: Any, model: str, inputs: list[np.ndarray], chunk: int | None) -> list[np.ndarray]:
    """The model on ``inputs``, in chunks of ``chunk`` rows where the model takes a fixed batch
    (auditor.policy.classes.run_chunks), else in one call."""
    if chunk is None:
        return list(worker.request("run", model=model, inputs=inputs).result["outputs"])
    return file_classes.run_chunks(worker, model, inputs, chunk)


def run_classes(worker: Any, model: str, subject: Subject, side: Side, check: Callable[[], None]) -> None:
    """Every input class's batch on this side: ``side.classes[name]`` = its outputs, or
    ``side.class_errors[name]`` = why not (a worker that died or hung ends the classes)."""
    for batch in subject.classes:
        check()
        try:
            side.classes[batch.name] = run_chunks(worker, model, batch.inputs, subject.chunk)
        except ValueError as exc:
            side.class_errors[batch.name] = str(exc)
        except WorkerError as exc:
            side.class_errors[batch.name] = exc.describe()
            if exc.kind != "error":
                return


def run_hidden(
    worker: Any,
    model: str,
    path: Path | None,
    subject: Subject,
    side: Side,
    check: Callable[[], None],
    load: bool = True,
) -> None:
    """The model that also returns the hidden nodes, on the own inputs and every class:
    ``side.hidden[class]`` = the hidden nodes' values (after the outputs)."""
    assert subject.hidden is not None
    count = len(subject.hidden.names)
    try:
        if load:
            worker.request("load", model=model, path=str(path))
        runs = [(subject.own_class, side.inputs if side.inputs is not None else subject.inputs)]
        runs += [(b.name, b.inputs) for b in subject.classes if b.name in side.classes]
        for name, x in runs:
            check()
            if subject.chunk is None:  # the whole class in one call: only the hidden rows judged come back
                got = worker.request(
                    "run", model=model, inputs=x, skip=len(subject.output_names), rows=HIDDEN_ROWS
                )
                out = list(got.result["outputs"])
            else:
                out = run_chunks(worker, model, x, subject.chunk)
            if len(out) < count:
                side.notes.append(f"hidden nodes: {len(out)} outputs, expected at least {count} hidden nodes")
                return
            side.hidden[name] = [np.asarray(v)[:HIDDEN_ROWS] for v in out[len(out) - count :]]
    except (WorkerError, ValueError) as exc:
        said = exc.describe() if isinstance(exc, WorkerError) else str(exc)
        side.notes.append(f"hidden nodes: {said}")
        if isinstance(exc, WorkerError) and exc.kind != "error":
            raise


def draw(worker: Any, model: str, subject: Subject, inputs: list[np.ndarray], side: Side) -> None:
    """Draw actions from this side's policy (its outputs on ``inputs``) and run its model on
    them: its in-graph log-probability of each draw (auditor.compare.ratios). Where this is not
    done, the comparator judges the ratios from the distributions' parameters."""
    head = subject.head
    if side.outputs is None or head is None or not head.in_graph() or subject.stochastic:
        return
    names = subject.names(len(side.outputs))
    try:
        k, seed = ratios.sampling(subject.head_options)
        dist = ratios.distribution(head, dict(zip(names, side.outputs, strict=False)))
        draws = ratios.draw(dist, k, seed)
        batches = ratios.behaviour_inputs(head, list(subject.input_names), inputs, draws)
        at = names.index(str(head.logp))
    except Exception as exc:  # the comparator says what is wrong with its options
        side.notes.append(f"importance ratios: not drawn: {exc}")
        return
    try:
        logps = [worker.request("run", model=model, inputs=x).result["outputs"][at] for x in batches]
    except WorkerError as exc:
        side.notes.append(f"importance ratios: {exc.describe()}")
        return
    side.behaviour = Behaviour(
        f"{head.logp}{ratios.BEHAVIOUR}", batches, np.stack([np.asarray(x) for x in logps])
    )


def _judge_key(audit: Audit, target: str, side: Side) -> tuple[Any, ...] | None:
    """What a serving side's verdict depends on, bitwise (None where it also depends on whose
    side it is: a failure, a block, a class it could not run, a conversion of its own)."""
    if (
        not side.ran
        or side.error is not None
        or side.blocked is not None
        or side.class_errors
        or side.conversion is not None
        or isinstance(side.rerun, WorkerError)
    ):
        return None
    assert side.outputs is not None
    parts = [peers.output_digest(list(side.outputs))]
    parts += [f"{name}:{peers.output_digest(list(side.classes[name]))}" for name in sorted(side.classes)]
    b = side.behaviour
    if b is not None:
        parts.append(
            f"{b.output}:{peers.output_digest([b.infer] + ([b.train] if b.train is not None else []))}"
        )
    if side.rerun is not None:
        parts.append(f"rerun {side.rerun_words}:{peers.output_digest(list(side.rerun))}")
    return ("judged", audit.key, repr(audit.settings(target)), tuple(parts))
