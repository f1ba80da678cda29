"""Preflight: will these stacks load and run this MindIR? Said on evidence, in seconds, without a cycle.

The file is read without any framework (``auditor.worker.mindir``), the stacks are fingerprinted
(one worker each, in parallel), and every rule runs on a pair "the file -> the stack" as if a
train stack had just exported it: the MindIR version against the runtime, the operators
against those the runtime is known not to run, the producer's MindSpore against the served
runtime, and the stacks' own MindSpore/CANN/driver/firmware.

A stack's verdict is ``ok`` only on today's evidence that its runtime loads and runs this
file: a load and one seeded run on the stack (the default; a failure is read as the user thinks
of it: incompatible with the version pair, unsupported with the operator, load or first call,
the runtime's own lines: ``auditor.stacks.failures``). A stack that cannot be reached is never
``ok``: its verdict is ``unchecked``, naming what is known instead (a result an earlier audit
stored for this very file, by digest, on the same runtime release, device kind and host, newest
first; or the runtime's measured operator table covering every operator of the file,
``auditor.rules.operator_support``). Without a load (``load=False``, ``auditor check
--no-load``) the verdict is never ok either: it says what was checked and what could not be
known (``unchecked``), or the problem found. The newest stored failure of the file, an operator
the runtime's table measured computing differently, a cross-release pair the runtime itself
warns about, each keeps the verdict from ``ok``; causes of the same weight are all named.

With ``convert`` a stack that declares its deployment's conversion (``[stacks.X.convert]``)
first converts the file with it (``auditor.policy.convert``): a conversion that fails is that
stack's error in the converter's words, what is loaded and run is what the conversion made, and
only stored results of converted runs (and no operator table, which was measured on exported
files) are named for a stack that cannot be reached.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from auditor.common import tempdirs
from auditor.config.tables import Config, FilesConfig, PairConfig, SecretsConfig, StackConfig
from auditor.fingerprint import collect as fingerprint
from auditor.history import fixes
from auditor.history.queries import ServedResult, latest_fingerprints, served_results
from auditor.history.store import Store
from auditor.policy import convert as conversion
from auditor.policy.model_file import other_formats, read_model, seeded_inputs
from auditor.results import CONSISTENT, DRIFT, Finding, LearnedMaximum, LearnedOperator
from auditor.rules.engine import Rule, blocked, file_rules
from auditor.rules.operator_support import (
    Coverage,
    coverage,
    learn,
    learned_failures,
    target_of,
)
from auditor.runtime import MINDIR, RuntimeSpec
from auditor.stacks.failures import Diagnosis, diagnose, runtime_warnings
from auditor.stacks.session import Reach, reach
from auditor.stacks.worker import StackWorker, WorkerError
from auditor.worker.mindir import MindIRInfo

OK, WARNING, INCOMPATIBLE, UNSUPPORTED, ERROR = "ok", "warning", "incompatible", "unsupported", "error"
UNCHECKED = "unchecked"
"""No evidence either way: not loaded, and nothing stored or measured vouches for the file."""
VERDICT_ORDER = (OK, UNCHECKED, WARNING, UNSUPPORTED, INCOMPATIBLE, ERROR)
MODEL_PROBE = "model"
"""The probe name the file takes in the rules' view (ExportedModel.probe)."""
VERBOSE_ENV = {"GLOG_v": "2"}
"""The log level at which MindSpore and MindSpore Lite name the operator a load failed on."""


@dataclass
class LoadCheck:
    """What loading the file and running one seeded batch on a stack gave."""

    ok: bool
    message: str
    outputs: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    attempted: bool = True
    """False when a rule's finding made the load pointless (an incompatible version, an
    operator the runtime does not run: the load would fail or hang)."""
    phase: str = ""
    """Where it failed: "load" (the runtime refused the file) or "run" (the first call)."""
    log_lines: list[str] = field(default_factory=list)
    """The runtime's own lines: around the failure, or its warnings on a load that worked."""


