"""A policy under audit, one shape for a built-in probe variant and a user's ``[models.NAME]``.

Both are declared the same way, as a trainer has them: a **network** built by a factory from
its weights (a probe's ``build_cell`` from its seeded weights; a model's ``train = { factory,
checkpoint }``), what is **served** (the network's export, or the user's file), the **inputs**
of one run and the **input classes** beyond them, the **distribution head** (a Gaussian, a
tanh-squashed one, a categorical; ``importance_ratios``' options), what each output and hidden
node must satisfy on its own (**invariants**, with a float64 reference where the policy has
one) and the **tolerances** its outputs are compared with. Every check of the cycle
(auditor.policy.verdict, auditor.policy.alone, localization, repeatability, rollouts,
importance ratios, latency, goldens, conversion) reads a ``Subject``, never a probe or a model
as such; what a check needs and a kind of policy lacks is said in auditor.policy.checks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from auditor.compare import input_classes, ratios
from auditor.compare.golden import Golden
from auditor.compare.verdicts import Tolerance
from auditor.config.thresholds import DTYPE_TOLERANCES, ProbeConfig
from auditor.config.user_models import TrainNetwork
from auditor.extend.probe_spec import ProbeSpec, dtype_variant_name
from auditor.policy import classes as file_classes
from auditor.policy import hidden as hidden_nodes
from auditor.policy import invariants
from auditor.policy.model_file import ModelPlan, computes_in
from auditor.runtime import MINDIR, ArtifactFormat
from auditor.worker.mindir import MindIRInfo

REFERENCE, SERVED = "reference", "served"
"""The two sides of a policy: what it is compared with, and each stack serving it."""
MODEL_VARIANT = "model"
"""The variant of a ``[models.NAME]`` (one file: one variant)."""
RATIOS = "importance_ratios"
RANDOM_OPS = frozenset(
    {
        "StandardNormal",
        "UniformReal",
        "UniformInt",
        "RandomStandardNormal",
        "Multinomial",
        "RandomCategorical",
    }
)
"""The MindIR operators that draw from a seeded generator (each call moves it on)."""


@dataclass(frozen=True)
class ProbeJob:
    """One variant of a probe with its resolved parameters, exported in one format: one
    export, which several pairs may share. ``variant`` defaults to the name of the params'
    dtype ("fp32", ...); ``format`` is what the pairs' infer runtime loads."""

    spec: ProbeSpec
    params: dict[str, Any]
    variant: str = ""
    format: ArtifactFormat = MINDIR

    def __post_init__(self) -> None:
        if not self.variant:
            object.__setattr__(self, "variant", dtype_variant_name(self.params))

    @property
    def key(self) -> str:
        digest = hashlib.sha256(repr(sorted(self.params.items())).encode()).hexdigest()[:10]
        key = f"{self.spec.name}-{self.variant}-{digest}"
        return key if self.format.name == MINDIR.name else f"{key}-{self.format.name}"

    @property
    def dtype(self) -> str | None:
        dtype = self.params.get("dtype")
        return str(dtype) if dtype is not None else None

    @property
    def batch(self) -> int:
        return int(self.params.get("batch", 1))

    @property
    def rerun(self) -> bool:
        """Whether this variant is run again in a fresh worker process, to check repeatability."""
        return self.variant in self.spec.rerun


@dataclass(frozen=True)
class Network:
    """How a train stack's worker builds the policy's training network (PyNative): the probe's
    cell from its module, parameters and seeded weights (``build``), or the user's factory with
    its checkpoint (``network``, auditor.worker.train_network)."""

    op: str
    """The worker request that builds it: "build" or "network"."""
    payload: Mapping[str, Any]
    exposes_layers: bool = False
    """Whether it can return its hidden layers after its outputs (a probe's ``expose_layers``)."""
    stack: str | None = None
    """The train stack it is built on (a model's ``train.stack``; a probe's is its pair's)."""
    checkpoint: str = ""
    """A checkpoint file the worker loads: sent to a worker on another host with the request."""

    def build(self, worker: Any, model_id: str, layers: bool = False) -> None:
        """Build it in ``worker`` as ``model_id`` (``layers``: with its layers exposed). Raises
        WorkerError (the factory's or the checkpoint's failure), OSError (the checkpoint
        cannot be read here for a remote worker)."""
        payload = dict(self.payload)
        if layers:
            payload["probe"] = {**payload["probe"], "expose_layers": True}
        if self.checkpoint and worker.is_remote:
            payload["checkpoint_data"] = Path(self.checkpoint).read_bytes()
        worker.request(self.op, model=model_id, **payload)


