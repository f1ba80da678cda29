"""``[models.NAME]``: a user's own exported MindIR audited like a probe, without Python; and
``[stacks.X] models``: the model files a stack serves (the deployed-model watch).

    [models.policy]
    path = "export/policy.mindir"       # relative to the config file
    stacks = ["lite20"]                 # where it is served (default: every infer stack)
    reference = "ms210-graph"           # a stack that runs it as the reference, or:
    golden = "policy.golden.npz"        # inputs and expected outputs (docs/golden.md), or:
    train = { factory = "mypolicy.nets:build_actor", checkpoint = "actor.ckpt", stack = "ms20" }
                                        # the training network, built in PyNative on a train stack
    output_names = ["logits", "mean"]   # optional; else the golden's, else output0, output1...
    seed = 0                            # of the generated inputs
    atol = 1e-5                         # element-wise thresholds, as [probes.P]
    rtol = 1e-5
    outputs.mean = { atol = 1e-4 }      # per output
    policy = { kind = "gaussian", mean = "mean", std = "std" }
                                        # a policy: PPO's importance ratios (or log_std, or
                                        # kind = "tanh", or kind = "categorical", logits = ...)
    [models.policy.rollout]             # optional: closed-loop episodes, reference vs each stack
    env = "Pendulum-v1"                 # or "mypkg.envs:make_env", your own gymnasium.Env
    episodes = 3                        # seeds seed, seed + 1, ...; max_steps = 200
    action = "mean"                     # the output that is the action; action_scale = 2.0
    [[models.policy.inputs]]            # optional: default, the file's own input signature
    name = "obs"                        # with normal(0, 1) floats and a batch of 1
    shape = [64, 11]
    dtype = "float32"
    generator = "normal"                # normal (mean, std) | uniform (low, high) | npz
    npz = "recorded_obs.npz"            # generator = "npz": recorded observations
    key = "obs"                         # ... the array's name in it (default: name)

The tables are validated by the config schema (``auditor.config.load.ModelTable``) and turned into
the ``ModelConfig`` here, which the cycle, ``auditor golden`` and ``auditor check`` use.
"""

from __future__ import annotations

import glob
import importlib.machinery
import importlib.util
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from auditor.compare.verdicts import Tolerance
from auditor.config.thresholds import DTYPE_TOLERANCES, ProbeConfig

# The kinds of change of a deployed model file (``[stacks.X] models``; auditor.rules.deployed)
# and the severity of each unless ``[stacks.X] model_drift_severity`` says otherwise. Another
# graph (other operators, inputs of another shape or dtype, weights of another dtype: an
# fp32 model replaced by an fp16 one) is an error, so the run's exit status is not 0.
MODEL_CHANGE_SEVERITY = {
    "added": "info",
    "removed": "warning",
    "retrained": "warning",
    "re-exported": "warning",
    "graph": "error",
    "unreadable": "error",
    "readable": "warning",
}
GENERATORS = ("normal", "uniform", "npz")
MODEL_CLASSES = ("sweep", "magnitude", "fp16-edge", "nan-inf")
"""The input classes of a model probe: auditor.compare.input_classes.CLASSES without the layer
sweep (a MindIR declares no layers to solve a sweep through)."""
INPUT_DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool")


