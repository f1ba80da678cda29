"""auditor.toml: one declarative schema drives validation, defaults, error messages,
``auditor config generate`` and ``auditor config schema``.

Each section is a frozen pydantic dataclass whose fields declare their type, finiteness,
range, default and description (the docstring under the field) once, with the field types of
auditor.config.fields. Every problem in a file is reported at once, each with its key path
(``stacks.lite20.runtime: unknown runtime 'lite' (known: ...)``), so a user fixes a broken
file in one pass. Checks that need more than one key or the plugins (runtimes, probes and
their parameters, variants, sink types, a cron that never fires) run after the per-key ones.

Adding a section: one ``@section`` class, a field of that type in ``Document`` and one in
``Config`` with the same name; parse() validates it with the others.
"""

import dataclasses
import re
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from auditor.common.paths import default_db_url
from auditor.compare.verdicts import Tolerance
from auditor.config import fleet as fleet_config
from auditor.config import groups
from auditor.config.fields import (
    check_param,
    infer_param_spec,
    show,
    validate,
)
from auditor.config.schedule import cron_trigger
from auditor.config.tables import (
    DTYPES,
    NAME_RE,
    ROLES,
    SECTIONS,
    SIMPLE_SECTIONS,
    AlertsConfig,
    Config,
    ConfigError,
    HostConfig,
    LatencyConfig,
    ModelTable,
    ModelTrainTable,
    PairConfig,
    PluginsTable,
    ProbeTable,
    RolloutConfig,
    ScheduleConfig,
    ScopeTable,
    SinkConfig,
    StackConfig,
    StorageTable,
    TelemetryConfig,
    UnsetVariable,
    _relative_to,
    expand,
)
from auditor.config.thresholds import ProbeConfig, ThresholdScope
from auditor.config.user_models import InputSpec, ModelConfig, ModelRollout, TrainNetwork
from auditor.db import url as db_url
from auditor.runtime import MINDIR, RuntimeSpec
from auditor.worker.npu_metrics import METRICS

# -- parse: per-key validation by the schema, then the checks that need more ------------------

_OPTION_PATH_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\[\]-]*$")


