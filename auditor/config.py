"""auditor.toml: one declarative schema drives validation, defaults, error messages,
``auditor config generate`` and ``auditor config schema``.

Each section is a frozen pydantic dataclass whose fields declare their type, finiteness,
range, default and description (the docstring under the field) once, with the field types of
auditor.schema. Every problem in a file is reported at once, each with its key path
(``stacks.lite20.runtime: unknown runtime 'lite' (known: ...)``), so a user fixes a broken
file in one pass. Checks that need more than one key or the plugins (runtimes, probes and
their parameters, variants, sink types, a cron that never fires) run after the per-key ones.

Adding a section: one ``@section`` class, a field of that type in ``Document`` and one in
``Config`` with the same name; parse() validates it with the others.
"""

import dataclasses
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic.dataclasses import dataclass as _pydantic_dataclass

from auditor import fleet_config
from auditor.compare import Tolerance
from auditor.model_config import GENERATORS, INPUT_DTYPES, InputSpec, ModelConfig
from auditor.paths import default_db_url
from auditor.schema import (
    DAY,
    MAX_BATCH,
    MAX_SEED,
    Bool,
    Choice,
    Duration,
    Float,
    Int,
    Scalar,
    Text,
    check_param,
    infer_param_spec,
    show,
    validate,
)

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
SEVERITIES = ("info", "warning", "error", "critical")
"""Finding and alert severities, least to most severe."""
DTYPES = ("float16", "bfloat16", "float32", "float64")


class ConfigError(Exception):
    """A config file that cannot be used; ``errors`` lists every problem with its key path."""

    def __init__(self, source: str, errors: list[str]):
        self.source = source
        self.errors = errors
        super().__init__(f"{source}: {len(errors)} problem(s)\n" + "\n".join(f"  {e}" for e in errors))


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


def _relative_to(source: str, path: str) -> str:
    """Relative paths in a config file are relative to the file's folder."""
    if os.path.isabs(path) or source.startswith("<"):
        return path
    return str(Path(source).resolve().parent / path)


def _expanded(value: str, info: ValidationInfo) -> str:
    return expand(value)


def _expanded_path(value: str, info: ValidationInfo) -> str:
    """$VAR and ~ expanded; a relative path is relative to the config file's folder."""
    out = expand(value)
    source = (info.context or {}).get("source", "<config>")
    return _relative_to(source, out) if out else out


def section(cls: type) -> Any:
    """A config section: a frozen pydantic dataclass that rejects unknown keys and takes each
    field's description from the docstring under it."""
    config = ConfigDict(extra="forbid", use_attribute_docstrings=True, arbitrary_types_allowed=True)
    return _pydantic_dataclass(frozen=True, config=config)(cls)


def _from_key(description: str) -> Any:
    """A field filled from the table's key (or its other keys), not written as a key itself."""
    return Field(description=description, json_schema_extra={"x-not-a-key": True})


# Reusable field types.
Tol = Float(0.0, 1e6)
"""A tolerance: beyond 1e6 a comparison can no longer fail, which is a typo, not a setting."""
Seconds = Duration
Name = Text(nonempty=True)
Expanded = Text(expand=_expanded)
RelativePath = Text(expand=_expanded_path)
AbsPath = Text(nonempty=True, pattern=r"/.*", what="an absolute path", expand=_expanded)
Command = Text(nonempty=True, what="a command name or path", expand=_expanded)


@section
class StackConfig:
    """``[stacks.NAME]``: one runtime environment, driven through a worker process."""

    name: Annotated[str, _from_key("The stack's name: the table's key.")]
    role: Choice(*ROLES)
    """train (builds and exports probes) or infer (loads the exported MindIR)."""
    runtime: Name
    """mindspore (PyNative, train), mindspore-graph (GraphCell over MindIR, infer), mindspore-lite
    (MindSpore Lite, infer), or a plugin's runtime."""
    python: Text(nonempty=True, what="the path of the stack's Python interpreter", expand=_expanded) = ""
    """The stack's Python interpreter ($VAR and ~ are expanded); required, except for a train
    stack with ``source = "db"``."""
    device: Text(pattern=DEVICE_RE.pattern[1:-1], what="'cpu', 'ascend:N' or 'gpu:N'") = "cpu"
    """cpu, ascend:N or gpu:N."""
    host: Name = "local"
    """Where the stack runs."""
    ascend_root: Expanded = "/usr/local/Ascend"
    """CANN toolkit / nnae / nnrt, driver and firmware are read under this folder."""
    env: dict[str, Expanded] = field(default_factory=dict)
    """Environment variables of the stack's worker ($VAR expanded)."""
    system_root: AbsPath = "/"
    """Where the stack's /etc is read from (fingerprints); a container's or a test tree's root."""
    npu_smi: Command = "npu-smi"
    """The npu-smi command (looked up on the worker's PATH) or its path."""
    npu_smi_timeout: Seconds(0.0, 3600.0, lo_open=True) = 10.0
    """Seconds one npu-smi call may take before its process group is killed."""
    models: tuple[Text(nonempty=True, what="a path or glob pattern", expand=_expanded_path), ...] = ()
    """Paths or glob patterns of the MindIR files the stack serves (the deployed-model watch;
    relative to the config file)."""
    source: Choice("local", "db") = "local"
    """local: driven through a worker here (or on its host); db (a train stack of another
    auditor sharing the history database): its latest complete publication stands in for it
    (split mode, README "A fleet")."""
    publish: tuple[Name, ...] = ()
    """Probes whose exports this train stack publishes in the history database every cycle,
    for inference-side auditors that cannot reach it (split mode)."""


