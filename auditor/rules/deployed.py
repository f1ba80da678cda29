"""The deployed-model watch: what changed in the model files a stack serves since its last
fingerprint, and what the rules say about each file on the stack that serves it.

The files come from the ``models`` section of the stack's fingerprint (collected in the
worker by ``auditor.plugins.collectors.models``). A file that appeared, disappeared, or whose
content changed is a ``model-drift`` finding that says what kind of change it is: new
weights from the same exporter (retrained), another exporting MindSpore or MindIR version
(re-exported), another graph (operators, inputs, weights of another dtype or count). The
generic stack drift leaves the section to this module, so one change is one finding.

Each kind has a severity (``auditor.config.user_models.MODEL_CHANGE_SEVERITY``), which
``[stacks.X] model_drift_severity`` changes per stack: another graph is an error by default,
so a replaced fp32 model now served as fp16 fails the run. A re-export that also changed the
graph takes the more severe of the two.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from auditor.config.tables import SEVERITIES, PairConfig, StackConfig
from auditor.config.user_models import MODEL_CHANGE_SEVERITY
from auditor.results import Finding
from auditor.rules.engine import ExportedModel, Rule, RuleContext, run_rules
from auditor.runtime import RuntimeSpec

SECTION = "models"
KIND = "model-drift"
VARIANT = "deployed"


def files_of(document: Mapping[str, Any] | None) -> dict[str, dict[str, Any]] | None:
    """Path -> entry of a fingerprint's watched files; None when it has no models section."""
    section = (document or {}).get(SECTION)
    if not isinstance(section, dict) or not isinstance(section.get("files"), dict):
        return None
    return section["files"]


def without_models(document: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in document.items() if k != SECTION}


def _who(entry: Mapping[str, Any]) -> str:
    if not entry.get("readable", True):
        return f"not a readable MindIR ({entry.get('reason')})"
    return f"MindSpore {entry.get('model_version')}, MindIR version {entry.get('mind_ir_version')}"


def _graph_changes(b: Mapping[str, Any], a: Mapping[str, Any]) -> list[str]:
    """What differs in the graph itself: operators, input signature, weights' count and dtypes
    (the dtypes only where both entries carry them: older fingerprints do not)."""
    graph = []
    added = sorted(set(a.get("op_types") or ()) - set(b.get("op_types") or ()))
    gone = sorted(set(b.get("op_types") or ()) - set(a.get("op_types") or ()))
    if added or gone:
        graph.append("operators " + ", ".join([f"+{o}" for o in added] + [f"-{o}" for o in gone]))
    if b.get("inputs") != a.get("inputs"):
        graph.append(f"inputs {_signature(b.get('inputs'))} -> {_signature(a.get('inputs'))}")
    if b.get("parameter_elements") != a.get("parameter_elements"):
        graph.append(f"{b.get('parameter_elements')} -> {a.get('parameter_elements')} weights")
    if "parameter_dtypes" in b and "parameter_dtypes" in a and b["parameter_dtypes"] != a["parameter_dtypes"]:
        graph.append(
            f"weights {', '.join(b['parameter_dtypes'] or ()) or 'none'} -> "
            f"{', '.join(a['parameter_dtypes'] or ()) or 'none'}"
        )
    return graph


def _change(path: str, b: Mapping[str, Any], a: Mapping[str, Any]) -> tuple[list[str], str]:
    """(the kinds of change, most telling first; words)."""
    sha = f"sha256 {str(b.get('sha256'))[:12]} -> {str(a.get('sha256'))[:12]}"
    if b.get("readable", True) != a.get("readable", True) or not a.get("readable", True):
        kind = "unreadable" if not a.get("readable", True) else "readable"
        return [kind], f"now {_who(a)} (was {_who(b)}; {sha})"
    exporter = ("model_version", "mind_ir_version", "producer_name", "producer_version", "ir_version")
    graph = _graph_changes(b, a)
    if any(b.get(k) != a.get(k) for k in exporter):
        also = f"; another graph too: {'; '.join(graph)}" if graph else ""
        return [
            "re-exported",
            *(["graph"] if graph else []),
        ], f"re-exported: {_who(a)} (was {_who(b)}{also}; {sha})"
    if graph:
        return ["graph"], f"another graph from the same exporter ({'; '.join(graph)}; {sha})"
    return ["retrained"], f"new weights, same exporter and graph (retrained? {sha})"


