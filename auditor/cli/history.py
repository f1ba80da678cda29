"""The history commands: ``history``, ``show``, ``trend``, ``report`` and ``db``.

They read the history database named by ``--db`` or the config's ``[storage] url`` (the
default SQLite file when there is neither). Listings stream: ``history --limit 0`` over a
long history writes rows as they are read, in any of the three formats.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from auditor.cli.context import MAX_LIMIT, Context, fail
from auditor.cli.exits import EXIT_FINDINGS, EXIT_USAGE
from auditor.cli.formats import json_short
from auditor.cli.selection import selector_options
from auditor.common.redact import redact_url
from auditor.config.tables import MAX_KEEP_DAYS, Config, ConfigError
from auditor.history import fixes as stored_fixes
from auditor.history.filters import FIELDS, STACK_FIELDS, Filters, HistoryError, iso, parse_when, parse_where
from auditor.history.queries import (
    METRIC_COLUMNS,
    RESULT_COLUMNS,
    FingerprintChange,
    fingerprint_changes,
    known_values,
    metric_rows,
    refresh_statistics,
    resolve_run,
    result_rows,
    run_auditors,
    run_detail,
    trend,
    unknown_where,
)
from auditor.history.size import measure
from auditor.report import fleet_view
from auditor.report.tables import (
    WRITERS,
    jsonable,
    plain,
    render_run,
    render_trend,
    with_words,
)
from auditor.results import STATUS_ORDER

STATUSES = STATUS_ORDER
"""Every status a probe result is stored with (``unsupported`` included)."""

auditor_option = click.option(
    "--auditor",
    "auditors",
    multiple=True,
    metavar="ID",
    help="Only the runs of this auditor ([storage] auditor_id) of a shared database.",
)

FORMATS = ("table", "json", "csv")


def _when(value: str | None, option: str) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_when(value)
    except HistoryError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None


def filter_options(metric: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The filter options shared by history and trend (repeat one to match any value): the
    selectors every command takes (--stack, --pair, --probe, --model, --host), then the
    history's own."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        opts = [
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
                "--status",
                "statuses",
                multiple=True,
                type=click.Choice(STATUSES),
                help="Only results with this status.",
            ),
            auditor_option,
            click.option(
                "--where",
                "where",
                multiple=True,
                metavar="FIELD=VALUE",
                help="Only results whose FIELD is VALUE (FIELD!=VALUE: is not, FIELD~TEXT: contains "
                f"TEXT); fields: {', '.join([*FIELDS, *STACK_FIELDS])}.",
            ),
            click.option(
                "--since", metavar="WHEN", help="Runs started at or after: ISO time, or 7d, 12h, 90m."
            ),
            click.option("--until", metavar="WHEN", help="Runs started before: ISO time, or 7d, 12h, 90m."),
        ]
        for opt in reversed(opts):
            fn = opt(fn)
        return selector_options(texts=SELECTOR_HELP)(fn)

    return decorate


SELECTOR_HELP = {
    "stack": "Only pairs with this stack on a side.",
    "host": "Only pairs with a stack on this host ([hosts] name, or 'local') on a side.",
    "group": "Only pairs with a member of this host group ([groups.NAME] of the config) on a side.",
    "model": "Only this [models.NAME]'s results.",
}


def _group_hosts(groups: tuple[str, ...]) -> tuple[str, ...]:
    """``--group``: its members' hosts, from the config (a group is the config's idea)."""
    if not groups:
        return ()
    config = click.get_current_context().find_object(Context).config()
    members = {s.group: [] for s in config.stacks.values() if s.group}
    for s in config.stacks.values():
        if s.group:
            members[s.group].append(s.host)
    unknown = [g for g in groups if g not in members]
    if unknown:
        there = ", ".join(members) or "none"
        fail(f"no group {', '.join(map(repr, unknown))} in {config.source} (groups: {there})")
    return tuple(h for g in groups for h in members[g])


def _filters(kw: dict[str, Any], limit: int | None) -> Filters:
    try:
        where = tuple(parse_where(w) for w in kw.get("where", ()))
    except HistoryError as exc:
        raise click.BadParameter(str(exc), param_hint="--where") from None
    return Filters(
        pairs=tuple(kw.get("pairs", ())),
        probes=tuple(kw.get("probes", ())) + tuple(kw.get("models", ())),
        variants=tuple(kw.get("variants", ())),
        metrics=tuple(kw.get("metrics", ())),
        outputs=tuple(kw.get("outputs", ())),
        stacks=tuple(kw.get("stacks", ())),
        statuses=tuple(kw.get("statuses", ())),
        hosts=tuple(kw.get("hosts", ())) + _group_hosts(tuple(kw.get("groups", ()))),
        auditors=tuple(kw.get("auditors", ())),
        where=where,
        since=_when(kw.get("since"), "--since"),
        until=_when(kw.get("until"), "--until"),
        limit=limit if limit else None,
    )


def _reject_unknown(conn: Any, f: Filters) -> None:
    """A filter value that matches nothing in the whole history is a typo: a usage error
    naming the values there are, before any output (--where FIELD=VALUE and FIELD!=VALUE too;
    FIELD~TEXT is a search, which may rightly find nothing)."""
    for column, values in (
        ("pair", f.pairs),
        ("probe", f.probes),
        ("variant", f.variants),
        ("metric", f.metrics),
        ("output", f.outputs),
        ("stack", f.stacks),
        ("host", f.hosts),
        ("auditor", f.auditors),
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
    for name, op, value in f.where:
        problem = unknown_where(conn, name, op, value, STATUSES if name == "status" else ())
        if problem is not None:
            fail(problem, EXIT_USAGE)


# -- formatting ---------------------------------------------------------------------------------


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
@click.option(
    "--fixes",
    is_flag=True,
    help="List what `auditor fix` found instead (newest first; --probe/--model narrow it).",
)
@json_short
@click.pass_obj
def history_command(obj: Context, limit: int, fmt: str, fixes: bool, **kw: Any) -> None:
    """List probe results from the history, newest first.

    One row per probe result (status and p50 latency of each side); with --metric, one row
    per result, output and metric with its value. Filters combine (all must hold); a
    repeated filter matches any of its values.

    \b
    Examples:
      auditor history --pair 'ms20->lite20' --metric max_abs --since 7d
      auditor history --probe ppo_policy --status drift --status error
      auditor history --stack lite20 --limit 0 --format csv > lite20.csv
      auditor history --fixes
    """
    f = _filters(kw, limit)
    store = obj.store(read=True)
    out = sys.stdout
    if fixes:
        names = f.probes or (None,)
        with store.engine.connect() as conn:
            rows = [x for n in names for x in stored_fixes.listing(conn, limit or MAX_LIMIT, n)]
        rows.sort(key=lambda x: x.id, reverse=True)
        rows = rows[: limit or None]
        if fmt == "json":  # every field, the whole digest and the change
            click.echo(json.dumps([x.to_json() for x in rows], indent=2))
            return
        n = WRITERS[fmt](out, FIX_COLUMNS, (_fix_row(x) for x in rows))
        if n == 0 and fmt == "table":
            click.echo("(no fixes stored: auditor fix NAME --stack S)", err=True)
        return
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


FIX_COLUMNS = ("fix", "at", "policy", "pair", "runtime", "found", "kept_in_float32", "sha256", "exports")
"""``history --fixes``: one row per `auditor fix` run."""


def _fix_row(x: stored_fixes.StoredFix) -> tuple:
    policy = f"{x.name} [{x.variant}]" if x.variant else f"models.{x.name}"
    cells = x.cells
    kept = "-" if cells is None else (", ".join(c or "(own ops)" for c in cells) or "none")
    return (
        x.id,
        x.created_at,
        policy,
        f"{x.train}->{x.stack}",
        f"{x.runtime} {x.runtime_version}".strip(),
        "yes" if x.found else "no",
        kept,
        (x.sha256 or "")[:12],
        x.exports,
    )


# -- show -------------------------------------------------------------------------------------------

text_or_json = click.option(
    "--format",
    "fmt",
    type=click.Choice(("text", "table", "json", "csv")),
    default="text",
    show_default=True,
    help="Output format: text (the same as table), JSON, or CSV (one row per result or point).",
)

SHOW_COLUMNS = tuple(c for c in RESULT_COLUMNS if c != "started_at")
"""``show --format csv``: the run's results, as ``history`` lists them."""