@dataclass(frozen=True)
class InputSpec:
    """One input of a model probe and how its values are made (seeded from the model's seed)."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    generator: str = "normal"
    mean: float = 0.0
    std: float = 1.0
    low: float = -1.0
    high: float = 1.0
    npz: str = ""
    key: str = ""


@dataclass(frozen=True)
class TrainNetwork:
    """How training builds the policy: ``factory`` ("package.module:function") called with
    ``kwargs`` in PyNative on train stack ``stack``, then ``checkpoint`` (a .ckpt) loaded into
    it. ``path``: a folder holding the factory's package when the auditor's Python cannot
    import it; the package travels to the stack's worker like the auditor's own probes."""

    stack: str
    factory: str
    checkpoint: str = ""
    path: str = ""
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def module(self) -> str:
        return self.factory.partition(":")[0]

    def package(self) -> tuple[str, str] | None:
        """(the factory's top-level package, its folder), or None when it cannot be found
        (then the worker cannot import it, and says so for this model only)."""
        top = self.module.partition(".")[0]
        spec = None
        if self.path:
            spec = importlib.machinery.PathFinder.find_spec(top, [self.path])
        if spec is None:
            try:
                spec = importlib.util.find_spec(top)
            except (ImportError, ValueError):
                spec = None
        if spec is None or not spec.submodule_search_locations:
            return None
        return top, os.path.realpath(list(spec.submodule_search_locations)[0])

    def missing(self) -> str | None:
        """Why the factory cannot be reached, when that is known before the stack tries: its
        ``path`` does not hold its package. (A package found nowhere here may be installed in
        the train stack's own environment: the stack's import says.)"""
        top = self.module.partition(".")[0]
        if self.path and importlib.machinery.PathFinder.find_spec(top, [self.path]) is None:
            return f"train.path {self.path} holds no package {top!r} (the factory {self.factory})"
        return None

    def describe(self) -> str:
        ckpt = f" with {os.path.basename(self.checkpoint)}" if self.checkpoint else ""
        return f"the training network ({self.factory}{ckpt}, PyNative on {self.stack})"


@dataclass(frozen=True)
class ModelRollout:
    """``[models.NAME.rollout]`` (auditor.config.tables.ModelRolloutTable): the episodes a model's
    reference side and each serving stack drive from the same seeds. None: ``[rollout]``'s."""

    env: str
    path: str = ""
    episodes: int = 3
    max_steps: int = 200
    seed: int = 0
    action: str | None = None
    observation: str | None = None
    obs_scale: tuple[float, ...] = (1.0,)
    obs_offset: tuple[float, ...] = (0.0,)
    action_scale: tuple[float, ...] = (1.0,)
    action_offset: tuple[float, ...] = (0.0,)
    mode: str | None = None
    action_atol: float | None = None
    return_atol: float | None = None

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(self.seed + i for i in range(self.episodes))


@dataclass(frozen=True)
class ModelConfig:
    name: str
    path: str
    stacks: tuple[str, ...]
    """The stacks that serve the model and are compared with the reference."""
    reference: str | None = None
    """A stack that runs the same file as the reference (e.g. ms210-graph), or None."""
    golden: str | None = None
    """A golden .npz (inputs and expected outputs, docs/golden.md), or None."""
    train: TrainNetwork | None = None
    """The training network as the reference, or None."""
    inputs: tuple[InputSpec, ...] = ()
    output_names: tuple[str, ...] = ()
    seed: int = 0
    thresholds: Tolerance = Tolerance()
    outputs: dict[str, Tolerance] = field(default_factory=dict)
    thresholds_set: frozenset[str] = frozenset()
    """Where the user set thresholds: "" for the model's atol/rtol, else the output names."""
    convert: Any = None
    """auditor.config.tables.ConvertTable: the conversion the serving stacks run on the file."""
    policy: dict[str, Any] | None = None
    """``policy = {kind, mean, std, ...}``: the importance_ratios comparator's options, or None."""
    rollout: ModelRollout | None = None
    """``[models.NAME.rollout]``: closed-loop episodes (enabled), or None."""
    input_classes: tuple[str, ...] | None = None
    """The input classes to run (None: all that apply; auditor.policy.classes)."""
    class_input: str | None = None
    """The input they vary (None: the rollout's observation, else the first float input)."""
    nan_hazard: bool = True
    """A NaN input row that comes out finite is a finding."""

    @property
    def probe_config(self) -> Any:
        """The thresholds as the probes' ``auditor.config.thresholds.ProbeConfig``, so that model probes
        resolve them the same way (per output, then the built-in dtype defaults)."""
        return ProbeConfig(self.name, self.thresholds, dict(self.outputs))

    def tolerance_for(
        self, output: str, dtype: str | None = None, computes_in: str | None = None
    ) -> Tolerance:
        """The output's thresholds; an fp16/bf16 output gets the built-in dtype thresholds
        (auditor.config.thresholds.DTYPE_TOLERANCES), as a probe's fp16 variant does, and so
        does any output of a file that computes in fp16 inside (``computes_in``) unless the
        user set thresholds for the model or that output."""
        if computes_in in DTYPE_TOLERANCES and dtype not in DTYPE_TOLERANCES and not self.user_set(output):
            return Tolerance(**DTYPE_TOLERANCES[computes_in])
        return self.probe_config.tolerance_for(output, None, dtype)

    def user_set(self, output: str) -> bool:
        """Did the config set thresholds for this output (or the whole model)?"""
        return "" in self.thresholds_set or output in self.thresholds_set

    @property
    def reference_label(self) -> str:
        """The reference side's name in results: the stack (the train stack for the training
        network), or "golden"."""
        if self.train is not None:
            return self.train.stack
        return self.reference or "golden"

    @property
    def reference_stack(self) -> str | None:
        """The stack whose worker gives the reference outputs (None for a golden)."""
        return self.train.stack if self.train is not None else self.reference


def expand_patterns(patterns: Iterable[str]) -> list[str]:
    """The files the patterns name now, sorted; a plain path is kept even when missing (its
    absence is what the watch reports)."""
    found: set[str] = set()
    for p in patterns:
        if glob.has_magic(p):
            found.update(f for f in glob.glob(p) if os.path.isfile(f))
        else:
            found.add(p)
    return sorted(found)