@dataclass
class ConvertCheck:
    """What converting the file with the stack's declared conversion gave."""

    ok: bool
    message: str
    artifact: dict[str, Any] | None = None
    """The converted artifact: sha256, size, format, options, converter, source."""
    seconds: float = 0.0
    log: str = ""


@dataclass
class StackVerdict:
    stack: str
    runtime: str
    runtime_version: str | None
    status: str
    reason: str
    remedy: str = ""
    findings: list[Finding] = field(default_factory=list)
    load: LoadCheck | None = None
    evidence: list[str] = field(default_factory=list)
    """What the verdict rests on: the load, earlier audits of this file, the measured table."""
    unknown: list[str] = field(default_factory=list)
    """What could not be known (why an ``unchecked`` verdict is not ok)."""
    conversion: ConvertCheck | None = None


@dataclass
class CheckReport:
    path: str
    info: MindIRInfo
    verdicts: list[StackVerdict]
    findings: list[Finding]
    """Every rule's finding, for the stacks checked (including those about no one stack)."""
    seconds: float
    learned_maxima: list[LearnedMaximum] = field(default_factory=list)
    learned_operators: list[LearnedOperator] = field(default_factory=list)
    loaded: bool = True
    """Whether loads were asked for (``--no-load``: False)."""
    notes: list[str] = field(default_factory=list)
    """About the check as a whole (a history that could not be read, ...)."""

    @property
    def exit_code(self) -> int:
        return 0 if self.verdicts and all(v.status == OK for v in self.verdicts) else 1

    def to_json(self) -> dict[str, Any]:
        info = asdict(self.info)
        info.pop("parameters", None)
        return {
            "file": self.path,
            "model": info,
            "loaded": self.loaded,
            "verdicts": [
                {
                    **{k: v for k, v in asdict(verdict).items() if k != "findings"},
                    "findings": [asdict(f) for f in verdict.findings],
                }
                for verdict in self.verdicts
            ],
            "findings": [asdict(f) for f in self.findings],
            "notes": self.notes,
            "seconds": self.seconds,
            "exit_code": self.exit_code,
        }


@dataclass
class _Probe:
    """One stack's worker answers: its hello and fingerprint, and the load if asked."""

    fingerprint: dict[str, Any] | None = None
    hello: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    load: LoadCheck | None = None
    load_error: WorkerError | None = None
    load_log: str = ""
    """The log of the load request (a first call's failure is read with the load's warnings)."""
    diagnosis: Diagnosis | None = None
    last_seen: str = ""
    """For a stack that could not be reached: whose fingerprint stands in for it."""
    conversion: ConvertCheck | None = None
    converted: Path | None = None
    """The converted file (``convert``), staged on this machine: what is loaded."""


@dataclass
class _History:
    """What the history database says about the file and the stacks."""

    served: list[ServedResult] = field(default_factory=list)
    last: dict[str, dict[str, Any]] = field(default_factory=dict)
    maxima: dict[tuple[str, str], LearnedMaximum] = field(default_factory=dict)
    operators: list[LearnedOperator] = field(default_factory=list)
    note: str = ""


def file_label(path: str) -> str:
    return Path(path).name or str(path)


def _read_history(store: Store | None, sha256: str) -> _History:
    out = _History()
    if store is None:
        return out
    try:
        out.maxima = store.mindir_limits()
        out.operators = store.operator_limits()
        with store.engine.connect() as conn:
            out.served = served_results(conn, sha256)
            out.last = {r["name"]: r for r in latest_fingerprints(conn)}
    except Exception as exc:  # an old or foreign database: the check goes on without it
        out.note = (
            f"history not read ({type(exc).__name__}: {exc}); earlier results and learned limits unused"
        )
        return out
    try:
        with store.engine.connect() as conn:
            # what `auditor fix` proved of this very file counts as an audit of it
            proved = [r for r in map(fixes.as_served, fixes.for_file(conn, sha256)) if r is not None]
        out.served = sorted([*out.served, *proved], key=lambda r: r.started_at, reverse=True)
    except Exception as exc:  # a database from before fixes were kept: the rest still counts
        out.note = (
            f"fixes not read ({type(exc).__name__}: {exc}); earlier audits of the file by auditor fix unused"
        )
    return out


