"""auditor.toml: one schema drives validation, defaults and error messages.

Every problem in a config file is reported at once, each with its key path
(``stacks.lite20.runtime: unknown runtime 'lite' (known: ...)``), so a user fixes a
broken file in one pass instead of one error per run.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from auditor import fleet_config
from auditor.compare import Tolerance
from auditor.paths import default_db_url

# The built-in runtimes -> what each can do in a pair: "export" (train side) or "load" (infer
# side). Plugins add more; the CLI passes the full map to parse().
RUNTIMES = {
    "mindspore": "export",
    "mindspore-graph": "load",
    "mindspore-lite": "load",
}
ROLES = ("train", "infer")
DEVICE_RE = re.compile(r"^(cpu|(ascend|gpu):\d+)$")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class ConfigError(Exception):
    """A config file that cannot be used; ``errors`` lists every problem with its key path."""

    def __init__(self, source: str, errors: list[str]):
        self.source = source
        self.errors = errors
        super().__init__(f"{source}: {len(errors)} problem(s)\n" + "\n".join(f"  {e}" for e in errors))


@dataclass(frozen=True)
class StackConfig:
    name: str
    role: str
    runtime: str
    python: str
    device: str = "cpu"
    host: str = "local"
    ascend_root: str = "/usr/local/Ascend"
    env: dict[str, str] = field(default_factory=dict)
    system_root: str = "/"
    """Where the stack's /etc is read from (fingerprints); a container's or a test tree's root."""
    npu_smi: str = "npu-smi"
    """The npu-smi command (looked up on the worker's PATH) or its path."""
    npu_smi_timeout: float = 10.0
    """Seconds one npu-smi call may take before its process group is killed."""


DTYPE_TOLERANCES: dict[str, dict[str, float]] = {
    "float16": {"atol": 1e-3, "rtol": 1e-3},
    "bfloat16": {"atol": 1e-2, "rtol": 1e-2},
}
"""Built-in element-wise thresholds of the low-precision dtypes, as if written in every probe's
``[probes.X.dtype.D]``. One fp16 ULP is at most 2**-10 (9.8e-4) of a normal value, so rtol 1e-3
passes a one-ULP difference, msProbe's acceptance for fp16; bf16's ULP is 2**-7 (7.8e-3).
Every other dtype starts from ``Tolerance()`` (1e-5, about 84 fp32 ULPs, Polygraphy's default)."""

DTYPES = ("float16", "bfloat16", "float32", "float64")


@dataclass(frozen=True)
class ThresholdScope:
    """What one level of a probe's config sets (None: not set there, inherited): atol/rtol,
    per-output atol/rtol, and comparator options. Used for ``dtype.D`` and ``variant.V``."""

    atol: float | None = None
    rtol: float | None = None
    outputs: dict[str, dict[str, float]] = field(default_factory=dict)
    comparators: dict[str, dict[str, Any]] = field(default_factory=dict)

    def settings(self, output: str) -> dict[str, float]:
        own = {k: v for k, v in (("atol", self.atol), ("rtol", self.rtol)) if v is not None}
        return {**own, **self.outputs.get(output, {})}


@dataclass(frozen=True)
class ProbeConfig:
    """A probe's settings. Thresholds are resolved per key (atol and rtol separately), the most
    specific level that sets the key winning:

        variant.V.outputs.O > variant.V > dtype.D.outputs.O > dtype.D
            > outputs.O > the probe's atol/rtol > Tolerance() (1e-5, 1e-5)

    where D is the variant's ``dtype`` parameter and ``DTYPE_TOLERANCES`` fills in what
    ``dtype.D`` leaves unset. Comparator options merge the same way: ``comparators.C``, then
    ``dtype.D.comparators.C``, then ``variant.V.comparators.C``.
    """

    name: str
    thresholds: Tolerance = Tolerance()
    outputs: dict[str, Tolerance] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    variants: tuple[str, ...] = ()
    """The variants to run; empty: all the probe declares."""
    dtypes: dict[str, ThresholdScope] = field(default_factory=dict)
    variant_scopes: dict[str, ThresholdScope] = field(default_factory=dict)
    comparators: dict[str, dict[str, Any]] = field(default_factory=dict)

    def _scopes(self, variant: str | None, dtype: str | None) -> list[ThresholdScope]:
        scopes = []
        if dtype is not None:
            builtin = DTYPE_TOLERANCES.get(dtype, {})
            configured = self.dtypes.get(dtype, ThresholdScope())
            scopes.append(
                ThresholdScope(
                    configured.atol if configured.atol is not None else builtin.get("atol"),
                    configured.rtol if configured.rtol is not None else builtin.get("rtol"),
                    configured.outputs,
                    configured.comparators,
                )
            )
        if variant is not None and variant in self.variant_scopes:
            scopes.append(self.variant_scopes[variant])
        return scopes

    def tolerance_for(self, output: str, variant: str | None = None, dtype: str | None = None) -> Tolerance:
        own = self.outputs.get(output, self.thresholds)
        tol = {"atol": own.atol, "rtol": own.rtol}
        for scope in self._scopes(variant, dtype):
            tol.update(scope.settings(output))
        return Tolerance(**tol)

    def comparator_options(
        self, comparator: str, variant: str | None = None, dtype: str | None = None
    ) -> dict[str, Any]:
        options = dict(self.comparators.get(comparator, {}))
        for scope in self._scopes(variant, dtype):
            options.update(scope.comparators.get(comparator, {}))
        return options


