"""The history as a person or a program reads it: tables with headings, JSON and CSV
writers over the same rows, one run's details as text, and trends as sparklines."""

from __future__ import annotations

import csv
import json
import math
import statistics
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any, TextIO

from auditor.compare.ratio_names import by_trainer
from auditor.history.filters import iso
from auditor.history.queries import (
    FingerprintChange,
    RunDetail,
    Series,
)
from auditor.report.summary import ppo_sentence
from auditor.report.text import format_number as num


def plain(value: Any) -> Any:
    """JSON/CSV value: times as ISO 8601 UTC, non-finite floats as "inf", "-inf", "nan"."""
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def us(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:.2f} ms" if value >= 1000 else f"{value:.0f} µs"


def _cells(columns: tuple[str, ...], row: tuple) -> list[str]:
    out = []
    for col, v in zip(columns, row, strict=True):
        if isinstance(v, datetime):
            out.append(f"{v:%Y-%m-%d %H:%M:%S}")
        elif col.endswith("_us"):
            out.append(us(v))
        elif col == "value":
            out.append(num(v))
        elif col == "message" and v is not None:
            out.append(shorten(str(v)))
        else:
            out.append("-" if v is None else str(v))
    return out


MESSAGE_SHOWN = 160
"""Characters of a result's message a table row shows: a row per line of the terminal; the
whole message is in --format json and csv, and in `auditor show RUN`."""


def shorten(message: str, most: int = MESSAGE_SHOWN) -> str:
    """The message's first line, cut to ``most`` characters with an ellipsis where it was cut."""
    lines = message.splitlines() or [""]
    first = lines[0]
    if len(first) > most:
        return first[: most - 1].rstrip() + "…"
    return first + (" …" if len(lines) > 1 else "")


HEADINGS = {
    "started_at": "started (UTC)",
    "finished_at": "finished (UTC)",
    "opened_at": "opened (UTC)",
    "last_seen_at": "last seen (UTC)",
    "resolved_at": "resolved (UTC)",
    "created_at": "since (UTC)",
    "train_p50_us": "train p50",
    "infer_p50_us": "infer p50",
    "auditor_id": "auditor",
}


def write_table(out: TextIO, columns: tuple[str, ...], rows: Iterator[tuple]) -> int:
    """Aligned columns; widths come from the first 1000 rows, then rows stream through."""
    head = [HEADINGS.get(c, c) for c in columns]
    first: list[list[str]] = []
    n = 0
    for row in rows:
        first.append(_cells(columns, row))
        n += 1
        if len(first) == 1000:
            break
    widths = [max([len(h)] + [len(r[i]) for r in first]) for i, h in enumerate(head)]
    widths[-1] = 0  # the last column (message, value) is not padded

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip() + "\n"

    out.write(line(head))
    for cells in first:
        out.write(line(cells))
    for row in rows:
        out.write(line(_cells(columns, row)))
        n += 1
    return n


def write_json(out: TextIO, columns: tuple[str, ...], rows: Iterable[tuple]) -> int:
    n = 0
    out.write("[")
    for row in rows:
        doc = {c: plain(v) for c, v in zip(columns, row, strict=True)}
        out.write(("," if n else "") + "\n  " + json.dumps(doc, allow_nan=False))
        n += 1
    out.write("\n]\n" if n else "]\n")
    return n


def write_csv(out: TextIO, columns: tuple[str, ...], rows: Iterable[tuple]) -> int:
    w = csv.writer(out, lineterminator="\n")
    w.writerow(columns)
    n = 0
    for row in rows:
        w.writerow(["" if v is None else (repr(v) if isinstance(v, float) else plain(v)) for v in row])
        n += 1
    return n


WRITERS = {"table": write_table, "json": write_json, "csv": write_csv}


def jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return plain(value)


def with_words(d: RunDetail) -> RunDetail:
    """A run's results with what the live report said in words beside their figures: the answer
    in PPO terms (``in_ppo_terms``, auditor.report.summary.ppo_sentence), for text and JSON alike,
    and the ratio figures under each trainer's logged names (``in_trainer_terms``)."""
    for res in d.results:
        said = ppo_sentence(res["metrics"].get("*", {}))
        if said is not None:
            res["in_ppo_terms"] = said
        named = by_trainer(res["metrics"].get("*", {}))
        if named:
            res["in_trainer_terms"] = named
    return d