def training_network(train: TrainNetwork) -> Network:
    """A model's training network (``train = { factory, checkpoint, stack }``)."""
    checkpoint = str(Path(train.checkpoint).resolve()) if train.checkpoint else ""
    payload = {"factory": train.factory, "kwargs": dict(train.kwargs), "checkpoint": checkpoint}
    payload["checkpoint_data"] = None
    return Network("network", payload, stack=train.stack, checkpoint=checkpoint)


@dataclass(frozen=True)
class Subject:
    """What the cycle audits: one policy, on every stack that serves it."""

    kind: str
    """"probe" or "model": what declared it (never what decides which checks run)."""
    key: str
    """Unique in a cycle: a probe job's key, ``model/NAME`` for a model."""
    name: str
    version: str
    variant: str
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    inputs: list[np.ndarray]
    """The policy's own inputs: one run's batch."""
    own_class: str
    """What the own inputs are called where a finding names them: "random", "recorded", "golden"."""
    dtype: str | None = None
    """The policy's dtype where it has one (a probe's ``dtype``), else each output's own."""
    inside: str | None = None
    """"float16" for a file that computes in float16 inside."""
    chunk: int | None = None
    """Rows per run where the served model takes a fixed batch (a file): the input classes run
    in chunks of it. None: any batch (a network, and its export at the batch of each class)."""
    classes: list[input_classes.ClassBatch] = field(default_factory=list)
    class_problem: str | None = None
    """Why the input classes could not be made (a probe's broken hook)."""
    varied: int | None = None
    """The input the classes vary (None: no float input)."""
    declared: invariants.Declared = invariants.Declared()
    declared_problem: str | None = None
    """Why the invariants could not be read (a probe that contradicts itself)."""
    hidden: hidden_nodes.Hidden | None = None
    hidden_problem: str | None = None
    """Why the hidden nodes cannot be exposed (a file that cannot be tapped)."""
    head: ratios.Policy | None = None
    """The distribution head (importance ratios, sampled episodes), or None."""
    head_options: dict[str, Any] = field(default_factory=dict)
    comparators: tuple[str, ...] = ()
    options: Callable[[str], dict[str, Any]] = lambda name: {}
    """A comparator's options for this variant: the policy's own, then the config's."""
    tolerances: Callable[[str, str | None], Tolerance] = lambda output, dtype: Tolerance()
    """An output's thresholds, given the output's dtype."""
    envelopes: Callable[[list[np.ndarray] | None], dict[str, np.ndarray]] = lambda inputs: {}
    """Per output, how far two correct evaluations can be apart on these inputs (a probe's
    ``rounding``: on its own inputs only); {} where nothing says."""
    repeat: frozenset[str] = frozenset()
    """The sides whose repeatability decides (a rerun in a process started cold)."""
    stochastic: bool = False
    """It draws from seeded random ops in its graph: each call moves the generator on, so its
    input classes are not compared (its repeatability across processes is)."""
    options_source: str = ""
    """The config key its comparators' options come from, for an error's words (``{comparator}``
    stands for the comparator's name)."""
    reference64: Callable[[list[np.ndarray]], dict[str, np.ndarray] | None] | None = None
    """Its forward pass in float64 numpy from the same weights (a probe's ``reference``): where
    the mathematics decides its invariants and NaN/Inf hazards; None without one."""
    hazard_action: str = ""
    """What to do about a NaN/Inf hazard, in the words of where it is set ("" : the probes')."""
    inputs_at: Callable[[int], list[np.ndarray]] | None = None
    """The inputs at another batch size (a network's export can be made at any; a file cannot)."""
    user_set: Callable[[str], bool] = lambda output: True
    """Did the config set this output's thresholds (else a float16 file's are the dtype's)?"""
    network: Network | None = None
    """The training network, where the policy has one."""
    golden: Golden | None = None
    """A golden file's outputs as the reference side (a model's ``golden``)."""
    file_info: MindIRInfo | None = None
    """What a served file says of itself (a model)."""
    infinities: bool = True
    """±Inf in, finite out, judged: only with a float64 reference (tanh(Inf) = 1 is arithmetic)."""
    nan_hazard: bool = True
    invariants_on: bool = True
    max_hazard_share: float = 0.0
    one_masking_per_side: bool = False
    """Without a graph of what each output is computed from, a side's NaN masking in several
    outputs is one cause (said in the first)."""
    module: str = ""
    """The module that declares it (a probe's), named where its own code fails."""
    problem: BaseException | None = None
    """Why the policy could not be declared (a probe's make_inputs or make_weights raised): every
    side of it is an error saying so, and nothing of it runs."""

    @property
    def batch(self) -> int:
        first = np.asarray(self.inputs[0]) if self.inputs else np.zeros(0)
        return int(first.shape[0]) if first.ndim and first.shape[0] else 1

    def tolerance(self, output: str, dtype: str | None = None) -> Tolerance:
        return self.tolerances(output, dtype)

    def names(self, count: int) -> list[str]:
        """The output names of ``count`` outputs (``output{i}`` beyond those declared)."""
        names = list(self.output_names)
        return names[:count] + [f"output{i}" for i in range(len(names), count)]

    @property
    def in_graph(self) -> bool:
        """The head's log-probability of given actions is an output: the models score drawn
        actions themselves (what a trainer computes), not just their parameters."""
        return self.head is not None and self.head.in_graph()

    @property
    def fp16(self) -> bool:
        return self.inside is not None or self.dtype in DTYPE_TOLERANCES