@click.command("show")
@click.argument("run", metavar="RUN")
@auditor_option
@text_or_json
@json_short
@click.pass_obj
def show_command(obj: Context, run: str, auditors: tuple[str, ...], fmt: str) -> None:
    """Everything stored about one run: RUN is a run id, 'latest' or 'latest~N' (of the
    --auditor given, in a shared database).

    The run's status and times, each stack with its fingerprint (and what changed since
    that stack's previous run), every probe result with its metrics and latencies, the
    findings and the exported models. CSV: one row per probe result.
    """
    store = obj.store(read=True)
    with store.engine.connect() as conn:
        try:
            detail = with_words(run_detail(conn, resolve_run(conn, run, auditors)))
        except HistoryError as exc:
            fail(str(exc), EXIT_FINDINGS if "no run" in str(exc) else EXIT_USAGE)
    if fmt == "json":
        click.echo(json.dumps(jsonable(detail.to_json()), indent=2, allow_nan=False))
        return
    if fmt == "csv":
        r = detail.run
        WRITERS["csv"](
            sys.stdout,
            SHOW_COLUMNS,
            (
                (
                    r["id"],
                    r.get("auditor_id"),
                    x["pair"],
                    x["probe"],
                    x["variant"],
                    x["status"],
                    x["latency"].get("train", {}).get("p50_us"),
                    x["latency"].get("infer", {}).get("p50_us"),
                    x["message"],
                )
                for x in detail.results
            ),
        )
        return
    click.echo(render_run(detail))


