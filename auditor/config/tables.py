"""The tables of auditor.toml as typed, frozen sections (one pydantic dataclass per table,
each field's description the docstring under it), the parsed ``Config`` they make, and the
vocabulary they share (roles, severities, dtypes, ``expand``). auditor.config.load fills them
and runs the checks that need more than one key; auditor.config.doc turns them into JSON
Schema and a commented example."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic.dataclasses import dataclass as _pydantic_dataclass

from auditor.common.redact import redact_argv
from auditor.compare.presets import TRAINERS
from auditor.config import fleet as fleet_config
from auditor.config.fields import (
    DAY,
    MAX_BATCH,
    MAX_SEED,
    Bool,
    Choice,
    Duration,
    Float,
    Int,
    Numbers,
    Scalar,
    Text,
)
from auditor.config.thresholds import ProbeConfig
from auditor.config.user_models import (
    GENERATORS,
    INPUT_DTYPES,
    MODEL_CHANGE_SEVERITY,
    MODEL_CLASSES,
    ModelConfig,
)
from auditor.worker import files
from auditor.worker.npu_metrics import DEFAULT_VIEWS, VIEWS

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


class UnsetVariable(ValueError):
    """A value names an environment variable that is not set (or empty) and gives no default:
    expanding it to "" would quietly turn ``${STACKS}/ms20/bin/python`` into ``/ms20/bin/python``."""

    def __init__(self, name: str, written: str):
        self.name = name
        super().__init__(
            f"{written} uses ${{{name}}}, which is not set in the auditor's environment; set it, or give "
            f"a default: ${{{name}:-default}} (${{{name}:-}} for an empty one)"
        )


def _expand_vars(value: str, env: Mapping[str, str], written: str = "") -> str:
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
                out.append(_expand_vars(default, env, written or value))
            else:
                raise UnsetVariable(name, repr(written or value))
            i = j + 1
        elif value[i] == "$" and (m := _NAME_RE.match(value, i + 1)):
            if not env.get(m.group(0)):
                raise UnsetVariable(m.group(0), repr(written or value))
            out.append(env[m.group(0)])
            i = m.end()
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


def expand(value: str, env: Mapping[str, str] | None = None) -> str:
    """Expand ``$VAR``, ``${VAR}`` and ``${VAR:-default}`` (defaults may nest), then a leading ``~``.

    One pass: the value of a variable is used as it is, never expanded again. A variable that
    is unset or empty and has no default raises UnsetVariable (a ValueError naming it).
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


def _expanded_option(value: str, info: ValidationInfo) -> str:
    """An ssh option ``Name=value`` (or ``Name value``) with $VAR and a leading ``~`` of its
    value expanded here, as every other path of the config is: ssh would expand ``~`` with the
    account's home, not ``$HOME``."""
    m = re.fullmatch(r"([A-Za-z][A-Za-z0-9]*)([ =]\s*)(.*)", value, re.DOTALL)
    return f"{m.group(1)}{m.group(2)}{expand(m.group(3))}" if m else value  # else: the pattern says why


def section(cls: type) -> Any:
    """A config section: a frozen pydantic dataclass that rejects unknown keys and takes each
    field's description from the docstring under it."""
    config = ConfigDict(extra="forbid", use_attribute_docstrings=True, arbitrary_types_allowed=True)
    return _pydantic_dataclass(frozen=True, config=config)(cls)


def _from_key(description: str) -> Any:
    """A field filled from the table's key (or its other keys), not written as a key itself."""
    return Field(description=description, json_schema_extra={"x-not-a-key": True})