class _Parse:
    """One parse: the problems found so far and the validation context."""

    def __init__(self, doc: dict, source: str):
        self.doc = doc
        self.source = source
        self.errors: list[str] = []
        self.context = {"source": source}
        self.host_groups: dict[str, str] = {}
        """Host -> the [groups.NAME] it came from (auditor.config.groups.expand)."""

    def error(self, path: str, message: str) -> None:
        line = f"{path}: {message}"
        if line not in self.errors:
            self.errors.append(line)

    def said(self) -> list[str]:
        """The problems on the keys as written (``written``), each once."""
        out: list[str] = []
        for line in self.errors:
            path, sep, message = line.partition(": ")
            shown = f"{self.written(path)}{sep}{message}" if sep else line
            if shown not in out:
                out.append(shown)
        return out

    def written(self, path: str) -> str:
        """The key as the user wrote it: a group's member host or stack (``hosts.infer-01.x``,
        ``stacks.lite20@infer-01.x``) is its group's table (``groups.infer.x``,
        ``stacks.lite20.x``), so a problem of the group is one line, not one per member."""
        section, _, rest = path.partition(".")
        name, dot, key = rest.partition(".")
        if section == "hosts" and name in self.host_groups:
            return f"groups.{self.host_groups[name]}{dot}{key}"
        if section == "stacks" and groups.SEP in name:
            return f"stacks.{name.partition(groups.SEP)[0]}{dot}{key}"
        return path

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
    runtimes: Mapping[str, RuntimeSpec] | None = None,
    probe_variants: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
    sink_types: Mapping[str, Callable[[dict[str, Any]], list[str]]] | None = None,
    param_schemas: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
    env_problem: Callable[..., str | None] | None = None,
) -> Config:
    """Validate a parsed TOML document; raise ConfigError listing every problem.

    known_probes maps each probe name to its parameters (name -> default; a plain set of names
    skips the parameter check); None skips probe checks altogether. runtimes maps each runtime
    name to its spec (the plugins'), to check stacks' runtimes and that each pair's train
    runtime exports the format its infer runtime loads; None skips those checks. probe_variants maps a probe
    name to its variants (name -> parameter overrides), to check variant names and params
    that a variant sets; a probe not in it skips those checks. sink_types maps each alert
    sink type to its ``validate(options)``; None skips the sink type and option checks.
    param_schemas maps a probe name to its parameters' declarations (``ProbeSpec.param_schema``);
    a probe not in it has its parameters' types inferred from the defaults in known_probes.
    env_problem says why a gymnasium environment id cannot be made (None: it can); without it
    ``[rollout] env`` is not checked (auditor.policy.env_process.env_problem asks a child).
    """
    p = _Parse(doc, source)
    folder = str(Path(source).resolve().parent) if source else "."
    # [groups.NAME]: ordinary hosts, stacks, pairs (their problems said on the group's keys)
    doc = p.doc = groups.expand(doc, p.error, folder, p.host_groups)
    for unknown in sorted(set(doc) - set(SECTIONS)):
        if unknown == "leases":
            p.error(unknown, RETIRED_LEASES)
            continue
        p.error(unknown, f"unknown section (expected {', '.join(SECTIONS)})")

    simple = {}
    for name in SIMPLE_SECTIONS:
        cls = type(getattr(Config, name))
        simple[name] = p.check(cls, p.table(doc, name, name), name) or cls()
    storage = p.check(StorageTable, p.table(doc, "storage", "storage"), "storage") or StorageTable()
    if storage.url:
        try:
            db_url.parse(storage.url)
        except ValueError as exc:
            p.error("storage.url", f"{exc}; an SQLite file is written sqlite:////absolute/path/history.db")
    if simple["queue"].enabled and storage.url and not _is_postgres(storage.url):
        p.error(
            "queue.enabled",
            "the job queue lives in a PostgreSQL history; [storage] url is not PostgreSQL "
            "(one auditor on SQLite needs no queue: set enabled = false)",
        )
    plugins = p.check(PluginsTable, p.table(doc, "plugins", "plugins"), "plugins") or PluginsTable()

    stacks = _stacks(p, runtimes)
    hosts = _hosts(p, stacks)
    models = _models(p, stacks, runtimes, env_problem)
    fleet = fleet_config.parse(p, p.doc.get("stacks"), known_probes)
    probes = _probes(p, known_probes, probe_variants, param_schemas)
    pairs = _pairs(p, known_probes, runtimes)
    _check_latency(p)
    _check_telemetry(p, simple["telemetry"])
    _check_rollout(p, pairs, known_probes, probe_variants, env_problem)
    simple["schedule"] = _check_schedule(p, simple["schedule"])
    _check_secrets(p)
    alerts = _alerts(p, sink_types)
    if p.errors:
        raise ConfigError(source, p.said())
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


RETIRED_LEASES = (
    "[leases] was replaced by [queue] (a job queue in the PostgreSQL history): rename the table; "
    "enabled, pool and claim mean what they meant; slot is gone (every cycle is its own: a "
    "scheduled one, or auditor audit --cycle LABEL), expire is [queue] timeout"
)


def _is_postgres(url: str) -> bool:
    try:
        return db_url.is_postgres(db_url.parse(url))
    except ValueError:
        return True  # said at storage.url already