@dataclass(frozen=True)
class PairConfig:
    train: str
    infer: str
    probes: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.train}->{self.infer}"


@dataclass(frozen=True)
class WorkerConfig:
    start_timeout: float = 120.0
    request_timeout: float = 120.0
    parallel: int = 2


@dataclass(frozen=True)
class LatencyConfig:
    warmup: int = 5
    iterations: int = 50
    batches: tuple[int, ...] = (1, 256)
    """Batch sizes timed besides the probe's own (a probe takes part if it has a "batch" parameter)."""
    regression_factor: float = 1.5
    """A latency-regression finding when p50 exceeds this factor of the rolling median."""
    regression_window: int = 10
    """How many previous complete runs of the same stack, probe, variant, batch make the median."""
    regression_min_runs: int = 3
    """No judgement before this many previous runs."""


@dataclass(frozen=True)
class RolloutConfig:
    """``[rollout]``: closed-loop episodes of a probe's deterministic action (auditor.rollout)."""

    enabled: bool = True
    env: str = "Pendulum-v1"
    probe: str = "ppo_policy"
    variant: str = "fp32"
    seeds: tuple[int, ...] = (0, 1, 2)
    steps: int = 200
    """Steps per episode at most; 0: until the environment ends it (Pendulum-v1: 200)."""
    action_atol: float = 1e-5
    return_atol: float = 0.1
    pairs: tuple[str, ...] = ()
    """Pairs ("train->infer") to roll out; empty: every pair that runs the probe."""


SEVERITIES = ("info", "warning", "error", "critical")
"""Finding and alert severities, least to most severe."""


@dataclass(frozen=True)
class ScheduleConfig:
    """When ``auditor daemon`` runs cycles: every ``interval`` seconds, or on ``cron``."""

    interval: float | None = 3600.0
    cron: str | None = None
    timezone: str | None = None
    jitter: float = 0.0
    run_on_start: bool = True
    misfire_grace: float = 300.0


@dataclass(frozen=True)
class SinkConfig:
    """``[alerts.sinks.NAME]``: ``type`` and ``min_severity``; every other key is an option of
    the sink type, checked by its ``validate``."""

    name: str
    type: str
    min_severity: str = "info"
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AlertsConfig:
    cooldown: float = 21600.0
    max_attempts: int = 5
    sinks: dict[str, SinkConfig] = field(default_factory=dict)


@dataclass(frozen=True)
class PrometheusConfig:
    enabled: bool = False
    address: str = "127.0.0.1"
    port: int = 9731


@dataclass(frozen=True)
class DaemonConfig:
    state_dir: str = ""
    """Empty: ``auditor.paths.state_dir()``."""
    stop_timeout: float = 30.0


@dataclass(frozen=True)
class Config:
    source: str
    db_url: str
    stacks: dict[str, StackConfig]
    pairs: tuple[PairConfig, ...]
    probes: dict[str, ProbeConfig]
    worker: WorkerConfig = WorkerConfig()
    latency: LatencyConfig = LatencyConfig()
    rollout: RolloutConfig = RolloutConfig()
    plugin_dirs: tuple[str, ...] = ()
    schedule: ScheduleConfig = ScheduleConfig()
    alerts: AlertsConfig = AlertsConfig()
    prometheus: PrometheusConfig = PrometheusConfig()
    daemon: DaemonConfig = DaemonConfig()
    keep_days: int = 90
    """[storage] keep_days: runs older than this many days are deleted (0: keep forever)."""
    auditor_id: str = ""
    """[storage] auditor_id: this auditor's name in a shared history (empty: the host name)."""
    fleet: fleet_config.FleetConfig = fleet_config.FleetConfig()
    """Split mode: [stacks.X] source = "db" and [stacks.X] publish (auditor.fleet_config)."""

    def probe(self, name: str) -> ProbeConfig:
        return self.probes.get(name, ProbeConfig(name))