COMMAND_SHOWN = 48
"""A host's command prefix is said up to this many characters in messages (all of it in the config)."""

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
class ConvertTable:
    """``[stacks.NAME.convert]`` (a MindSpore Lite stack) or ``[models.NAME.convert]``: the
    MindSpore Lite conversion the deployment runs before it serves a model. Each cycle converts
    the train side's export (or the model's file) with exactly these options in the serving
    stack, records the converted artifact (digest, format, options, the converter's version)
    and audits the converted model (auditor.policy.convert)."""

    optimize: Choice("none", "general", "ascend_oriented") = "general"
    """The converter's graph optimization: none, general (CPU) or ascend_oriented (needs CANN on
    the serving host)."""
    weight_fp16: Bool = False
    """Store float32 weights as float16 (in a .ms; no effect on a mindir)."""
    input_shape: dict[str, tuple[Int(1, MAX_BATCH * 4096), ...]] = field(default_factory=dict)
    """Input name -> shape to convert for (the converter ignores names that match no input)."""
    input_data_type: Choice("float32", "int8", "uint8") = "float32"
    """The converted model's input data type."""
    output_data_type: Choice("float32", "int8", "uint8") = "float32"
    """The converted model's output data type."""
    save_type: Choice("ms", "mindir") = "ms"
    """ms: a MindSpore Lite model (.ms, what Lite serves fastest); mindir: a converted MindIR."""
    config_file: RelativePath | None = None
    """A converter config file (sections such as [common_quant_param]; relative to the config
    file), read here and handed to the converter with every conversion."""
    served: dict[str, Text(nonempty=True)] = field(default_factory=dict)
    """Converted files the stack serves -> the MindIR each was converted from, both paths on the
    stack's host: each cycle converts the source again with these options and compares."""

    def options(self) -> dict[str, Any]:
        """The options as the worker's converter takes them (auditor.plugins.runtimes.lite.converter)."""
        return {
            "optimize": self.optimize,
            "weight_fp16": self.weight_fp16,
            "input_shape": {k: list(v) for k, v in self.input_shape.items()},
            "input_data_type": self.input_data_type,
            "output_data_type": self.output_data_type,
            "save_type": self.save_type,
        }

    def describe(self) -> str:
        """The options in a few words: "ms, optimize general, weight_fp16"."""
        words = [self.save_type, f"optimize {self.optimize}"]
        if self.weight_fp16:
            words.append("weight_fp16")
        if self.input_shape:
            words.append("input_shape " + ", ".join(f"{k}={list(v)}" for k, v in self.input_shape.items()))
        for key in ("input_data_type", "output_data_type"):
            if getattr(self, key) != "float32":
                words.append(f"{key} {getattr(self, key)}")
        if self.config_file:
            words.append(f"config {os.path.basename(self.config_file)}")
        return ", ".join(words)


