"""Render a cycle's result for a person (text) or a program (JSON).

The default text is the compact report (auditor.report.summary): one line per probe variant
or model, the failing outputs of a failing one, each cause once, and the outcome line;
``verbose`` prints every output and check of every result. ``--json`` holds the full result
and, under ``"report"``, the compact report's structure. ``outcome_line`` is the one place
that says a run's outcome in words (the worst status and the count of every status).
"""

from __future__ import annotations

import json
import math
import textwrap
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from auditor.compare.verdicts import MetricCheck
from auditor.history.publication import summary_of
from auditor.policy import baseline, localize, rollout
from auditor.report import fleet_view
from auditor.report.summary import (
    MAX_CHECKS,
    Cause,
    FailingCheck,
    FailingOutput,
    Line,
    Summary,
    conversion_words,
    format_number,
    host_telemetry_line,
    is_model,
    not_checked_lines,
    ppo_words,
    publication_lines,
    reference_label,
    result_line,
    summarize,
)
from auditor.report.summary import status_counts as status_counts
from auditor.results import (
    CONSISTENT,
    NPU_TELEMETRY,
    STATUS_ORDER,
    TELEMETRY_UNAVAILABLE,
    CycleResult,
    Finding,
    HostTelemetry,
    Latency,
    ProbeResult,
)

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


def _probe_block(r: ProbeResult) -> list[str]:
    """One result with every output and check (the full report)."""
    batch = (r.train_latency or r.infer_latency).batch if (r.train_latency or r.infer_latency) else None
    sides = (reference_label(r), r.infer) if is_model(r) else ("train", "infer")
    lat = f"p50 {sides[0]} {format_latency(r.train_latency)}, {sides[1]} {format_latency(r.infer_latency)}"
    if batch:
        lat += f" (batch {batch})"
    lat += _more_latencies(r)
    if r.throughput:
        lat += f"; {_throughput(r)}"
    lines = [f"  {r.probe} [{r.variant}]  {r.status.upper()}  {lat}"]
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
    if is_model(r) and r.outputs:
        lines.append(f"    {r.samples} samples compared with {reference_label(r)}")
    ppo = ppo_words(r)
    if ppo is not None:
        lines.append(f"    {ppo}")
    if r.status != CONSISTENT:
        lines += ["    " + line for line in r.message.splitlines()]
    lines += ["    " + words for words in conversion_words(r)]
    return lines + localize.report_lines(r.localization) + baseline.report_lines(r.baseline)


SYMBOLS = {"<=": "≤", ">=": "≥"}


def _limit(k: MetricCheck) -> str:
    """The limit with its direction: "≤ 0.001" (value at most), "≥ 0.99" (at least)."""
    symbol = SYMBOLS.get(k.bound(), "")
    return f"{symbol} {_num(k.limit)}" if symbol else _num(k.limit)


def format_rate(samples_per_s: float) -> str:
    """Samples per second, short: 812/s, 12.3k/s, 4.1M/s."""
    for factor, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if samples_per_s >= factor:
            return f"{samples_per_s / factor:.3g}{unit}/s"
    return f"{samples_per_s:.3g}/s"


def _throughput(r: ProbeResult) -> str:
    """ "served 12.3k/s at batch 1 … 1.9M/s at batch 256, saturating at batch 64" """
    first, last = r.throughput[0], r.throughput[-1]
    words = f"served {format_rate(first.samples_per_s)} at batch {first.batch}"
    if last.batch != first.batch:
        words += f" … {format_rate(last.samples_per_s)} at batch {last.batch}"
    if r.saturation_batch is not None:
        words += f", saturating at batch {r.saturation_batch}"
    return words


def _more_latencies(r: ProbeResult) -> str:
    """ "; batch 1: train 1.2 ms, infer 80 µs" for each other batch size timed."""
    train = {lat.batch: lat for lat in r.train_latencies}
    infer = {lat.batch: lat for lat in r.infer_latencies}
    return "".join(
        f"; batch {b}: train {format_latency(train.get(b))}, infer {format_latency(infer.get(b))}"
        for b in sorted(set(train) | set(infer))
    )