def render_run(d: RunDetail) -> str:
    r = d.run
    lines = [
        f"run {r['id']}  {r['status']}"
        + (f" · outcome {r['outcome']}" if r.get("outcome") else "")
        + f" · started {r['started_at']} · finished {r['finished_at'] or '-'}",
        f"  host {r['host']} · pid {r['pid']} · config {r['config_path']}",
    ]
    if r.get("note"):
        lines.append(f"  note: {r['note']}")
    for problem in d.problems:
        lines.append(f"  unreadable (damaged history database): {problem}")
    lines += ["", "Stacks"]
    for s in d.stacks:
        state = "ok" if s["fingerprint_digest"] else f"no fingerprint: {s['error'] or 'unknown'}"
        if s["fingerprint_digest"] and s["error"]:
            state = f"ok, but: {s['error'].splitlines()[0]}"
        lines.append(
            f"  {s['name']:<14} {s['role']:<6} {s['runtime']:<16} {s['device']:<6} {s['host']}  "
            f"fingerprint {(s['fingerprint_digest'] or '-')[:12]}  {state}"
        )
        if s["fingerprint_changed"]:
            lines.append(
                f"    changed since run {s['previous_run']} "
                f"({(s['previous_digest'] or '')[:12]} → {s['fingerprint_digest'][:12]}):"
            )
            lines += [f"      {change}" for change in s["changes"]]
        doc = s["fingerprint"]
        if doc:
            rt = doc.get("runtime") if isinstance(doc.get("runtime"), dict) else {}
            summary = ", ".join(
                f"{k} {rt[k]}" for k in ("runtime_package", "runtime_version", "python") if rt.get(k)
            )
            if summary:
                lines.append(f"    {summary}")
    lines += ["", "Results"]
    if not d.results:
        lines.append("  (none: the run stored no probe results)")
    for res in d.results:
        lat = res["latency"]
        model = res["variant"] == "model" and ":" in res["pair"]  # [models.NAME]: NAME:REFERENCE->STACK
        reference = res["pair"].split(":", 1)[1].split("->", 1)[0] if model else "train"
        lines.append(
            f"  {res['pair']}  {res['probe']} [{res['variant']}]  {res['status'].upper()}  "
            f"p50 {reference} {us(lat.get('train', {}).get('p50_us'))}, "
            f"{res['infer'] if model else 'infer'} {us(lat.get('infer', {}).get('p50_us'))}"
        )
        if res["status"] != "consistent":
            lines.append(f"    {res['message']}")
        if res.get("localization"):
            lines.append(f"    localized: {res['localization']}")
        ppo = res.get("in_ppo_terms") if res["status"] == "drift" else None
        if ppo:  # the live report's answer in PPO terms, from the stored figures
            lines.append(f"    {ppo}")
        if res["metrics"]:
            # one row per metric, one column per output: outputs are few, metrics many
            names: list[str] = []
            for per_output in res["metrics"].values():
                names += [n for n in per_output if n not in names]
            outputs = list(res["metrics"])
            rows = [["metric", *outputs]] + [
                [n, *(num(res["metrics"][o].get(n)) for o in outputs)] for n in names
            ]
            widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
            for row in rows:
                lines.append(
                    "    " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                )
        for values in res["latencies"]:
            lines.append(
                f"    latency {values['side']}: batch {values['batch']}, {values['samples']} samples, "
                f"p50 {us(values['p50_us'])}, p90 {us(values['p90_us'])}, p99 {us(values['p99_us'])}"
            )
    lines += ["", "Findings"]
    if not d.findings:
        lines.append("  (none)")
    for f in d.findings:
        lines.append(f"  [{f['severity']}] {f['kind']} {f['subject']}: {f['message']}")
    if d.artifacts:
        lines += ["", "Exported models"]
        for a in d.artifacts:
            info = ", ".join(
                f"{k} {v}" for k, v in sorted(a["info"].items()) if not isinstance(v, dict | list)
            )
            stored = "stored" if a["stored"] else "metadata only"
            lines.append(
                f"  {a['sha256'][:16]}  {a['kind']}  {a['size']} bytes  {stored}"
                + (f"  {info}" if info else "")
            )
    return "\n".join(lines)