def preflight(config: Config, path: str, *args: Any, **kwargs: Any) -> CheckReport:
    """Check the MindIR at ``path``: ``preflight_many`` with one file (the same arguments)."""
    (report,) = preflight_many(config, [path], *args, **kwargs)
    return report


def preflight_many(
    config: Config,
    paths: Sequence[str],
    stacks: Sequence[str],
    collectors: Sequence[str],
    rules: Sequence[Rule],
    runtimes: Mapping[str, RuntimeSpec],
    learned_maxima: Mapping[tuple[str, str], LearnedMaximum] | None = None,
    learned_operators: Sequence[LearnedOperator] = (),
    load: bool = True,
    seed: int = 0,
    history: Store | None = None,
    convert: bool = False,
) -> list[CheckReport]:
    """Check each MindIR of ``paths`` against ``stacks``, one report each: every stack's worker
    is started and fingerprinted once; a worker whose load failed is replaced before the next
    file (nothing a runtime kept from a failure leaks into another file's verdict). Raises
    ModelInputError, before any worker starts, for a file that cannot be audited; a stack that
    cannot be started is that stack's error verdict unless stored or measured evidence speaks
    for it. ``history``: the history database, read only (earlier results of each file, learned
    limits, the last fingerprint of a stack that cannot be reached). ``convert``: stacks with a
    ``[stacks.X.convert]`` convert each file first, and load what the conversion made."""
    others = other_formats(runtimes)
    read = [(path, *read_model(path, config.files.limits, others)) for path in paths]
    # A stack whose runtime loads another format cannot serve a MindIR: its verdict says so,
    # and no worker is started for it.
    elsewhere = {
        n: runtimes[config.stacks[n].runtime] for n in stacks if not loads_mindir(config, runtimes, n)
    }
    chosen = {n: config.stacks[n] for n in stacks if n not in elsewhere}
    stacks_reach = reach(config, runtimes, (), collectors)
    gate = _Gate(chosen, rules, runtimes, stacks_reach, convert)
    workers: dict[str, StackWorker] = {}
    tmp = tempdirs.make("auditor-check-") if convert else None

    def one(stack: StackConfig) -> _Probe:
        worker = workers[stack.name] = stacks_reach.worker(stack.name)
        return _fingerprint(worker, stack, collectors, config.secrets, config.files)

    reports = []
    try:
        with ThreadPoolExecutor(
            max_workers=max(1, config.worker.parallel), thread_name_prefix="check"
        ) as pool:
            base = dict(zip(chosen, pool.map(one, chosen.values()), strict=True))
            for path, data, info in read:
                started = time.time()
                past = _read_history(history, info.sha256)
                for name, p in base.items():
                    _stand_in(p, past.last.get(name))
                maxima = {**past.maxima, **dict(learned_maxima or {})}
                known_ops = [*past.operators, *learned_operators]
                probed = {n: dataclasses.replace(p) for n, p in base.items()}
                findings = gate.file_rules(path, info, probed, maxima)
                model_id = f"check/{info.sha256[:16]}"  # one per file: Lite keeps each model alive
                if tmp is not None:
                    todo = gate.conversions(path, probed, findings)
                    jobs = [(workers[n], stack, probed[n], data, model_id, tmp) for n, stack in todo.items()]
                    list(pool.map(lambda job: _convert(*job), jobs))
                if load:
                    inputs = seeded_inputs(info.inputs or (), seed)
                    todo = gate.loads(path, probed, findings)
                    abspath = str(Path(path).resolve())
                    jobs = [
                        (
                            workers[n],
                            todo[n],
                            str(todo[n].converted or abspath),
                            inputs,
                            model_id,
                            runtimes.get(chosen[n].runtime),
                        )
                        for n in todo
                    ]
                    list(pool.map(lambda job: _load(*job), jobs))
                report = gate.report(path, info, probed, findings, past, known_ops, load)
                report.verdicts += [_other_format(name, spec) for name, spec in elsewhere.items()]
                report.seconds = time.time() - started
                reports.append(report)
                for name in [n for n, p in probed.items() if p.load_error is not None and n in workers]:
                    workers[name].close()  # a fresh process for the next file
                    workers[name] = stacks_reach.worker(name)
                    try:
                        base[name].hello = dict(workers[name].start())
                    except WorkerError as exc:
                        base[name].error, base[name].last_seen = exc.describe(), "earlier in this check"
    finally:
        for worker in workers.values():
            worker.close()
        stacks_reach.close()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return reports