_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _expand_vars(value: str, env: Mapping[str, str]) -> str:
    out: list[str] = []
    i = 0
    while i < len(value):
        if value.startswith("${", i):
            depth, j = 0, i + 1
            while j < len(value):
                depth += {"{": 1, "}": -1}.get(value[j], 0)
                if depth == 0:
                    break
                j += 1
            if j >= len(value):  # unterminated: keep as written
                out.append(value[i:])
                break
            name, sep, default = value[i + 2 : j].partition(":-")
            if env.get(name):
                out.append(env[name])
            elif sep:
                out.append(_expand_vars(default, env))
            i = j + 1
        elif value[i] == "$" and (m := _NAME_RE.match(value, i + 1)):
            out.append(env.get(m.group(0), ""))
            i = m.end()
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


def expand(value: str, env: Mapping[str, str] | None = None) -> str:
    """Expand ``$VAR``, ``${VAR}`` and ``${VAR:-default}`` (defaults may nest), then a leading ``~``.

    One pass: the value of a variable is used as it is, never expanded again.
    """
    return os.path.expanduser(_expand_vars(value, os.environ if env is None else env))


class _Checker:
    """Collects errors with their key paths while reading a parsed TOML document."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def error(self, path: str, message: str) -> None:
        self.errors.append(f"{path}: {message}")

    def table(self, doc: dict, key: str, path: str, allowed: set[str] | None = None) -> dict:
        value = doc.get(key, {})
        if not isinstance(value, dict):
            self.error(path, f"must be a table, not {type(value).__name__}")
            return {}
        if allowed is not None:
            for unknown in sorted(set(value) - allowed):
                self.error(
                    f"{path}.{unknown}", f"unknown key (expected one of: {', '.join(sorted(allowed))})"
                )
        return value

    def get(
        self,
        doc: dict,
        key: str,
        path: str,
        kind: type | tuple[type, ...],
        default: Any = None,
        required: bool = False,
    ) -> Any:
        if key not in doc:
            if required:
                self.error(path, "is required")
            return default
        value = doc[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
        if not ok:
            names = " or ".join(k.__name__ for k in kinds)
            self.error(path, f"must be {names}, not {type(value).__name__} {value!r}")
            return default
        return value

    def positive(self, doc: dict, key: str, path: str, kind: type, default: Any) -> Any:
        value = self.get(doc, key, path, (int, float) if kind is float else kind, default)
        if value is not None and value <= 0:
            self.error(path, f"must be greater than 0, not {value!r}")
            return default
        return kind(value)


def _partial_thresholds(c: _Checker, doc: dict, path: str) -> dict[str, float]:
    """The atol/rtol a table sets (only those it sets), each a number 0 or more."""
    values = {}
    for name in ("atol", "rtol"):
        value = c.get(doc, name, f"{path}.{name}", (int, float))
        if value is None:
            continue
        if not value >= 0:  # also catches NaN
            c.error(f"{path}.{name}", f"must be a number 0 or more, not {value!r}")
            continue
        values[name] = float(value)
    return values


def _comparator_tables(c: _Checker, doc: dict, path: str) -> dict[str, dict[str, Any]]:
    out = {}
    for comp, options in c.get(doc, "comparators", f"{path}.comparators", dict, {}).items():
        if not isinstance(options, dict):
            c.error(f"{path}.comparators.{comp}", "must be a table of the comparator's options")
            continue
        for key, value in options.items():
            if not isinstance(value, (int, float, str, bool)):
                c.error(
                    f"{path}.comparators.{comp}.{key}",
                    f"must be a number, string or boolean, not {type(value).__name__}",
                )
        out[comp] = dict(options)
    return out


def _scope(c: _Checker, doc: Any, path: str) -> ThresholdScope:
    """A ``dtype.D`` or ``variant.V`` table: atol, rtol, outputs.O.{atol,rtol}, comparators.C."""
    if not isinstance(doc, dict):
        c.error(path, "must be a table with atol, rtol, outputs and/or comparators")
        return ThresholdScope()
    allowed = {"atol", "rtol", "outputs", "comparators"}
    for unknown in sorted(set(doc) - allowed):
        c.error(f"{path}.{unknown}", f"unknown key (expected one of: {', '.join(sorted(allowed))})")
    own = _partial_thresholds(c, doc, path)
    outputs = {}
    for out, t in c.get(doc, "outputs", f"{path}.outputs", dict, {}).items():
        if isinstance(t, dict):
            for unknown in sorted(set(t) - {"atol", "rtol"}):
                c.error(f"{path}.outputs.{out}.{unknown}", "unknown key (expected one of: atol, rtol)")
            outputs[out] = _partial_thresholds(c, t, f"{path}.outputs.{out}")
        else:
            c.error(f"{path}.outputs.{out}", "must be a table with atol and/or rtol")
    return ThresholdScope(own.get("atol"), own.get("rtol"), outputs, _comparator_tables(c, doc, path))


def _thresholds(c: _Checker, doc: dict, path: str, base: Tolerance) -> Tolerance:
    values = {}
    for name in ("atol", "rtol"):
        value = c.get(doc, name, f"{path}.{name}", (int, float), getattr(base, name))
        if not value >= 0:  # also catches NaN
            c.error(f"{path}.{name}", f"must be a number 0 or more, not {value!r}")
            value = getattr(base, name)
        values[name] = float(value)
    return Tolerance(**values)


SECTIONS = (
    "storage",
    "worker",
    "latency",
    "rollout",
    "plugins",
    "stacks",
    "pairs",
    "probes",
    "schedule",
    "alerts",
    "prometheus",
    "daemon",
)


def parse(
    doc: dict,
    source: str = "<config>",
    known_probes: Mapping[str, Iterable[str]] | None = None,
    runtimes: Mapping[str, str] | None = None,
    probe_variants: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
    sink_types: Mapping[str, Callable[[dict[str, Any]], list[str]]] | None = None,
) -> Config:
    """Validate a parsed TOML document; raise ConfigError listing every problem.

    known_probes maps each probe name to its parameter names (a plain set of names skips
    the parameter check); None skips probe checks altogether. runtimes maps each runtime
    name to "export" or "load" (default: the built-in runtimes). probe_variants maps a probe
    name to its variants (name -> parameter overrides), to check variant names and params
    that a variant sets; a probe not in it skips those checks. sink_types maps each alert
    sink type to its ``validate(options)``; None skips the sink type and option checks.
    """
    known_runtimes = runtimes if runtimes is not None else RUNTIMES
    c = _Checker()
    for unknown in sorted(set(doc) - set(SECTIONS)):
        c.error(unknown, f"unknown section (expected {', '.join(SECTIONS)})")

    plugins = c.table(doc, "plugins", "plugins", {"dirs"})
    plugin_dirs = []
    for i, d in enumerate(c.get(plugins, "dirs", "plugins.dirs", list, [])):
        if isinstance(d, str):
            plugin_dirs.append(_relative_to(source, expand(d)))
        else:
            c.error(f"plugins.dirs[{i}]", f"must be a directory path, not {type(d).__name__}")

    storage = c.table(doc, "storage", "storage", {"url", "keep_days", "auditor_id"})
    auditor_id = expand(c.get(storage, "auditor_id", "storage.auditor_id", str, "")).strip()
    url = expand(c.get(storage, "url", "storage.url", str, "")) or default_db_url()
    keep_days = c.get(storage, "keep_days", "storage.keep_days", int, Config.keep_days)
    if keep_days < 0:
        c.error("storage.keep_days", f"must be a number of days (0: keep every run), not {keep_days}")
        keep_days = Config.keep_days

    w = c.table(doc, "worker", "worker", {"start_timeout", "request_timeout", "parallel"})
    worker = WorkerConfig(
        start_timeout=c.positive(
            w, "start_timeout", "worker.start_timeout", float, WorkerConfig.start_timeout
        ),
        request_timeout=c.positive(
            w, "request_timeout", "worker.request_timeout", float, WorkerConfig.request_timeout
        ),
        parallel=c.positive(w, "parallel", "worker.parallel", int, WorkerConfig.parallel),
    )
    lat = c.table(
        doc,
        "latency",
        "latency",
        {"warmup", "iterations", "batches", "regression_factor", "regression_window", "regression_min_runs"},
    )
    warmup = c.get(lat, "warmup", "latency.warmup", int, LatencyConfig.warmup)
    if warmup < 0:
        c.error("latency.warmup", f"must be 0 or more, not {warmup}")
    latency = LatencyConfig(
        warmup=max(0, warmup),
        iterations=c.positive(lat, "iterations", "latency.iterations", int, LatencyConfig.iterations),
        **_latency_extras(c, lat),
    )

    stacks: dict[str, StackConfig] = {}
    stack_keys = {"role", "runtime", "python", "device", "host", "ascend_root", "env"}
    stack_keys |= {"system_root", "npu_smi", "npu_smi_timeout"}  # fingerprint options
    stack_keys |= fleet_config.KEYS  # split mode
    for name, s in c.table(doc, "stacks", "stacks").items():
        path = f"stacks.{name}"
        if not isinstance(s, dict):
            c.error(path, "must be a table")
            continue
        if not NAME_RE.match(name):
            c.error(path, "stack names use letters, digits, '.', '_' and '-'")
        for unknown in sorted(set(s) - stack_keys):
            c.error(f"{path}.{unknown}", f"unknown key (expected one of: {', '.join(sorted(stack_keys))})")
        role = c.get(s, "role", f"{path}.role", str, required=True)
        if role is not None and role not in ROLES:
            c.error(f"{path}.role", f"must be 'train' or 'infer', not {role!r}")
        runtime = c.get(s, "runtime", f"{path}.runtime", str, required=True)
        if runtime is not None and runtime not in known_runtimes:
            c.error(
                f"{path}.runtime",
                f"unknown runtime {runtime!r} (known: {', '.join(sorted(known_runtimes))})",
            )
        elif runtime and role in ROLES:
            needed = "export" if role == "train" else "load"
            if known_runtimes[runtime] != needed:
                what = "build and export probes" if role == "train" else "load exported MindIR"
                c.error(f"{path}.runtime", f"runtime {runtime!r} cannot {what}, which a {role} stack must do")
        remote = fleet_config.is_remote(s)  # no interpreter here: exports come from the database
        python = c.get(s, "python", f"{path}.python", str, "", required=not remote)
        device = c.get(s, "device", f"{path}.device", str, "cpu")
        if not DEVICE_RE.match(device):
            c.error(f"{path}.device", f"must be 'cpu', 'ascend:N' or 'gpu:N', not {device!r}")
        env = c.get(s, "env", f"{path}.env", dict, {})
        for k, v in env.items():
            if not isinstance(v, str):
                c.error(f"{path}.env.{k}", f"must be a string, not {type(v).__name__}")
        system_root = expand(c.get(s, "system_root", f"{path}.system_root", str, "/"))
        if not os.path.isabs(system_root):
            c.error(f"{path}.system_root", f"must be an absolute path, not {system_root!r}")
        npu_smi = expand(c.get(s, "npu_smi", f"{path}.npu_smi", str, "npu-smi"))
        if not npu_smi.strip():
            c.error(f"{path}.npu_smi", "must name the npu-smi command or its path, not an empty string")
        npu_smi_timeout = c.positive(s, "npu_smi_timeout", f"{path}.npu_smi_timeout", float, 10.0)
        if not math.isfinite(npu_smi_timeout):
            c.error(f"{path}.npu_smi_timeout", f"must be a finite number of seconds, not {npu_smi_timeout!r}")
            npu_smi_timeout = 10.0
        if role in ROLES and runtime in known_runtimes and (python or remote):
            stacks[name] = StackConfig(
                name=name,
                role=role,
                runtime=runtime,
                python=expand(python),
                device=device,
                host=c.get(s, "host", f"{path}.host", str, "local"),
                ascend_root=expand(c.get(s, "ascend_root", f"{path}.ascend_root", str, "/usr/local/Ascend")),
                env={k: expand(v) for k, v in env.items() if isinstance(v, str)},
                system_root=system_root,
                npu_smi=npu_smi,
                npu_smi_timeout=npu_smi_timeout,
            )

    probes: dict[str, ProbeConfig] = {}
    for name, p in c.table(doc, "probes", "probes").items():
        path = f"probes.{name}"
        if not isinstance(p, dict):
            c.error(path, "must be a table")
            continue
        if known_probes is not None and name not in known_probes:
            c.error(path, f"unknown probe (known: {', '.join(sorted(known_probes))})")
        probe_keys = {"atol", "rtol", "outputs", "params", "variants", "variant", "dtype", "comparators"}
        for unknown in sorted(set(p) - probe_keys):
            c.error(f"{path}.{unknown}", f"unknown key (expected one of: {', '.join(sorted(probe_keys))})")
        base = _thresholds(c, p, path, Tolerance())
        outputs = {}
        for out, t in c.get(p, "outputs", f"{path}.outputs", dict, {}).items():
            if isinstance(t, dict):
                outputs[out] = _thresholds(c, t, f"{path}.outputs.{out}", base)
            else:
                c.error(f"{path}.outputs.{out}", "must be a table with atol and/or rtol")
        params = c.get(p, "params", f"{path}.params", dict, {})
        if isinstance(known_probes, Mapping) and name in known_probes:
            allowed = set(known_probes[name])
            for unknown in sorted(set(params) - allowed):
                c.error(
                    f"{path}.params.{unknown}",
                    f"probe {name} has no such parameter (known: {', '.join(sorted(allowed))})",
                )
        declared = (probe_variants or {}).get(name)
        selected: list[str] = []
        raw_variants = p.get("variants", [])
        if not isinstance(raw_variants, list):
            c.error(
                f"{path}.variants",
                f"must be a list of variant names (per-variant thresholds go in [{path}.variant.NAME])",
            )
            raw_variants = []
        for j, v in enumerate(raw_variants):
            if not isinstance(v, str):
                c.error(f"{path}.variants[{j}]", "must be a variant name")
            elif declared is not None and v not in declared:
                c.error(f"{path}.variants[{j}]", f"unknown variant {v!r} (known: {', '.join(declared)})")
            else:
                selected.append(v)
        if declared is not None and isinstance(params, dict):
            for key in sorted(params):
                setters = [v for v, o in declared.items() if isinstance(o, Mapping) and key in o]
                if setters:
                    c.error(
                        f"{path}.params.{key}",
                        f"is set by the variant(s) {', '.join(setters)}; choose them with {path}.variants",
                    )
        variant_scopes = {}
        for v, t in c.get(p, "variant", f"{path}.variant", dict, {}).items():
            if declared is not None and v not in declared:
                c.error(f"{path}.variant.{v}", f"unknown variant {v!r} (known: {', '.join(declared)})")
            variant_scopes[v] = _scope(c, t, f"{path}.variant.{v}")
        dtypes = {}
        for d, t in c.get(p, "dtype", f"{path}.dtype", dict, {}).items():
            if d not in DTYPES:
                c.error(f"{path}.dtype.{d}", f"unknown dtype {d!r} (known: {', '.join(DTYPES)})")
            dtypes[d] = _scope(c, t, f"{path}.dtype.{d}")
        probes[name] = ProbeConfig(
            name,
            base,
            outputs,
            dict(params),
            tuple(selected),
            dtypes,
            variant_scopes,
            _comparator_tables(c, p, path),
        )

    fleet = fleet_config.parse(c, doc.get("stacks"), known_probes)
    pairs: list[PairConfig] = []
    raw_pairs = doc.get("pairs", [])
    if not isinstance(raw_pairs, list):
        c.error("pairs", "must be an array of tables ([[pairs]])")
        raw_pairs = []
    if not raw_pairs and not fleet.publish:
        c.error("pairs", "no pairs configured: add at least one [[pairs]] with train, infer and probes")
    seen: set[tuple[str, str]] = set()
    for i, p in enumerate(raw_pairs):
        path = f"pairs[{i}]"
        if not isinstance(p, dict):
            c.error(path, "must be a table")
            continue
        for unknown in sorted(set(p) - {"train", "infer", "probes"}):
            c.error(f"{path}.{unknown}", "unknown key (expected one of: infer, probes, train)")
        train = c.get(p, "train", f"{path}.train", str, required=True)
        infer = c.get(p, "infer", f"{path}.infer", str, required=True)
        for side, role in ((train, "train"), (infer, "infer")):
            if side is None:
                continue
            raw = doc.get("stacks", {}).get(side) if isinstance(doc.get("stacks"), dict) else None
            if raw is None:
                c.error(f"{path}.{role}", f"no stack named {side!r} in [stacks]")
            elif isinstance(raw, dict) and raw.get("role") in ROLES and raw.get("role") != role:
                c.error(f"{path}.{role}", f"stack {side!r} has role {raw.get('role')!r}, not {role!r}")
        names = c.get(p, "probes", f"{path}.probes", list, [])
        if not names:
            c.error(f"{path}.probes", "list at least one probe")
        for j, n in enumerate(names):
            if not isinstance(n, str):
                c.error(f"{path}.probes[{j}]", "must be a probe name")
            elif known_probes is not None and n not in known_probes:
                c.error(
                    f"{path}.probes[{j}]", f"unknown probe {n!r} (known: {', '.join(sorted(known_probes))})"
                )
        if train and infer:
            if (train, infer) in seen:
                c.error(path, f"pair {train} -> {infer} is listed twice")
            seen.add((train, infer))
            pairs.append(PairConfig(train, infer, tuple(n for n in names if isinstance(n, str))))

    rollout = _rollout_section(c, doc, pairs, known_probes)
    daemon_sections = _daemon_sections(c, doc, source, sink_types)
    if c.errors:
        raise ConfigError(source, c.errors)
    return Config(
        source=source,
        db_url=url,
        stacks=stacks,
        pairs=tuple(pairs),
        probes=probes,
        worker=worker,
        latency=latency,
        rollout=rollout,
        plugin_dirs=tuple(plugin_dirs),
        **daemon_sections,
        keep_days=keep_days,
        auditor_id=auditor_id,
        fleet=fleet,
    )


def _int_list(
    c: _Checker, doc: dict, key: str, path: str, default: tuple[int, ...], minimum: int
) -> tuple[int, ...]:
    values = c.get(doc, key, path, list, list(default))
    out = []
    for i, v in enumerate(values):
        if isinstance(v, int) and not isinstance(v, bool) and v >= minimum:
            out.append(v)
        else:
            c.error(f"{path}[{i}]", f"must be a whole number {minimum} or more, not {v!r}")
    return tuple(out)


def _latency_extras(c: _Checker, lat: dict) -> dict[str, Any]:
    """``[latency]`` batches and the latency-regression settings."""
    batches = _int_list(c, lat, "batches", "latency.batches", LatencyConfig.batches, 1)
    factor = c.get(lat, "regression_factor", "latency.regression_factor", (int, float), 1.5)
    if not factor > 1:
        c.error("latency.regression_factor", f"must be greater than 1, not {factor!r}")
        factor = LatencyConfig.regression_factor
    window = c.positive(lat, "regression_window", "latency.regression_window", int, 10)
    min_runs = c.positive(lat, "regression_min_runs", "latency.regression_min_runs", int, 3)
    if min_runs > window:
        c.error(
            "latency.regression_min_runs", f"must be at most regression_window ({window}), not {min_runs}"
        )
    return {
        "batches": tuple(sorted(set(batches))),
        "regression_factor": float(factor),
        "regression_window": window,
        "regression_min_runs": min(min_runs, window),
    }


def _rollout_section(
    c: _Checker, doc: dict, pairs: list[PairConfig], known_probes: Mapping[str, Iterable[str]] | None
) -> RolloutConfig:
    keys = {"enabled", "env", "probe", "variant", "seeds", "steps", "action_atol", "return_atol", "pairs"}
    r = c.table(doc, "rollout", "rollout", keys)
    d = RolloutConfig()
    probe = c.get(r, "probe", "rollout.probe", str, d.probe)
    if known_probes is not None and probe not in known_probes:
        c.error("rollout.probe", f"unknown probe {probe!r} (known: {', '.join(sorted(known_probes))})")
    seeds = _int_list(c, r, "seeds", "rollout.seeds", d.seeds, 0)
    if not seeds and "seeds" in r:
        c.error("rollout.seeds", "list at least one seed")
    steps = c.get(r, "steps", "rollout.steps", int, d.steps)
    if steps < 0:
        c.error("rollout.steps", f"must be 0 (the whole episode) or more, not {steps}")
    tolerances = {}
    for key in ("action_atol", "return_atol"):
        value = c.get(r, key, f"rollout.{key}", (int, float), getattr(d, key))
        if not value >= 0:
            c.error(f"rollout.{key}", f"must be a number 0 or more, not {value!r}")
            value = getattr(d, key)
        tolerances[key] = float(value)
    names = {p.name: p for p in pairs}
    selected = []
    for i, name in enumerate(c.get(r, "pairs", "rollout.pairs", list, [])):
        if not isinstance(name, str) or name not in names:
            c.error(f"rollout.pairs[{i}]", f"no pair {name!r} (pairs: {', '.join(names) or 'none'})")
        elif probe not in names[name].probes:
            c.error(f"rollout.pairs[{i}]", f"pair {name} does not run probe {probe!r}")
        else:
            selected.append(name)
    return RolloutConfig(
        enabled=c.get(r, "enabled", "rollout.enabled", bool, d.enabled),
        env=c.get(r, "env", "rollout.env", str, d.env),
        probe=probe,
        variant=c.get(r, "variant", "rollout.variant", str, d.variant),
        seeds=seeds,
        steps=max(0, steps),
        pairs=tuple(selected),
        **tolerances,
    )


def _relative_to(source: str, path: str) -> str:
    """Relative paths in a config file are relative to the file's folder."""
    if os.path.isabs(path) or source.startswith("<"):
        return path
    return str(Path(source).resolve().parent / path)