def _stacks(p: _Parse, known_runtimes: Mapping[str, RuntimeSpec] | None) -> dict[str, StackConfig]:
    stacks: dict[str, StackConfig] = {}
    for name, path, s in p.entries("stacks"):
        base, _, member = name.partition(groups.SEP)
        if not NAME_RE.match(base) or (member and not NAME_RE.match(member)):
            p.error(path, "stack names use letters, digits, '.', '_' and '-'")
        stack = p.check(StackConfig, {**s, "name": name}, path)
        if s.get("source", "local") != "db" and "python" not in s:
            p.error(
                f"{path}.python",
                "is required: the stack's Python interpreter (a train stack of another auditor "
                'sharing the history database takes source = "db" instead)',
            )
        role, runtime = s.get("role"), s.get("runtime")
        if known_runtimes is None or not isinstance(runtime, str) or not runtime:
            pass
        elif runtime not in known_runtimes:
            p.error(f"{path}.runtime", f"unknown runtime {runtime!r} (known: {_known(known_runtimes)})")
        elif role in ROLES:
            needed = "export" if role == "train" else "load"
            if known_runtimes[runtime].can != needed:
                what = "build and export probes" if role == "train" else "load exported models"
                p.error(f"{path}.runtime", f"runtime {runtime!r} cannot {what}, which a {role} stack must do")
        if "convert" in s and runtime != "mindspore-lite":
            p.error(
                f"{path}.convert", f"only a mindspore-lite stack converts models (this one runs {runtime!r})"
            )
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


def _models(
    p: _Parse,
    stacks: Mapping[str, StackConfig],
    runtimes: Mapping[str, RuntimeSpec] | None,
    env_problem: Callable[..., str | None] | None = None,
) -> dict[str, ModelConfig]:
    """[models.NAME]: each table by the schema, then what needs the stacks and several keys.
    A model is a MindIR: the stacks that serve it by default are the infer stacks whose
    runtime loads MindIR."""

    def other_format(stack: str) -> str | None:
        spec = runtimes.get(stacks[stack].runtime) if runtimes is not None and stack in stacks else None
        return spec.loads.title if spec is not None and spec.loads.name != MINDIR.name else None

    infer = tuple(n for n, s in stacks.items() if s.role == "infer" and other_format(n) is None)
    out: dict[str, ModelConfig] = {}
    for name, path, raw in p.entries("models"):
        if "path" not in raw:
            p.error(f"{path}.path", "is required: the exported .mindir")
        if sum(k in raw for k in ("reference", "golden", "train")) != 1:
            p.error(
                path,
                "needs exactly one reference: reference = STACK, golden = FILE.npz, or train = "
                '{ factory = "package.module:function", checkpoint = FILE.ckpt }',
            )
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
                elif isinstance(s, str) and stacks[s].role != "infer":  # refused now, not after a start
                    p.error(
                        f"{path}.{key}",
                        f"{s} runs {stacks[s].runtime}, a train runtime that does not load a MindIR; "
                        f"name a stack that does: {', '.join(infer) or 'none in [stacks]'}",
                    )
                elif isinstance(s, str) and other_format(s) is not None:
                    p.error(
                        f"{path}.{key}",
                        f"stack {s!r} ({stacks[s].runtime}) loads {other_format(s)} files, not the MindIR "
                        "a [models.NAME] audits",
                    )
        table = p.check(ModelTable, {"path": "", **raw}, path)
        if table is None:
            continue
        train = _train_network(p, f"{path}.train", table.train, stacks)
        served = table.stacks if table.stacks is not None else infer
        targets = tuple(s for s in served if s != table.reference)
        if table.train is not None and train is None:
            continue
        if not targets and table.path:
            p.error(f"{path}.stacks", "no stack to compare: name the stacks that serve the model")
        if table.convert is not None:
            other = [s for s in targets if s in stacks and stacks[s].runtime != "mindspore-lite"]
            if other:
                p.error(
                    f"{path}.convert",
                    f"only mindspore-lite stacks convert models; {', '.join(other)} serve(s) it too "
                    "(name the Lite stacks in stacks = [...])",
                )
        policy = _policy(p, f"{path}.policy", table)
        named = [i.name for i in table.inputs]
        if table.class_input is not None and named and table.class_input not in named:
            p.error(
                f"{path}.class_input",
                f"{table.class_input!r} is not an input of the model (inputs: {', '.join(named)})",
            )
        base = Tolerance(
            table.atol if table.atol is not None else Tolerance().atol,
            table.rtol if table.rtol is not None else Tolerance().rtol,
        )
        chosen = {"": table.atol is not None or table.rtol is not None}
        chosen.update({o: t.atol is not None or t.rtol is not None for o, t in table.outputs.items()})
        out[name] = ModelConfig(
            name,
            table.path,
            targets,
            table.reference,
            table.golden,
            train,
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
            frozenset(o for o, v in chosen.items() if v),
            table.convert,
            policy,
            _model_rollout(p, f"{path}.rollout", table, env_problem),
            table.input_classes,
            table.class_input,
            table.nan_hazard,
        )
    return out