def loads_mindir(config: Config, runtimes: Mapping[str, RuntimeSpec], stack: str) -> bool:
    """Whether the stack's runtime loads MindIR (a runtime no plugin provides is assumed to)."""
    spec = runtimes.get(config.stacks[stack].runtime)
    return spec is None or spec.loads.name == MINDIR.name


def _other_format(name: str, spec: RuntimeSpec) -> StackVerdict:
    """The verdict of a stack whose runtime loads another format than MindIR: not checked."""
    return StackVerdict(
        name,
        spec.name,
        None,
        INCOMPATIBLE,
        f"{spec.name} loads {spec.loads.title} files, not a MindIR; not checked",
        f"check the {spec.loads.title} export of the model against {name}",
    )


@dataclass
class _Gate:
    """What every file of one check is checked with: the stacks, the rules, the runtimes and
    how to reach the stacks."""

    chosen: Mapping[str, StackConfig]
    rules: Sequence[Rule]
    runtimes: Mapping[str, RuntimeSpec]
    stacks_reach: Reach
    convert: bool = False
    """Stacks with a ``[stacks.X.convert]`` convert the file first."""

    def converts(self, name: str) -> bool:
        return self.convert and self.chosen[name].convert is not None

    def file_rules(
        self,
        path: str,
        info: MindIRInfo,
        probed: Mapping[str, _Probe],
        maxima: dict[tuple[str, str], LearnedMaximum],
    ) -> list[Finding]:
        """The rules on "the file -> each stack", the file standing for a train stack's export
        (auditor.rules.engine.file_rules: a cycle judges a [models.NAME] file the same way)."""
        fingerprints: dict[str, dict[str, Any] | None] = {n: p.fingerprint for n, p in probed.items()}
        return file_rules(
            self.rules,
            file_label(path),
            MODEL_PROBE,
            "file",
            asdict(info),
            dict(self.chosen),
            fingerprints,
            maxima,
            dict(self.runtimes),
        )

    def conversions(
        self, path: str, probed: Mapping[str, _Probe], findings: list[Finding]
    ) -> dict[str, StackConfig]:
        """The stacks that convert the file first: they declare a conversion, are reached, and
        no rule's finding says the file cannot serve there."""
        return {
            name: stack
            for name, stack in self.chosen.items()
            if self.converts(name)
            and probed[name].error is None
            and blocked(findings, PairConfig(file_label(path), name, ()).name, MODEL_PROBE, "file") is None
        }

    def loads(self, path: str, probed: Mapping[str, _Probe], findings: list[Finding]) -> dict[str, _Probe]:
        """The stacks to load the file on: reached, and no rule's finding (nor a failed
        conversion) makes the load pointless."""
        todo = {}
        for name in self.chosen:
            stopper = blocked(findings, PairConfig(file_label(path), name, ()).name, MODEL_PROBE, "file")
            conv = probed[name].conversion
            if probed[name].error is not None:
                continue
            if stopper is not None:
                probed[name].load = LoadCheck(False, f"not attempted: {stopper.message}", attempted=False)
            elif conv is not None and not conv.ok:
                probed[name].load = LoadCheck(False, "not attempted: the conversion failed", attempted=False)
            else:
                todo[name] = probed[name]
        return todo

    def report(
        self,
        path: str,
        info: MindIRInfo,
        probed: Mapping[str, _Probe],
        findings: list[Finding],
        past: _History,
        known_ops: list[LearnedOperator],
        load: bool,
    ) -> CheckReport:
        """Each stack's verdict on one file, and what its failures taught."""
        abspath = str(Path(path).resolve())
        verdicts, learned_max, learned_ops = [], [], []
        for name, stack in self.chosen.items():
            p = probed[name]
            package, version = _identity(p)
            spec = self.runtimes.get(stack.runtime)
            target = target_of(stack)
            tables = () if spec is None or self.converts(name) else spec.operator_tables
            cov = coverage(tables, package, version, target, asdict(info))
            before = learned_failures(known_ops, package, version, target)
            before = {op: why for op, why in before.items() if op in (info.op_types or ())}
            if p.load_error is not None:
                known = {**before, **cov.known_failures()}
                loaded = str(p.converted or abspath)
                p.diagnosis = _diagnose_load(self.stacks_reach, stack, spec, p, loaded, known, info)
            d = p.diagnosis
            if d is not None:
                if d.maximum is not None and package and version:
                    learned_max.append(LearnedMaximum(str(package), str(version), d.maximum, d.words))
                op = learn(stack, p.hello, d)
                if op is not None:
                    learned_ops.append(op)
            served = served_here(past.served, stack, package, version, self.converts(name))
            pair = PairConfig(file_label(path), name, (MODEL_PROBE,)).name
            verdicts.append(_verdict(stack, pair, p, findings, served, cov, before, load))
        notes = [past.note] if past.note else []
        return CheckReport(str(path), info, verdicts, findings, 0.0, learned_max, learned_ops, load, notes)