_OPTION_PATH_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\[\]-]*$")
_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)\s*(s|m|h|d)")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration(c: _Checker, doc: dict, key: str, path: str, default: float, minimum: float = 0.0) -> float:
    """Seconds, written as a number or as a string with units: "90s", "15m", "1h30m", "2d"."""
    value = doc.get(key, default)
    seconds: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.replace(" ", "")
        parts = _DURATION_RE.findall(text)
        if parts and "".join(n + u for n, u in parts) == text:
            seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if seconds is None:
        c.error(path, f'must be a duration: seconds, or a string like "90s", "15m", "1h30m", not {value!r}')
        return default
    if not seconds >= minimum:
        c.error(path, f"must be at least {minimum:g} s, not {value!r}")
        return default
    return seconds


def _daemon_sections(
    c: _Checker,
    doc: dict,
    source: str,
    sink_types: Mapping[str, Callable[[dict[str, Any]], list[str]]] | None,
) -> dict[str, Any]:
    """[schedule], [alerts], [prometheus] and [daemon]: what only ``auditor daemon`` uses."""
    sch_keys = {"interval", "cron", "timezone", "jitter", "run_on_start", "misfire_grace"}
    sch = c.table(doc, "schedule", "schedule", sch_keys)
    cron = c.get(sch, "cron", "schedule.cron", str)
    timezone = c.get(sch, "timezone", "schedule.timezone", str)
    if "cron" in sch and "interval" in sch:
        c.error("schedule", "set either interval or cron, not both")
    interval: float | None = None
    if cron is None:
        interval = _duration(c, sch, "interval", "schedule.interval", ScheduleConfig.interval or 3600.0, 1.0)
    else:
        from apscheduler.triggers.cron import CronTrigger

        try:
            CronTrigger.from_crontab(cron)
        except ValueError as exc:
            c.error("schedule.cron", f"not a cron expression (minute hour day month weekday): {exc}")
    if timezone is not None:
        import zoneinfo

        try:
            zoneinfo.ZoneInfo(timezone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            c.error("schedule.timezone", f"unknown time zone {timezone!r} (e.g. 'UTC', 'Europe/Berlin')")
            timezone = None
    schedule = ScheduleConfig(
        interval=interval,
        cron=cron,
        timezone=timezone,
        jitter=_duration(c, sch, "jitter", "schedule.jitter", ScheduleConfig.jitter),
        run_on_start=c.get(sch, "run_on_start", "schedule.run_on_start", bool, ScheduleConfig.run_on_start),
        misfire_grace=_duration(
            c, sch, "misfire_grace", "schedule.misfire_grace", ScheduleConfig.misfire_grace, 1.0
        ),
    )

    al = c.table(doc, "alerts", "alerts", {"cooldown", "max_attempts", "sinks"})
    sinks: dict[str, SinkConfig] = {}
    for name, s in c.table(al, "sinks", "alerts.sinks").items():
        path = f"alerts.sinks.{name}"
        if not isinstance(s, dict):
            c.error(path, "must be a table with type = ... and the sink's options")
            continue
        if not NAME_RE.match(name):
            c.error(path, "sink names use letters, digits, '.', '_' and '-'")
        kind = c.get(s, "type", f"{path}.type", str, required=True)
        severity = c.get(s, "min_severity", f"{path}.min_severity", str, "info")
        if severity not in SEVERITIES:
            c.error(f"{path}.min_severity", f"must be one of {', '.join(SEVERITIES)}, not {severity!r}")
        options = {k: v for k, v in s.items() if k not in ("type", "min_severity")}
        if kind is not None and sink_types is not None:
            if kind not in sink_types:
                known = ", ".join(sorted(sink_types))
                c.error(f"{path}.type", f"unknown sink type {kind!r} (known: {known})")
            else:
                try:
                    problems = list(sink_types[kind](dict(options)))
                except Exception as exc:  # a plugin's validator is plugin code
                    problems = [f"the {kind} sink could not check its options: {type(exc).__name__}: {exc}"]
                for problem in problems:
                    # "KEY: message" names an option; anything else is about the whole sink.
                    key, sep, message = str(problem).partition(": ")
                    if sep and _OPTION_PATH_RE.match(key):
                        c.error(f"{path}.{key}", message)
                    else:
                        c.error(path, str(problem))
        if kind is not None:
            sinks[name] = SinkConfig(name, kind, severity if severity in SEVERITIES else "info", options)
    max_attempts = c.positive(al, "max_attempts", "alerts.max_attempts", int, AlertsConfig.max_attempts)
    alerts = AlertsConfig(
        cooldown=_duration(c, al, "cooldown", "alerts.cooldown", AlertsConfig.cooldown),
        max_attempts=max_attempts,
        sinks=sinks,
    )

    pr = c.table(doc, "prometheus", "prometheus", {"enabled", "address", "port"})
    port = c.get(pr, "port", "prometheus.port", int, PrometheusConfig.port)
    if not 0 <= port <= 65535:
        c.error("prometheus.port", f"must be a port number 0-65535 (0: any free port), not {port}")
        port = PrometheusConfig.port
    address = c.get(pr, "address", "prometheus.address", str, PrometheusConfig.address)
    if not address.strip():
        c.error("prometheus.address", "must be an address to listen on, e.g. '127.0.0.1' or '::1'")
    prometheus = PrometheusConfig(
        enabled=c.get(pr, "enabled", "prometheus.enabled", bool, PrometheusConfig.enabled),
        address=address,
        port=port,
    )

    dm = c.table(doc, "daemon", "daemon", {"state_dir", "stop_timeout"})
    state_dir = expand(c.get(dm, "state_dir", "daemon.state_dir", str, ""))
    daemon = DaemonConfig(
        state_dir=_relative_to(source, state_dir) if state_dir else "",
        stop_timeout=_duration(c, dm, "stop_timeout", "daemon.stop_timeout", DaemonConfig.stop_timeout),
    )
    return {"schedule": schedule, "alerts": alerts, "prometheus": prometheus, "daemon": daemon}


def read_document(path: str | Path) -> dict:
    """The parsed TOML of a config file, or ConfigError naming the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(str(path), ["file not found"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), [f"cannot read: {exc}"]) from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), [f"not valid TOML: {exc}"]) from None
    return doc


def plugin_dirs(doc: dict, source: str) -> list[str]:
    """``[plugins] dirs`` read before validation, which needs the plugins' probes and runtimes;
    malformed entries are left for parse() to report."""
    section = doc.get("plugins")
    dirs = section.get("dirs") if isinstance(section, dict) else None
    if not isinstance(dirs, list):
        return []
    return [_relative_to(source, expand(d)) for d in dirs if isinstance(d, str)]


def load(
    path: str | Path,
    known_probes: Mapping[str, Iterable[str]] | None = None,
    runtimes: Mapping[str, str] | None = None,
    probe_variants: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
) -> Config:
    return parse(read_document(path), str(path), known_probes, runtimes, probe_variants)