@section
class StackConfig:
    """``[stacks.NAME]``: one runtime environment, driven through a worker process."""

    name: Annotated[str, _from_key("The stack's name: the table's key.")]
    role: Choice(*ROLES)
    """train (builds and exports probes) or infer (loads the exported model)."""
    runtime: Name
    """A runtime a plugin registers (``auditor plugins`` lists them), e.g. mindspore (PyNative,
    train) or mindspore-lite (infer); a train stack exports the format its pair's infer runtime
    loads."""
    python: Text(nonempty=True, what="the path of the stack's Python interpreter", expand=_expanded) = ""
    """The stack's Python interpreter ($VAR and ~ are expanded); required, except for a train
    stack with ``source = "db"``."""
    device: Text(pattern=DEVICE_RE.pattern[1:-1], what="'cpu', 'ascend:N' or 'gpu:N'") = "cpu"
    """cpu, ascend:N or gpu:N."""
    host: Name = "local"
    """Where the stack runs."""
    group: Name | None = None
    """A ``[groups.NAME]``: one stack per member host instead, named ``NAME@HOST`` (expanded
    before the config is checked; on a member, the group it is one of)."""
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
    model_drift_severity: dict[Choice(*MODEL_CHANGE_SEVERITY), Choice(*SEVERITIES)] = field(
        default_factory=dict
    )
    """The severity of each kind of change of a served file (default: graph and unreadable
    error, added info, the others warning), e.g. ``{ retrained = "info", graph = "critical" }``;
    an error or critical finding makes the run's exit status 1."""
    source: Choice("local", "db") = "local"
    """local: driven through a worker here (or on its host); db (a train stack of another
    auditor sharing the history database): its latest complete publication stands in for it
    (split mode, docs/hosts.md, "A fleet")."""
    publish: tuple[Name, ...] = ()
    """Probes whose exports this train stack publishes in the history database every cycle,
    for inference-side auditors that cannot reach it (split mode)."""
    convert: ConvertTable | None = None
    """A MindSpore Lite stack only: the conversion its deployment runs on every model it serves
    (``[stacks.NAME.convert]``)."""
    max_publication_age: Seconds(0.0, 366 * DAY, lo_open=True) | None = None
    """With source = "db": how old its newest complete publication may be ("1h", "2d"). An
    older one is still compared, but the run is not called consistent: it says the
    publication is stale (unset: any age is accepted; a missing publication always counts)."""


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
    options: tuple[
        Text(
            pattern=r"[A-Za-z][A-Za-z0-9]*[ =].+", what="an ssh option 'Name=value'", expand=_expanded_option
        ),
        ...,
    ] = ()
    """Extra ``-o`` options for ssh, e.g. ``"UserKnownHostsFile=/etc/auditor/known_hosts"`` ($VAR
    and a leading ``~`` of the value are expanded)."""
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
        said = " ".join(redact_argv(self.command))  # a token in a prefix is never shown
        if len(said) > COMMAND_SHOWN:  # a wrapper script inline: its first words name it
            said = said[:COMMAND_SHOWN].rsplit(" ", 1)[0] + " …"
        return f"host {self.name} (command {said})"


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
class ModelTrainTable:
    """``[models.NAME] train``: how training builds the policy, so that each cycle builds it in
    PyNative on a train stack and compares every serving stack's outputs with it."""

    factory: Text(
        nonempty=True,
        pattern=r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+:[A-Za-z_][\w]*",
        what="'package.module:function' (the factory inside a package, so its code can travel to the stack)",
    )
    """The function that builds the network (``mindspore.nn.Cell``), importable on the train stack."""
    checkpoint: RelativePath = ""
    """The .ckpt loaded into the network (relative to the config file); empty: the factory sets
    the weights itself."""
    stack: Name | None = None
    """The train stack that builds it (default: the config's only train stack)."""
    path: RelativePath = ""
    """The folder holding the factory's package, when the auditor's own Python cannot import it
    (relative to the config file); the package travels to the stack like the auditor's probes."""
    kwargs: dict[str, Scalar] = field(default_factory=dict)
    """Keyword arguments of the factory."""


@section
class ModelPolicyTable:
    """``[models.NAME] policy``: the model is a policy; which outputs make its action distribution,
    so that PPO's importance ratios under the serving side's policy are judged
    (docs/reading-the-report.md, "In PPO terms")."""

    kind: Choice("gaussian", "tanh", "categorical")
    """gaussian: a diagonal Gaussian (mean and std or log_std); tanh: the same, its actions squashed
    by tanh; categorical: logits over discrete actions."""
    mean: Name | None = None
    """The output holding the Gaussian's mean (gaussian, tanh)."""
    std: Name | None = None
    """The output holding its standard deviation (or set log_std)."""
    log_std: Name | None = None
    """The output holding its log standard deviation (or set std)."""
    logits: Name | None = None
    """The output holding the logits (categorical)."""
    logp: Name | None = None
    """The output holding the model's own log-probability of the actions in ``actions`` (set
    both): the importance ratios are then scored by the models themselves on actions drawn from
    the serving side, what a trainer computes, and not from the distributions' parameters."""
    actions: Name | None = None
    """The input holding the actions ``logp`` scores (set with logp)."""
    samples_per_state: Int(1, 1024) = 4
    """Actions drawn from the serving side's policy per state (input row)."""
    trainer: Choice(*TRAINERS) | None = None
    """The trainer correction this model's verdict judges by (default: ``[ppo] trainer``)."""
    max_removed_share: Float(0.0, 1.0) | None = None
    """The share that correction may remove (default: ``[ppo] max_removed_share``)."""
    clip_epsilon: Float(0.0, 1.0, lo_open=True) = 0.2
    """PPO's clip range: a sample with |w - 1| above it is clipped."""
    tis_cap: Float(1.0, 1e6, lo_open=True) = 2.0
    """Truncated importance sampling's cap C: a sample with w above it is truncated."""
    max_ppo_clip_share: Float(0.0, 1.0) = 0.0
    """The share of samples the stacks alone may make PPO clip."""
    max_tis_share: Float(0.0, 1.0) = 0.0
    """The share of samples the stacks alone may make truncated importance sampling truncate."""
    min_ess: Float(0.0, 1.0) | None = None
    """The lowest effective sample size (sum w)^2 / (n sum w^2) of the samples allowed (default
    0.9995, the importance_ratios comparator's; its sampled episodes' default is 0.99)."""