def _fingerprint(
    worker: StackWorker,
    stack: StackConfig,
    collectors: Sequence[str],
    secrets: SecretsConfig | None = None,
    files_config: FilesConfig | None = None,
) -> _Probe:
    out = _Probe()
    try:
        out.hello = dict(worker.start())
        out.fingerprint = fingerprint.collect(worker, stack, collectors, secrets=secrets, files=files_config)
    except WorkerError as exc:
        out.error = exc.describe()
    except Exception as exc:  # a broken collector or runtime plugin: this stack's error only
        out.error = f"stack {stack.name}: {type(exc).__name__}: {exc}"
    return out


def _stand_in(p: _Probe, last: Mapping[str, Any] | None) -> None:
    """A stack that could not be reached is known by its last stored fingerprint (its rules
    still run, stored results of the file still count), said as such."""
    if p.error is None or last is None or not isinstance(last.get("document"), dict):
        return
    p.fingerprint = last["document"]
    p.last_seen = f"run {last['run_id']} on {last['started_at']:%Y-%m-%d %H:%M}"


def _identity(p: _Probe) -> tuple[str | None, str | None]:
    rt = p.hello or (p.fingerprint or {}).get("runtime") or {}
    return rt.get("runtime_package"), rt.get("runtime_version")


def served_here(
    served: list[ServedResult], stack: StackConfig, package: str | None, version: str | None, converted: bool
) -> list[ServedResult]:
    """The stored results that are evidence about this file on ``stack`` today: the same runtime
    release and device, the same host, loaded the same way (converted or not); newest first,
    as stored. Another host's result is about another machine's libraries and driver."""
    target = target_of(stack)
    return [
        r
        for r in served
        if _same_runtime(r, package, version, target) and r.converted == converted and r.host == stack.host
    ]


def _same_runtime(r: ServedResult, package: str | None, version: str | None, target: str) -> bool:
    return (
        package is not None
        and (r.runtime_package, r.runtime_version) == (package, version)
        and r.device.partition(":")[0] == target
    )


def _convert(
    worker: StackWorker, stack: StackConfig, out: _Probe, data: bytes, model: str, tmp: Path
) -> None:
    assert stack.convert is not None
    begun = time.time()
    try:
        done = conversion.convert(worker, stack, stack.convert, data, model, tmp)
    except WorkerError as exc:
        out.conversion = ConvertCheck(False, exc.message, seconds=time.time() - begun, log=exc.log[-4000:])
        return
    info = done.artifact.info
    out.converted = done.path
    out.conversion = ConvertCheck(
        True,
        f"converted ({stack.convert.describe()}) by MindSpore Lite {info['converter'].get('version')}: "
        f"{info['format']}, {done.artifact.size} bytes, sha256 {done.artifact.sha256[:12]}",
        {**info, "size": done.artifact.size},
        time.time() - begun,
    )