# -- trend -----------------------------------------------------------------------------------------


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
@click.option(
    "--members",
    is_flag=True,
    help="Chart every member of a host group on its own (default: one chart per group stack, each "
    "run's worst member; --format json and csv always give every member).",
)
@text_or_json
@json_short
@click.pass_obj
def trend_command(
    obj: Context, metric: str, limit: int, scale: str, width: int, members: bool, fmt: str, **kw: Any
) -> None:
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
            # A damaged start time reads as missing (auditor.db.columns): such points bound nothing.
            times = [at for s in series for _, at, _, _ in s.points if at is not None]
            first, last = (min(times), max(times)) if times else (None, None)
            changes = [
                c
                for c in fingerprint_changes(conn, sorted(stacks), since=first)
                if last is None or c.at is None or c.at <= last
            ]
        elif not metric.startswith("latency.") and metric not in known_values(conn, "metric"):
            known = ", ".join(known_values(conn, "metric"))
            fail(f"no metric {metric!r} in the history (known: {known or 'none yet'})")
        whose = run_auditors(conn, {p[0] for s in series for p in s.points}) if fmt in ("json", "csv") else {}
    if fmt == "csv":
        WRITERS["csv"](
            sys.stdout,
            TREND_COLUMNS,
            (
                (metric, s.pair, s.probe, s.variant, s.output, r, whose.get(r), at, v, st)
                for s in series
                for r, at, v, st in s.points
            ),
        )
        return
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
                        {"run": r, "auditor": whose.get(r), "at": iso(at), "value": plain(v), "status": st}
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
    if not members:  # a group's members as one chart: per run the worst (cosine: the lowest is worst too)
        how = "min" if metric in LOWER_IS_WORSE else "max"
        series = fleet_view.fold_series(series, fleet_view.family_keys(s.key[:3] for s in series), how)
    click.echo(render_trend(series, changes, scale, width), nl=False)


LOWER_IS_WORSE = ("cosine", "rel_lt_1e-3", "bitwise_equal")
"""Metrics where a member's lowest value is its worst (the folded chart shows the worst)."""

TREND_COLUMNS = ("metric", "pair", "probe", "variant", "output", "run", "auditor", "at", "value", "status")


# -- report ----------------------------------------------------------------------------------------


@click.command("report")
@click.option("--out", "out_path", required=True, metavar="FILE.html", help="Where to write the page.")
@click.option("--pair", "pairs", multiple=True, metavar="TRAIN->INFER", help="Only this pair.")
@click.option("--probe", "probes", multiple=True, metavar="NAME", help="Only this probe.")
@click.option("--variant", "variants", multiple=True, metavar="NAME", help="Only this variant.")
@click.option(
    "--stack", "stacks", multiple=True, metavar="NAME", help="Only pairs with this stack on a side."
)
@auditor_option
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

    from auditor.report.html import ReportError, render_report

    f = _filters(kw, None)
    path = Path(out_path)
    if not path.resolve().parent.is_dir():  # said before any work; no directory is made for it
        fail(f"--out {path}: no such directory {path.resolve().parent}")
    store = obj.store(read=True)
    limits = None  # the NPU telemetry thresholds drawn: the config's, else the built-in ones
    if obj.find_config(required=False):
        with contextlib.suppress(ConfigError):
            limits = obj.load_config().telemetry.limits()
    with store.engine.connect() as conn:
        refresh_statistics(conn)
        _reject_unknown(conn, f)  # an unknown --metric is the report's ReportError
        try:
            page, summary = render_report(
                conn, f, metric=metric, source=_redacted(store.url), telemetry_limits=limits
            )
        except ReportError as exc:
            fail(str(exc))
    try:
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
@click.option("--json", "as_json", is_flag=True, help="Print database, revision, latest and pending as JSON.")
@click.pass_obj
def db_current(obj: Context, check: bool, as_json: bool) -> None:
    """Show the schema revision of the database and whether it is up to date."""
    from alembic.script.revision import RevisionError
    from alembic.util import CommandError

    from auditor.history.store import StoreError

    store = obj.store(migrate=False)
    try:
        current = store.current_heads()
    except StoreError as exc:
        fail(str(exc), EXIT_FINDINGS)
    heads = store.head_revisions()
    if not as_json:
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
    if as_json:
        doc = {
            "database": _redacted(store.url),
            "revision": list(current),
            "latest": list(heads),
            "pending": list(pending),
            "up_to_date": not pending,
        }
        click.echo(json.dumps(doc, indent=2))
        if pending and check:
            sys.exit(EXIT_FINDINGS)
        return
    if pending:
        click.echo(f"pending:  {', '.join(pending)} (run `auditor db upgrade`)")
        if check:
            sys.exit(EXIT_FINDINGS)
    else:
        click.echo("up to date")


