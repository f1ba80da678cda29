"""What the daemon keeps of a cycle, as plain data the cycle child works out: the run's outcome in
a few words, its NPU telemetry, and the Prometheus families of its measurements (divergence,
statuses, latency, throughput, the stacks' versions).

The cycle child (auditor.daemon.cycle_child) builds a ``CycleSummary`` from the ``CycleResult``
and sends it instead of the result: the daemon then never unpickles the result's types (its
publications are rows of the history, its values numpy's), so it stays as light as it started,
and the exporter (auditor.exposition.prometheus) only turns families into Prometheus' own at scrape.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from auditor.compare import ratio_names
from auditor.results import STATUS_ORDER, CycleResult, HostTelemetry, StackReport

PPO_METRICS = ratio_names.ALL
"""The importance_ratios comparator's figures (auditor.compare.ratio_names: no numpy here)."""

GAUGE, INFO, STATESET = "gauge", "info", "stateset"


@dataclass(frozen=True)
class Family:
    """One metric family: its kind (gauge, info, stateset), name, help, label names and samples
    (label values, and a float; a dict of strings for info, of booleans for a state set)."""

    kind: str
    name: str
    documentation: str
    labels: tuple[str, ...]
    samples: tuple[tuple[tuple[str, ...], Any], ...] = ()


@dataclass(frozen=True)
class CycleSummary:
    """A complete, stored cycle as the daemon keeps it."""

    run_id: int | None
    outcome: str
    counts: str
    """The cycle in a few words ("3 consistent, 1 drift, stack(s) unavailable: ms20")."""
    started_at: float
    finished_at: float
    telemetry: list[HostTelemetry] = field(default_factory=list)
    families: tuple[Family, ...] = ()


def counts_text(result: CycleResult) -> str:
    """ "3 consistent, 1 drift, stack(s) unavailable: ms20": a cycle in a few words."""
    parts = [f"{n} {s}" for s, n in result.status_counts().items()]
    broken = [n for n, s in result.stacks.items() if s.error]
    if broken:
        parts.append(f"stack(s) unavailable: {', '.join(broken)}")
    return ", ".join(parts) or "nothing to check"


def summarize(result: CycleResult) -> CycleSummary:
    """What the daemon keeps of ``result`` (plain floats and strings only)."""
    return CycleSummary(
        result.run_id,
        result.outcome,
        counts_text(result),
        float(result.started_at),
        float(result.finished_at),
        list(result.telemetry),
        cycle_families(result),
    )


