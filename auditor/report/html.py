"""``auditor report``: the history as one self-contained HTML page.

One file, no network: the plots are PNGs drawn with matplotlib (Agg, no display needed) and
embedded as data URIs, the style is inline, every text from the database is escaped. Per
pair, probe and variant the page plots a divergence metric and both sides' p50 latency over
time above a strip of run statuses, with the runs in which a stack's fingerprint changed
drawn as vertical lines labelled with what changed; then the open alerts and the latest
fingerprint of every stack side by side, differing values highlighted. Before those, the
serving side's throughput (samples/s per batch size, and the saturation batch of a sweep)
over time per pair, probe and variant. Then the NPU telemetry
of every host (auditor.history.telemetry): power, temperature, utilisation, memory and HBM use,
ECC errors and health per NPU over the window, with the threshold levels drawn, and the
latest values of each NPU in a table.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, inspect, select
from sqlalchemy.orm import aliased

from auditor.alerts.engine import list_alerts
from auditor.config.tables import DEFAULT_LIMITS, LimitTable
from auditor.db import schema as m
from auditor.history.filters import Filters, HistoryError, iso, utcnow
from auditor.history.queries import (
    FingerprintChange,
    Series,
    fingerprint_changes,
    known_values,
    latest_fingerprints,
    latest_localizations,
    result_statuses,
    time_span,
    trend,
)
from auditor.history.telemetry import TelemetryFilters, TelemetrySeries, between
from auditor.report import fleet_view
from auditor.report.summary import ppo_sentence
from auditor.report.text import format_number as num
from auditor.worker.npu_metrics import HEALTH_LEGEND, METRICS

DEFAULT_WINDOW = timedelta(days=30)
"""What is read when --since is not given; the plots' time axis then fits the runs found in it."""
MIN_SPAN = timedelta(hours=1)
"""The narrowest time axis: three runs a minute apart still get a readable axis."""
MAX_DRAWN = 1200
"""Points drawn per line at most: a longer series is drawn as the min and max of each of
MAX_DRAWN / 2 consecutive slices (spikes stay visible). Only the drawing is thinned: tables
and summaries use every value."""
MARKERS_UP_TO = 400
"""Points per line up to which each point is also drawn as a dot."""
STATUS_COLORS = {
    "consistent": "#2ca02c",
    "unchecked": "#7f7f7f",
    "drift": "#ff7f0e",
    "unsupported": "#8c564b",
    "incompatible": "#d62728",
    "error": "#9467bd",
}
"""One colour per status of auditor.results.STATUS_ORDER, in that order (a test holds them together)."""
SIDE_COLORS = {"train": "#1f77b4", "infer": "#17becf"}
OUTPUT_COLORS = ("#1f77b4", "#e377c2", "#8c564b", "#bcbd22", "#7f7f7f", "#17becf")
CHANGE_COLOR = "#d62728"


class ReportError(Exception):
    """The report cannot be made (empty history, unknown metric)."""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _us(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:.2f} ms" if value >= 1000 else f"{value:.0f} µs"