@section
class HostConfig:
    """``[hosts.NAME]``: a machine other stacks live on, reached with the system OpenSSH client
    (``ssh``) or with any argv prefix that runs a command there (``command``); exactly one of
    the two is set. A stack on it names it with ``host = "NAME"``."""

    name: Annotated[str, _from_key("The host's name: the table's key.")]
    ssh: Text(nonempty=True, pattern=r"[^-\s]\S*", what="[user@]server without spaces") | None = None
    """``[user@]server`` for the OpenSSH client (an alias of ~/.ssh/config works too)."""
    port: Int(1, 65535) | None = None
    """The ssh port (default: ssh's own, 22 or ~/.ssh/config's)."""
    identity_file: Expanded | None = None
    """The private key ssh authenticates with (``-i``)."""
    options: tuple[Text(pattern=r"[A-Za-z][A-Za-z0-9]*[ =].+", what="an ssh option 'Name=value'"), ...] = ()
    """Extra ``-o`` options for ssh, e.g. ``"UserKnownHostsFile=/etc/auditor/known_hosts"``."""
    command: tuple[Text(nonempty=True), ...] = ()
    """An argv prefix that runs the rest of the argv on the host (``["kubectl", "exec", "-i",
    "pod", "--"]``, ``["docker", "exec", "-i", "box"]``)."""
    connect_timeout: Seconds(0.0, 3600.0, lo_open=True) = 10.0
    """Seconds ssh may take to connect and authenticate (``ConnectTimeout``)."""
    parallel: Int(1, 1024) | None = None
    """How many of this host's stacks are driven at once (default: ``[worker] parallel``)."""

    @property
    def transport(self) -> str:
        return "ssh" if self.ssh else "command"

    def describe(self) -> str:
        """The host as a person identifies it in a message: name and how it is reached."""
        if self.ssh:
            port = f" port {self.port}" if self.port else ""
            return f"host {self.name} (ssh {self.ssh}{port})"
        return f"host {self.name} (command {' '.join(self.command)})"


@section
class ModelInputTable:
    """``[[models.NAME.inputs]]``: one input of a model probe and how its values are made."""

    name: Name
    """The input's name."""
    shape: tuple[Int(1, MAX_BATCH * 4096), ...]
    """Its dimensions, each greater than 0 (the first is the batch)."""
    dtype: Choice(*INPUT_DTYPES) = "float32"
    """The input's dtype."""
    generator: Choice(*GENERATORS) | None = None
    """normal (mean, std), uniform (low, high) or npz (recorded observations); default: npz
    when ``npz`` is set, else normal. Seeded from the model's seed."""
    mean: Float(-1e30, 1e30) = 0.0
    std: Float(0.0, 1e30) = 1.0
    low: Float(-1e30, 1e30) = -1.0
    high: Float(-1e30, 1e30) = 1.0
    npz: RelativePath = ""
    """The .npz of recorded observations (generator = "npz"), relative to the config file."""
    key: Text() = ""
    """The array's name in the .npz (default: the input's name)."""


@section
class ModelOutputTable:
    """``[models.NAME.outputs.O]``: one output's thresholds."""

    atol: Tol | None = None
    rtol: Tol | None = None


@section
class ModelTable:
    """``[models.NAME]``: a user's exported MindIR audited like a probe (auditor.model_config)."""

    path: RelativePath
    """The exported .mindir (relative to the config file)."""
    stacks: tuple[Name, ...] | None = None
    """The stacks that serve it and are compared with the reference (default: every infer stack)."""
    reference: Name | None = None
    """A stack that runs the same file as the reference (e.g. ms210-graph); or set golden."""
    golden: RelativePath | None = None
    """A golden .npz of inputs and expected outputs (docs/golden.md); or set reference."""
    output_names: tuple[Name, ...] = ()
    """Names of the outputs (default: the golden's, else output0, output1, ...)."""
    seed: Int(0, MAX_SEED) = 0
    """Seed of the generated inputs."""
    atol: Tol = 1e-5
    rtol: Tol = 1e-5
    outputs: dict[str, ModelOutputTable] = field(default_factory=dict)
    """Per-output atol/rtol."""
    inputs: tuple[ModelInputTable, ...] = ()
    """The inputs (default: the file's own input signature, normal(0, 1), batch 1)."""


DTYPE_TOLERANCES: dict[str, dict[str, float]] = {
    "float16": {"atol": 1e-3, "rtol": 1e-3},
    "bfloat16": {"atol": 1e-2, "rtol": 1e-2},
}
"""Built-in element-wise thresholds of the low-precision dtypes, as if written in every probe's
``[probes.X.dtype.D]``. One fp16 ULP is at most 2**-10 (9.8e-4) of a normal value, so rtol 1e-3
passes a one-ULP difference, msProbe's acceptance for fp16; bf16's ULP is 2**-7 (7.8e-3).
Every other dtype starts from ``Tolerance()`` (1e-5, about 84 fp32 ULPs, Polygraphy's default)."""


@dataclasses.dataclass(frozen=True)
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


@dataclasses.dataclass(frozen=True)
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


@section
class OutputTable:
    """``outputs.O``: thresholds of one output."""

    atol: Tol | None = None
    """Absolute tolerance (0 or more)."""
    rtol: Tol | None = None
    """Relative tolerance (0 or more)."""


ComparatorTables = dict[str, dict[str, Scalar]]


@section
class ScopeTable:
    """``dtype.D`` or ``variant.V``: what that level sets, the rest inherited."""

    atol: Tol | None = None
    """Absolute tolerance at this level."""
    rtol: Tol | None = None
    """Relative tolerance at this level."""
    outputs: dict[str, OutputTable] = field(default_factory=dict)
    """Per-output atol/rtol at this level."""
    comparators: ComparatorTables = field(default_factory=dict)
    """Per-comparator options at this level."""


