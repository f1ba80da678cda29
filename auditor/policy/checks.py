"""Every check the cycle makes on a policy, what it needs, and which ran on each result.

One table for every kind of policy: a check runs wherever what it needs is there, whatever
declared the policy (a built-in probe, a plugin's, a user's ``[models.NAME]``). ``covered``
says, for one result, which checks ran and, for each that did not, why (a result carries it
as ``coverage``: an all-clear rests on what ran). docs/checks.md is this table in words, and
tests/stacks/test_one_pipeline_stacks.py holds a probe and a user's policy of the same shape to
it: a check that runs for one runs for the other, or the table says why not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from auditor.policy.side import Side
from auditor.policy.subject import REFERENCE, SERVED, Subject

RAN = "ran"
ON_DRIFT = "on a drift"
"""Armed, and run only when the result drifts (localization)."""


@dataclass(frozen=True)
class Check:
    name: str
    what: str
    needs: str
    """What it needs, in words (the docs' column)."""
    probe: str = ""
    """Why a built-in probe does not get it by default ("": it does where it needs are met)."""
    model: str = ""
    """Why a ``[models.NAME]`` does not get it by default ("": likewise)."""


CHECKS: tuple[Check, ...] = (
    Check(
        "outputs",
        "every output compared element-wise with its tolerance (Polygraphy's rule); a rounding "
        "envelope where the policy has one",
        "a reference side with outputs (a network, a reference stack or a golden)",
    ),
    Check(
        "input-classes",
        "sweeps through saturation, extreme magnitudes, fp16 edges and NaN/Inf, compared per class",
        "a float input to vary, and a reference that runs inputs (a golden holds outputs of its own "
        "inputs only); not for a policy drawing from seeded random ops",
    ),
    Check(
        "invariants",
        "each side's outputs held to their ranges on its own (a std > 0, a tanh in [-1, 1], a "
        "softmax summing to 1), judged by a float64 reference where the policy has one",
        "declared invariants (a probe's) or outputs returned by a bounded operator (a file's graph)",
    ),
    Check(
        "hidden-nodes",
        "each side's hidden nodes held to their ranges on its own, on the own inputs and every class",
        "a network built with its layers exposed (a probe's), or bounded operators inside a MindIR "
        "file (returned by a tapped copy); not an ONNX export",
    ),
    Check(
        "nan-hazards",
        "a NaN or Inf in the observation that comes out as a valid-looking number",
        "a float input to vary (the nan-inf class) and an output computed from it",
    ),
    Check(
        "localization",
        "where a drift starts: the first divergent layer or node",
        "a reference that runs the exposing model (a network's layers, the file's tapped copy); "
        "not a golden; not a stack that serves a conversion",
    ),
    Check(
        "repeatability",
        "a side run again in a process started cold gives the same bits",
        "a side that ran",
        probe="a probe declares the variants whose repeatability decides (RERUN_IN_FRESH_PROCESS: "
        "its seeded random ops); a served file always repeats its serving sides",
    ),
    Check(
        "importance-ratios",
        "PPO's ratios under the serving side's policy (and on actions drawn from the training side): "
        "clip share, TIS share, ESS, KL, or the chosen trainer's correction's share",
        "a distribution head (a probe's importance_ratios options, a model's policy = {...})",
    ),
    Check(
        "in-graph-ratios",
        "the ratios from the models' own log-probabilities of drawn actions (what a trainer "
        "computes), not from the distributions' parameters",
        "a head whose log-probability of given actions is an output (logp and actions), and a "
        "reference that can score them (not a golden, not a publication)",
    ),
    Check(
        "rollouts",
        "closed-loop episodes of reference and serving side from the same seeds",
        "an environment ([rollout] for a probe, [models.NAME.rollout]) and a reference that can act",
        probe="[rollout] names the one probe variant that drives the episodes",
        model="only with [models.NAME.rollout]",
    ),
    Check(
        "latency",
        "each side's latency at its own batch, timed inside its worker",
        "a side that ran",
    ),
    Check(
        "latency-batches",
        "latency and throughput at the other batch sizes of [latency]",
        "a network whose export can be made at another batch (a file has one batch)",
        model="a served file has the batch it was exported with",
    ),
    Check(
        "goldens",
        "each side's outputs against its first accepted result (a drift of both sides together)",
        "a history database",
    ),
    Check(
        "comparators",
        "the policy's comparators: its distributions' KL, log-probability and action agreement, ...",
        "comparators declared by the policy (a probe's COMPARATORS; a model's importance ratios)",
    ),
    Check(
        "conversion",
        "what a Lite stack really serves: the file converted with the deployment's options",
        "a [stacks.X.convert] (or [models.NAME.convert]) on the serving stack",
    ),
)
BY_NAME = {c.name: c for c in CHECKS}


def covered(
    subject: Subject,
    reference: Side,
    served: Side,
    result: Any,
    *,
    reference_runs: bool,
    converts: bool,
    history: bool,
    rolled: bool | str,
) -> dict[str, str]:
    """Check -> "ran", "on a drift", or why it did not run, for one result. ``reference_runs``:
    the reference side is a model a worker runs (not a golden or a publication);
    ``converts``: the serving stack converts what it serves; ``history``: goldens were read;
    ``rolled``: episodes ran (True), or why not."""
    out: dict[str, str] = {}
    ran = served.ran and reference.ran

    def said(name: str, done: bool, why: str) -> None:
        out[name] = RAN if done else why

    said("outputs", ran and bool(result.outputs), "a side did not run")
    if subject.stochastic:
        out["input-classes"] = "it draws from seeded random ops: each call moves the generator on"
    elif not subject.classes:
        out["input-classes"] = subject.class_problem or "no float input to vary"
    else:
        said(
            "input-classes", bool(reference.classes) and bool(served.classes), "the reference cannot run them"
        )
    said(
        "invariants", served.ran and bool(_output_invariants(subject)), "nothing declares its outputs' ranges"
    )
    if subject.hidden is None:
        out["hidden-nodes"] = subject.hidden_problem or "no hidden node it can expose has a range"
    else:
        said("hidden-nodes", bool(served.hidden), served.hidden_note or "the hidden nodes did not run")
    nan = "nan-inf" in {b.name for b in subject.classes}
    said("nan-hazards", served.ran and nan and subject.nan_hazard and bool(subject.declared.propagates),
         "no nan-inf class, or no output computed from the varied input")  # fmt: skip
    if subject.hidden is None and not (subject.network and subject.network.exposes_layers):
        out["localization"] = "nothing exposes its inner values"
    elif not reference_runs:
        out["localization"] = "the reference does not run the exposing model (a golden, a publication)"
    elif converts:
        out["localization"] = "the serving stack serves a conversion"
    else:
        out["localization"] = RAN if getattr(result, "localization", None) is not None else ON_DRIFT
    reran = (SERVED in subject.repeat and served.rerun is not None) or (
        REFERENCE in subject.repeat and reference.rerun is not None
    )
    said("repeatability", reran, "its repeatability is not declared to decide")
    metrics = {k.metric for k in result.checks}
    said("importance-ratios", "ppo_clip_share" in metrics, "no distribution head")
    in_graph = any(k.metric == "ratio_mean" and "own log-probabilities" in k.message for k in result.checks)
    said("in-graph-ratios", in_graph, _in_graph_why(subject, reference_runs))
    out["rollouts"] = RAN if rolled is True else str(rolled or "no environment")
    said("latency", served.latency is not None and reference.latency is not None, "a side was not timed")
    said("latency-batches", bool(served.latencies), "no other batch of the served model")
    said(
        "goldens",
        bool(getattr(result, "baseline", ())),
        "no history database" if not history else "no side ran",
    )
    said("comparators", bool(metrics - _OWN), "it declares none")
    said(
        "conversion",
        served.conversion is not None,
        "the serving stack serves the file as it is" if not converts else "the conversion failed",
    )
    return out


_OWN = {
    "class_failing",
    "class_nan_inf_mismatch",
    "class_max_abs",
    "class_run",
    "train_rerun_max_abs",
    "infer_rerun_max_abs",
}


def _output_invariants(subject: Subject) -> list[Any]:
    hidden = set(subject.hidden.names) if subject.hidden is not None else set()
    return [i for i in subject.declared.invariants if i.output not in hidden]


def _in_graph_why(subject: Subject, reference_runs: bool) -> str:
    if subject.head is None:
        return "no distribution head"
    if not subject.head.in_graph():
        return "its head's log-probability of given actions is not an output"
    if not reference_runs:
        return "the reference cannot score drawn actions (a golden, a publication)"
    return "the actions were not drawn"


def table(checks: Sequence[Check] = CHECKS) -> list[str]:
    """The table of docs/checks.md."""
    rows = ["| check | what | needs | a built-in probe | a `[models.NAME]` |", "|---|---|---|---|---|"]
    for c in checks:
        rows.append(f"| `{c.name}` | {c.what} | {c.needs} | {c.probe or 'yes'} | {c.model or 'yes'} |")
    return rows
