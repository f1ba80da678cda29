"""Preflight: will these stacks load this MindIR, and what do the rules say, without a cycle.

The file is read without any framework (``auditor.worker.mindir``), the stacks are fingerprinted
(one worker each, in parallel), and every rule runs on a pair "the file -> the stack" as if a
train stack had just exported it: the MindIR version against the runtime, the operators
against those the runtime is known not to run, the producer's MindSpore against the served
runtime, and the stacks' own MindSpore/CANN/driver/firmware. With ``load`` each stack's worker
also loads the file and runs one seeded batch, which turns a prediction into a measurement.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from auditor.config.tables import Config, PairConfig, StackConfig
from auditor.fingerprint import collect as fingerprint
from auditor.results import Finding, LearnedMaximum, LearnedOperator
from auditor.rules.engine import ExportedModel, Rule, RuleContext, blocked, run_rules
from auditor.rules.operator_support import learn, operator_limits
from auditor.runtime import MINDIR, Failure, RuntimeSpec
from auditor.stacks.failures import meaning
from auditor.stacks.session import reach
from auditor.stacks.worker import StackWorker, WorkerError
from auditor.worker.mindir import MindIRInfo, TensorInfo, read_info

OK, WARNING, INCOMPATIBLE, UNSUPPORTED, ERROR = "ok", "warning", "incompatible", "unsupported", "error"
VERDICT_ORDER = (OK, WARNING, UNSUPPORTED, INCOMPATIBLE, ERROR)
MODEL_PROBE = "model"
"""The probe name the file takes in the rules' view (ExportedModel.probe)."""


class ModelInputError(Exception):
    """The model file cannot be audited: unreadable path, not a MindIR, truncated, encrypted."""


