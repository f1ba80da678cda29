"""The deployed-model watch: what changed in the model files a stack serves since its last
fingerprint, and what the rules say about each file on the stack that serves it.

The files come from the ``models`` section of the stack's fingerprint (collected in the
worker by ``auditor.plugins.collectors.models``). A file that appeared, disappeared, or whose
content changed is a ``model-drift`` finding that says what kind of change it is: new
weights from the same exporter (retrained), another exporting MindSpore or MindIR version
(re-exported), another graph (operators or inputs). The generic stack drift leaves the
section to this module, so one change is one finding.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from auditor.config.tables import PairConfig, StackConfig
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


def _change(path: str, b: Mapping[str, Any], a: Mapping[str, Any]) -> tuple[str, str]:
    """(what kind of change, words)."""
    sha = f"sha256 {str(b.get('sha256'))[:12]} -> {str(a.get('sha256'))[:12]}"
    if b.get("readable", True) != a.get("readable", True) or not a.get("readable", True):
        return "unreadable" if not a.get(
            "readable", True
        ) else "readable", f"now {_who(a)} (was {_who(b)}; {sha})"
    exporter = ("model_version", "mind_ir_version", "producer_name", "producer_version", "ir_version")
    if any(b.get(k) != a.get(k) for k in exporter):
        return "re-exported", (f"re-exported: {_who(a)} (was {_who(b)}; {sha})")
    graph = []
    added = sorted(set(a.get("op_types") or ()) - set(b.get("op_types") or ()))
    gone = sorted(set(b.get("op_types") or ()) - set(a.get("op_types") or ()))
    if added or gone:
        graph.append("operators " + ", ".join([f"+{o}" for o in added] + [f"-{o}" for o in gone]))
    if b.get("inputs") != a.get("inputs"):
        graph.append(f"inputs {_signature(b.get('inputs'))} -> {_signature(a.get('inputs'))}")
    if b.get("parameter_elements") != a.get("parameter_elements"):
        graph.append(f"{b.get('parameter_elements')} -> {a.get('parameter_elements')} weights")
    if graph:
        return "graph", f"another graph from the same exporter ({'; '.join(graph)}; {sha})"
    return "retrained", f"new weights, same exporter and graph (retrained? {sha})"


def _signature(inputs: Any) -> str:
    return ", ".join(f"{t.get('name')}{t.get('shape')} {t.get('dtype')}" for t in inputs or ()) or "none"


def model_drift(
    stack: str, before: Mapping[str, Any], after: Mapping[str, Any], previous_run: int | None
) -> list[Finding]:
    """One finding per watched file that was added, removed or changed between two
    fingerprints of ``stack``; none when the earlier one did not watch models yet."""
    b, a = files_of(before), files_of(after)
    if b is None or a is None:
        return []
    since = f"since run {previous_run}" if previous_run is not None else "since the last fingerprint"
    out = []
    for path in sorted(set(b) | set(a)):
        old, new = b.get(path), a.get(path)
        if old == new:
            continue
        if old is None:
            change, words, severity = (
                "added",
                f"new: {_who(new or {})}, sha256 {str((new or {}).get('sha256'))[:12]}",
                "info",
            )
        elif new is None:
            change, words, severity = (
                "removed",
                f"removed (was {_who(old)}, sha256 {str(old.get('sha256'))[:12]})",
                "warning",
            )
        else:
            change, words = _change(path, old, new)
            severity = "warning"
        out.append(
            Finding(
                KIND,
                severity,
                stack,
                f"{stack}/{KIND}/{path}",
                f"deployed model {path} on {stack} changed {since}: {words}",
                {
                    "rule": "deployed-model-watch",
                    "path": path,
                    "change": change,
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