def _load(
    worker: StackWorker,
    out: _Probe,
    path: str,
    inputs: list[np.ndarray],
    model_id: str,
    spec: RuntimeSpec | None,
) -> None:
    """Load and run the file on a stack; a load that worked keeps the runtime's warnings (read
    with ``spec``'s log format)."""
    begun = time.time()
    try:
        out.load_log = worker.request("load", model=model_id, path=path).log
        outputs = worker.request("run", model=model_id, inputs=inputs).result["outputs"]
        out.load = LoadCheck(
            True,
            f"loaded and ran one seeded batch: {len(outputs)} output(s)",
            [
                {
                    "index": i,
                    "shape": list(o.shape),
                    "dtype": str(o.dtype),
                    "finite": bool(np.isfinite(o).all()) if o.dtype.kind in "fc" else True,
                }
                for i, o in enumerate(outputs)
            ],
            time.time() - begun,
            log_lines=list(runtime_warnings(out.load_log, spec)),
        )
    except WorkerError as exc:
        phase = "run" if exc.op == "run" else "load"
        out.load = LoadCheck(False, exc.message, seconds=time.time() - begun, phase=phase)
        out.load_error = exc


def _diagnose_load(
    stacks_reach: Reach,
    stack: StackConfig,
    spec: RuntimeSpec | None,
    p: _Probe,
    path: str,
    known: dict[str, str],
    info: MindIRInfo,
) -> Diagnosis:
    """The failed load or first call read as the user thinks of it; a load failure whose log
    names no cause is loaded once more at the verbose log level, in a fresh worker, when the
    stack's own environment runs its runtime quieter than that."""
    assert p.load is not None and p.load_error is not None
    error = p.load_error
    package, version = _identity(p)
    summary = asdict(info)
    d = diagnose(error, spec, version, summary, p.load_log, known, target_of(stack), package=package)
    if not d.named_by_runtime and error.kind == "error" and error.op == "load" and _quieter(stack):
        again = _verbose_load(stacks_reach, stack, path)
        if again is not None:
            d = diagnose(again, spec, version, summary, "", known, target_of(stack), package=package)
    p.load.message = d.summary
    p.load.log_lines = list(d.log_lines)
    return d


def _quieter(stack: StackConfig) -> bool:
    """Does the stack's environment set its runtime's log level above the verbose one?"""
    outside = os.environ.get("GLOG_v", "2") if stack.host == "local" else "2"  # noqa: SIM112 - its name
    level = stack.env.get("GLOG_v", outside)
    return not level.strip().isdigit() or int(level) > int(VERBOSE_ENV["GLOG_v"])


def _verbose_load(stacks_reach: Reach, stack: StackConfig, path: str) -> WorkerError | None:
    """The same load in a fresh worker whose runtime logs at GLOG_v=2: its error, or None if
    it worked this time."""
    worker = stacks_reach.worker(stack.name, env=VERBOSE_ENV)
    try:
        worker.start()
        worker.request("load", model="check", path=path)
        return None
    except WorkerError as exc:
        return exc if exc.op == "load" else None
    finally:
        worker.close()


def _concerns(f: Finding, stack: str, pair: str) -> bool:
    if f.subject in (stack, pair):
        return True
    facts = f.details.get("facts") or {}
    return stack in (facts.get("stacks") or ())


def _status_of(f: Finding) -> str:
    if f.kind == INCOMPATIBLE or f.severity == "critical":
        return INCOMPATIBLE
    if f.kind == UNSUPPORTED:
        return UNSUPPORTED
    if f.severity in ("warning", "error"):
        return WARNING
    return OK