def render_full(result: CycleResult) -> str:
    """The full report (``--verbose``): every output and check of every result, every finding."""
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
        for r in results:
            out += _probe_block(r)
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
    out += telemetry_lines(result.telemetry, result.findings, verbose=True)
    out += publication_lines(result) + not_checked_lines(result.unchecked)
    out += ["", outcome_line(result.outcome, status_counts(result), result.exit_code)]
    return "\n".join(out) + "\n"


def render_text(result: CycleResult, verbose: bool = False) -> str:
    """The report a person reads: the compact one, or with ``verbose`` the full tables."""
    return render_full(result) if verbose else render_summary(summarize(result))


def render_result(r: ProbeResult, title: str, verbose: bool = False) -> str:
    """One comparison on its own (``auditor compare``): its line and failing outputs, or with
    ``verbose`` every output and check."""
    if verbose:
        lines = _probe_block(r)
    else:
        ln = result_line(r)
        lines = _summary_line(ln, len(_label(ln)))
        if ln.outputs and ln.checks:  # alone, its failing checks are said too
            lines.insert(1 + len(ln.outputs), _checks_line(ln.checks))
        if r.status not in (CONSISTENT, "drift"):
            lines += ["    " + m for m in r.message.splitlines()]
    counts = {s: int(s == r.status) for s in STATUS_ORDER}
    outcome = outcome_line(r.status, counts, 0 if r.status == CONSISTENT else 1)
    return "\n".join([title, *lines, "", outcome]) + "\n"


def outcome_line(worst: str, counts: dict[str, int], exit_code: int | None = None) -> str:
    """The last line of a run's report: its worst status and the count of every status
    (``Outcome: DRIFT (20 consistent, 3 drift, 0 unsupported, 0 incompatible, 0 error); exit
    status 1``). Every report of a run's outcome says it with this function."""
    said = ", ".join(f"{n} {status}" for status, n in counts.items())
    tail = f"; exit status {exit_code}" if exit_code is not None else ""
    return f"Outcome: {worst.upper()} ({said}){tail}"


def render_summary(summary: Summary) -> str:
    """The compact report: a screen for a failing default cycle, each cause once."""
    out = [summary.title, ""]
    out += _stack_lines(summary.stacks)
    width = max((len(_label(ln)) for b in summary.blocks for ln in b.lines), default=0)
    titles = max((len(b.title) for b in summary.blocks if b.folded), default=0)
    for block in summary.blocks:
        if block.folded:
            out.append(f"{block.title:<{titles}}  {block.folded}")
        else:
            out.append(block.title)
            for ln in block.lines:
                if block.rest is None or ln.status != CONSISTENT:
                    out += _summary_line(ln, width)
            if block.rest is not None:
                out.append(f"{'  the others':<{width}}  {CONSISTENT:<12} {block.rest}")
        if block.also:  # a group's hosts failing the same way (auditor.report.fleet_view)
            hosts = fleet_view.some(block.also)
            out.append(f"  the same on {fleet_view.plural(len(block.also), 'more host')}: {hosts}")
            if len(block.also) > fleet_view.SHOWN + 1:
                out.append(f"  (every one: {fleet_view.LIST_ALL})")
    if len(summary.devices) == 1:
        out += ["", *_wrapped(summary.devices[0], "NPU telemetry: ", "  ", 1)]
    elif summary.devices:  # a line per kind of reading, hosts folded, each cut to one line
        out += ["", "NPU telemetry"] + [x for line in summary.devices for x in _wrapped(line, "  ", "  ", 1)]
    if summary.causes:
        out += ["", "Findings"]
        actions: dict[str, int] = {}
        for c in summary.causes:
            out += _cause_lines(c, actions)
    out += summary.publications + not_checked_lines(summary.unchecked)
    o = summary.outcome
    out += ["", outcome_line(o.worst, o.counts, o.exit_code)]
    return "\n".join(out) + "\n"