@section
class ModelRolloutTable:
    """``[models.NAME.rollout]``: closed-loop episodes of the model on a gymnasium environment,
    the reference side (the training network or the reference stack) against each serving
    stack, from the same seeds (auditor.policy.model_rollout)."""

    env: Name
    """A registered gymnasium id ("Pendulum-v1"), "package.module:Name-v0" (the module
    registers it), or "package.module:function" returning your own ``gymnasium.Env``. It runs
    in the auditor's environment process, not on a stack."""
    path: RelativePath = ""
    """The folder holding the environment's package, when the auditor's Python cannot import it
    (relative to the config file)."""
    enabled: Bool = True
    """Run the episodes (``[rollout] enabled`` is the built-in probe's)."""
    episodes: Int(1, 1000) = 3
    """Episodes, seeded seed, seed + 1, ..."""
    max_steps: Int(0, 1_000_000) = 200
    """Steps per episode at most; 0: until the environment ends it."""
    seed: Int(0, MAX_SEED) = 0
    """The first episode's seed."""
    action: Name | None = None
    """The output that is the action (default: the policy's mean, else the first output)."""
    observation: Name | None = None
    """The input the observation goes to (default: the first); other inputs keep their
    generated values."""
    obs_scale: Numbers() = (1.0,)
    """The model gets obs_scale * observation + obs_offset (a number, or one per value)."""
    obs_offset: Numbers() = (0.0,)
    action_scale: Numbers() = (1.0,)
    """The environment gets action_scale * action + action_offset, clipped to its bounds."""
    action_offset: Numbers() = (0.0,)
    mode: Choice("deterministic", "sampled") | None = None
    """deterministic or sampled (needs a ``policy``); default: ``[rollout] mode`` for a policy."""
    action_atol: Tol | None = None
    """Drift when the sides' actions differ by more at a step (default: ``[rollout] action_atol``)."""
    return_atol: Tol | None = None
    """Drift when an episode's returns differ by more (default: ``[rollout] return_atol``)."""


@section
class ModelOutputTable:
    """``[models.NAME.outputs.O]``: one output's thresholds."""

    atol: Tol | None = None
    rtol: Tol | None = None


@section
class ModelTable:
    """``[models.NAME]``: a user's exported MindIR audited like a probe (auditor.config.user_models)."""

    path: RelativePath
    """The exported .mindir (relative to the config file)."""
    stacks: tuple[Name, ...] | None = None
    """The stacks that serve it and are compared with the reference (default: every infer stack)."""
    reference: Name | None = None
    """A stack that runs the same file as the reference (e.g. ms210-graph); or set golden or train."""
    golden: RelativePath | None = None
    """A golden .npz of inputs and expected outputs (docs/golden.md); or set reference or train."""
    train: ModelTrainTable | None = None
    """The training network as the reference: built by its factory in PyNative on a train stack,
    its checkpoint loaded; or set reference or golden."""
    output_names: tuple[Name, ...] = ()
    """Names of the outputs (default: the golden's, else output0, output1, ...)."""
    seed: Int(0, MAX_SEED) = 0
    """Seed of the generated inputs."""
    atol: Tol | None = None
    """Absolute tolerance of every output (default 1e-5; a file that computes in float16 inside
    is judged with the float16 thresholds, 1e-3, unless this is set)."""
    rtol: Tol | None = None
    """Relative tolerance of every output (default 1e-5, as atol)."""
    outputs: dict[str, ModelOutputTable] = field(default_factory=dict)
    """Per-output atol/rtol."""
    inputs: tuple[ModelInputTable, ...] = ()
    """The inputs (default: the file's own input signature, normal(0, 1), batch 1)."""
    convert: ConvertTable | None = None
    """The MindSpore Lite conversion the serving stacks run on the file before serving it
    (they must be mindspore-lite stacks); replaces theirs for this model."""
    policy: ModelPolicyTable | None = None
    """The model is a policy: the outputs of its action distribution (importance ratios)."""
    rollout: ModelRolloutTable | None = None
    """Closed-loop episodes of the model on an environment, reference against each serving stack."""
    input_classes: tuple[Choice(*MODEL_CLASSES), ...] | None = None
    """The input classes run besides the model's own inputs (sweep, magnitude, fp16-edge,
    nan-inf); default: all that apply (fp16-edge where the file computes in float16 or takes
    float16). [] runs none."""
    class_input: Name | None = None
    """The input the classes vary (default: the rollout's observation, else the first float input)."""
    nan_hazard: Bool = True
    """A NaN input row that comes out finite is a finding; false for a graph that maps NaN on
    purpose (a Select on IsNan)."""


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
    trainer: Choice(*TRAINERS) | None = None
    """The trainer correction this pair's importance ratios are judged by (default: ``[ppo]
    trainer``)."""

    @property
    def name(self) -> str:
        return f"{self.train}->{self.infer}"