@section
class ProbeTable:
    """``[probes.NAME]``: a probe's thresholds, parameters and variants."""

    atol: Tol | None = None
    """Absolute tolerance of every output (default 1e-5)."""
    rtol: Tol | None = None
    """Relative tolerance of every output (default 1e-5)."""
    outputs: dict[str, OutputTable] = field(default_factory=dict)
    """Per-output atol/rtol."""
    params: dict[str, Any] = field(default_factory=dict)
    """Parameter overrides, checked against the probe's declared parameters (`auditor probes`)."""
    variants: tuple[Name, ...] = ()
    """The variants to run; empty: all the probe declares."""
    variant: dict[str, ScopeTable] = field(default_factory=dict)
    """Per-variant thresholds and comparator options."""
    dtype: dict[str, ScopeTable] = field(default_factory=dict)
    """Per-dtype thresholds and comparator options (float16, bfloat16, float32, float64)."""
    comparators: ComparatorTables = field(default_factory=dict)
    """Per-comparator options."""


@section
class PairConfig:
    """``[[pairs]]``: a train stack, an infer stack and the probes compared between them."""

    train: Name
    """The train stack's name."""
    infer: Name
    """The infer stack's name."""
    probes: tuple[Name, ...] = ()
    """The probes to run on this pair."""

    @property
    def name(self) -> str:
        return f"{self.train}->{self.infer}"


@section
class WorkerConfig:
    """``[worker]``: the stack worker processes."""

    start_timeout: Seconds(0.0, DAY, lo_open=True) = 120.0
    """Seconds for a stack's interpreter to import its runtime and answer."""
    request_timeout: Seconds(0.0, DAY, lo_open=True) = 120.0
    """Seconds for any one request (build, export, load, run, time)."""
    parallel: Int(1, 64) = 2
    """Stacks driven at the same time."""


