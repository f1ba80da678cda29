"""The plugin: registers the probe and its comparators with the auditor."""

from auditor.compare.outputs import Comparator
from auditor.hookspecs import hookimpl
from auditor_discrete_policy import comparators


@hookimpl
def auditor_probes():
    return ["auditor_discrete_policy.policy"]


@hookimpl
def auditor_comparators():
    return [
        Comparator(
            "argmax_agreement",
            comparators.argmax_agreement,
            "share of observations where both sides choose the same greedy action",
        ),
        Comparator(
            "probability_difference",
            comparators.probability_difference,
            "max and mean |p_train - p_infer| over the action probabilities",
        ),
    ]