def _probe_options(job: ProbeJob, cfg: ProbeConfig) -> Callable[[str], dict[str, Any]]:
    defaults = job.spec.comparator_defaults(job.params)

    def options(name: str) -> dict[str, Any]:
        return {**defaults.get(name, {}), **cfg.comparator_options(name, job.variant, job.dtype)}

    return options


def from_probe(job: ProbeJob, cfg: ProbeConfig) -> Subject:
    """A probe variant as a policy under audit: its cell built from its seeded weights is the
    training network, its export is served, its own inputs, classes, invariants (and its
    layers' through ``expose_layers``), its head from its ``importance_ratios`` options."""
    spec, params = job.spec, job.params
    inputs = spec.make_inputs(params)
    options = _probe_options(job, cfg)
    classes, class_problem = [], None
    try:
        classes = input_classes.class_batches(spec, params)
    except Exception as exc:  # a probe's class_inputs hook or INPUT_CLASSES is broken
        class_problem = f"the probe cannot make them: {exc}"
    declared, declared_problem = invariants.Declared(), None
    try:
        declared = invariants.declared(spec, params)
    except Exception as exc:
        declared_problem = f"{type(exc).__name__}: {exc}"
    hidden = hidden_nodes.Hidden(declared.layers) if declared.checks_layers else None
    head, head_options = None, {}
    if RATIOS in spec.comparators:
        head_options = options(RATIOS)
        try:
            head = ratios.Policy.from_options(head_options)
        except ValueError:
            head = None  # the comparator says what is wrong with its options
    inv = cfg.comparator_options(invariants.INVARIANTS, job.variant, job.dtype)
    haz = cfg.comparator_options(invariants.HAZARD, job.variant, job.dtype)
    weights = spec.make_weights(params)
    probe: dict[str, Any] = {"module": spec.module, "params": params}
    built = weights
    plan = spec.precision.get(job.variant)
    if plan:  # float32 weights, each cell computing as the plan says (auditor fix's candidates)
        probe = {**probe, "params": {**params, "dtype": "float32"}, "precision": dict(plan)}
        built = spec.make_weights(probe["params"])
    network = Network("build", {"probe": probe, "weights": built}, exposes_layers=bool(declared.layers))
    return Subject(
        **_probe_identity(job, cfg),
        inputs=inputs,
        classes=classes,
        class_problem=class_problem,
        varied=input_classes.varied_index(spec),
        declared=declared,
        declared_problem=declared_problem,
        hidden=hidden,
        head=head,
        head_options=head_options,
        comparators=tuple(spec.comparators),
        options=options,
        envelopes=lambda given: _envelopes(job, inputs, given),
        inputs_at=(lambda b: spec.make_inputs({**params, "batch": int(b)})) if "batch" in params else None,
        repeat=frozenset({REFERENCE, SERVED}) if job.rerun else frozenset(),
        stochastic=job.rerun,
        reference64=(
            (lambda given: invariants.reference_outputs(declared, params, weights, given))
            if declared.reference is not None
            else None
        ),
        options_source=f"probes.{spec.name}.comparators.{{comparator}}",
        network=network,
        invariants_on=bool(inv.get("enabled", True)),
        nan_hazard=bool(haz.get("enabled", True)),
        max_hazard_share=float(haz.get("max_share", 0.0)),
    )


