"""Render a cycle's result for a person (text) or a program (JSON)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

from auditor.compare.outputs import MetricCheck
from auditor.cycle import baseline, localize, rollout
from auditor.history.publication import summary_of
from auditor.results import CONSISTENT, CycleResult, Latency, ProbeResult

COLUMNS = (
    ("max_abs", "max abs"),
    ("max_rel", "max rel"),
    ("mean_abs", "mean abs"),
    ("cosine", "cosine"),
    ("rel_lt_1e-3", "rel<1e-3"),
    ("bitwise_equal", "bitwise"),
    ("nan_inf_mismatch", "nan/inf"),
    ("min_atol", "min atol"),
    ("min_rtol", "min rtol"),
)


def format_number(value: float | None) -> str:
    """Three significant digits for tables; "-" for a missing value, non-finite spelled out."""
    if value is None:
        return "-"
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == 0:
        return "0"
    return f"{value:.3g}"


_num = format_number


def _cell(name: str, value: float) -> str:
    if name == "cosine":
        return "1" if value == 1.0 else f"{value:.7f}"
    if name == "rel_lt_1e-3":
        return f"{value * 100:.1f}%"
    if name == "bitwise_equal":
        return "yes" if value else "no"
    if name == "nan_inf_mismatch":
        return str(int(value))
    return _num(value)


def format_latency(lat: Latency | None) -> str:
    if lat is None:
        return "-"
    us = lat.p50_us
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.0f} µs"


def _table(rows: list[list[str]], indent: str = "    ") -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def _probe_block(r: ProbeResult, verbose: bool = True, said: str | None = None) -> list[str]:
    """One result. ``said``: the message of the result above it in the same pair; a blocked
    variant with the same reason does not repeat it (the default, non-verbose report)."""
    batch = (r.train_latency or r.infer_latency).batch if (r.train_latency or r.infer_latency) else None
    lat = f"p50 train {format_latency(r.train_latency)}, infer {format_latency(r.infer_latency)}"
    if batch:
        lat += f" (batch {batch})"
    lat += _more_latencies(r)
    head = f"  {r.probe} [{r.variant}]  {r.status.upper()}  {lat}"
    lines = [head]
    if not verbose and r.status == CONSISTENT:
        return lines + _summary_lines(r)
    if r.outputs:
        rows = [["output"] + [label for _, label in COLUMNS] + ["atol/rtol", "verdict"]]
        for c in r.outputs:
            tol = r.thresholds.get(c.output, {})
            rows.append(
                [c.output]
                + [_cell(k, c.metrics[k]) for k, _ in COLUMNS]
                + [
                    f"{_num(tol.get('atol', 0))}/{_num(tol.get('rtol', 0))}",
                    "ok" if c.passed else f"FAIL {c.failing}/{c.total}",
                ]
            )
        lines += _table(rows)
    if r.checks:
        rows = [["check", "output", "value", "limit", "verdict"]]
        for k in r.checks:
            rows.append(
                [
                    k.metric,
                    k.output or "*",
                    _num(k.value),
                    "-" if k.limit is None else _limit(k),
                    "ok" if k.passed else "FAIL",
                ]
            )
        lines += _table(rows)
    if r.status != CONSISTENT and (verbose or r.message != said):
        lines += ["    " + line for line in r.message.splitlines()]
    lines += localize.report_lines(r.localization) + _baseline_lines(r, verbose)
    return lines


SYMBOLS = {"<=": "≤", ">=": "≥"}


def _limit(k: MetricCheck) -> str:
    """The limit with its direction: "≤ 0.001" (value at most), "≥ 0.99" (at least)."""
    symbol = SYMBOLS.get(k.bound(), "")
    return f"{symbol} {_num(k.limit)}" if symbol else _num(k.limit)


def _baseline_lines(r: ProbeResult, verbose: bool) -> list[str]:
    """The golden-baseline lines: always in verbose, else only when a side moved."""
    lines = baseline.report_lines(r.baseline)
    if verbose or not lines or not lines[0].startswith("    baseline: "):
        return lines
    return []


def _summary_lines(r: ProbeResult) -> list[str]:
    """A consistent result in one line: how close it came to its tolerance. The tables are in
    --verbose and --json; a baseline line only when a side moved against its golden."""
    parts = []
    if r.outputs:
        worst = max(r.outputs, key=lambda c: c.metrics.get("max_abs", 0.0))
        bitwise = all(c.metrics.get("bitwise_equal") == 1.0 for c in r.outputs)
        parts.append(
            f"{len(r.outputs)} output{'s' if len(r.outputs) > 1 else ''} "
            + (
                "bitwise equal"
                if bitwise
                else f"within tolerance (max abs {_num(worst.metrics['max_abs'])} on {worst.output})"
            )
        )
    if r.checks:
        parts.append(f"{len(r.checks)} checks ok")
    lines = [f"    {'; '.join(parts)}"] if parts else []
    return lines + _baseline_lines(r, verbose=False)


def _more_latencies(r: ProbeResult) -> str:
    """ "; batch 1: train 1.2 ms, infer 80 µs" for each other batch size timed."""
    train = {lat.batch: lat for lat in r.train_latencies}
    infer = {lat.batch: lat for lat in r.infer_latencies}
    return "".join(
        f"; batch {b}: train {format_latency(train.get(b))}, infer {format_latency(infer.get(b))}"
        for b in sorted(set(train) | set(infer))
    )


def render_text(result: CycleResult, verbose: bool = False) -> str:
    """The report a person reads. Consistent results take two lines; drift, incompatibilities
    and errors show every output and check. ``verbose``: the full tables for every result."""
    when = datetime.fromtimestamp(result.started_at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    run = f"run {result.run_id}" if result.run_id is not None else "not stored"
    out = [
        f"auditor audit · {result.config} · {run} · {when} · {result.finished_at - result.started_at:.1f} s",
        "",
        "Stacks",
    ]
    rows = []
    for s in result.stacks.values():
        fp = s.fingerprint or {}
        rt = fp.get("runtime") if isinstance(fp.get("runtime"), dict) else fp  # the worker's hello
        version = f"{rt.get('runtime_package', s.runtime)} {rt.get('runtime_version', '?')}" if fp else "-"
        python = f"Python {rt['python']}" if rt.get("python") else "-"
        rows.append(
            [
                s.name,
                s.role,
                s.runtime,
                version,
                python,
                s.device,
                "UNAVAILABLE"
                if s.error
                else ("WORKER FAILED" if s.problems else ("ok" if fp else "not run")),
            ]
        )
        if any(x.host != "local" for x in result.stacks.values()):
            rows[-1].insert(-1, f"on {s.host}")  # stacks on other hosts: say where each one is
    out += _table(rows, "  ")
    for s in result.stacks.values():
        if s.error:
            out += ["", f"  {s.name}: " + s.error.splitlines()[0]]
        for problem in s.problems:  # a worker that died or was replaced mid-cycle
            out += ["", f"  {s.name}: " + problem.splitlines()[0]]
    by_pair: dict[str, list[ProbeResult]] = {}
    for r in result.results:
        by_pair.setdefault(r.pair, []).append(r)
    for pair, results in by_pair.items():
        out += ["", f"{pair.replace('->', ' → ')}"]
        said = None
        for r in results:
            out += _probe_block(r, verbose, said)
            said = r.message if r.status != CONSISTENT else None
        for ro in result.rollouts:
            if ro.pair == pair:
                out += rollout.report_lines(ro)
    regressions = [f for f in result.findings if f.kind == "latency-regression"]
    if regressions:
        out += ["", "Latency regressions"]
        out += [f"  ! {f.message}" for f in regressions]
    incompatible = [f for f in result.findings if f.kind == "incompatible"]
    if incompatible:
        out += ["", "Incompatibilities"]
        for f in incompatible:
            out += [f"  ✗ {f.message}"]
            if f.details.get("action"):
                out += [f"      → {f.details['action']}"]
    out += _rule_lines(result)
    out += _side_lines(result)
    out += publication_lines(result)
    unchecked = result.unchecked
    if unchecked:
        out += ["", "Not checked (the run cannot be called consistent)"]
        for line in unchecked:
            first, *rest = line.splitlines()
            out += [f"  ? {first}"] + [f"      {more}" for more in rest[:3]]
    out += ["", outcome_line(result)]
    return "\n".join(out) + "\n"


def publication_lines(result: CycleResult) -> list[str]:
    """Split mode: what this run published (stacks, each export's MindIR digest, when) and
    which publication each ``source = "db"`` stack's pairs were compared with, and its age."""
    out = []
    when = datetime.fromtimestamp(result.finished_at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    for pub in result.publications:
        s = summary_of(pub, run_id=result.run_id)
        out.append(
            f"  published {s.stack}: {len(s.items)} export{'s' if len(s.items) != 1 else ''} at {when}"
        )
        out += [f"      {probe} [{variant}]  MindIR sha256 {sha[:16]}" for probe, variant, sha in s.items]
        if not s.items:
            out.append("      nothing: every export of this stack failed (see its results)")
    now = datetime.fromtimestamp(result.started_at, UTC).replace(tzinfo=None)
    for s in result.read_publications:
        out.append(f"  read {s.stack}: {s.describe(now)}")
        out += [f"      {probe} [{variant}]  MindIR sha256 {sha[:16]}" for probe, variant, sha in s.items]
    return ["", "Publications (split mode)", *out] if out else []


def outcome_line(result: CycleResult) -> str:
    """``Outcome: WORST (n status, ...); exit status N``: the worst status and how many parts
    of the run (results, rollouts, stacks, findings) have each one."""
    counts = result.status_counts()
    summary = ", ".join(f"{n} {s}" for s, n in counts.items()) or "no probe results"
    return f"Outcome: {result.outcome.upper()} ({summary}); exit status {result.exit_code}"


RULE_KINDS = ("version-drift", "rule-error")
MARKS = {"info": "·", "warning": "!", "error": "✗", "critical": "✗"}


def _rule_lines(result: CycleResult) -> list[str]:
    """What the compatibility rules and the drift check found (incompatibilities are above)."""
    found = [
        f
        for f in result.findings
        if f.kind != "incompatible" and ("rule" in f.details or f.kind in RULE_KINDS)
    ]
    if not found:
        return []
    out = ["", "Compatibility and version drift"]
    for f in found:
        text = f.message.splitlines()[0]
        if f.kind == "version-drift":  # the changes one per line below, not run together
            text = text.partition(": ")[0] + ":"
        out.append(f"  {MARKS.get(f.severity, '!')} {f.severity:<8} {text}")
        if f.kind == "version-drift":
            out += [f"      {c['words']}" for c in f.details.get("changes", [])]
        if f.details.get("action"):
            out.append(f"      → {f.details['action']}")
    return out


SIDE_KINDS = ("invariant", "nan-hazard")


def _side_lines(result: CycleResult) -> list[str]:
    """What each stack's outputs showed on their own (auditor.cycle.invariants)."""
    found = [f for f in result.findings if f.kind in SIDE_KINDS]
    if not found:
        return []
    out = ["", "Each stack on its own (invariants, NaN/Inf hazards)"]
    for f in found:
        out.append(f"  {MARKS.get(f.severity, '!')} {f.severity:<8} {f.message}")
    return out


def _jsonable(value: Any) -> Any:
    """Strict JSON: non-finite floats become the strings "inf", "-inf", "nan"."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def render_json(result: CycleResult) -> str:
    doc = result.to_json()
    doc["published"] = [summary_of(p, run_id=result.run_id).to_json() for p in result.publications]
    doc["read_publications"] = [s.to_json() for s in result.read_publications]
    doc["exit_code"] = result.exit_code
    return json.dumps(_jsonable(doc), indent=2, allow_nan=False) + "\n"