@section
class LatencyConfig:
    """``[latency]``: timing of every loaded probe variant."""

    warmup: Int(0, 100_000) = 5
    """Untimed calls before measuring."""
    iterations: Int(1, 1_000_000) = 50
    """Timed calls; p50/p90/p99 are taken over these."""
    batches: tuple[Int(1, MAX_BATCH), ...] = (1, 256)
    """Batch sizes timed besides the probe's own (a probe takes part if it has a "batch" parameter)."""
    regression_factor: Float(1.0, 1000.0, lo_open=True) = 1.5
    """A latency-regression finding when p50 exceeds this factor of the rolling median."""
    regression_window: Int(1, 10_000) = 10
    """How many previous complete runs of the same stack, probe, variant, batch make the median."""
    regression_min_runs: Int(1, 10_000) = 3
    """No judgement before this many previous runs (at most regression_window)."""

    @field_validator("batches")
    @classmethod
    def _sorted(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(sorted(set(value)))


@section
class RolloutConfig:
    """``[rollout]``: closed-loop episodes of a probe's deterministic action (auditor.rollout)."""

    enabled: Bool = True
    """Run the rollouts."""
    env: Name = "Pendulum-v1"
    """A registered gymnasium environment id; "package.module:Name-v0" imports the module that
    registers it first (in the environment process, which steps it: the auditor never imports
    gymnasium)."""
    probe: Name = "ppo_policy"
    """The probe whose action drives the episodes."""
    variant: Name = "fp32"
    """The probe's variant."""
    seeds: tuple[Int(0, MAX_SEED), ...] = Field(default=(0, 1, 2), min_length=1)
    """One episode per seed."""
    steps: Int(0, 1_000_000) = 200
    """Steps per episode at most; 0: until the environment ends it (Pendulum-v1: 200)."""
    action_atol: Tol = 1e-5
    """Drift when |action_train - action_infer| exceeds this at any step."""
    return_atol: Tol = 0.1
    """Drift when an episode's returns differ by more than this."""
    pairs: tuple[Name, ...] = ()
    """Pairs ("train->infer") to roll out; empty: every pair that runs the probe."""


@section
class ScheduleConfig:
    """``[schedule]``: when ``auditor daemon`` runs cycles: every ``interval``, or on ``cron``."""

    interval: Seconds(1.0, 366 * DAY) | None = 3600.0
    """Time between cycles (not with cron)."""
    cron: Name | None = None
    """A crontab line (minute hour day month weekday) instead of interval."""
    timezone: Name | None = None
    """The cron's time zone, e.g. "UTC", "Europe/Berlin"; unset: the host's."""
    jitter: Seconds(0.0, DAY) = 0.0
    """Each cycle starts up to this much later, at random."""
    run_on_start: Bool = True
    """Run a cycle as soon as the daemon starts."""
    misfire_grace: Seconds(1.0, 7 * DAY) = 300.0
    """A cycle missed by less than this (e.g. the host slept) still runs."""


@section
class SinkConfig:
    """``[alerts.sinks.NAME]``: ``type`` and ``min_severity``; every other key is an option of
    the sink type, checked by its ``validate``."""

    name: Annotated[str, _from_key("The sink's name: the table's key.")]
    type: Name
    """The sink type: log, jsonl, webhook, exec, or a plugin's."""
    min_severity: Choice(*SEVERITIES) = "info"
    """Alerts below this severity are not sent to this sink."""
    options: dict[str, Any] = field(default_factory=dict)
    """The sink type's options: the table's other keys."""


@section
class AlertsConfig:
    """``[alerts]``: alerts from findings, sent to sinks."""

    cooldown: Seconds(0.0, 365 * DAY) = 21600.0
    """The same alert is not sent again within this time."""
    max_attempts: Int(1, 1000) = 5
    """Deliveries of one alert to one sink are tried this often."""
    sinks: dict[str, SinkConfig] = field(default_factory=dict)
    """The sinks, by name: type = "log" | "jsonl" | "webhook" | "exec" | a plugin's, and options."""


@section
class PrometheusConfig:
    """``[prometheus]``: the daemon's metrics endpoint."""

    enabled: Bool = False
    """Serve /metrics."""
    address: Text(nonempty=True, what="an address to listen on, e.g. '127.0.0.1' or '::1'") = "127.0.0.1"
    """The address to listen on."""
    port: Int(0, 65535) = 9731
    """The port (0: any free port)."""


@section
class DaemonConfig:
    """``[daemon]``: the daemon's state."""

    state_dir: RelativePath = ""
    """The daemon's lock and state; empty: ``auditor.paths.state_dir()``."""
    stop_timeout: Seconds(0.0, 3600.0) = 30.0
    """Seconds a running cycle may take to stop on SIGTERM."""


@section
class SecretsConfig:
    """``[secrets]``: what is redacted from fingerprints, logs, alerts and exports, besides the
    built-in rules (names with TOKEN, SECRET, PASSWORD, AUTH or KEY, ``--password=...`` options,
    URLs with credentials)."""

    names: tuple[Name, ...] = ()
    """More environment variable names to redact: shell patterns, case-insensitive ("*_CRED*")."""
    values: tuple[Name, ...] = ()
    """More values to redact: regular expressions, searched in every value."""


@section
class StorageTable:
    """``[storage]``: the history database."""

    url: Expanded = ""
    """SQLAlchemy URL of the history database; empty: SQLite at
    ${XDG_STATE_HOME:-~/.local/state}/auditor/history.db."""
    keep_days: Int(0, 36500) = 90
    """Runs older than this many days are deleted (0: keep forever); only this auditor's own
    runs (auditor_id) in a shared database."""
    auditor_id: Expanded = ""
    """This auditor's name in a shared history database (empty: the host name)."""


@section
class PluginsTable:
    """``[plugins]``: folders of plugin .py files."""

    dirs: tuple[Text(nonempty=True, what="a directory path", expand=_expanded_path), ...] = ()
    """Folders of plugin .py files (relative paths are relative to the config file)."""


class Document(BaseModel):
    """auditor.toml: every section, as written in the file (the JSON Schema's root)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, title="auditor.toml")

    storage: StorageTable = StorageTable()
    """The history database."""
    worker: WorkerConfig = WorkerConfig()
    """The stack worker processes."""
    latency: LatencyConfig = LatencyConfig()
    """Timing of every loaded probe variant."""
    rollout: RolloutConfig = RolloutConfig()
    """Closed-loop rollouts."""
    plugins: PluginsTable = PluginsTable()
    """Plugin folders."""
    secrets: SecretsConfig = SecretsConfig()
    """Extra redaction patterns."""
    hosts: dict[str, HostConfig] = Field(default_factory=dict)
    """The other machines stacks live on, by name."""
    stacks: dict[str, StackConfig] = Field(default_factory=dict)
    """The stacks, by name."""
    models: dict[str, ModelTable] = Field(default_factory=dict)
    """Users' own exported MindIR files audited like probes, by name."""
    pairs: list[PairConfig] = Field(default_factory=list)
    """Pairs of a train and an infer stack."""
    probes: dict[str, ProbeTable] = Field(default_factory=dict)
    """Per-probe settings, by probe name."""
    schedule: ScheduleConfig = ScheduleConfig()
    """When the daemon runs cycles."""
    alerts: AlertsConfig = AlertsConfig()
    """Alerts and their sinks."""
    prometheus: PrometheusConfig = PrometheusConfig()
    """The daemon's metrics endpoint."""
    daemon: DaemonConfig = DaemonConfig()
    """The daemon's state."""


SECTIONS = tuple(Document.model_fields)
SIMPLE_SECTIONS = ("worker", "latency", "rollout", "secrets", "schedule", "prometheus", "daemon")
"""Sections whose table is the Config attribute of the same name as it is."""


@dataclasses.dataclass(frozen=True)
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
    secrets: SecretsConfig = SecretsConfig()
    hosts: dict[str, HostConfig] = dataclasses.field(default_factory=dict)
    """[hosts.NAME] by name: the machines other than the auditor's own that stacks live on."""
    models: dict[str, ModelConfig] = dataclasses.field(default_factory=dict)
    """[models.NAME] by name: users' own MindIR files audited like probes."""
    auditor_id: str = ""
    """[storage] auditor_id: this auditor's name in a shared history (empty: the host name)."""
    fleet: fleet_config.FleetConfig = fleet_config.FleetConfig()
    """Split mode: [stacks.X] source = "db" and [stacks.X] publish (auditor.fleet_config)."""

    def probe(self, name: str) -> ProbeConfig:
        return self.probes.get(name, ProbeConfig(name))


# -- parse: per-key validation by the schema, then the checks that need more ------------------

_OPTION_PATH_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\[\]-]*$")