def cycle_families(cycle: CycleResult) -> tuple[Family, ...]:
    """The Prometheus families of one complete cycle's measurements."""
    labels = ("pair", "probe", "variant")
    divergence: list[tuple[tuple[str, ...], Any]] = []
    status: list[tuple[tuple[str, ...], Any]] = []
    latency: list[tuple[tuple[str, ...], Any]] = []
    served: list[tuple[tuple[str, ...], Any]] = []
    saturation: list[tuple[tuple[str, ...], Any]] = []
    ppo: list[tuple[tuple[str, ...], Any]] = []
    limits: list[tuple[tuple[str, ...], Any]] = []
    for r in cycle.results:
        key = (r.pair, r.probe, r.variant)
        status.append((key, {s: s == r.status for s in STATUS_ORDER}))
        for c in r.outputs:
            for name, value in c.metrics.items():
                if isinstance(value, bool | int | float):
                    divergence.append(((*key, c.output, name), float(value)))
        for stack, lat in ((r.train, r.train_latency), (r.infer, r.infer_latency)):
            if lat is None:
                continue
            for q, us in (("0.5", lat.p50_us), ("0.9", lat.p90_us), ("0.99", lat.p99_us)):
                latency.append(((stack, *key, q), float(us) / 1e6))
        for t in r.throughput:
            served.append(((r.infer, *key, str(t.batch)), float(t.samples_per_s)))
        if r.saturation_batch is not None:
            saturation.append(((r.infer, *key), float(r.saturation_batch)))
        for c in r.checks:
            if c.metric in PPO_METRICS and c.output is None:
                ppo.append(((*key, c.metric), float(c.value)))
                if c.limit is not None:
                    limits.append(((*key, c.metric), float(c.limit)))
    found = Counter((f.kind, f.severity, f.subject) for f in cycle.findings)
    stacks = [((name, s.role, s.runtime, s.host), stack_versions(s)) for name, s in cycle.stacks.items()]
    families = [
        Family(
            GAUGE,
            "auditor_divergence",
            "Comparison metrics of the last complete cycle, per pair, probe variant, output and metric.",
            (*labels, "output", "metric"),
            tuple(divergence),
        ),
        Family(
            STATESET,
            "auditor_probe_status",
            "Status of each probe variant on each pair in the last complete cycle.",
            labels,
            tuple(status),
        ),
        Family(
            GAUGE,
            "auditor_latency_seconds",
            "Per-call latency measured inside the stack's worker, by quantile, in the last complete cycle.",
            ("stack", *labels, "quantile"),
            tuple(latency),
        ),
        Family(
            GAUGE,
            "auditor_throughput_samples_per_second",
            "Samples per second of the serving (infer) stack at each batch size timed (batch / p50), "
            "in the last complete cycle.",
            ("stack", *labels, "batch"),
            tuple(served),
        ),
    ]
    if ppo:
        families.append(
            Family(
                GAUGE,
                "auditor_ppo_ratio",
                "The stacks' difference in PPO's terms in the last complete cycle: importance ratios "
                "w = pi_train / pi_infer on actions drawn from the infer side's policy.",
                (*labels, "metric"),
                tuple(ppo),
            )
        )
    if limits:
        families.append(
            Family(
                GAUGE,
                "auditor_ppo_limit",
                "The limit each auditor_ppo_ratio figure is held to ([ppo]; at most, ess: at least) "
                "in the last complete cycle.",
                (*labels, "metric"),
                tuple(limits),
            )
        )
    families.append(
        Family(
            GAUGE,
            "auditor_findings",
            "Findings of the last complete cycle by kind, severity and subject (a pair, a stack, a "
            "host): a cause is one finding however many places it holds.",
            ("kind", "severity", "subject"),
            tuple(((k, sev, sub), float(n)) for (k, sev, sub), n in sorted(found.items())),
        )
    )
    if saturation:
        families.append(
            Family(
                GAUGE,
                "auditor_saturation_batch",
                "The smallest timed batch whose throughput reaches [latency] saturation of the highest.",
                ("stack", *labels),
                tuple(saturation),
            )
        )
    families.append(
        Family(
            INFO,
            "auditor_stack",
            "Versions found in each stack's fingerprint (empty: unknown).",
            ("stack", "role", "runtime", "host"),
            tuple(stacks),
        )
    )
    return tuple(families)


def stack_versions(stack: StackReport) -> dict[str, str]:
    """The stack's runtime (its package and version, whatever the runtime), and the MindSpore,
    MindSpore Lite, CANN and driver versions from a fingerprint, whichever of its layouts is
    present (the collectors' sections, or the worker's hello alone)."""
    fp = stack.fingerprint or {}

    def dig(*path: str) -> str:
        node: Any = fp
        for key in path:
            if not isinstance(node, dict):
                return ""
            node = node.get(key)
        return str(node) if isinstance(node, str | int | float) and node != "" else ""

    runtime = fp.get("runtime") if isinstance(fp.get("runtime"), dict) else fp
    package = runtime.get("runtime_package") if isinstance(runtime, dict) else None
    version = runtime.get("runtime_version") if isinstance(runtime, dict) else None
    found = {
        "mindspore": dig("framework", "mindspore", "version") or dig("packages", "framework", "mindspore"),
        "mindspore_lite": dig("framework", "mindspore_lite", "version")
        or dig("packages", "framework", "mindspore-lite"),
    }
    label = str(package or "").replace("-", "_")
    if label in found and not found[label] and version:
        found[label] = str(version)  # the hello alone: the runtime's own package
    return {
        "runtime_package": str(package or ""),
        "runtime_version": str(version or ""),
        **found,
        "cann": dig("cann", "version"),
        "driver": dig("driver", "version"),
    }