def _probe_identity(job: ProbeJob, cfg: ProbeConfig) -> dict[str, Any]:
    """What a probe variant is called and judged by, whatever else it declares."""
    spec = job.spec
    return dict(
        kind="probe",
        key=job.key,
        name=spec.name,
        version=spec.version,
        variant=job.variant,
        input_names=tuple(spec.inputs),
        output_names=tuple(spec.outputs),
        own_class=input_classes.RANDOM,
        dtype=job.dtype,
        tolerances=lambda output, dtype: cfg.tolerance_for(output, job.variant, job.dtype),
        module=spec.module,
    )


def broken_probe(job: ProbeJob, cfg: ProbeConfig, exc: BaseException) -> Subject:
    """A probe variant whose own code raised while it was declared: its names and tolerances,
    and the exception, which fails its results only."""
    return Subject(**_probe_identity(job, cfg), inputs=[], problem=exc)


def _envelopes(job: ProbeJob, own: list[np.ndarray], given: list[np.ndarray] | None) -> dict[str, np.ndarray]:
    """The probe's rounding envelope per output where the outputs belong to its own inputs;
    none for other inputs (a publication's). A hook that raises is the caller's CheckError."""
    if given is not None and not same_inputs(own, given):
        return {}
    return job.spec.rounding(job.params)


def same_inputs(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(
        np.shape(x) == np.shape(y) and np.array_equal(x, y) for x, y in zip(a, b, strict=True)
    )


def from_model(plan: ModelPlan) -> Subject:
    """A user's model as a policy under audit: the file is served, the reference is its
    training network, a reference stack running the file or a golden; its invariants are what
    its graph implies for its outputs and its bounded hidden nodes, its head is its ``policy``."""
    model, info = plan.model, plan.info
    inside = computes_in(info)
    recorded = any(spec.generator == "npz" for spec in model.inputs)
    own = "golden" if plan.golden is not None else "recorded" if recorded else input_classes.RANDOM
    names = list(model.output_names or (plan.golden.output_names if plan.golden else ()))
    sources = (info.output_sources if info is not None else None) or ()
    count = len(sources) or len(names)
    names += [f"output{i}" for i in range(len(names), count)]
    declared = invariants.from_graph(sources, names)
    varied = file_classes.varied_index(model, plan.inputs, plan.input_names)
    if varied is not None and model.nan_hazard and info is not None:
        file_inputs = [t.name for t in (info.inputs or ())]
        varied_name = file_inputs[varied] if varied < len(file_inputs) else plan.input_names[varied]
        declared = replace(declared, propagates=file_classes.reached(names, plan.dependencies, varied_name))
    hidden, hidden_problem = None, None
    found = hidden_nodes.of_file(plan.data) if plan.data else None
    if isinstance(found, str):
        hidden_problem = found
    elif found is not None:
        hidden = found
        declared = replace(declared, invariants=declared.invariants + found.invariants, layers=found.names)
    head, options = None, dict(model.policy or {})
    if options:
        try:
            head = ratios.Policy.from_options(options)
        except ValueError:
            head = None  # the comparator says what is wrong with it
    return Subject(
        kind="model",
        key=f"model/{model.name}",
        name=model.name,
        version=info.sha256[:12] if info else "unreadable",
        variant=MODEL_VARIANT,
        input_names=plan.input_names,
        output_names=tuple(names),
        inputs=plan.inputs,
        own_class=own,
        inside=inside,
        chunk=file_classes.file_batch(plan.inputs),
        classes=plan.classes,
        varied=varied,
        declared=declared,
        hidden=hidden,
        hidden_problem=hidden_problem,
        head=head,
        head_options=options,
        comparators=(RATIOS,) if options else (),
        options=lambda name: dict(options) if name == RATIOS else {},
        tolerances=lambda output, dtype: model.tolerance_for(output, dtype, inside),
        repeat=frozenset({SERVED}),
        stochastic=bool(set((info.op_types if info else None) or ()) & RANDOM_OPS),
        options_source=f"models.{model.name}.policy",
        user_set=model.user_set,
        hazard_action=(
            "a bad observation would become a valid-looking action in production: check inputs for "
            "NaN/Inf before the model, or set nan_hazard = false in its [models.NAME] if the graph maps "
            "NaN on purpose"
        ),
        network=training_network(model.train) if model.train is not None else None,
        golden=plan.golden,
        file_info=info,
        infinities=False,
        nan_hazard=model.nan_hazard,
        one_masking_per_side=True,
    )