class _Parse:
    """One parse: the problems found so far and the validation context."""

    def __init__(self, doc: dict, source: str):
        self.doc = doc
        self.source = source
        self.errors: list[str] = []
        self.context = {"source": source}

    def error(self, path: str, message: str) -> None:
        line = f"{path}: {message}"
        if line not in self.errors:
            self.errors.append(line)

    def table(self, parent: Any, key: str, path: str) -> dict:
        value = parent.get(key, {}) if isinstance(parent, dict) else {}
        if not isinstance(value, dict):
            self.error(path, f"must be a table, not {show(value)}")
            return {}
        return value

    def entries(self, section: str) -> Iterator[tuple[str, str, dict]]:
        """(name, key path, table) of each ``[section.NAME]`` table; an entry that is not a
        table is reported and skipped."""
        for name, value in self.table(self.doc, section, section).items():
            path = f"{section}.{name}"
            if isinstance(value, dict):
                yield name, path, value
            else:
                self.error(path, f"must be a table, not {show(value)}")

    def check(self, cls: Any, value: Any, path: str) -> Any:
        return validate(cls, value, path, self.errors, self.context)

    def raw(self, section: str, key: str, kind: type, default: Any) -> Any:
        """A key as written, if it is of ``kind``: cross-key checks still run on the keys that
        are right when others in their section are wrong."""
        table = self.doc.get(section)
        value = table.get(key, default) if isinstance(table, dict) else default
        ok = isinstance(value, kind) and not (isinstance(value, bool) and kind is not bool)
        return value if ok else default


def _known(names: Iterable[str]) -> str:
    return ", ".join(sorted(names)) or "none"


def parse(
    doc: dict,
    source: str = "<config>",
    known_probes: Mapping[str, Iterable[str]] | None = None,
    runtimes: Mapping[str, str] | None = None,
    probe_variants: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
    sink_types: Mapping[str, Callable[[dict[str, Any]], list[str]]] | None = None,
    param_schemas: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
) -> Config:
    """Validate a parsed TOML document; raise ConfigError listing every problem.

    known_probes maps each probe name to its parameters (name -> default; a plain set of names
    skips the parameter check); None skips probe checks altogether. runtimes maps each runtime
    name to "export" or "load" (default: the built-in runtimes). probe_variants maps a probe
    name to its variants (name -> parameter overrides), to check variant names and params
    that a variant sets; a probe not in it skips those checks. sink_types maps each alert
    sink type to its ``validate(options)``; None skips the sink type and option checks.
    param_schemas maps a probe name to its parameters' declarations (``ProbeSpec.param_schema``);
    a probe not in it has its parameters' types inferred from the defaults in known_probes.
    """
    p = _Parse(doc, source)
    for unknown in sorted(set(doc) - set(SECTIONS)):
        p.error(unknown, f"unknown section (expected {', '.join(SECTIONS)})")

    simple = {}
    for name in SIMPLE_SECTIONS:
        cls = type(getattr(Config, name))
        simple[name] = p.check(cls, p.table(doc, name, name), name) or cls()
    storage = p.check(StorageTable, p.table(doc, "storage", "storage"), "storage") or StorageTable()
    plugins = p.check(PluginsTable, p.table(doc, "plugins", "plugins"), "plugins") or PluginsTable()

    stacks = _stacks(p, runtimes if runtimes is not None else RUNTIMES)
    hosts = _hosts(p, stacks)
    models = _models(p, stacks)
    fleet = fleet_config.parse(p, p.doc.get("stacks"), known_probes)
    probes = _probes(p, known_probes, probe_variants, param_schemas)
    pairs = _pairs(p, known_probes)
    _check_latency(p)
    _check_rollout(p, pairs, known_probes, probe_variants)
    simple["schedule"] = _check_schedule(p, simple["schedule"])
    _check_secrets(p)
    alerts = _alerts(p, sink_types)
    if p.errors:
        raise ConfigError(source, p.errors)
    return Config(
        source=source,
        db_url=storage.url or default_db_url(),
        stacks=stacks,
        pairs=tuple(pairs),
        probes=probes,
        plugin_dirs=tuple(plugins.dirs),
        alerts=alerts,
        keep_days=storage.keep_days,
        hosts=hosts,
        models=models,
        auditor_id=storage.auditor_id.strip(),
        fleet=fleet,
        **simple,
    )


def _stacks(p: _Parse, known_runtimes: Mapping[str, str]) -> dict[str, StackConfig]:
    stacks: dict[str, StackConfig] = {}
    for name, path, s in p.entries("stacks"):
        if not NAME_RE.match(name):
            p.error(path, "stack names use letters, digits, '.', '_' and '-'")
        stack = p.check(StackConfig, {**s, "name": name}, path)
        if s.get("source", "local") != "db" and "python" not in s:
            p.error(
                f"{path}.python",
                "is required: the stack's Python interpreter (a train stack of another auditor "
                'sharing the history database takes source = "db" instead)',
            )
        role, runtime = s.get("role"), s.get("runtime")
        if isinstance(runtime, str) and runtime and runtime not in known_runtimes:
            p.error(f"{path}.runtime", f"unknown runtime {runtime!r} (known: {_known(known_runtimes)})")
        elif isinstance(runtime, str) and runtime and role in ROLES:
            needed = "export" if role == "train" else "load"
            if known_runtimes[runtime] != needed:
                what = "build and export probes" if role == "train" else "load exported MindIR"
                p.error(f"{path}.runtime", f"runtime {runtime!r} cannot {what}, which a {role} stack must do")
        if stack is not None:
            stacks[name] = stack
    return stacks


