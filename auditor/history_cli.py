"""The history commands: ``history``, ``show``, ``trend``, ``report`` and ``db``.

They read the history database named by ``--db`` or the config's ``[storage] url`` (the
default SQLite file when there is neither). Listings stream: ``history --limit 0`` over a
long history writes rows as they are read, in any of the three formats.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from datetime import datetime
from typing import Any, TextIO

import click

from auditor.cli_context import EXIT_FINDINGS, EXIT_USAGE, MAX_LIMIT, Context, fail
from auditor.history import (
    METRIC_COLUMNS,
    RESULT_COLUMNS,
    Filters,
    FingerprintChange,
    HistoryError,
    RunDetail,
    Series,
    fingerprint_changes,
    iso,
    known_values,
    metric_rows,
    parse_when,
    refresh_statistics,
    resolve_run,
    result_rows,
    run_detail,
    trend,
)
from auditor.redact import redact_url
from auditor.report import format_number as num
from auditor.results import STATUS_ORDER

STATUSES = STATUS_ORDER
"""Every status a probe result is stored with (``unsupported`` included)."""


def _when(value: str | None, option: str) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_when(value)
    except HistoryError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None


def filter_options(metric: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The filter options shared by history, trend and report (repeat one to match any value)."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        opts = [
            click.option("--pair", "pairs", multiple=True, metavar="TRAIN->INFER", help="Only this pair."),
            click.option("--probe", "probes", multiple=True, metavar="NAME", help="Only this probe."),
            click.option("--variant", "variants", multiple=True, metavar="NAME", help="Only this variant."),
        ]
        if metric:
            opts.append(
                click.option(
                    "--metric",
                    "metrics",
                    multiple=True,
                    metavar="NAME",
                    help="List metric values (one row per output and metric) instead of results.",
                )
            )
        opts += [
            click.option(
                "--output", "outputs", multiple=True, metavar="NAME", help="Only this probe output."
            ),
            click.option(
                "--stack",
                "stacks",
                multiple=True,
                metavar="NAME",
                help="Only pairs with this stack on a side.",
            ),
            click.option(
                "--host",
                "hosts",
                multiple=True,
                metavar="NAME",
                help="Only pairs with a stack on this host ([hosts] name, or 'local') on a side.",
            ),
            click.option(
                "--status",
                "statuses",
                multiple=True,
                type=click.Choice(STATUSES),
                help="Only results with this status.",
            ),
            click.option(
                "--since", metavar="WHEN", help="Runs started at or after: ISO time, or 7d, 12h, 90m."
            ),
            click.option("--until", metavar="WHEN", help="Runs started before: ISO time, or 7d, 12h, 90m."),
        ]
        for opt in reversed(opts):
            fn = opt(fn)
        return fn

    return decorate


def _filters(kw: dict[str, Any], limit: int | None) -> Filters:
    return Filters(
        pairs=tuple(kw.get("pairs", ())),
        probes=tuple(kw.get("probes", ())),
        variants=tuple(kw.get("variants", ())),
        metrics=tuple(kw.get("metrics", ())),
        outputs=tuple(kw.get("outputs", ())),
        stacks=tuple(kw.get("stacks", ())),
        statuses=tuple(kw.get("statuses", ())),
        hosts=tuple(kw.get("hosts", ())),
        since=_when(kw.get("since"), "--since"),
        until=_when(kw.get("until"), "--until"),
        limit=limit if limit else None,
    )


def _reject_unknown(conn: Any, f: Filters) -> None:
    """A filter value that matches nothing in the whole history is a typo: a usage error
    naming the values there are, before any output."""
    for column, values in (
        ("pair", f.pairs),
        ("probe", f.probes),
        ("variant", f.variants),
        ("metric", f.metrics),
        ("output", f.outputs),
        ("stack", f.stacks),
        ("host", f.hosts),
    ):
        if not values:
            continue
        known = known_values(conn, column)
        if column == "metric":
            values = tuple(v for v in values if not v.startswith("latency."))
        for v in values:
            if v not in known:
                shown = ", ".join(known[:20]) + (", …" if len(known) > 20 else "")
                fail(f"no {column} {v!r} in the history (known: {shown or 'none yet'})", EXIT_USAGE)


# -- formatting ---------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
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
        if col == "started_at":
            out.append("-" if v is None else f"{v:%Y-%m-%d %H:%M:%S}")
        elif col.endswith("_us"):
            out.append(us(v))
        elif col == "value":
            out.append(num(v))
        else:
            out.append("-" if v is None else str(v))
    return out


HEADINGS = {"started_at": "started (UTC)", "train_p50_us": "train p50", "infer_p50_us": "infer p50"}


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
        doc = {c: _plain(v) for c, v in zip(columns, row, strict=True)}
        out.write(("," if n else "") + "\n  " + json.dumps(doc, allow_nan=False))
        n += 1
    out.write("\n]\n" if n else "]\n")
    return n


def write_csv(out: TextIO, columns: tuple[str, ...], rows: Iterable[tuple]) -> int:
    w = csv.writer(out, lineterminator="\n")
    w.writerow(columns)
    n = 0
    for row in rows:
        w.writerow(["" if v is None else (repr(v) if isinstance(v, float) else _plain(v)) for v in row])
        n += 1
    return n


WRITERS = {"table": write_table, "json": write_json, "csv": write_csv}


# -- history --------------------------------------------------------------------------------------


@click.command("history")
@filter_options()
@click.option(
    "--limit",
    default=50,
    show_default=True,
    type=click.IntRange(0, MAX_LIMIT),
    help="At most this many rows, newest first (0: all).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(tuple(WRITERS)),
    default="table",
    show_default=True,
    help="Output format.",
)
@click.pass_obj
def history_command(obj: Context, limit: int, fmt: str, **kw: Any) -> None:
    """List probe results from the history, newest first.

    One row per probe result (status and p50 latency of each side); with --metric, one row
    per result, output and metric with its value. Filters combine (all must hold); a
    repeated filter matches any of its values.

    \b
    Examples:
      auditor history --pair 'ms20->lite20' --metric max_abs --since 7d
      auditor history --probe ppo_policy --status drift --status error
      auditor history --stack lite20 --limit 0 --format csv > lite20.csv
    """
    f = _filters(kw, limit)
    store = obj.store(read=True)
    out = sys.stdout
    with store.engine.connect() as conn:
        refresh_statistics(conn)
        _reject_unknown(conn, f)
        if f.metrics or f.outputs:
            columns, rows = METRIC_COLUMNS, metric_rows(conn, f)
        else:
            columns, rows = RESULT_COLUMNS, result_rows(conn, f)
        n = WRITERS[fmt](out, columns, rows)
        if n == 0 and fmt == "table":
            click.echo("(no matching rows)", err=True)


# -- show -------------------------------------------------------------------------------------------

text_or_json = click.option(
    "--format",
    "fmt",
    type=click.Choice(("text", "json")),
    default="text",
    show_default=True,
    help="Output format.",
)


@click.command("show")
@click.argument("run", metavar="RUN")
@text_or_json
@click.pass_obj
def show_command(obj: Context, run: str, fmt: str) -> None:
    """Everything stored about one run: RUN is a run id, 'latest' or 'latest~N'.

    The run's status and times, each stack with its fingerprint (and what changed since
    that stack's previous run), every probe result with its metrics and latencies, the
    findings and the exported models.
    """
    store = obj.store(read=True)
    with store.engine.connect() as conn:
        try:
            detail = run_detail(conn, resolve_run(conn, run))
        except HistoryError as exc:
            fail(str(exc), EXIT_FINDINGS if "no run" in str(exc) else EXIT_USAGE)
    if fmt == "json":
        click.echo(json.dumps(_jsonable(detail.to_json()), indent=2, allow_nan=False))
        return
    click.echo(_render_run(detail))


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return _plain(value)


def _render_run(d: RunDetail) -> str:
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
        lines.append(
            f"  {res['pair']}  {res['probe']} [{res['variant']}]  {res['status'].upper()}  "
            f"p50 train {us(lat.get('train', {}).get('p50_us'))}, "
            f"infer {us(lat.get('infer', {}).get('p50_us'))}"
        )
        if res["status"] != "consistent":
            lines.append(f"    {res['message']}")
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


# -- trend -----------------------------------------------------------------------------------------

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


def render_trend(
    series: list[Series], changes: list[FingerprintChange], scale: str = "auto", width: int = 60
) -> str:
    lines: list[str] = []
    for s in series:
        values = [p[2] for p in s.points]
        fn = _scale(values, scale)
        stacks = {s.train, s.infer}
        mine = [c for c in changes if c.stack in stacks and s.points[0][1] <= c.at <= s.points[-1][1]]
        finite = sorted(v for v in values if math.isfinite(v))
        what = "side" if s.metric.startswith("latency.") else "output"
        lines.append(f"{s.metric} · {s.pair} · {s.probe} [{s.variant}] · {what} {s.output}")
        lines.append(
            f"  {len(values)} points, {s.points[0][1]:%Y-%m-%d %H:%M} → {s.points[-1][1]:%Y-%m-%d %H:%M} UTC"
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
                i = next((k for k, p in enumerate(s.points) if p[1] >= c.at), len(s.points) - 1)
                marks[where[i]] = CHANGE_MARK
            lines.append(f"  {''.join(marks).rstrip()}")
        lines.append("")
        pending = list(mine)
        bar_width = 30
        for run_id, at, value, status in s.points:
            while pending and pending[0].at <= at:
                c = pending.pop(0)
                lines.append(f"  {CHANGE_MARK} run {c.run_id}: {c.summary()}")
            frac = fn(value)
            bar = "█" * int(frac * bar_width) if math.isfinite(value) or value == math.inf else ""
            tag = "" if status == "consistent" else f"  {status}"
            lines.append(
                f"  {at:%Y-%m-%d %H:%M}  {run_id:>6}  {num(value):>9}  {bar:<{bar_width}}{tag}".rstrip()
            )
        lines.append("")
    return "\n".join(lines) + "\n"


@click.command("trend")
@click.option(
    "--metric",
    required=True,
    metavar="NAME",
    help="A stored metric (max_abs, cosine, ...) or latency.[train.|infer.]p50_us (also p90, p99, mean).",
)
@filter_options(metric=False)
@click.option(
    "--limit",
    default=50,
    show_default=True,
    type=click.IntRange(0, MAX_LIMIT),
    help="Newest points per series (0: all).",
)
@click.option(
    "--scale",
    type=click.Choice(("auto", "linear", "log")),
    default="auto",
    show_default=True,
    help="Bar scale; auto is log when values span more than two orders of magnitude.",
)
@click.option(
    "--width",
    default=60,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="Width of the sparkline in characters.",
)
@text_or_json
@click.pass_obj
def trend_command(obj: Context, metric: str, limit: int, scale: str, width: int, fmt: str, **kw: Any) -> None:
    """One metric over time, per pair, probe, variant and output, in the terminal.

    A sparkline and one line per run, oldest first; a run in which the fingerprint of the
    pair's train or infer stack changed is marked with ◆ and what changed.

    \b
    Examples:
      auditor trend --metric max_abs --pair 'ms20->lite20' --output mean
      auditor trend --metric latency.infer.p50_us --since 7d
    """
    f = _filters(kw, limit)
    store = obj.store(read=True)
    with store.engine.connect() as conn:
        refresh_statistics(conn)
        _reject_unknown(conn, replace(f, metrics=(metric,)))
        try:
            series = trend(conn, metric, f)
        except HistoryError as exc:
            fail(str(exc))
        changes: list[FingerprintChange] = []
        if series:
            stacks = {n for s in series for n in (s.train, s.infer) if n}
            first = min(s.points[0][1] for s in series)
            last = max(s.points[-1][1] for s in series)
            changes = [c for c in fingerprint_changes(conn, sorted(stacks), since=first) if c.at <= last]
        elif not metric.startswith("latency.") and metric not in known_values(conn, "metric"):
            known = ", ".join(known_values(conn, "metric"))
            fail(f"no metric {metric!r} in the history (known: {known or 'none yet'})")
    if fmt == "json":
        doc = {
            "metric": metric,
            "series": [
                {
                    "pair": s.pair,
                    "probe": s.probe,
                    "variant": s.variant,
                    "output": s.output,
                    "train": s.train,
                    "infer": s.infer,
                    "points": [
                        {"run": r, "at": iso(at), "value": _plain(v), "status": st}
                        for r, at, v, st in s.points
                    ],
                }
                for s in series
            ],
            "fingerprint_changes": [c.to_json() for c in changes],
        }
        click.echo(json.dumps(doc, indent=2, allow_nan=False))
        return
    if not series:
        click.echo(f"no values of {metric} match", err=True)
        return
    click.echo(render_trend(series, changes, scale, width), nl=False)


# -- report ----------------------------------------------------------------------------------------


@click.command("report")
@click.option("--out", "out_path", required=True, metavar="FILE.html", help="Where to write the page.")
@click.option("--pair", "pairs", multiple=True, metavar="TRAIN->INFER", help="Only this pair.")
@click.option("--probe", "probes", multiple=True, metavar="NAME", help="Only this probe.")
@click.option("--variant", "variants", multiple=True, metavar="NAME", help="Only this variant.")
@click.option(
    "--stack", "stacks", multiple=True, metavar="NAME", help="Only pairs with this stack on a side."
)
@click.option("--since", metavar="WHEN", help="Start of the window (default: 30 days before its end).")
@click.option("--until", metavar="WHEN", help="End of the window (default: just after the latest run).")
@click.option(
    "--metric", default="max_abs", show_default=True, metavar="NAME", help="The divergence metric to plot."
)
@click.pass_obj
def report_command(obj: Context, out_path: str, metric: str, **kw: Any) -> None:
    """Write a self-contained HTML report of the history (plots embedded).

    Per pair, probe and variant: the divergence metric and the p50 latency of both sides
    over time, with the runs in which a stack's fingerprint changed marked on the time
    axis; then the open alerts and the latest fingerprint of every stack side by side.
    """
    from pathlib import Path

    from auditor.html_report import ReportError, render_report

    f = _filters(kw, None)
    store = obj.store(read=True)
    with store.engine.connect() as conn:
        refresh_statistics(conn)
        _reject_unknown(conn, f)  # an unknown --metric is the report's ReportError
        try:
            page, summary = render_report(conn, f, metric=metric, source=_redacted(store.url))
        except ReportError as exc:
            fail(str(exc))
    path = Path(out_path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(page, encoding="utf-8")
    except OSError as exc:
        fail(f"cannot write the report to {path}: {exc}")
    click.echo(f"wrote {path} ({len(page) / 1024:.0f} KiB): {summary}")


_redacted = redact_url


# -- db ---------------------------------------------------------------------------------------------


@click.group("db")
def db_group() -> None:
    """The history database: schema migrations and retention."""


@db_group.command("current")
@click.option("--check", is_flag=True, help="Exit 1 when migrations are pending.")
@click.pass_obj
def db_current(obj: Context, check: bool) -> None:
    """Show the schema revision of the database and whether it is up to date."""
    from alembic.script.revision import RevisionError
    from alembic.util import CommandError

    from auditor.store import StoreError

    store = obj.store(migrate=False)
    try:
        current = store.current_heads()
    except StoreError as exc:
        fail(str(exc), EXIT_FINDINGS)
    heads = store.head_revisions()
    click.echo(f"database: {_redacted(store.url)}")
    click.echo(f"revision: {', '.join(current) or '(none: no schema yet)'}")
    click.echo(f"latest:   {', '.join(heads)}")
    try:
        pending = store.pending_revisions()
    except (CommandError, RevisionError):
        fail(
            f"the database is at revision {', '.join(current)}, which this auditor does not know: "
            "a newer auditor migrated it; upgrade the auditor",
            EXIT_FINDINGS,
        )
    if pending:
        click.echo(f"pending:  {', '.join(pending)} (run `auditor db upgrade`)")
        if check:
            sys.exit(EXIT_FINDINGS)
    else:
        click.echo("up to date")


@db_group.command("check")
@click.pass_obj
def db_check(obj: Context) -> None:
    """Check the database: damaged pages, missing tables, unreadable timestamps or JSON,
    read-only (exit 1 if anything is wrong). `auditor audit` refuses such a database."""
    from auditor.db_health import check

    store = obj.store(migrate=False)
    health = check(store.engine)
    click.echo(f"database: {_redacted(store.url)}")
    for problem in health.problems:
        click.echo(f"  problem: {problem}")
    if health.read_only:
        click.echo("  read-only: read commands work, `auditor audit` cannot store runs here")
    if health.ok:
        click.echo("ok")
    else:
        sys.exit(EXIT_FINDINGS)


@db_group.command("upgrade")
@click.pass_obj
def db_upgrade(obj: Context) -> None:
    """Apply the pending schema migrations (the auditor also does this when it opens the database)."""
    from auditor.store import StoreError

    store = obj.store(migrate=False)
    before = store.current_heads()
    pending = store.pending_revisions()
    try:
        store.upgrade()
    except StoreError as exc:
        fail(str(exc), EXIT_FINDINGS)
    if not pending:
        click.echo(f"already up to date at {', '.join(before)}")
        return
    click.echo(
        f"upgraded {_redacted(store.url)} from {', '.join(before) or '(empty)'} "
        f"to {', '.join(store.current_heads())} (applied {', '.join(pending)})"
    )


@db_group.command("prune")
@click.option(
    "--keep-days",
    type=click.IntRange(min=0),
    metavar="N",
    help="Keep the runs of the last N days (default: the config's [storage] keep_days, else 90; 0: all).",
)
@click.option("--dry-run", is_flag=True, help="Count what would be deleted, delete nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
@click.option(
    "--auditor",
    "auditor_id",
    metavar="ID",
    help="Prune this auditor's runs (default: this auditor's, [storage] auditor_id or the host name).",
)
@click.option("--all-auditors", is_flag=True, help="Prune the runs of every auditor of a shared database.")
@click.pass_obj
def db_prune(
    obj: Context,
    keep_days: int | None,
    dry_run: bool,
    as_json: bool,
    auditor_id: str | None,
    all_auditors: bool,
) -> None:
    """Delete the runs older than keep_days with everything they stored.

    Their probe results, metrics, latencies, findings and fingerprint links go; so do
    fingerprints and exported models no remaining run refers to. Runs still running are
    never touched. One transaction: an interrupted prune deletes nothing. In a shared
    database only this auditor's runs are pruned unless --auditor or --all-auditors says otherwise.
    """
    from auditor.config import Config
    from auditor.retention import prune
    from auditor.store import auditor_identity

    config = obj.config() if obj.find_config(required=not obj.db) else None
    if keep_days is None:
        keep_days = config.keep_days if config is not None else Config.keep_days
    if auditor_id is None and not all_auditors:
        auditor_id = auditor_identity(config.auditor_id if config is not None else "")
    store = obj.store()
    result = prune(store.engine, keep_days, dry_run=dry_run, auditor_id=None if all_auditors else auditor_id)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    elif keep_days == 0:
        click.echo("keep_days is 0: every run is kept")
    else:
        click.echo(result.summary())


COMMANDS = (history_command, show_command, trend_command, report_command, db_group)