@db_group.command("check")
@click.option(
    "--json", "as_json", is_flag=True, help="Print database, ok, problems, remedy and read_only as JSON."
)
@click.pass_obj
def db_check(obj: Context, as_json: bool) -> None:
    """Check the database: damaged pages or indexes (SQLite's whole integrity_check), missing
    tables, unreadable timestamps or JSON, read-only (exit 1 if anything is wrong, with the
    remedy). `auditor audit` refuses such a database."""
    from auditor.db.health import check

    store = obj.store(migrate=False)
    health = check(store.engine, thorough=True)
    if as_json:
        doc = {
            "database": _redacted(store.url),
            "ok": health.ok,
            "problems": list(health.problems),
            "remedy": health.remedy,
            "read_only": health.read_only,
        }
        click.echo(json.dumps(doc, indent=2))
        if not health.ok:
            sys.exit(EXIT_FINDINGS)
        return
    click.echo(f"database: {_redacted(store.url)}")
    for problem in health.problems:
        click.echo(f"  problem: {problem}")
    if health.remedy:
        click.echo(f"  remedy: {health.remedy}")
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
    from alembic.script.revision import RevisionError
    from alembic.util import CommandError

    from auditor.history.store import StoreError

    store = obj.store(migrate=False, create=True)
    try:
        before = store.current_heads()
        pending = store.pending_revisions()
        store.upgrade()
        after = store.current_heads()
    except StoreError as exc:  # unreachable, not a database, damaged, read-only
        fail(str(exc), EXIT_FINDINGS)
    except (CommandError, RevisionError):
        fail(
            f"the database is at revision {', '.join(before)}, which this auditor does not know: "
            "a newer auditor migrated it; upgrade the auditor",
            EXIT_FINDINGS,
        )
    if not pending:
        click.echo(f"already up to date at {', '.join(before)}")
    else:
        click.echo(
            f"upgraded {_redacted(store.url)} from {', '.join(before) or '(empty)'} "
            f"to {', '.join(after)} (applied {', '.join(pending)})"
        )
    config = _config_if_any(obj)
    if config is not None and config.queue.enabled:  # the job queue's tables: here, or by the first cycle
        from auditor.queue.jobs import JobQueue, QueueError

        try:
            queue = JobQueue(store.url, config.queue.heartbeat).open(register=False)
        except QueueError as exc:
            fail(str(exc), EXIT_FINDINGS)
        queue.close()
        said = "created" if queue.created_schema else "present"
        click.echo(f"job queue ([queue] pool {config.queue.pool!r}): procrastinate's tables {said}")


def _config_if_any(obj: Context) -> Config | None:
    """The config where there is a usable one (commands that work on the database alone)."""
    from auditor.config.tables import ConfigError

    path = obj.find_config(required=False)
    if path is None or not Path(path).is_file():
        return None
    try:
        return obj.load_config()
    except (ConfigError, OSError):
        return None


@db_group.command("prune")
@click.option(
    "--keep-days",
    type=click.IntRange(0, MAX_KEEP_DAYS),
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
    from auditor.config.tables import Config
    from auditor.history.retention import prune
    from auditor.history.store import auditor_identity

    config = obj.config() if obj.find_config(required=not obj.db) else None
    if keep_days is None:
        keep_days = config.keep_days if config is not None else Config.keep_days
    if auditor_id is None and not all_auditors:
        auditor_id = auditor_identity(config.auditor_id if config is not None else "")
    store = obj.store(create=False)
    result = prune(store.engine, keep_days, dry_run=dry_run, auditor_id=None if all_auditors else auditor_id)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    elif keep_days == 0:
        click.echo("keep_days is 0: every run is kept")
    else:
        click.echo(result.summary())


@db_group.command("size")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@click.pass_obj
def db_size(obj: Context, as_json: bool) -> None:
    """How big the history is, and how big keep_days of runs at the schedule's rate make it:
    the database's bytes, its complete runs, their average size (first runs included, so
    the projection errs large)."""
    config = obj.config() if obj.find_config(required=not obj.db) else None
    keep_days = config.keep_days if config is not None else Config.keep_days
    interval = config.schedule.interval if config is not None and not config.schedule.cron else None
    store = obj.store(create=False, read=True)
    found = measure(store.engine, keep_days, interval)
    click.echo(json.dumps(found.to_json(), indent=2, default=str) if as_json else found.summary())


COMMANDS = (history_command, show_command, trend_command, report_command, db_group)