def _hosts(p: _Parse, stacks: Mapping[str, StackConfig]) -> dict[str, HostConfig]:
    """[hosts.NAME] tables, and each stack's ``host`` naming ``local`` or one of them."""
    hosts: dict[str, HostConfig] = {}
    raw = p.table(p.doc, "hosts", "hosts")
    for name, path, h in p.entries("hosts"):
        if name == "local":
            p.error(path, "'local' is the auditor's own machine and needs no table; pick another name")
            continue
        if not NAME_RE.match(name):
            p.error(path, "host names use letters, digits, '.', '_' and '-'")
        if "ssh" in h and "command" in h:
            p.error(path, "set either ssh or command, not both")
            continue
        if "ssh" not in h and "command" not in h:
            p.error(path, 'set ssh = "user@server" or command = [argv prefix]')
            continue
        if "command" in h and h["command"] == []:
            p.error(f"{path}.command", "must name the program to run (e.g. ['docker', 'exec', '-i', 'box'])")
            continue
        if "command" in h and any(k in h for k in ("port", "identity_file", "options")):
            p.error(path, "port, identity_file and options belong to ssh hosts, not command hosts")
            continue
        host = p.check(HostConfig, {**h, "name": name}, path)
        if host is not None:
            hosts[name] = host
    for sname, s in stacks.items():
        if s.host != "local" and s.host not in hosts and s.host not in raw:
            p.error(f"stacks.{sname}.host", f"no [hosts.{s.host}] table (known hosts: {_known(raw)})")
    return hosts


def _models(p: _Parse, stacks: Mapping[str, StackConfig]) -> dict[str, ModelConfig]:
    """[models.NAME]: each table by the schema, then what needs the stacks and several keys."""
    infer = tuple(n for n, s in stacks.items() if s.role == "infer")
    out: dict[str, ModelConfig] = {}
    for name, path, raw in p.entries("models"):
        if "path" not in raw:
            p.error(f"{path}.path", "is required: the exported .mindir")
        if ("reference" in raw) == ("golden" in raw):
            p.error(path, "needs exactly one reference: reference = STACK, or golden = FILE.npz")
        for i, spec in enumerate(raw.get("inputs") or []):
            if not isinstance(spec, dict):
                continue
            if spec.get("generator", "npz" if "npz" in spec else "") == "npz" and not spec.get("npz"):
                p.error(
                    f"{path}.inputs[{i}].npz",
                    "is required with generator = 'npz': the .npz of recorded observations",
                )
            if spec.get("generator") == "uniform":
                low, high = spec.get("low", -1.0), spec.get("high", 1.0)
                if isinstance(low, int | float) and isinstance(high, int | float) and not low < high:
                    p.error(f"{path}.inputs[{i}].high", f"must be greater than low ({low}), not {high}")
        for key in ("stacks", "reference"):
            named = raw.get(key)
            for s in named if isinstance(named, list) else [named] if isinstance(named, str) else []:
                if isinstance(s, str) and s not in stacks:
                    p.error(f"{path}.{key}", f"no stack named {s!r} in [stacks]")
        table = p.check(ModelTable, {"path": "", **raw}, path)
        if table is None:
            continue
        served = table.stacks if table.stacks is not None else infer
        targets = tuple(s for s in served if s != table.reference)
        if not targets and table.path:
            p.error(f"{path}.stacks", "no stack to compare: name the stacks that serve the model")
        base = Tolerance(table.atol, table.rtol)
        out[name] = ModelConfig(
            name,
            table.path,
            targets,
            table.reference,
            table.golden,
            tuple(
                InputSpec(
                    i.name,
                    tuple(i.shape),
                    i.dtype,
                    i.generator or ("npz" if i.npz else "normal"),
                    i.mean,
                    i.std,
                    i.low,
                    i.high,
                    i.npz,
                    i.key,
                )
                for i in table.inputs
            ),
            table.output_names,
            table.seed,
            base,
            {
                o: Tolerance(
                    t.atol if t.atol is not None else base.atol, t.rtol if t.rtol is not None else base.rtol
                )
                for o, t in table.outputs.items()
            },
        )
    return out


def _scope(scope: ScopeTable) -> ThresholdScope:
    outputs = {
        out: {k: v for k, v in (("atol", t.atol), ("rtol", t.rtol)) if v is not None}
        for out, t in scope.outputs.items()
    }
    return ThresholdScope(scope.atol, scope.rtol, outputs, {k: dict(v) for k, v in scope.comparators.items()})


def _param_schema(
    name: str,
    known_probes: Mapping[str, Iterable[str]] | None,
    param_schemas: Mapping[str, Mapping[str, Mapping[str, Any]]] | None,
) -> Mapping[str, Mapping[str, Any]] | None:
    if param_schemas is not None and name in param_schemas:
        return param_schemas[name]
    if isinstance(known_probes, Mapping) and isinstance(known_probes.get(name), Mapping):
        return {k: infer_param_spec(v) for k, v in known_probes[name].items()}  # type: ignore[union-attr]
    return None