def render_report(
    conn: Connection,
    filters: Filters,
    metric: str = "max_abs",
    source: str = "",
    now: datetime | None = None,
    telemetry_limits: dict[str, LimitTable] | None = None,
) -> tuple[str, str]:
    """The page, and a one-line summary of what it covers. ``telemetry_limits``: the NPU
    telemetry thresholds drawn on its plots (default: the built-in ones)."""
    first, last, n_runs = time_span(conn)
    if not n_runs or last is None:
        raise ReportError("the history database has no runs yet: run `auditor audit` first")
    until = filters.until or last + timedelta(seconds=1)
    since = filters.since or until - DEFAULT_WINDOW
    if since >= until:
        raise ReportError(f"empty window: --since {iso(since)} is not before --until {iso(until)}")
    if not metric.startswith("latency.") and metric not in (known := known_values(conn, "metric")):
        raise ReportError(f"no metric {metric!r} in the history (known: {', '.join(known) or 'none yet'})")
    f = replace(filters, since=since, until=until, limit=None, metrics=(), outputs=())
    try:
        divergence = trend(conn, metric, f)
        latency = trend(conn, "latency.p50_us", f)
    except HistoryError as exc:
        raise ReportError(str(exc)) from None
    statuses = result_statuses(conn, f)
    ppo = _ppo_terms(conn, f, known_values(conn, "metric"))
    localized = latest_localizations(conn, f)
    stacks_of = _stacks_of(divergence + latency)
    # A group's members' pairs are one plot and one row: the worst member's divergence, the
    # members' median latency, each run's worst status (auditor.report.fleet_view).
    families = fleet_view.family_keys(statuses)
    if families:
        statuses = fleet_view.fold_statuses(statuses, families)
        divergence = fleet_view.fold_series(divergence, families, "max")
        latency = fleet_view.fold_series(latency, families, "median")
        for key, fam in families.items():
            stacks_of.setdefault(fam, set()).update(stacks_of.pop(key, set()))
            if key in ppo:
                ppo.setdefault(fam, ppo.pop(key))
            if key in localized:
                localized.setdefault(fam, localized.pop(key))
    groups = sorted(statuses)
    changes = fingerprint_changes(conn, None, since, until)
    alerts, alert_note = _open_alerts(conn)
    side = side_findings(conn, since, until)
    fingerprints = latest_fingerprints(conn)
    served = fleet_view.fold_series(trend(conn, "throughput", f), families, "median")
    saturation = {
        s.key[:3]: s for s in fleet_view.fold_series(trend(conn, "saturation_batch", f), families, "median")
    }
    served_figures = [
        (
            key,
            plot_throughput(
                key,
                series,
                saturation.get(key),
                *fitted_axis([p[1] for s in series for p in s.points], since, until),
            ),
            series,
            saturation.get(key),
        )
        for key, series in _by_group(served).items()
    ]
    npu_series = telemetry(conn, since, until, filters.hosts)
    limits = DEFAULT_LIMITS if telemetry_limits is None else telemetry_limits
    npu_figures = [
        (host, plot_telemetry(host, series, limits), series) for host, series in _by_host(npu_series).items()
    ]

    axis = fitted_axis([at for pts in statuses.values() for _, at, _ in pts], since, until)
    figures = []
    for key in groups:
        div = [s for s in divergence if s.key[:3] == key]
        lat = [s for s in latency if s.key[:3] == key]
        stacks = stacks_of.get(key, set())
        mine = [c for c in changes if c.stack in stacks]
        png = plot_group(key, metric, div, lat, statuses[key], mine, *axis)
        figures.append((key, png, div, lat, mine))

    run_count = sum(1 for _ in {r for pts in statuses.values() for r, _, _ in pts})
    summary = (
        f"{len(groups)} pair/probe/variant plot(s), {run_count} run(s) from {since:%Y-%m-%d %H:%M} "
        f"to {until:%Y-%m-%d %H:%M} UTC, {len(changes)} fingerprint change(s), "
        + (f"{len(alerts)} open alert(s)" if alerts is not None else "no alert data")
        + (f", NPU telemetry of {len(npu_figures)} host(s)" if npu_figures else "")
    )
    page = _page(
        source=source,
        generated=now or utcnow(),
        since=since,
        until=until,
        history=(first, last, n_runs),
        metric=metric,
        statuses=statuses,
        figures=figures,
        changes=changes,
        alerts=alerts,
        alert_note=alert_note,
        fingerprints=fingerprints,
        side=side,
        npu_figures=npu_figures,
        served_figures=served_figures,
        ppo=ppo,
        localized=localized,
    )
    return page, summary


PPO_FIGURES = (
    "ppo_clip_share",
    "ess",
    "tis_share",
    "samples",
    "invalid_samples",
    "clip_epsilon",
    "tis_cap",
    "ratio_p99",
    "ratio_max",
)
"""What the answer in PPO terms is said from (auditor.report.summary.ppo_sentence)."""


def _ppo_terms(conn: Connection, f: Filters, known: Iterable[str]) -> dict[tuple[str, str, str], str]:
    """Per (pair, probe, variant), the latest importance-ratio figures (auditor.compare.ratios)
    in the live report's words: what the stacks' difference alone does to a PPO update."""
    names = set(known)
    if not {"ppo_clip_share", "ess"} <= names:
        return {}
    latest: dict[tuple[str, str, str], dict[str, tuple[int, float]]] = {}
    for metric in (name for name in PPO_FIGURES if name in names):
        for s in trend(conn, metric, f):
            if s.points and s.output in ("*", None):
                run, _, value, _ = s.points[-1]
                latest.setdefault(s.key[:3], {})[metric] = (run, value)
    out = {}
    for key, figures in latest.items():
        run = figures.get("ppo_clip_share", (None, 0))[0]  # the figures of one run: the latest
        said = ppo_sentence({name: v for name, (r, v) in figures.items() if r == run})
        if said:
            out[key] = said.removeprefix("in PPO terms, ")
    return out


SIDE_KINDS = ("invariant", "nan-hazard")