@dataclass
class _Worst:
    """The worst of what is known about one stack, with its words."""

    status: str = OK
    reason: str = ""
    remedy: str = ""

    def add(self, status: str, reason: str, remedy: str = "") -> None:
        """The worse status wins; causes of the same status are all said (two operators a
        runtime cannot run are two reasons, not the first of them)."""
        if VERDICT_ORDER.index(status) > VERDICT_ORDER.index(self.status):
            self.status, self.reason, self.remedy = status, reason, remedy
        elif status == self.status and status != OK and reason and reason not in self.reason:
            self.reason = f"{self.reason}; {reason}" if self.reason else reason
            if remedy and remedy not in self.remedy:
                self.remedy = f"{self.remedy}; {remedy}" if self.remedy else remedy


def _when(r: ServedResult) -> str:
    if r.fix is not None:
        return f"auditor fix {r.fix} on {r.started_at:%Y-%m-%d %H:%M}, pair {r.pair}"
    return f"run {r.run_id} on {r.started_at:%Y-%m-%d %H:%M}, pair {r.pair}"


def _verdict(
    stack: StackConfig,
    pair: str,
    p: _Probe,
    findings: list[Finding],
    served: list[ServedResult],
    cov: Coverage,
    before: dict[str, str],
    asked_to_load: bool,
) -> StackVerdict:
    package, version = _identity(p)
    runtime = f"{package or stack.runtime} {version or '?'} ({target_of(stack)})"
    verdict = StackVerdict(stack.name, stack.runtime, version, OK, "")
    worst = _Worst()
    if p.error is not None and p.fingerprint is None:
        verdict.status, verdict.reason, verdict.remedy = ERROR, p.error, "fix the stack, then check again"
        verdict.unknown.append(
            "its runtime: the stack was not reached and the history holds no fingerprint of it"
        )
        return verdict
    if p.error is not None:
        verdict.unknown.append(
            f"the stack could not be reached ({p.error.splitlines()[0]}); its runtime is known from its "
            f"fingerprint of {p.last_seen}"
        )
    mine = [f for f in findings if _concerns(f, stack.name, pair)]
    verdict.findings = mine
    for f in sorted(mine, key=lambda f: VERDICT_ORDER.index(_status_of(f))):
        worst.add(_status_of(f), f.message, str(f.details.get("action") or ""))
    verdict.load, verdict.conversion = p.load, p.conversion
    if p.conversion is not None and not p.conversion.ok:
        worst.add(
            ERROR,
            f"the conversion failed: {p.conversion.message}",
            f"fix [stacks.{stack.name}.convert] or the model; the converter's log is above",
        )
    loaded = p.load is not None and p.load.ok
    if loaded:
        assert p.load is not None
        shapes = ", ".join(f"{o['shape']} {o['dtype']}" for o in p.load.outputs)
        what = "the file" if p.converted is None else "the file as its deployment converts it"
        verdict.evidence.append(
            f"{stack.name} loaded {what} and ran one seeded batch on {runtime} in {p.load.seconds:.2f} s: "
            f"{len(p.load.outputs)} output(s) ({shapes})"
        )
        bad = [o["index"] for o in p.load.outputs if not o["finite"]]
        if bad:
            worst.add(
                WARNING,
                f"{stack.name} ran the file, but output(s) {bad} are not all finite on seeded normal inputs",
                "check the model's inputs and normalization; audit it against a reference ([models.NAME])",
            )
    elif p.diagnosis is not None:
        d = p.diagnosis
        worst.add(d.status, d.summary, d.remedy)
    tried = p.load is not None and p.load.attempted
    _history_and_table(verdict, worst, served, cov, runtime, loaded, tried)
    if before and not tried:
        worst.add(
            WARNING,
            f"{runtime} may fail on this file: loads of other files failed at its operators before: "
            + "; ".join(f"{op}: {why}" for op, why in before.items()),
            "load it on the stack (auditor check without --no-load); an operator that failed in one graph "
            "may run in another",
        )
    if worst.status != OK:
        verdict.status, verdict.reason, verdict.remedy = worst.status, worst.reason, worst.remedy
        return verdict
    notes = f" ({len(mine)} note{'s' if len(mine) > 1 else ''} from the rules)" if mine else ""
    if loaded:
        verdict.reason = f"{runtime}: loaded and ran one seeded batch{notes}"
    elif not asked_to_load:
        verdict.status = UNCHECKED
        verdict.reason = (
            f"{runtime}: not loaded (--no-load), so not known to run this file; the rules found no "
            f"problem{notes}"
        )
        verdict.remedy = "run the check without --no-load where the stack is reachable"
        verdict.unknown.insert(0, "whether the runtime loads and runs the file: not loaded (--no-load)")
    elif p.error is not None:
        # Never OK without having been reached: what is stored or measured is said, not trusted.
        verdict.status = UNCHECKED
        known = f"; known: {verdict.evidence[0]}" if verdict.evidence else ""
        verdict.reason = f"{runtime}: not reached now, so not known to run this file{known}{notes}"
        verdict.remedy = "reach the stack and check again (its load is the evidence)"
    else:
        verdict.status = UNCHECKED
        verdict.reason = (
            f"{runtime}: no evidence that it runs this file (not loaded, nothing stored or measured)"
        )
        verdict.remedy = "reach the stack and check again (its load is the evidence)"
    return verdict