def _probes(
    p: _Parse,
    known_probes: Mapping[str, Iterable[str]] | None,
    probe_variants: Mapping[str, Mapping[str, Mapping[str, Any]]] | None,
    param_schemas: Mapping[str, Mapping[str, Mapping[str, Any]]] | None,
) -> dict[str, ProbeConfig]:
    probes: dict[str, ProbeConfig] = {}
    for name, raw in p.table(p.doc, "probes", "probes").items():
        path = f"probes.{name}"
        if not isinstance(raw, dict):
            p.error(path, f"must be a table, not {show(raw)}")
            continue
        if known_probes is not None and name not in known_probes:
            p.error(path, f"unknown probe (known: {_known(known_probes)})")
        if "variants" in raw and not isinstance(raw["variants"], list):
            p.error(
                f"{path}.variants",
                f"must be a list of variant names (per-variant thresholds go in [{path}.variant.NAME])",
            )
            raw = {k: v for k, v in raw.items() if k != "variants"}
        table = p.check(ProbeTable, raw, path)
        params = raw.get("params", {})
        params = params if isinstance(params, dict) else {}
        if isinstance(known_probes, Mapping) and name in known_probes:
            allowed = set(known_probes[name])
            for unknown in sorted(set(params) - allowed):
                p.error(
                    f"{path}.params.{unknown}",
                    f"probe {name} has no such parameter (known: {_known(allowed)})",
                )
        schema = _param_schema(name, known_probes, param_schemas)
        for key, value in params.items():
            if schema is not None and key in schema:
                for problem in check_param(schema[key], value, f"{path}.params.{key}"):
                    p.errors.append(problem)
        declared = (probe_variants or {}).get(name)
        if declared is not None:
            for j, v in enumerate(raw.get("variants", []) if isinstance(raw.get("variants"), list) else []):
                if isinstance(v, str) and v not in declared:
                    p.error(f"{path}.variants[{j}]", f"unknown variant {v!r} (known: {', '.join(declared)})")
            for v in p.table(raw, "variant", f"{path}.variant"):
                if v not in declared:
                    p.error(f"{path}.variant.{v}", f"unknown variant {v!r} (known: {', '.join(declared)})")
            for key in sorted(params):
                setters = [v for v, o in declared.items() if isinstance(o, Mapping) and key in o]
                if setters:
                    p.error(
                        f"{path}.params.{key}",
                        f"is set by the variant(s) {', '.join(setters)}; choose them with {path}.variants",
                    )
        for d in p.table(raw, "dtype", f"{path}.dtype"):
            if d not in DTYPES:
                p.error(f"{path}.dtype.{d}", f"unknown dtype {d!r} (known: {', '.join(DTYPES)})")
        if table is None:
            continue
        base = Tolerance(
            table.atol if table.atol is not None else Tolerance().atol,
            table.rtol if table.rtol is not None else Tolerance().rtol,
        )
        probes[name] = ProbeConfig(
            name,
            base,
            {
                out: Tolerance(
                    t.atol if t.atol is not None else base.atol, t.rtol if t.rtol is not None else base.rtol
                )
                for out, t in table.outputs.items()
            },
            dict(params),
            tuple(table.variants),
            {d: _scope(t) for d, t in table.dtype.items()},
            {v: _scope(t) for v, t in table.variant.items()},
            {k: dict(v) for k, v in table.comparators.items()},
        )
    return probes


def _pairs(p: _Parse, known_probes: Mapping[str, Iterable[str]] | None) -> list[PairConfig]:
    pairs: list[PairConfig] = []
    raw_pairs = p.doc.get("pairs", [])
    if not isinstance(raw_pairs, list):
        p.error("pairs", "must be an array of tables ([[pairs]])")
        raw_pairs = []
    stacks = p.doc.get("stacks")
    watched = isinstance(stacks, dict) and any(
        isinstance(s, dict) and s.get("models") for s in stacks.values()
    )
    publishing = isinstance(stacks, dict) and any(
        isinstance(s, dict) and s.get("publish") for s in stacks.values()
    )
    if not raw_pairs and not p.doc.get("models") and not watched and not publishing:
        p.error(
            "pairs",
            "no pairs configured: add at least one [[pairs]] with train, infer and probes "
            "(or a [models.NAME], or a stack's models = [...])",
        )
    raw_stacks = p.doc.get("stacks") if isinstance(p.doc.get("stacks"), dict) else {}
    seen: set[tuple[str, str]] = set()
    for i, raw in enumerate(raw_pairs):
        path = f"pairs[{i}]"
        if not isinstance(raw, dict):
            p.error(path, f"must be a table, not {show(raw)}")
            continue
        pair = p.check(PairConfig, raw, path)
        for role in ROLES:
            side = raw.get(role)
            if not isinstance(side, str) or not side:
                continue
            stack = raw_stacks.get(side)
            if stack is None:
                p.error(
                    f"{path}.{role}", f"no stack named {side!r} in [stacks] (stacks: {_known(raw_stacks)})"
                )
            elif isinstance(stack, dict) and stack.get("role") in ROLES and stack.get("role") != role:
                p.error(f"{path}.{role}", f"stack {side!r} has role {stack.get('role')!r}, not {role!r}")
        names = raw.get("probes", [])
        if isinstance(names, list) and not names:
            p.error(f"{path}.probes", "list at least one probe")
        for j, n in enumerate(names if isinstance(names, list) else []):
            if isinstance(n, str) and known_probes is not None and n not in known_probes:
                p.error(f"{path}.probes[{j}]", f"unknown probe {n!r} (known: {_known(known_probes)})")
        if pair is not None:
            if (pair.train, pair.infer) in seen:
                p.error(path, f"pair {pair.train} -> {pair.infer} is listed twice")
            seen.add((pair.train, pair.infer))
            pairs.append(pair)
    return pairs


def _check_latency(p: _Parse) -> None:
    window = p.raw("latency", "regression_window", int, LatencyConfig.regression_window)
    min_runs = p.raw("latency", "regression_min_runs", int, LatencyConfig.regression_min_runs)
    if 1 <= window < min_runs:
        p.error(
            "latency.regression_min_runs", f"must be at most regression_window ({window}), not {min_runs}"
        )


_ENV_KNOWN: set[str] = set()


def env_problem(env_id: str) -> str | None:
    """Why gymnasium cannot make ``env_id`` (not registered, with close matches; its module not
    importable), asked of a short-lived child (once per process for a good id): the daemon never imports
    gymnasium (auditor.env_process). None when it can, or when the child cannot tell (gymnasium
    missing, the child failing): the cycle's rollout then reports it."""
    if env_id in _ENV_KNOWN:
        return None
    from auditor.env_process import EnvError, EnvProcess

    try:
        with EnvProcess() as envs:
            problem = envs.problem(env_id)
    except EnvError:
        return None
    if problem is None:  # a problem is asked again: the user may be fixing it (reload)
        _ENV_KNOWN.add(env_id)
    return problem