def _signature(inputs: Any) -> str:
    return ", ".join(f"{t.get('name')}{t.get('shape')} {t.get('dtype')}" for t in inputs or ()) or "none"


def severity_of(kinds: list[str], severities: Mapping[str, str] | None = None) -> str:
    """The most severe of the kinds' severities (the stack's ``model_drift_severity``, then the
    defaults)."""
    chosen = {**MODEL_CHANGE_SEVERITY, **dict(severities or {})}
    return max((chosen[k] for k in kinds), key=SEVERITIES.index)


def model_drift(
    stack: str,
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    previous_run: int | None,
    severities: Mapping[str, str] | None = None,
) -> list[Finding]:
    """One finding per watched file that was added, removed or changed between two
    fingerprints of ``stack``; none when the earlier one did not watch models yet. A file
    with the same content (sha256) is the same deployment, whatever else its entry says (a
    newer collector may record more of it). ``severities``: the stack's
    ``model_drift_severity``."""
    b, a = files_of(before), files_of(after)
    if b is None or a is None:
        return []
    since = f"since run {previous_run}" if previous_run is not None else "since the last fingerprint"
    out = []
    for path in sorted(set(b) | set(a)):
        old, new = b.get(path), a.get(path)
        if old == new or (old and new and old.get("sha256") and old.get("sha256") == new.get("sha256")):
            continue
        if old is None:
            kinds, words = ["added"], f"new: {_who(new or {})}, sha256 {str((new or {}).get('sha256'))[:12]}"
        elif new is None:
            kinds, words = ["removed"], f"removed (was {_who(old)}, sha256 {str(old.get('sha256'))[:12]})"
        else:
            kinds, words = _change(path, old, new)
        out.append(
            Finding(
                KIND,
                severity_of(kinds, severities),
                stack,
                f"{stack}/{KIND}/{path}",
                f"deployed model {path} on {stack} changed {since}: {words}",
                {
                    "rule": "deployed-model-watch",
                    "path": path,
                    "change": kinds[0],
                    "changes": kinds,
                    "before": old,
                    "after": new,
                    "previous_run": previous_run,
                    "action": "if this deployment was not planned, find who replaced the file; if it was, "
                    "re-record its golden (auditor golden record) and run auditor check on it",
                },
            )
        )
    return out


def deployed_rule_findings(
    stacks: Mapping[str, StackConfig],
    fingerprints: Mapping[str, dict[str, Any] | None],
    rules: Iterable[Rule],
    learned_maxima: Mapping[Any, Any],
    operator_limits: Mapping[str, dict[str, str]],
    runtimes: Mapping[str, RuntimeSpec] | None = None,
) -> list[Finding]:
    """The artifact rules (MindIR version, operator support) on every deployed file, against
    the stack that serves it (``runtimes``: the runtime plugins' specs, for their version facts)."""
    artifact_rules = [r for r in rules if r.needs_artifacts]
    exported, pairs = [], []
    docs: dict[str, dict[str, Any] | None] = dict(fingerprints)
    for name in stacks:
        files = files_of(fingerprints.get(name))
        if not files:
            continue
        train = f"{VARIANT}:{name}"
        pairs.append(PairConfig(train, name, tuple(files)))
        docs[train] = {}
        for path, entry in files.items():
            exported.append(ExportedModel(train, path, VARIANT, dict(entry)))
    if not exported or not artifact_rules:
        return []
    context = RuleContext(
        dict(stacks),
        docs,
        tuple(pairs),
        exported,
        dict(learned_maxima),
        dict(operator_limits),
        dict(runtimes or {}),
    )
    return run_rules(artifact_rules, context)