def _model_rollout(
    p: _Parse, path: str, table: ModelTable, env_problem: Callable[..., str | None] | None
) -> ModelRollout | None:
    """``[models.NAME.rollout]``: what its environment, its policy and its names allow."""
    r = table.rollout
    if r is None or not r.enabled:
        return None
    policy = table.policy
    if r.mode == "sampled" and policy is None:
        p.error(
            f"{path}.mode",
            "sampled episodes draw actions from the model's policy: declare it, "
            'policy = { kind = "gaussian" (or "tanh"), mean = ..., std = ... } or '
            '{ kind = "categorical", logits = ... }',
        )
    if r.action is not None and table.output_names and r.action not in table.output_names:
        p.error(
            f"{path}.action",
            f"{r.action!r} is not an output of the model (output_names: {', '.join(table.output_names)})",
        )
    names = [i.name for i in table.inputs]
    if r.observation is not None and names and r.observation not in names:
        p.error(
            f"{path}.observation",
            f"{r.observation!r} is not an input of the model (inputs: {', '.join(names)})",
        )
    problem = env_problem(r.env, r.path) if env_problem is not None else None
    if problem is not None:
        p.error(f"{path}.env", problem)
    return ModelRollout(
        r.env,
        r.path,
        r.episodes,
        r.max_steps,
        r.seed,
        r.action,
        r.observation,
        tuple(r.obs_scale),
        tuple(r.obs_offset),
        tuple(r.action_scale),
        tuple(r.action_offset),
        r.mode,
        r.action_atol,
        r.return_atol,
    )


def _policy(p: _Parse, path: str, table: ModelTable) -> dict[str, Any] | None:
    """``[models.NAME] policy`` as the importance_ratios comparator's options: the outputs its
    kind needs, each one of ``output_names`` where those are given (else the run says it)."""
    policy = table.policy
    if policy is None:
        return None
    if policy.kind == "categorical":
        needed = {"logits": policy.logits}
        extra = [k for k in ("mean", "std", "log_std") if getattr(policy, k) is not None]
    else:
        needed = {"mean": policy.mean}
        if (policy.std is None) == (policy.log_std is None):
            p.error(f"{path}.std", f"a {policy.kind} policy names its std output: set std or log_std (one)")
        needed.update({k: getattr(policy, k) for k in ("std", "log_std") if getattr(policy, k) is not None})
        extra = ["logits"] if policy.logits is not None else []
    for key in extra:
        p.error(f"{path}.{key}", f"a {policy.kind} policy has no {key} (kind = {policy.kind!r})")
    if (policy.logp is None) != (policy.actions is None):
        p.error(
            f"{path}.{'actions' if policy.actions is None else 'logp'}",
            "the model's own log-probability names both its output (logp) and the input of the "
            "actions it scores (actions)",
        )
    if policy.logp is not None:
        needed["logp"] = policy.logp
    names = [spec.name for spec in table.inputs]
    if policy.actions is not None and names and policy.actions not in names:
        p.error(
            f"{path}.actions", f"{policy.actions!r} is not an input of the model (inputs: {', '.join(names)})"
        )
    for key, output in needed.items():
        if output is None:
            p.error(f"{path}.{key}", f"a {policy.kind} policy names its {key} output: set {key}")
        elif table.output_names and output not in table.output_names:
            p.error(
                f"{path}.{key}",
                f"{output!r} is not an output of the model (output_names: {', '.join(table.output_names)})",
            )
    options = {k: v for k, v in dataclasses.asdict(policy).items() if v is not None}
    return options


