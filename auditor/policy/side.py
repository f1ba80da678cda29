"""What one side made of a policy under audit: the reference side (a training network on its
train stack, a reference stack running the file, or a golden) and each serving side (a stack
loading the export or the file) are the same shape, so that every check reads them alike
(auditor.policy.verdict, auditor.policy.alone)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from auditor.results import Artifact, Finding, Latency
from auditor.stacks.worker import WorkerError


@dataclass
class Behaviour:
    """Both models run on actions drawn from the serving side's distribution
    (auditor.compare.ratios): the k batches of inputs and each side's in-graph log-probability
    of them, (k, states)."""

    output: str
    """The comparator's name for them: ``logp@behaviour``."""
    inputs: list[list[np.ndarray]]
    infer: np.ndarray
    train: np.ndarray | None = None


@dataclass
class Side:
    """One side of a policy on one stack (or a golden). The reference side also carries what
    the serving sides load (``export``, the hidden nodes' model, other batch sizes)."""

    outputs: list[np.ndarray] | None = None
    latency: Latency | None = None
    error: WorkerError | None = None
    blocked: Finding | None = None
    """A rule's finding that made loading pointless (the load was not attempted)."""
    load_log: str = ""
    """The runtime's log of the load (its warnings belong to a first call's failure)."""
    conversion: Artifact | None = None
    """What the stack's converter made of the file and ran (``[stacks.X.convert]``)."""
    inputs: list[np.ndarray] | None = None
    """The inputs the outputs belong to, when not the policy's own (a publication's)."""
    rerun: list[np.ndarray] | WorkerError | None = None
    """The same model and inputs in a process started cold (repeatability)."""
    rerun_words: str = ""
    """How the rerun's process was started, said with its checks ("a cold process")."""
    classes: dict[str, list[np.ndarray]] = field(default_factory=dict)
    """Input class -> its outputs (auditor.compare.input_classes, auditor.policy.classes)."""
    class_errors: dict[str, str] = field(default_factory=dict)
    """Input class -> why this side did not run it."""
    hidden: dict[str, list[np.ndarray]] = field(default_factory=dict)
    """Input class (the own inputs under the policy's own label) -> its hidden nodes' values,
    in the order of ``Subject.hidden.names`` (auditor.policy.hidden)."""
    hidden_note: str = ""
    """Why the hidden nodes were not run on this side, when they were not."""
    behaviour: Behaviour | None = None
    """Both models on actions drawn from this side's policy (the importance ratios' samples)."""
    latencies: list[Latency] = field(default_factory=list)
    """Latency at other batch sizes (``[latency] batches``)."""
    notes: list[str] = field(default_factory=list)
    """What went wrong beyond the verdict's own requests (other batch sizes, hidden nodes,
    importance ratios' draws), kept in the result's log."""
    # -- what the reference side hands the serving sides (a probe's export) -------------------
    export: Path | None = None
    """The export, staged for the serving sides to load."""
    artifact: Artifact | None = None
    batch_exports: dict[int, Path] = field(default_factory=dict)
    hidden_export: Path | None = None
    """The model that also returns the hidden nodes, staged for the serving sides."""
    batch_models: dict[int, str] = field(default_factory=dict)
    """On a serving side: batch -> the loaded model of the export at that batch."""

    @property
    def ran(self) -> bool:
        return self.outputs is not None