def side_findings(conn: Connection, since: datetime, until: datetime) -> list[dict[str, Any]]:
    """The per-side findings (auditor.policy.invariants) as they stand: for each stack, probe
    and variant, those of the latest complete run in the window that audited it. A run narrowed
    to one model or pair (``audit --model``) speaks for what it ran only; the rest keeps the
    findings of the run before it that covered them."""
    F, R, P = m.FindingRow, m.Run, m.ProbeResultRow
    train, infer = aliased(m.Stack), aliased(m.Stack)
    covered = conn.execute(
        select(R.id, P.probe, P.variant, train.name, infer.name)
        .join(P, P.run_id == R.id)
        .join(train, train.id == P.train_stack_id)
        .join(infer, infer.id == P.infer_stack_id)
        .where(R.started_at >= since, R.started_at < until, R.status == "complete")
        .order_by(R.started_at.desc(), R.id.desc())
    ).all()
    newest: dict[tuple[str, str, str], int] = {}
    for run_id, probe, variant, *stacks in covered:
        for stack in stacks:
            newest.setdefault((stack, probe, variant), run_id)
    if not newest:
        return []
    rows = conn.execute(
        select(F.run_id, F.kind, F.severity, F.subject, F.message, F.details)
        .where(F.run_id.in_(sorted(set(newest.values()))), F.kind.in_(SIDE_KINDS))
        .order_by(F.run_id.desc(), F.id)
    ).mappings()
    found = []
    for row in rows:
        held = [p for p in _places(row["details"], row["subject"]) if newest.get(p) == row["run_id"]]
        if held:
            doc = {k: row[k] for k in ("run_id", "kind", "severity", "subject", "message")}
            # the stacks it speaks for: a cause's subject is its probe, not a stack (#54)
            doc["stacks"] = ", ".join(dict.fromkeys(stack for stack, _, _ in held))
            found.append(doc)
    return found


def _places(details: Any, subject: str) -> list[tuple[str, str, str]]:
    """The (stack, probe, variant) a per-side finding is about: each place of a finding merged
    from one cause (auditor.cycle.causes), else its own."""
    d = details if isinstance(details, dict) else {}
    probe = str(d.get("probe", ""))
    where = [w for w in d.get("where") or () if isinstance(w, dict)]
    if where:
        return [(str(w.get("subject", "")), probe, str(w.get("variant", ""))) for w in where]
    return [(str(d.get("stack", subject)), probe, str(d.get("variant", "")))]


def _stacks_of(series: Iterable[Series]) -> dict[tuple[str, str, str], set[str]]:
    out: dict[tuple[str, str, str], set[str]] = {}
    for s in series:
        out.setdefault(s.key[:3], set()).update(n for n in (s.train, s.infer) if n)
    return out


def _open_alerts(conn: Connection) -> tuple[list[dict[str, Any]] | None, str]:
    """Open alerts from the alert engine's table; None (and why) where there is none."""
    if not inspect(conn).has_table("alerts"):
        return None, "no alert data: the database has no alerts table"
    return list_alerts(conn.engine, open_only=True, limit=200), ""


# -- plots ------------------------------------------------------------------------------------------


def fitted_axis(times: list[datetime], since: datetime, until: datetime) -> tuple[datetime, datetime]:
    """The plots' time axis: from the first to the last run found in the window, widened to
    at least MIN_SPAN around them and padded by 3% on each side, so a few days of history
    fill the plot instead of its right edge. No runs: the window itself."""
    if not times:
        return since, until
    first, last = min(times), max(times)
    span = last - first
    if span < MIN_SPAN:
        middle = first + span / 2
        first, last, span = middle - MIN_SPAN / 2, middle + MIN_SPAN / 2, MIN_SPAN
    pad = span * 0.03
    return first - pad, last + pad


def thin(xs: list[datetime], ys: list[float], most: int = MAX_DRAWN) -> tuple[list[datetime], list[float]]:
    """At most ``most`` points to draw a line of many: the minimum and the maximum (in time
    order) of each of ``most // 2`` consecutive slices; a slice without a finite value stays a
    gap. Fewer points than ``most``: the line as it is."""
    if len(xs) <= most:
        return xs, ys
    slices = most // 2
    out_x: list[datetime] = []
    out_y: list[float] = []
    for i in range(slices):
        lo, hi = i * len(xs) // slices, (i + 1) * len(xs) // slices
        finite = [j for j in range(lo, hi) if math.isfinite(ys[j])]
        if not finite:
            out_x.append(xs[lo])
            out_y.append(math.nan)
            continue
        a = min(finite, key=lambda j: ys[j])
        b = max(finite, key=lambda j: ys[j])
        for j in sorted({a, b}):
            out_x.append(xs[j])
            out_y.append(ys[j])
    return out_x, out_y


def _line_style(n: int) -> dict[str, Any]:
    return {"lw": 1.2, "marker": ".", "ms": 3} if n <= MARKERS_UP_TO else {"lw": 1.2}