def _stack_lines(stacks: list[dict]) -> list[str]:
    """One line when every stack is fine, else a line per stack with what went wrong."""
    remote = any(s["host"] != "local" for s in stacks)

    def name(s: dict) -> str:
        where = f" on {s['host']}" if remote else ""  # "on 31 hosts" for a group's members
        return f"{s['name']}{where} ({s['version'] or s['runtime']})"

    if all(s["state"] == "ok" for s in stacks):
        return [f"Stacks (all ok): {', '.join(name(s) for s in stacks)}", ""] if stacks else []
    out = ["Stacks"]
    fine = [s for s in stacks if s["state"] == "ok"]
    if fine:  # those that are fine in one line, each problem (one per cause) in its own
        out += _wrapped(", ".join(name(s) for s in fine), "  ok: ", "      ", 1)
    for s in stacks:
        if s["state"] == "ok":
            continue
        head = f"  {name(s)}  {s['state'].upper()}"
        if s.get("cause") is not None:  # said in full by a finding below
            out.append(f"{head} [{s['cause']}]")
        else:
            out += _wrapped(s["problem"], head + ": ", "      ", 2) if s["problem"] else [head]
    return out + [""]


def _label(ln: Line) -> str:
    return f"  {ln.label}"


def _summary_line(ln: Line, width: int) -> list[str]:
    """A variant's line; a failing one's outputs (its checks when no output failed) and the
    first line of each note; or where it fails as a line above it, that line's name."""
    status = ln.status if ln.status == CONSISTENT else ln.status.upper()
    said = " ".join(x for x in (f"[{ln.cause}]" if ln.cause is not None else "", ln.text) if x)
    if ln.same_as is not None:
        failed = ", ".join(o.output for o in ln.outputs) or ", ".join(k.metric for k in ln.checks)
        return [f"{_label(ln):<{width}}  {status:<12} the same outputs as {ln.same_as}: {failed}"]
    head = f"{_label(ln):<{width}}  {status:<12} "
    lines = _wrapped(said, head, " " * min(len(head), 30), LINE_LINES) if said else [head.rstrip()]
    lines += _output_lines(ln.outputs)
    if ln.checks and not ln.outputs:
        lines.append(_checks_line(ln.checks))
    lines += [x for note in ln.notes for x in _wrapped(note, "      ", "        ", 1)]
    if ln.ppo:  # the answer a trainer needs is never cut: clip share, TIS share and ESS
        lines += textwrap.wrap(ln.ppo, WIDTH, initial_indent="      ", subsequent_indent="        ")
    return lines


LINE_LINES = 2
"""A variant's or rollout's own line, wrapped, at most (the rest is in --verbose and show)."""


def _output_lines(outputs: list[FailingOutput]) -> list[str]:
    """The failing outputs of a variant, one aligned line each: how much of it failed, by how
    far, and the tolerance that would have passed (Polygraphy's "minimum required tolerance")."""
    rows = []
    for o in outputs:
        if o.shape_mismatch:
            rows.append([o.output, f"shape differs: {o.shape_mismatch}"])
            continue
        if o.nan_inf:
            passes = f"NaN/Inf on one side only in {o.nan_inf}: no tolerance passes"
        else:
            passes = f"would pass at atol {_num(o.min_atol)} or rtol {_num(o.min_rtol)}"
            if o.atol is not None and o.rtol is not None:
                passes += f" (is {_num(o.atol)}/{_num(o.rtol)})"
        rows.append(
            [
                o.output,
                f"{o.failing}/{o.total} out ({o.share:.0%})",
                f"max abs {_num(o.max_abs)}",
                f"max rel {_num(o.max_rel)}",
                passes,
            ]
        )
    widths = [max((len(r[i]) for r in rows if len(r) > 2), default=0) for i in range(4)] + [0]

    def line(r: list[str]) -> str:
        if len(r) == 2:
            return "      " + ": ".join(r)
        return "      " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()

    return [line(r) for r in rows]


def _checks_line(checks: list[FailingCheck]) -> str:
    def one(k: FailingCheck) -> str:
        name = f"{k.metric}[{k.output}]" if k.output else k.metric
        if k.limit is None:
            return f"{name} {_num(k.value)}"
        op = {"<=": ">", ">=": "<"}.get(k.bound, "vs")
        return f"{name} {_num(k.value)} {op} {_num(k.limit)}"

    shown = ", ".join(one(k) for k in checks[:MAX_CHECKS])
    more = f", +{len(checks) - MAX_CHECKS} more" if len(checks) > MAX_CHECKS else ""
    return f"      checks: {shown}{more}"