def _check_rollout(
    p: _Parse,
    pairs: list[PairConfig],
    known_probes: Mapping[str, Iterable[str]] | None,
    probe_variants: Mapping[str, Mapping[str, Mapping[str, Any]]] | None,
) -> None:
    raw = p.doc.get("rollout") if isinstance(p.doc.get("rollout"), dict) else {}
    probe = p.raw("rollout", "probe", str, RolloutConfig.probe)
    variant = p.raw("rollout", "variant", str, RolloutConfig.variant)
    env = p.raw("rollout", "env", str, RolloutConfig.env)
    if "probe" in raw and known_probes is not None and probe not in known_probes:
        p.error("rollout.probe", f"unknown probe {probe!r} (known: {_known(known_probes)})")
    declared = (probe_variants or {}).get(probe)
    if declared is not None and variant not in declared:
        p.error(
            "rollout.variant", f"unknown variant {variant!r} of probe {probe} (known: {', '.join(declared)})"
        )
    problem = env_problem(env) if "env" in raw and env else None
    if problem is not None:
        p.error("rollout.env", problem)
    names = {pair.name: pair for pair in pairs}
    for i, name in enumerate(raw.get("pairs", []) if isinstance(raw.get("pairs"), list) else []):
        if not isinstance(name, str):
            continue
        if name not in names:
            p.error(f"rollout.pairs[{i}]", f"no pair {name!r} (pairs: {', '.join(names) or 'none'})")
        elif probe not in names[name].probes:
            p.error(f"rollout.pairs[{i}]", f"pair {name} does not run probe {probe!r}")


def _check_schedule(p: _Parse, schedule: ScheduleConfig) -> ScheduleConfig:
    """Interval or cron, a known time zone, and a cron that fires: the daemon never starts with a
    schedule under which no cycle would ever run."""
    raw = p.doc.get("schedule") if isinstance(p.doc.get("schedule"), dict) else {}
    if "cron" in raw and "interval" in raw:
        p.error("schedule", "set either interval or cron, not both")
    tz = None
    timezone = p.raw("schedule", "timezone", str, None)
    if timezone:
        import zoneinfo

        try:
            tz = zoneinfo.ZoneInfo(timezone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError, TypeError):
            p.error("schedule.timezone", f"unknown time zone {timezone!r} (e.g. 'UTC', 'Europe/Berlin')")
    cron = p.raw("schedule", "cron", str, None)
    if not cron:
        return schedule
    from datetime import UTC, datetime

    from auditor.daemon import cron_trigger

    try:
        trigger = cron_trigger(cron, tz or UTC)
        first = trigger.get_next_fire_time(None, datetime.now(UTC))
    except (ValueError, KeyError, IndexError, TypeError, OverflowError) as exc:
        p.error("schedule.cron", f"not a cron expression (minute hour day month weekday): {exc}")
    else:
        if first is None:
            p.error("schedule.cron", f"{cron!r} never fires (no date matches it), so no cycle would run")
    return dataclasses.replace(schedule, interval=None)


def _check_secrets(p: _Parse) -> None:
    for i, pattern in enumerate(p.raw("secrets", "values", list, [])):
        if isinstance(pattern, str):
            try:
                re.compile(pattern)
            except re.error as exc:
                p.error(f"secrets.values[{i}]", f"not a regular expression: {exc}")


def _alerts(
    p: _Parse, sink_types: Mapping[str, Callable[[dict[str, Any]], list[str]]] | None
) -> AlertsConfig:
    raw = p.table(p.doc, "alerts", "alerts")
    alerts = p.check(AlertsConfig, {k: v for k, v in raw.items() if k != "sinks"}, "alerts") or AlertsConfig()
    sinks: dict[str, SinkConfig] = {}
    for name, s in p.table(raw, "sinks", "alerts.sinks").items():
        path = f"alerts.sinks.{name}"
        if not isinstance(s, dict):
            p.error(path, "must be a table with type = ... and the sink's options")
            continue
        if not NAME_RE.match(name):
            p.error(path, "sink names use letters, digits, '.', '_' and '-'")
        options = {k: v for k, v in s.items() if k not in ("type", "min_severity")}
        own = {k: s[k] for k in ("type", "min_severity") if k in s}
        sink = p.check(SinkConfig, {"name": name, **own, "options": options}, path)
        kind = s.get("type")
        if isinstance(kind, str) and kind and sink_types is not None:
            if kind not in sink_types:
                p.error(f"{path}.type", f"unknown sink type {kind!r} (known: {_known(sink_types)})")
            else:
                try:
                    problems = list(sink_types[kind](dict(options)))
                except Exception as exc:  # a plugin's validator is plugin code
                    problems = [f"the {kind} sink could not check its options: {type(exc).__name__}: {exc}"]
                for problem in problems:
                    # "KEY: message" names an option; anything else is about the whole sink.
                    key, sep, message = str(problem).partition(": ")
                    if sep and _OPTION_PATH_RE.match(key):
                        p.error(f"{path}.{key}", message)
                    else:
                        p.error(path, str(problem))
        if sink is not None:
            sinks[name] = sink
    return dataclasses.replace(alerts, sinks=sinks)


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
    **checks: Any,
) -> Config:
    """The config file at ``path``; ``checks`` are parse()'s sink_types and param_schemas."""
    return parse(read_document(path), str(path), known_probes, runtimes, probe_variants, **checks)