def plot_group(
    key: tuple[str, str, str],
    metric: str,
    divergence: list[Series],
    latency: list[Series],
    statuses: list[tuple[int, datetime, str]],
    changes: list[FingerprintChange],
    since: datetime,
    until: datetime,
) -> bytes:
    """A PNG: the metric per output (top), p50 latency per side (middle), run statuses
    (bottom strip), with fingerprint changes as labelled vertical lines on all three."""
    import matplotlib.dates as mdates
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 5.6), dpi=96, layout="constrained")
    ax_div, ax_lat, ax_st = fig.subplots(3, 1, sharex=True, gridspec_kw={"height_ratios": [5, 4, 1]})
    pair, probe, variant = key
    fig.suptitle(f"{pair} · {probe} [{variant}]", fontsize=12, fontweight="bold")

    plotted = False
    for i, s in enumerate(divergence):
        xs = [p[1] for p in s.points]
        ys = [p[2] if math.isfinite(p[2]) else math.nan for p in s.points]
        style = _line_style(len(xs))
        xs, ys = thin(xs, ys)
        ax_div.plot(xs, ys, color=OUTPUT_COLORS[i % len(OUTPUT_COLORS)], label=s.output, **style)
        plotted = plotted or any(math.isfinite(y) for y in ys)
    values = [p[2] for s in divergence for p in s.points if math.isfinite(p[2])]
    if values and min(values) >= 0 and max(values) > 0:
        positive = [v for v in values if v > 0]
        ax_div.set_yscale("symlog", linthresh=min(positive) / 2 if positive else 1e-12)
    ax_div.set_ylabel(metric)
    if plotted:
        ax_div.legend(loc="upper left", fontsize=8, title="output", title_fontsize=8)
    else:
        worst = Counter(st for _, _, st in statuses).most_common(1)
        why = f" (status: {worst[0][0]})" if worst else ""
        ax_div.text(
            0.5,
            0.5,
            f"no {metric} values in this window{why}",
            transform=ax_div.transAxes,
            ha="center",
            va="center",
            color="#555",
        )
    ax_div.grid(True, alpha=0.3)

    lat_plotted = False
    for s in latency:
        xs = [p[1] for p in s.points]
        ys = [p[2] for p in s.points]
        style = _line_style(len(xs))
        xs, ys = thin(xs, ys)
        ax_lat.plot(
            xs,
            ys,
            color=SIDE_COLORS.get(s.output, "#333"),
            label=f"{s.output} ({s.infer if s.output == 'infer' else s.train})",
            **style,
        )
        lat_plotted = lat_plotted or bool(ys)
    if lat_plotted:
        ax_lat.set_yscale("log")
        ax_lat.legend(loc="upper left", fontsize=8, title="p50 latency", title_fontsize=8)
    else:
        ax_lat.text(
            0.5,
            0.5,
            "no latency measured in this window",
            transform=ax_lat.transAxes,
            ha="center",
            va="center",
            color="#555",
        )
    ax_lat.set_ylabel("p50 (µs)")
    ax_lat.grid(True, alpha=0.3, which="both")

    by_status: dict[str, list[datetime]] = {}
    for _, at, st in statuses:
        by_status.setdefault(st, []).append(at)
    size = 14 if len(statuses) <= MARKERS_UP_TO * 4 else 4
    for st, xs in by_status.items():
        ax_st.scatter(
            xs, [0] * len(xs), s=size, marker="s", color=STATUS_COLORS.get(st, "#333"), label=st, linewidths=0
        )
    ax_st.set_yticks([])
    ax_st.set_ylabel("status", rotation=0, ha="right", va="center")
    if by_status:
        ax_st.legend(
            loc="upper center", bbox_to_anchor=(0.5, -0.9), ncol=len(by_status), fontsize=8, frameon=False
        )

    for c in changes:
        for ax in (ax_div, ax_lat, ax_st):
            ax.axvline(c.at, color=CHANGE_COLOR, lw=1.4, ls="--", alpha=0.85)
        label = c.summary(limit=1)
        ax_div.annotate(
            label if len(label) <= 60 else label[:59] + "…",
            xy=(mdates.date2num(c.at), 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(3, -3),
            textcoords="offset points",
            rotation=0,
            fontsize=8,
            color=CHANGE_COLOR,
            va="top",
            ha="left",
            bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": CHANGE_COLOR, "alpha": 0.85},
        )

    locator = mdates.AutoDateLocator()
    ax_st.xaxis.set_major_locator(locator)
    ax_st.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    ax_st.set_xlim(since, until)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


# -- the page ----------------------------------------------------------------------------------------

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1100px;
       color: #222; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: .2em; } h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
h3 { margin: 1.5em 0 .3em; font-size: 1.05em; }
table { border-collapse: collapse; margin: .5em 0; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.meta { color: #555; } .muted { color: #777; }
.consistent { color: #2ca02c; } .drift { color: #e67300; } .incompatible, .error { color: #d62728; }
.status { font-weight: 600; text-transform: uppercase; font-size: 12px; }
tr.differs td { background: #fff4e5; } tr.section th { background: #e9eef5; }
figure { margin: .5em 0 1.5em; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: 12px; } code { font-size: 12px; }
.fp td { font-family: ui-monospace, monospace; font-size: 12px; max-width: 360px; overflow-wrap: anywhere; }
"""


def _status(status: str) -> str:
    return f'<span class="status {_e(status)}">{_e(status)}</span>'


def _table(head: list[str], rows: list[list[str]], cls: str = "") -> str:
    """``rows`` hold HTML already escaped by the caller."""
    out = [
        f'<table class="{cls}">' if cls else "<table>",
        "<tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>",
    ]
    out += ["<tr>" + "".join(row) + "</tr>" for row in rows]
    out.append("</table>")
    return "\n".join(out)


def _page(
    *,
    source: str,
    generated: datetime,
    since: datetime,
    until: datetime,
    history: tuple[datetime | None, datetime | None, int],
    metric: str,
    statuses: dict[tuple[str, str, str], list[tuple[int, datetime, str]]],
    figures: list[tuple[tuple[str, str, str], bytes, list[Series], list[Series], list[FingerprintChange]]],
    changes: list[FingerprintChange],
    alerts: list[dict[str, Any]] | None,
    alert_note: str,
    fingerprints: list[dict[str, Any]],
    side: list[dict[str, Any]] | None = None,
    npu_figures: list[tuple[str, bytes, list[TelemetrySeries]]] | None = None,
    served_figures: list[tuple[tuple[str, str, str], bytes, list[Series], Series | None]] | None = None,
    ppo: dict[tuple[str, str, str], str] | None = None,
    localized: dict[tuple[str, str, str], str] | None = None,
) -> str:
    first, last, n_runs = history
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>auditor report · {since:%Y-%m-%d} to {until:%Y-%m-%d}</title>",
        f"<style>{CSS}</style></head><body>",
        "<h1>auditor: training/inference consistency history</h1>",
        f'<p class="meta">Database <code>{_e(source)}</code> · window {_e(f"{since:%Y-%m-%d %H:%M}")} to '
        f"{_e(f'{until:%Y-%m-%d %H:%M}')} UTC · generated {_e(f'{generated:%Y-%m-%d %H:%M}')} UTC · "
        f"the history holds {n_runs} run(s) from {_e(iso(first))} to {_e(iso(last))}.</p>",
    ]

    # summary
    parts.append("<h2>Summary</h2>")
    if not statuses:
        parts.append('<p class="muted">No probe results in this window.</p>')
    else:
        rows = []
        div_latest = {}
        lat_latest = {}
        for key, _png, div, lat, _ch in figures:
            values = [s.points[-1][2] for s in div if s.points]
            div_latest[key] = max(values, key=lambda v: (math.isnan(v), v)) if values else None
            lat_latest[key] = {s.output: s.points[-1][2] for s in lat if s.points}
        for key, pts in sorted(statuses.items()):
            counts = Counter(st for _, _, st in pts)
            latest_run, latest_at, latest_status = pts[-1]
            rows.append(
                [
                    f"<td>{_e(key[0])}</td><td>{_e(key[1])}</td><td>{_e(key[2])}</td>",
                    f"<td>{_status(latest_status)} <span class='muted'>run {latest_run}</span></td>",
                    "".join(f'<td class="num">{counts.get(st, 0)}</td>' for st in STATUS_COLORS),
                    f'<td class="num">{_e(num(div_latest.get(key)))}</td>',
                    f'<td class="num">{_e(_us(lat_latest.get(key, {}).get("train")))}</td>',
                    f'<td class="num">{_e(_us(lat_latest.get(key, {}).get("infer")))}</td>',
                    f"<td>{_e((ppo or {}).get(key, ''))}</td>",
                    f"<td>{_e((localized or {}).get(key, ''))}</td>",
                ]
            )
        parts.append(
            _table(
                [
                    "pair",
                    "probe",
                    "variant",
                    "latest",
                    *STATUS_COLORS,
                    f"latest {_e(metric)} (worst output)",
                    "train p50",
                    "infer p50",
                    "in PPO terms (latest)",
                    "first divergent (latest drift)",
                ],
                rows,
            )
        )

    # version changes
    parts.append("<h2>Version changes</h2>")
    if not changes:
        parts.append('<p class="muted">No stack changed its fingerprint in this window.</p>')
    else:
        rows = [
            [
                f"<td>{_e(f'{c.at:%Y-%m-%d %H:%M}')}</td><td class='num'>{c.run_id}</td>",
                f"<td>{_e(c.stack)}</td><td>{_e(c.host)}</td>",
                "<td>"
                + "<br>".join(_e(x) for x in c.changes)
                + ("" if c.changes else f"{_e(c.old_digest[:12])} → {_e(c.new_digest[:12])}")
                + "</td>",
            ]
            for c in changes
        ]
        parts.append(_table(["time (UTC)", "run", "stack", "host", "what changed"], rows))

    # plots
    parts.append(f"<h2>Divergence ({_e(metric)}) and latency over time</h2>")
    parts.append(
        '<p class="muted">Dashed red lines: a run in which the train or infer stack of the pair had a '
        "different fingerprint than in its previous run. Bottom strip: the status of every run. "
        "A group's members (<code>train-&gt;stack@* (N hosts)</code>) are one plot: per run the worst "
        "member's value, the members' median latency and the worst status; each host is in "
        "<code>auditor hosts list</code> and <code>auditor trend --pair</code>.</p>"
    )
    for (pair, probe, variant), png, div, _lat, mine in figures:
        data = base64.b64encode(png).decode("ascii")
        alt = f"{metric} and p50 latency of {pair} {probe} [{variant}] over time"
        caption = f"{len(div[0].points) if div else 0} point(s) per output"
        if mine:
            caption += "; fingerprint changes: " + "; ".join(c.summary(limit=2) for c in mine)
        parts.append(
            f'<h3>{_e(pair)} · {_e(probe)} [{_e(variant)}]</h3><figure class="plot">'
            f'<img src="data:image/png;base64,{data}" alt="{_e(alt)}" width="960">'
            f"<figcaption>{_e(caption)}</figcaption></figure>"
        )

    # throughput
    parts.append("<h2>Throughput on the serving side</h2>")
    if not served_figures:
        parts.append('<p class="muted">No throughput measured in this window.</p>')
    else:
        parts.append(
            '<p class="muted">Samples per second of the infer stack at each batch size it was timed at '
            "(batch / p50 call time); with a <code>[latency] sweep</code>, the saturation batch: the "
            "smallest batch reaching <code>[latency] saturation</code> of the highest throughput.</p>"
        )
    for (pair, probe, variant), png, series, sat in served_figures or ():
        data = base64.b64encode(png).decode("ascii")
        latest = ", ".join(f"batch {s.output[1:]}: {num(s.points[-1][2])}/s" for s in series if s.points)
        if sat is not None and sat.points:
            latest += f"; saturation batch {num(sat.points[-1][2])}"
        parts.append(
            f"<h3>{_e(pair)} · {_e(probe)} [{_e(variant)}] · throughput</h3>"
            f'<figure class="plot"><img src="data:image/png;base64,{data}" '
            f'alt="throughput of {_e(pair)} {_e(probe)} [{_e(variant)}] over time" width="960">'
            f"<figcaption>latest: {_e(latest)}</figcaption></figure>"
        )

    # alerts
    parts.append("<h2>Open alerts</h2>")
    if alerts is None:
        parts.append(f'<p class="muted">{_e(alert_note)}</p>')
    elif not alerts:
        parts.append('<p class="muted">No open alerts.</p>')
    else:
        rows = [
            [
                f"<td>{_status(a.get('severity', ''))}</td><td>{_e(a.get('kind'))}</td>",
                f"<td>{_e(a.get('subject'))}</td><td>{_e(a.get('message'))}</td>",
                f"<td>{_e(a.get('opened_at'))}</td><td>{_e(a.get('last_seen_at'))}</td>",
            ]
            for a in alerts
        ]
        parts.append(_table(["severity", "kind", "subject", "message", "opened", "last seen"], rows))

    # per-side checks
    parts.append("<h2>Each stack on its own (invariants, NaN/Inf hazards)</h2>")
    if not side:
        parts.append('<p class="muted">No per-side finding in this window.</p>')
    else:
        parts.append(
            '<p class="muted">For each stack, probe and variant: the latest complete run in the window '
            "that audited it.</p>"
        )
        rows = [
            [
                f"<td>{_status(f['severity'])}</td><td>{_e(f['kind'])}</td>",
                f"<td>{_e(f['stacks'])}</td><td>{_e(f['message'])}</td>",
                f'<td class="num">{_e(f["run_id"])}</td>',
            ]
            for f in side
        ]
        parts.append(_table(["severity", "kind", "stack", "message", "run"], rows))

    # NPU telemetry
    parts.append("<h2>NPU telemetry</h2>")
    if not npu_figures:
        parts.append(
            '<p class="muted">No NPU telemetry in this window '
            "(hosts without npu-smi or NPUs record none).</p>"
        )
    for host, png, series in npu_figures or ():
        data = base64.b64encode(png).decode("ascii")
        parts.append(
            f"<h3>host {_e(host)}</h3>"
            f'<figure class="plot"><img src="data:image/png;base64,{data}" '
            f'alt="NPU telemetry of host {_e(host)} over time" width="960">'
            f"<figcaption>{len(series)} series; dashed lines: the threshold levels (warning, error, "
            f"critical)</figcaption></figure>"
        )
        parts.append(_telemetry_table(series))

    # fingerprints
    parts.append("<h2>Latest fingerprints</h2>")
    if not fingerprints:
        parts.append('<p class="muted">No stack has been fingerprinted yet.</p>')
    else:
        parts.append(_fingerprint_table(fingerprints))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


# -- throughput -------------------------------------------------------------------------------------


def _by_group(series: list[Series]) -> dict[tuple[str, str, str], list[Series]]:
    out: dict[tuple[str, str, str], list[Series]] = {}
    for s in sorted(series, key=lambda s: (s.key[:3], _batch(s.output))):
        out.setdefault(s.key[:3], []).append(s)
    return out


def _batch(output: str) -> int:
    return int(output[1:]) if output[1:].isdigit() else 0


def plot_throughput(
    key: tuple[str, str, str],
    series: list[Series],
    saturation: Series | None,
    since: datetime,
    until: datetime,
) -> bytes:
    """A PNG: samples/s per batch size over time (log scale), the saturation batch below when
    a sweep measured one."""
    import matplotlib.dates as mdates
    from matplotlib.figure import Figure

    rows = 2 if saturation is not None and saturation.points else 1
    fig = Figure(figsize=(10, 2.6 + 1.2 * (rows - 1)), dpi=96, layout="constrained")
    axes = fig.subplots(rows, 1, sharex=True, squeeze=False, gridspec_kw={"height_ratios": [3, 1][:rows]})[
        :, 0
    ]
    pair, probe, variant = key
    fig.suptitle(f"{pair} · {probe} [{variant}] · throughput of the serving side", fontsize=11)
    for i, s in enumerate(series):
        xs, ys = thin([p[1] for p in s.points], [p[2] for p in s.points])
        axes[0].plot(
            xs,
            ys,
            color=NPU_COLORS[i % len(NPU_COLORS)],
            label=f"batch {s.output[1:]}",
            **_line_style(len(xs)),
        )
    axes[0].set_yscale("log")
    axes[0].set_ylabel("samples/s")
    axes[0].grid(True, alpha=0.3, which="both")
    axes[0].legend(loc="upper left", fontsize=7, ncol=6)
    if rows == 2:
        assert saturation is not None
        xs = [p[1] for p in saturation.points]
        axes[1].step(xs, [p[2] for p in saturation.points], where="post", color="#333")
        axes[1].set_yscale("log", base=2)
        axes[1].set_ylabel("saturation\nbatch", fontsize=8)
        axes[1].grid(True, alpha=0.3)
    locator = mdates.AutoDateLocator()
    axes[-1].xaxis.set_major_locator(locator)
    axes[-1].xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    axes[-1].set_xlim(since, until)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


# -- NPU telemetry ----------------------------------------------------------------------------------

NPU_PANELS = (
    ("power (W)", ("power_w",)),
    ("temperature (°C)", ("temperature_c", "hbm_temperature_c")),
    ("utilisation (%)", ("aicore_pct", "aicpu_pct")),
    ("memory in use (%)", ("hbm_usage_pct", "memory_usage_pct")),
    ("ECC errors", ("ecc_hbm_single_bit", "ecc_hbm_double_bit", "ecc_ddr_single_bit", "ecc_ddr_double_bit")),
    ("health", ("health",)),
)
LEVEL_COLORS = {"warning": "#ff7f0e", "error": "#d62728", "critical": "#7f0000"}
NPU_COLORS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)  # matplotlib's tab10: eight NPUs, eight colours
STYLES = ("-", "--", ":", "-.")
TABLE_METRICS = (
    "power_w",
    "temperature_c",
    "aicore_pct",
    "aicpu_pct",
    "hbm_usage_pct",
    "memory_usage_pct",
    "ecc_hbm_double_bit",
    "health",
)


def telemetry(
    conn: Connection, since: datetime, until: datetime, hosts: tuple[str, ...] = ()
) -> list[TelemetrySeries]:
    """Every NPU telemetry point of the window (none when the database predates telemetry)."""
    if not inspect(conn).has_table("telemetry_points"):
        return []
    return between(conn, TelemetryFilters(hosts=hosts, since=since, until=until))


def _by_host(series: list[TelemetrySeries]) -> dict[str, list[TelemetrySeries]]:
    out: dict[str, list[TelemetrySeries]] = {}
    for s in series:
        out.setdefault(s.host, []).append(s)
    return out


def plot_telemetry(host: str, series: list[TelemetrySeries], limits: dict[str, LimitTable]) -> bytes:
    """A PNG: one panel per group of metrics that has values (power, temperature, utilisation,
    memory, ECC, health), a colour per NPU (and chip), a line style per metric, the threshold
    levels of the panel's metrics as dashed horizontal lines."""
    import matplotlib.dates as mdates
    from matplotlib.figure import Figure

    panels = [(title, metrics) for title, metrics in NPU_PANELS if any(s.metric in metrics for s in series)]
    fig = Figure(figsize=(10, 1.9 * max(1, len(panels)) + 0.6), dpi=96, layout="constrained")
    axes = fig.subplots(max(1, len(panels)), 1, sharex=True, squeeze=False)[:, 0]
    fig.suptitle(f"NPU telemetry · host {host}", fontsize=12, fontweight="bold")
    labels = sorted({s.label for s in series}, key=lambda x: (len(x), x))
    colors = {label: NPU_COLORS[i % len(NPU_COLORS)] for i, label in enumerate(labels)}
    for ax, (title, metrics) in zip(axes, panels, strict=False):
        for s in series:
            if s.metric not in metrics:
                continue
            xs, ys = thin([p[0] for p in s.points], [p[1] for p in s.points])
            style = _line_style(len(xs)) | {"ls": STYLES[metrics.index(s.metric) % len(STYLES)]}
            name = s.label if len(metrics) == 1 else f"{s.label} {s.metric}"
            ax.plot(xs, ys, color=colors[s.label], label=name, **style)
        for metric in metrics:
            limit = limits.get(metric)
            for level in ("warning", "error", "critical"):
                bound = getattr(limit, level) if limit is not None else None
                if bound is not None and any(s.metric == metric for s in series):
                    ax.axhline(bound, color=LEVEL_COLORS[level], lw=1, ls="--", alpha=0.8)
        ax.set_ylabel(title if title != "health" else f"health\n({HEALTH_LEGEND})", fontsize=8)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper left", fontsize=7, ncol=4)
    locator = mdates.AutoDateLocator()
    axes[-1].xaxis.set_major_locator(locator)
    axes[-1].xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _telemetry_table(series: list[TelemetrySeries]) -> str:
    """The latest value of each NPU (and chip) for the main metrics."""
    latest: dict[str, dict[str, tuple[datetime, float]]] = {}
    for s in series:
        if s.points:
            latest.setdefault(s.label, {})[s.metric] = s.points[-1]
    shown = [k for k in TABLE_METRICS if any(k in v for v in latest.values())]
    rows = []
    for label in sorted(latest, key=lambda x: (len(x), x)):
        values = latest[label]
        when = max(at for at, _ in values.values())
        cells = []
        for k in shown:
            point = values.get(k)
            cells.append(f'<td class="num">{_e("-" if point is None else f"{point[1]:g}")}</td>')
        rows.append([f"<td>{_e(label)}</td><td>{_e(f'{when:%Y-%m-%d %H:%M:%S}')}</td>", "".join(cells)])
    head = ["NPU", "latest (UTC)"] + [
        f"{_e(k)} ({_e(METRICS[k][0])})" if METRICS[k][0] else _e(k) for k in shown
    ]
    return _table(head, rows)


def _flatten(doc: Any, path: str = "") -> dict[str, Any]:
    if isinstance(doc, dict):
        out: dict[str, Any] = {}
        for k, v in doc.items():
            out.update(_flatten(v, f"{path}.{k}" if path else str(k)))
        return out if out or not path else {path: {}}
    return {path: doc}


def _fingerprint_table(fingerprints: list[dict[str, Any]]) -> str:
    """Stacks side by side, one row per value, grouped by top-level section; rows whose
    values differ between stacks of the same role are highlighted."""
    flat = [_flatten(fp["document"] or {}) for fp in fingerprints]
    keys: list[str] = []
    seen: set[str] = set()
    for f in flat:
        for k in f:
            if k not in seen:
                seen.add(k)
                keys.append(k)
    keys.sort(key=lambda k: (k.split(".")[0], k))
    head = ["value"] + [
        f"{_e(fp['name'])}<br><span class='muted'>{_e(fp['role'])} · {_e(fp['host'])} · run {fp['run_id']}"
        f"<br>{_e(fp['digest'][:12])}</span>"
        for fp in fingerprints
    ]
    rows = []
    section = None
    roles = [fp["role"] for fp in fingerprints]
    for k in keys:
        top = k.split(".")[0]
        if top != section:
            section = top
            rows.append(f'<tr class="section"><th colspan="{len(fingerprints) + 1}">{_e(top)}</th></tr>')
        cells = [f.get(k, _ABSENT) for f in flat]
        differs = any(
            len({_show(c) for c, r in zip(cells, roles, strict=True) if r == role}) > 1 for role in set(roles)
        )
        tds = "".join(f"<td>{_e(_show(c))}</td>" for c in cells)
        rows.append(f'<tr class="{"differs" if differs else ""}"><td>{_e(k)}</td>{tds}</tr>')
    out = ['<table class="fp">', "<tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>", *rows, "</table>"]
    return "\n".join(out)


_ABSENT = object()


def _show(value: Any) -> str:
    if value is _ABSENT:
        return "—"
    if value is None:
        return "null"
    if isinstance(value, list):
        return ", ".join(_show(v) for v in value)
    return str(value)


__all__ = ["ReportError", "plot_group", "render_report"]