SPARKS = "▁▂▃▄▅▆▇█"


CHANGE_MARK = "◆"


def _scale(values: list[float], scale: str) -> Callable[[float], float]:
    """A map of values to [0, 1]: linear from 0 (or the minimum, if negative) to the maximum,
    or logarithmic between the smallest positive value and the maximum."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return lambda v: 1.0 if v == math.inf else 0.0
    lo, hi = min(finite), max(finite)
    positive = [v for v in finite if v > 0]
    if scale == "auto":
        scale = "log" if positive and lo >= 0 and max(positive) / min(positive) > 100 else "linear"
    if scale == "log" and positive:
        a, b = math.log10(min(positive)), math.log10(max(positive))

        def log(v: float) -> float:
            if not math.isfinite(v):
                return 1.0 if v == math.inf else 0.0
            if v <= 0:
                return 0.0
            return 1.0 if b == a else min(1.0, max(0.0, (math.log10(v) - a) / (b - a)))

        return log
    base = min(lo, 0.0)

    def lin(v: float) -> float:
        if not math.isfinite(v):
            return 1.0 if v == math.inf else 0.0
        return 1.0 if hi == base else min(1.0, max(0.0, (v - base) / (hi - base)))

    return lin


def sparkline(values: list[float], scale: Callable[[float], float], width: int) -> tuple[str, list[int]]:
    """One character per point, or per bucket of points (its largest value) when there are
    more points than ``width``; also the index of each point's character."""
    if not values:
        return "", []
    buckets = min(width, len(values))
    where = [i * buckets // len(values) for i in range(len(values))]
    top = [-math.inf] * buckets
    for i, v in enumerate(values):
        fv = scale(v)
        top[where[i]] = max(top[where[i]], fv)
    return "".join(SPARKS[min(len(SPARKS) - 1, int(t * (len(SPARKS) - 1) + 0.5))] for t in top), where


def _minute(at: datetime | None) -> str:
    return f"{at:%Y-%m-%d %H:%M}" if at is not None else "(time unknown)  "


def render_trend(
    series: list[Series], changes: list[FingerprintChange], scale: str = "auto", width: int = 60
) -> str:
    lines: list[str] = []
    for s in series:
        values = [p[2] for p in s.points]
        fn = _scale(values, scale)
        stacks = {s.train, s.infer}
        # A damaged start time reads as None (auditor.db.columns): shown as such, bounds nothing.
        times = [p[1] for p in s.points if p[1] is not None]
        first, last = (times[0], times[-1]) if times else (None, None)
        mine = [
            c
            for c in changes
            if c.stack in stacks and first is not None and c.at is not None and first <= c.at <= last
        ]
        finite = sorted(v for v in values if math.isfinite(v))
        what = "side" if s.metric.startswith("latency.") else "output"
        lines.append(f"{s.metric} · {s.pair} · {s.probe} [{s.variant}] · {what} {s.output}")
        lines.append(
            f"  {len(values)} points, {_minute(first)} → {_minute(last)} UTC"
            + (
                f" · min {num(finite[0])} · median {num(statistics.median(finite))} · max {num(finite[-1])}"
                if finite
                else ""
            )
            + f" · latest {num(values[-1])}"
        )
        spark, where = sparkline(values, fn, width)
        lines.append(f"  {spark}")
        if mine:
            marks = [" "] * len(spark)
            for c in mine:
                i = next(
                    (k for k, p in enumerate(s.points) if p[1] is not None and p[1] >= c.at),
                    len(s.points) - 1,
                )
                marks[where[i]] = CHANGE_MARK
            lines.append(f"  {''.join(marks).rstrip()}")
        lines.append("")
        pending = list(mine)
        bar_width = 30
        for run_id, at, value, status in s.points:
            while pending and at is not None and pending[0].at <= at:
                c = pending.pop(0)
                lines.append(f"  {CHANGE_MARK} run {c.run_id}: {c.summary()}")
            frac = fn(value)
            bar = "█" * int(frac * bar_width) if math.isfinite(value) or value == math.inf else ""
            tag = "" if status == "consistent" else f"  {status}"
            lines.append(f"  {_minute(at)}  {run_id:>6}  {num(value):>9}  {bar:<{bar_width}}{tag}".rstrip())
        lines.append("")
    return "\n".join(lines) + "\n"