def _train_network(
    p: _Parse, path: str, table: ModelTrainTable | None, stacks: Mapping[str, StackConfig]
) -> TrainNetwork | None:
    """``[models.NAME] train``: its stack (default: the only train stack) must be a train stack
    the auditor drives."""
    if table is None:
        return None
    trains = [n for n, s in stacks.items() if s.role == "train" and s.source == "local"]
    name = table.stack
    if name is None:
        if len(trains) != 1:
            p.error(
                f"{path}.stack",
                "is required: name the train stack that builds the network"
                + (f" (train stacks: {', '.join(trains)})" if trains else " (the config has no train stack)"),
            )
            return None
        name = trains[0]
    if name not in trains:
        p.error(
            f"{path}.stack",
            f"{name!r} is not a train stack the auditor drives (train stacks: {', '.join(trains) or 'none'})",
        )
        return None
    # Where its package is (train.path, the auditor's Python path, or only the stack's own
    # environment) is the model's business at each cycle: a factory that cannot be imported is
    # an error of that model only.
    return TrainNetwork(name, table.factory, table.checkpoint, table.path, dict(table.kwargs))


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


def _spec_of(raw_stack: Any, runtimes: Mapping[str, RuntimeSpec] | None) -> RuntimeSpec | None:
    name = raw_stack.get("runtime") if isinstance(raw_stack, dict) else None
    return runtimes.get(name) if runtimes is not None and isinstance(name, str) else None


def _pairs(
    p: _Parse, known_probes: Mapping[str, Iterable[str]] | None, runtimes: Mapping[str, RuntimeSpec] | None
) -> list[PairConfig]:
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
        train, infer = (  # a side that is not a name was said above; only names are looked up
            _spec_of(raw_stacks.get(side) if isinstance(side := raw.get(role), str) else None, runtimes)
            for role in ("train", "infer")
        )
        if (
            train is not None
            and infer is not None
            and (train.can, infer.can) == ("export", "load")
            and infer.loads.name not in train.exports
        ):
            p.error(
                path,
                f"{raw['infer']} ({infer.name}) loads {infer.loads.title} files, which "
                f"{raw['train']} ({train.name}) cannot export (it exports: {', '.join(train.exports)})",
            )
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


def _check_telemetry(p: _Parse, telemetry: TelemetryConfig) -> None:
    """Threshold tables name known metrics, and their levels do not decrease."""
    for metric, limits in telemetry.thresholds.items():
        path = f"telemetry.thresholds.{metric}"
        if metric not in METRICS:
            p.error(path, f"unknown telemetry metric (known: {_known(METRICS)})")
            continue
        levels = [(n, getattr(limits, n)) for n in ("warning", "error", "critical")]
        given = [(n, v) for n, v in levels if v is not None]
        for (a, x), (b, y) in zip(given, given[1:], strict=False):
            if x > y:
                p.error(path, f"{a} ({x:g}) is above {b} ({y:g}): each level must be at least the one below")


def _check_rollout(
    p: _Parse,
    pairs: list[PairConfig],
    known_probes: Mapping[str, Iterable[str]] | None,
    probe_variants: Mapping[str, Mapping[str, Mapping[str, Any]]] | None,
    env_problem: Callable[..., str | None] | None,
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
    problem = env_problem(env) if env_problem is not None and "env" in raw and env else None
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
    out = []
    for d in dirs:
        try:
            if isinstance(d, str):
                out.append(_relative_to(source, expand(d)))
        except UnsetVariable:
            continue  # parse() names the variable with the key
    return out


def load(
    path: str | Path,
    known_probes: Mapping[str, Iterable[str]] | None = None,
    runtimes: Mapping[str, str] | None = None,
    probe_variants: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
    **checks: Any,
) -> Config:
    """The config file at ``path``; ``checks`` are parse()'s sink_types, param_schemas and
    env_problem."""
    return parse(read_document(path), str(path), known_probes, runtimes, probe_variants, **checks)