def read_model(path: str | os.PathLike[str]) -> tuple[bytes, MindIRInfo]:
    """The file's bytes and what it says about itself; ModelInputError names the file and
    the problem."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except IsADirectoryError:
        raise ModelInputError(f"{p}: is a directory, not a MindIR file") from None
    except FileNotFoundError:
        raise ModelInputError(f"{p}: no such file") from None
    except PermissionError:
        raise ModelInputError(f"{p}: not readable (permission denied)") from None
    except OSError as exc:
        raise ModelInputError(f"{p}: cannot be read: {exc.strerror or exc}") from None
    info = read_info(data)
    if not info.readable:
        raise ModelInputError(f"{p}: {info.reason}")
    return data, info


def seeded_inputs(inputs: Sequence[TensorInfo], seed: int = 0, dynamic: int = 1) -> list[np.ndarray]:
    """One batch for a model's declared inputs: standard normal floats, small integers,
    False booleans, from ``seed``; a dynamic dimension (-1) becomes ``dynamic``."""
    rng = np.random.RandomState(seed)
    out = []
    for t in inputs:
        shape = tuple(dynamic if d < 0 else d for d in t.shape)
        try:
            dtype = np.dtype(t.dtype)
        except TypeError:
            raise ModelInputError(f"input {t.name!r} has dtype {t.dtype}, which numpy cannot make") from None
        if dtype.kind == "f":
            out.append(rng.standard_normal(shape).astype(dtype))
        elif dtype.kind in "iu":
            out.append(rng.randint(0, 10, size=shape).astype(dtype))
        elif dtype.kind == "b":
            out.append(np.zeros(shape, dtype))
        else:
            raise ModelInputError(f"input {t.name!r} has dtype {t.dtype}, which the auditor cannot generate")
    return out


@dataclass
class LoadCheck:
    """What loading the file and running one seeded batch on a stack gave."""

    ok: bool
    message: str
    outputs: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    log: str = ""
    attempted: bool = True
    """False when a rule's finding made the load pointless (an incompatible version, an
    operator the runtime does not run: the load would fail or hang)."""


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

    @property
    def exit_code(self) -> int:
        return 0 if all(v.status == OK for v in self.verdicts) else 1

    def to_json(self) -> dict[str, Any]:
        info = asdict(self.info)
        info.pop("parameters", None)
        return {
            "file": self.path,
            "model": info,
            "verdicts": [
                {
                    **{k: v for k, v in asdict(verdict).items() if k != "findings"},
                    "findings": [asdict(f) for f in verdict.findings],
                }
                for verdict in self.verdicts
            ],
            "findings": [asdict(f) for f in self.findings],
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


def file_label(path: str) -> str:
    return Path(path).name or str(path)


def preflight(
    config: Config,
    path: str,
    stacks: Sequence[str],
    collectors: Sequence[str],
    rules: Sequence[Rule],
    runtimes: Mapping[str, RuntimeSpec],
    learned_maxima: Mapping[tuple[str, str], LearnedMaximum] | None = None,
    learned_operators: Sequence[LearnedOperator] = (),
    load: bool = False,
    seed: int = 0,
) -> CheckReport:
    """Check the MindIR at ``path`` against ``stacks``. Raises ModelInputError for a file that
    cannot be audited; a stack that cannot be started is that stack's error verdict."""
    started = time.time()
    data, info = read_model(path)
    label = file_label(path)
    # A stack whose runtime loads another format cannot serve this MindIR: its verdict says
    # so, and no worker is started for it.
    elsewhere = {
        n: runtimes[config.stacks[n].runtime] for n in stacks if not loads_mindir(config, runtimes, n)
    }
    chosen = {n: config.stacks[n] for n in stacks if n not in elsewhere}
    stacks_reach = reach(config, {n: r.worker_class for n, r in runtimes.items()}, (), collectors)
    inputs = seeded_inputs(info.inputs or (), seed) if load else []
    abspath = str(Path(path).resolve())

    workers: dict[str, StackWorker] = {}

    def one(stack: StackConfig) -> _Probe:
        worker = workers[stack.name] = stacks_reach.worker(stack.name)
        return _fingerprint(worker, stack, collectors)

    try:
        with ThreadPoolExecutor(
            max_workers=max(1, config.worker.parallel), thread_name_prefix="check"
        ) as pool:
            probed = dict(zip(chosen, pool.map(one, chosen.values()), strict=True))
            # The rules see the file as a train stack's export, paired with every stack checked.
            producer = info.model_version
            pseudo = {"framework": {"mindspore": {"version": producer}}} if producer else {}
            fingerprints: dict[str, dict[str, Any] | None] = {n: p.fingerprint for n, p in probed.items()}
            fingerprints[label] = pseudo
            pairs = tuple(PairConfig(label, n, (MODEL_PROBE,)) for n in chosen)
            context = RuleContext(
                dict(chosen),
                fingerprints,
                pairs,
                [ExportedModel(label, MODEL_PROBE, "file", asdict(info))],
                dict(learned_maxima or {}),
                operator_limits(chosen, fingerprints, runtimes, learned_operators),
                dict(runtimes),
            )
            findings = run_rules(rules, context)
            if load:
                todo = {}
                for name in chosen:
                    stopper = blocked(findings, PairConfig(label, name, ()).name, MODEL_PROBE, "file")
                    if probed[name].error is not None:
                        continue
                    if stopper is not None:
                        probed[name].load = LoadCheck(
                            False, f"not attempted: {stopper.message}", attempted=False
                        )
                    else:
                        todo[name] = probed[name]
                list(pool.map(lambda n: _load(workers[n], todo[n], abspath, inputs), todo))
    finally:
        for worker in workers.values():
            worker.close()
    verdicts, learned_max, learned_ops = [], [], []
    for name, stack in chosen.items():
        p = probed[name]
        failure = meaning(runtimes.get(stack.runtime), p.load_error) if p.load_error is not None else None
        known = p.hello.get("runtime_package") and p.hello.get("runtime_version")
        if failure is not None and failure.maximum is not None and known:
            learned_max.append(
                LearnedMaximum(
                    str(p.hello["runtime_package"]),
                    str(p.hello["runtime_version"]),
                    failure.maximum,
                    failure.words,
                )
            )
        op = learn(stack, p.hello, failure)
        if op is not None:
            learned_ops.append(op)
        verdicts.append(_verdict(stack, PairConfig(label, name, (MODEL_PROBE,)).name, p, findings, failure))
    for name, spec in elsewhere.items():
        verdicts.append(
            StackVerdict(
                name,
                spec.name,
                None,
                INCOMPATIBLE,
                f"{spec.name} loads {spec.loads.title} files, not a MindIR; not checked",
                f"check the {spec.loads.title} export of the model against {name}",
            )
        )
    return CheckReport(str(path), info, verdicts, findings, time.time() - started, learned_max, learned_ops)