def _history_and_table(
    verdict: StackVerdict,
    worst: _Worst,
    served: list[ServedResult],
    cov: Coverage,
    runtime: str,
    loaded: bool,
    tried: bool,
) -> None:
    """What earlier audits of this file on this runtime and its measured operator table add
    (``loaded``: today's load and run worked; ``tried``: a load was made, whatever it gave,
    and so decides over what was stored or measured)."""
    # The newest result decides: an older failure a later audit of the same file and runtime
    # did not repeat (a golden path since fixed, say) is history, not evidence.
    newest = served[:1]
    failed = [r for r in newest if r.status not in (CONSISTENT, DRIFT)]
    ran = [r for r in newest if r.status in (CONSISTENT, DRIFT)]
    if failed:
        r = failed[0]
        said = f"an audit of this very file on {runtime} ({_when(r)}) stored {r.status.upper()}: {r.message}"
        if loaded:
            worst.add(WARNING, said + "; today's load and run worked", "compare the two stacks' environments")
        elif not tried:
            worst.add(
                r.status if r.status in VERDICT_ORDER else ERROR,
                said,
                "see the stored result: auditor history",
            )
    if ran:
        r = ran[0]
        verdict.evidence.append(
            f"an audit loaded and ran this very file on {runtime} ({_when(r)}): {r.status}"
        )
        if r.status == DRIFT and not failed:
            worst.add(WARNING, f"an audit of this file on {runtime} found drift ({_when(r)}): {r.message}")
    if cov.table is None:
        if not tried:
            verdict.unknown.append(cov.why_no_table)
        return
    audited = bool(ran) and ran[0].status == CONSISTENT and not failed
    if cov.wrong and (loaded or not tried) and audited:
        # the remedy was done: this very file's outputs were audited on this release and agreed
        verdict.evidence.append(
            f"{runtime} is measured to compute "
            + ", ".join(sorted(cov.wrong))
            + " differently in minimal graphs; this file's outputs agreed with their reference "
            + f"({_when(ran[0])})"
        )
    elif cov.wrong and (loaded or not tried):
        worst.add(
            WARNING,
            f"{runtime} is measured to compute "
            + "; ".join(f"{o} differently ({e.wrong_output()})" for o, e in cov.wrong.items()),
            "audit the model's outputs against a reference ([models.NAME] with reference, golden or train)",
        )
    if tried:
        return
    if cov.covers:
        verdict.evidence.append(
            f"the measured operator table covers every operator of the file ({cov.table.describe()})"
        )
        return
    if ran:
        return  # this very file ran there: what failed in the sweep's minimal graphs does not apply
    known = cov.known_failures()
    if known:
        worst.add(
            WARNING,
            f"{runtime} may fail on this file: measured in minimal graphs, "
            + "; ".join(f"{o}: {w}" for o, w in known.items()),
            "load it on the stack (auditor check without --no-load)",
        )
    verdict.unknown.append(cov.describe())