@section
class PpoConfig:
    """``[ppo]``: the trainer whose terms the importance-ratio verdicts use (docs/checks.md,
    "Trainer presets"), for every policy and sampled rollout; a pair (``[[pairs]] trainer``) or
    a model (``[models.NAME] policy.trainer``) may choose its own."""

    trainer: Choice(*TRAINERS) = "ppo"
    """"ppo": PPO's own terms (the clip share at clip_epsilon, the truncation share at tis_cap,
    the ESS); or a trainer's rollout correction (verl_token_tis, verl_seq_rs, verl_geo_rs,
    verl_k3_rs, trl_seq_mask, openrlhf_icepop, skyrl_geo_mask, nemo_seq_logprob_error), judged
    by the share of samples (episodes, for a sequence-level one) it would remove."""
    max_removed_share: Float(0.0, 1.0) = 0.0
    """The share the trainer's correction may remove: 0, since two stacks computing one policy
    should leave nothing for it to correct."""

    def options(self, trainer: str | None = None) -> dict[str, Any]:
        """The importance_ratios options these settings give (``trainer``: a pair's own)."""
        return {"trainer": trainer or self.trainer, "max_removed_share": self.max_removed_share}


@section
class WorkerConfig:
    """``[worker]``: the stack worker processes."""

    start_timeout: Seconds(0.0, DAY, lo_open=True) = 120.0
    """Seconds for a stack's interpreter to import its runtime and answer."""
    request_timeout: Seconds(0.0, DAY, lo_open=True) = 120.0
    """Seconds for any one request (build, export, load, run, time)."""
    parallel: Int(1, 64) = 2
    """Stacks driven at the same time."""
    max_hosts: Int(1, 4096) | None = None
    """Hosts with workers at any one time in a cycle (``audit``, the daemon; Ansible's
    ``forks``): the hosts of the stacks every pair or model needs (train stacks, references)
    are held for the whole cycle; each of the others (a group's serving hosts) is audited on
    its own, the next one started the moment one is done (its workers, warm zygote and ssh
    connection ended); ``hosts check`` keeps to it too. Unset: every host at once."""
    warm: Choice("cycle", "daemon", "off") = "cycle"
    """Warm workers: each local stack's interpreter imports its runtime once (a zygote) and every
    worker is a fresh process forked from it. "cycle": zygotes live for one cycle or command;
    "daemon": ``auditor daemon`` keeps them between cycles (memory stated in its log and in
    Prometheus; a reload or a stack whose fingerprint changed starts fresh ones); "off": every
    worker starts its interpreter cold."""


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
    regression_spread: Float(0.0, 1000.0) = 3.0
    """A regression must also exceed the median by this many run-to-run spreads: the series'
    own (1.4826 × the median absolute deviation of its window's p50s) or the host's this run
    (the same over every judged series' move), whichever is wider, after the whole host's
    slowdown is divided out. A runtime whose p50 jumps between processes (MindSpore 2.10
    PyNative: 4, 8, 12 or 16 ms on a 2-core machine) or a busy box does not trip it. 0: the
    factor alone decides."""
    regression_confirm: Int(1, 100) = 2
    """How many runs in a row (this one included) must each be a regression against the runs
    before them: one run's p50 on a shared machine is one sample, while a step change stays
    (measured, bench/fleet.py: 64 members timed on one 2-core box put 11 of 128 series over the
    limit in one cycle; with 2, at most 2 in any of 6 cycles). 1: the run alone decides."""
    regression_sides: tuple[Choice("train", "infer"), ...] = ("infer",)
    """Which sides are judged: the serving side by default (what a policy server sees); the
    train side's eager mode is noisy and is not what production runs."""
    sweep: tuple[Int(1, MAX_BATCH), ...] = ()
    """Batch sizes the serving (infer) side is timed at besides ``batches``, to find the batch
    at which its throughput saturates (each needs one more export and load per probe variant;
    empty: no sweep)."""
    saturation: Float(0.0, 1.0, lo_open=True) = 0.9
    """The saturation batch: the smallest timed batch whose throughput (samples/s) reaches this
    share of the highest one."""

    @field_validator("batches", "sweep")
    @classmethod
    def _sorted(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(sorted(set(value)))


@section
class RolloutConfig:
    """``[rollout]``: closed-loop episodes of a probe's action, deterministic or sampled
    (auditor.policy.rollout)."""

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
    mode: Choice("deterministic", "sampled") = "deterministic"
    """deterministic: each side acts with its policy's deterministic action; sampled: each side
    draws its action from its policy with the same seeded noise, as PPO collects data, and
    the infer side's visited states and actions are scored by both models in one batch each
    (the episode's importance weights: the probe must be a policy, auditor.compare.ratios)."""
    clip_epsilon: Float(0.0, 1.0, lo_open=True) = 0.2
    """sampled: PPO's clip range for the share of steps the stacks alone would clip."""
    max_ppo_clip_share: Float(0.0, 1.0) = 0.0
    """sampled: drift when an episode has a larger share of steps beyond the clip range."""
    min_ess: Float(0.0, 1.0) = 0.99
    """sampled: drift when an episode's effective sample size of its steps is below this."""


@section
class LimitTable:
    """``[telemetry.thresholds.METRIC]``: a finding (and an alert) of the highest severity whose
    limit the value reaches (value >= limit); unset levels are not checked."""

    warning: Float(-1e30, 1e30) | None = None
    """A warning at or above this value."""
    error: Float(-1e30, 1e30) | None = None
    """An error at or above this value."""
    critical: Float(-1e30, 1e30) | None = None
    """A critical finding at or above this value."""

    def severity(self, value: float) -> tuple[str, float] | None:
        """The most severe level ``value`` reaches, with its limit; None below every limit."""
        for level in ("critical", "error", "warning"):
            limit = getattr(self, level)
            if limit is not None and value >= limit:
                return level, limit
        return None


DEFAULT_LIMITS = {
    "health": LimitTable(warning=1, error=2, critical=3),
    "temperature_c": LimitTable(warning=85),
    "ecc_hbm_double_bit": LimitTable(error=1),
    "ecc_ddr_double_bit": LimitTable(error=1),
}
"""Limits that hold unless ``[telemetry.thresholds.METRIC]`` replaces them: any health word
worse than OK, a chip at 85 °C, any uncorrectable (double-bit) ECC error."""


@section
class TelemetryConfig:
    """``[telemetry]``: NPU power, temperature, memory/HBM use, utilisation, ECC counts and health
    of every host's NPUs, read with npu-smi through one of the host's stacks, stored as series
    and judged against thresholds (auditor.cycle.telemetry)."""

    enabled: Bool = True
    """Sample every host's NPUs in each cycle (a host without npu-smi records nothing and says
    so once)."""
    interval: Seconds(0.0, DAY) = 0.0
    """``auditor daemon``: also sample every this many seconds between cycles (0: only in
    cycles). Thresholds are judged at each cycle on the worst value since the previous one."""
    views: tuple[Choice(*VIEWS), ...] = DEFAULT_VIEWS
    """The ``npu-smi info -t VIEW -i N`` views read per NPU (one call each)."""
    thresholds: dict[str, LimitTable] = field(default_factory=dict)
    """Limits per metric, replacing the default ones for that metric (health >= 1 warning,
    >= 2 error, >= 3 critical; temperature_c >= 85 warning; ecc_*_double_bit >= 1 error)."""

    def limits(self) -> dict[str, LimitTable]:
        """The limits in force: the defaults, each replaced by the configured table of its metric."""
        return {**DEFAULT_LIMITS, **self.thresholds}


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
class QueueConfig:
    """``[queue]``: auditors on one PostgreSQL history share each cycle's serving hosts through
    a job queue (procrastinate; auditor.queue): a cycle is deferred once for all of them, each
    serving host is a job any of them takes, and a job whose auditor stopped beating is taken
    by another. Every auditor runs its own train stacks."""

    enabled: Bool = False
    """Share the serving hosts (a group's members; not the train stacks' hosts) with the other
    auditors of the same ``pool`` on this database (PostgreSQL only)."""
    pool: Name = "fleet"
    """Auditors with the same pool split the same hosts; another pool on the same database
    (another team's fleet) is another queue."""
    claim: Int(1, 4096) = 4
    """Serving hosts this auditor works on at any time (with ``[worker] max_hosts``, at most
    max_hosts minus the held hosts)."""
    heartbeat: Seconds(1.0, 3600.0) = 10.0
    """How often this auditor tells the database it is alive while it works (in the database's
    own time)."""
    timeout: Seconds(3.0, DAY) = 60.0
    """An auditor whose last heartbeat is older than this (by the database's clock) has
    stalled: the hosts it holds go to the auditors still in the cycle. At least three
    heartbeats."""
    wait: Seconds(0.0, 366 * DAY) | None = None
    """Once no host is left to take, how long to wait for the hosts other auditors still work
    on (to take over those whose auditor stalls); unset: until the schedule's next cycle is
    due (an hour for a manual or named cycle)."""

    @model_validator(mode="after")
    def _beats(self) -> QueueConfig:
        if self.timeout < 3 * self.heartbeat:
            raise ValueError(
                f"timeout ({self.timeout:g} s) must be at least three heartbeats "
                f"(3 x {self.heartbeat:g} s): one late beat must not lose a live auditor's hosts"
            )
        return self


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


ALERT_CATEGORIES = ("models", "compatibility", "version-drift", "stacks", "latency", "probes", "devices")
"""What a finding is about, for ``[alerts] on`` (auditor.alerts.engine.category): your own
models and plugin probes; a stack that cannot load or run an export, and the compatibility
rules; a changed fingerprint or served model file; a stack that could not run; a serving-side
latency regression; the built-in probes' own results (drift, invariants, NaN/Inf hazards,
rollouts, golden baselines); the NPUs' telemetry against its thresholds."""


@section
class AlertsConfig:
    """``[alerts]``: alerts from findings, sent to sinks."""

    cooldown: Seconds(0.0, 365 * DAY) = 21600.0
    """The same alert is not sent again within this time."""
    max_attempts: Int(1, 1000) = 5
    """Deliveries of one alert to one sink are tried this often."""
    sink_budget: Seconds(0.0, DAY, lo_open=True) = 120.0
    """Seconds one sink may take in one delivery round (after a cycle): a sink that answers but
    slowly sends what it can within them, and the rest waits for the next round, so it never
    holds up the other sinks or the next cycle. A webhook attempt also has its own deadline."""
    on: tuple[Choice(*ALERT_CATEGORIES), ...] = (
        "models",
        "compatibility",
        "version-drift",
        "stacks",
        "devices",
    )
    """The findings that open alerts, by what they are about: models, compatibility,
    version-drift, stacks, latency, probes (the built-in probes), devices (NPU telemetry). Every
    finding is recorded with its run either way (`auditor show RUN`). Latency is not on by
    default: timings move with the machine's load, and a regression is a finding in every
    report; add "latency" once a few weeks of history show its noise on your hosts."""
    min_severity: Choice(*SEVERITIES) = "warning"
    """Findings below this severity open no alert."""
    open_after: Int(1, 1000) = 2
    """An alert opens once its finding was seen in this many complete runs in a row (1: at once);
    a changed fingerprint or served file, and a critical finding, open at once."""
    resolve_after: Int(1, 1000) = 2
    """An open alert resolves after this many complete runs in a row that checked it without its
    finding."""
    sinks: dict[str, SinkConfig] = field(default_factory=dict)
    """The sinks, by name: type = "log" | "jsonl" | "webhook" | "exec" | "alertmanager" | a
    plugin's, and options."""


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
    """The daemon's lock and state; empty: ``auditor.common.paths.state_dir()``."""
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
class FilesConfig:
    """``[files]``: how much of a model, golden, recorded-input or served MindIR file the
    auditor reads, and for how long (auditor.worker.files)."""

    max_size_mb: Int(1, 1024 * 1024) = files.DEFAULT_MAX_MB
    """Largest file read, in MiB (default 2048: protobuf cannot make a MindIR larger; a larger
    path is a mistake, stopped before it fills memory)."""
    read_timeout: Seconds(0.0, DAY, lo_open=True) = files.DEFAULT_TIMEOUT
    """Seconds one file may take to read (a hung network mount fails that file only)."""

    @property
    def limits(self) -> files.Limits:
        return files.Limits(self.max_size_mb * files.MIB, self.read_timeout)


MAX_KEEP_DAYS = 36500
"""A century: more is a typo (and overflows a date)."""


@section
class StorageTable:
    """``[storage]``: the history database."""

    url: Expanded = ""
    """SQLAlchemy URL of the history database; empty: SQLite at
    ${XDG_STATE_HOME:-~/.local/state}/auditor/history.db."""
    keep_days: Int(0, MAX_KEEP_DAYS) = 90
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
    telemetry: TelemetryConfig = TelemetryConfig()
    """NPU telemetry: series, thresholds, the daemon's sampling schedule."""
    plugins: PluginsTable = PluginsTable()
    """Plugin folders."""
    secrets: SecretsConfig = SecretsConfig()
    """Extra redaction patterns."""
    files: FilesConfig = FilesConfig()
    """Size and time limits of every file read."""
    hosts: dict[str, HostConfig] = Field(default_factory=dict)
    """The other machines stacks live on, by name."""
    groups: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Host groups, by name: ``hosts = ["infer-[01:12]", ...]`` (Ansible-style ranges), or
    ``inventory = "FILE"`` and ``group = "..."`` (an Ansible INI inventory's group), and any key of
    ``[hosts.NAME]`` with ``{host}`` substituted; a stack with ``group = "NAME"`` is one stack
    per member, ``NAME@HOST`` (auditor.config.groups)."""
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
    queue: QueueConfig = QueueConfig()
    """Auditors sharing a fleet's hosts through a job queue in the history database."""
    ppo: PpoConfig = PpoConfig()
    """The trainer whose terms the importance-ratio verdicts use."""


SECTIONS = tuple(Document.model_fields)


SIMPLE_SECTIONS = (
    "worker",
    "latency",
    "rollout",
    "telemetry",
    "secrets",
    "files",
    "schedule",
    "prometheus",
    "daemon",
    "queue",
    "ppo",
)
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
    telemetry: TelemetryConfig = TelemetryConfig()
    plugin_dirs: tuple[str, ...] = ()
    schedule: ScheduleConfig = ScheduleConfig()
    alerts: AlertsConfig = AlertsConfig()
    prometheus: PrometheusConfig = PrometheusConfig()
    daemon: DaemonConfig = DaemonConfig()
    queue: QueueConfig = QueueConfig()
    ppo: PpoConfig = PpoConfig()
    keep_days: int = 90
    """[storage] keep_days: runs older than this many days are deleted (0: keep forever)."""
    secrets: SecretsConfig = SecretsConfig()
    files: FilesConfig = FilesConfig()
    """[files]: size and time limits of every model, golden, input and served file read."""
    hosts: dict[str, HostConfig] = dataclasses.field(default_factory=dict)
    """[hosts.NAME] by name: the machines other than the auditor's own that stacks live on."""
    models: dict[str, ModelConfig] = dataclasses.field(default_factory=dict)
    """[models.NAME] by name: users' own MindIR files audited like probes."""
    auditor_id: str = ""
    """[storage] auditor_id: this auditor's name in a shared history (empty: the host name)."""
    fleet: fleet_config.FleetConfig = fleet_config.FleetConfig()
    """Split mode: [stacks.X] source = "db" and [stacks.X] publish (auditor.config.fleet)."""

    def probe(self, name: str) -> ProbeConfig:
        return self.probes.get(name, ProbeConfig(name))