def _fingerprint(worker: StackWorker, stack: StackConfig, collectors: Sequence[str]) -> _Probe:
    out = _Probe()
    try:
        out.hello = dict(worker.start())
        out.fingerprint = fingerprint.collect(worker, stack, collectors)
    except WorkerError as exc:
        out.error = exc.describe()
    except Exception as exc:  # a broken collector or runtime plugin: this stack's error only
        out.error = f"stack {stack.name}: {type(exc).__name__}: {exc}"
    return out


def _load(worker: StackWorker, out: _Probe, path: str, inputs: list[np.ndarray]) -> None:
    begun = time.time()
    try:
        worker.request("load", model="check", path=path)
        outputs = worker.request("run", model="check", inputs=inputs).result["outputs"]
        out.load = LoadCheck(
            True,
            f"loaded and ran one batch: {len(outputs)} output(s)",
            [
                {
                    "index": i,
                    "shape": list(o.shape),
                    "dtype": str(o.dtype),
                    "finite": bool(np.isfinite(o).all()),
                }
                for i, o in enumerate(outputs)
            ],
            time.time() - begun,
        )
    except WorkerError as exc:
        out.load_error = exc
        out.load = LoadCheck(False, exc.describe(), seconds=time.time() - begun, log=exc.log[-4000:])


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


def loads_mindir(config: Config, runtimes: Mapping[str, RuntimeSpec], stack: str) -> bool:
    """Whether the stack's runtime loads MindIR (a runtime no plugin provides is assumed to)."""
    spec = runtimes.get(config.stacks[stack].runtime)
    return spec is None or spec.loads.name == MINDIR.name


def _verdict(
    stack: StackConfig, pair: str, p: _Probe, findings: list[Finding], failure: Failure | None
) -> StackVerdict:
    version = p.hello.get("runtime_version")
    if p.error is not None:
        return StackVerdict(
            stack.name, stack.runtime, version, ERROR, p.error, "fix the stack, then check again"
        )
    mine = [f for f in findings if _concerns(f, stack.name, pair)]
    ranked = sorted(mine, key=lambda f: VERDICT_ORDER.index(_status_of(f)), reverse=True)
    status = _status_of(ranked[0]) if ranked else OK
    if status != OK:
        worst = ranked[0]
        reason, remedy = worst.message, str(worst.details.get("action") or "")
    else:
        reason = f"{stack.runtime} {version}: no rule found a problem" + (
            f" ({len(mine)} note{'s' if len(mine) > 1 else ''})" if mine else ""
        )
        remedy = ""
    if p.load is not None and p.load.attempted and not p.load.ok:
        load_status = failure.status if failure is not None else ERROR
        if VERDICT_ORDER.index(load_status) > VERDICT_ORDER.index(status):
            status, reason = load_status, f"the load failed: {p.load.message}"
            remedy = remedy or "see the runtime's log above"
    return StackVerdict(stack.name, stack.runtime, version, status, reason, remedy, mine, p.load)