WIDTH = 110
"""Findings and remedies are wrapped to this many columns."""


def _cause_lines(c: Cause, actions: dict[str, int]) -> list[str]:
    """A cause in at most ``CAUSE_LINES`` lines (the rest is in --verbose and `auditor show`),
    and its remedy unless a cause above gave the same one."""
    head = f"  [{c.ref}] {MARKS.get(c.severity, '!')} {c.severity:<8} "
    said = c.action in actions
    text = c.text + (f" (→ as for [{actions[c.action or '']}])" if said else "")
    lines = _wrapped(text, head, " " * len(head), CAUSE_LINES)
    if c.action and c.severity != "info" and not said:
        actions[c.action] = c.ref
        lines += _wrapped(c.action, "      → ", "        ", CAUSE_LINES - 1)
    return lines


CAUSE_LINES = 2


def _wrapped(text: str, first: str, rest: str, most: int) -> list[str]:
    lines = textwrap.wrap(text, WIDTH, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False)
    if len(lines) > most:
        lines = lines[:most]
        lines[-1] = lines[-1][: WIDTH - 1].rstrip() + "…"
    return lines


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
    """What each stack's outputs showed on their own (auditor.policy.invariants)."""
    found = [f for f in result.findings if f.kind in SIDE_KINDS]
    if not found:
        return []
    out = ["", "Each stack on its own (invariants, NaN/Inf hazards)"]
    for f in found:
        out.append(f"  {MARKS.get(f.severity, '!')} {f.severity:<8} {f.message}")
    return out


TELEMETRY_KINDS = (NPU_TELEMETRY, TELEMETRY_UNAVAILABLE)
TELEMETRY_COLUMNS = (
    ("power_w", "{:g} W"),
    ("temperature_c", "{:g} °C"),
    ("aicore_pct", "AI Core {:g}%"),
    ("aicpu_pct", "AI CPU {:g}%"),
    ("hbm_usage_pct", "HBM {:g}%"),
    ("memory_usage_pct", "DDR {:g}%"),
    ("ecc_hbm_double_bit", "ECC2 {:g}"),
)
HEALTH_WORDS = {0: "OK", 1: "Warning", 2: "Alarm", 3: "Critical"}


def telemetry_lines(samples: list[HostTelemetry], findings: list[Finding], verbose: bool) -> list[str]:
    """One line per host (a host without NPUs says so, once), each NPU's latest values when
    ``verbose``, and the threshold findings."""
    if not samples:
        return []
    out = ["", "NPU telemetry"]
    for t in samples:
        out.append(f"  {host_telemetry_line(t)}")
        if not t.available:
            continue
        if not verbose:
            continue
        rows = []
        for n in t.npus:
            for c in n.chips:
                v = c.values
                cells = [fmt.format(v[k]) for k, fmt in TELEMETRY_COLUMNS if k in v]
                if "health" in v:
                    cells.append(HEALTH_WORDS.get(int(v["health"]), f"health {v['health']:g}"))
                rows.append([f"npu{n.npu}" + ("" if c.chip == "0" else f".{c.chip}"), *cells])
        width = max((len(r) for r in rows), default=0)
        out += _table([r + [""] * (width - len(r)) for r in rows], "    ") if rows else []
        out += [f"    npu{n.npu}  {len(n.errors)} view(s) failed: {n.errors[0]}" for n in t.npus if n.errors]
    for f in findings:
        if f.kind in TELEMETRY_KINDS:
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


def jsonable_result(r: ProbeResult) -> dict[str, Any]:
    """One result as strict JSON data (``auditor compare --json``)."""
    doc = asdict(r)
    doc["exit_code"] = 0 if r.status == CONSISTENT else 1
    doc["report"] = asdict(result_line(r))
    return _jsonable(doc)


def render_json(result: CycleResult) -> str:
    """The full result, its exit status, and the compact report's structure under "report"."""
    doc = result.to_json()
    doc["published"] = [summary_of(p, run_id=result.run_id).to_json() for p in result.publications]
    doc["read_publications"] = [s.to_json() for s in result.read_publications]
    doc["exit_code"] = result.exit_code
    doc["report"] = summarize(result).to_json()
    return json.dumps(_jsonable(doc), indent=2, allow_nan=False) + "\n"
