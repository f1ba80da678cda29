"""``auditor hosts check``: can every host be reached, and does each stack's interpreter
start there and import its runtime? Answers in seconds, without running a cycle."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import click

from auditor.cli.context import Context, fail
from auditor.cli.exits import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE
from auditor.cli.formats import auditor_filter, chosen, format_options, write_rows
from auditor.config.fields import DAY
from auditor.config.tables import Config
from auditor.history.host_status import host_statuses
from auditor.runtime import RuntimeSpec
from auditor.stacks.hosts import LOCAL
from auditor.stacks.session import Reach, reach
from auditor.stacks.transport import CONNECTIONS, HostError
from auditor.stacks.worker import WorkerError


@dataclass
class StackCheck:
    stack: str
    ok: bool
    seconds: float
    python: str | None = None
    runtime: str | None = None
    error: str | None = None
    warm: str | None = None
    """How its workers start: forked from its zygote (and what the zygote holds), or cold."""


@dataclass
class HostCheck:
    host: str
    how: str
    ok: bool
    seconds: float = 0.0
    error: str | None = None
    stacks: list[StackCheck] = field(default_factory=list)


def check_hosts(config: Config, names: list[str], runtimes: Mapping[str, RuntimeSpec]) -> list[HostCheck]:
    """Connect to each host (one shared connection each), then start a worker for each of
    its stacks: the interpreter runs there, the worker code arrives, the runtime imports."""
    hosts: dict[str, HostCheck] = {}
    for name in names:
        h = config.hosts.get(name)
        hosts[name] = HostCheck(
            name, h.describe().partition(" (")[2].rstrip(")") if h else "this machine", True
        )
    for name, h in config.hosts.items():
        if name not in hosts:
            continue
        started = time.monotonic()
        try:
            CONNECTIONS.ensure(h)
        except HostError as exc:
            hosts[name].ok, hosts[name].error = False, str(exc)
        hosts[name].seconds = time.monotonic() - started
    stacks = reach(config, runtimes)

    def one(stack_name: str) -> StackCheck:
        started = time.monotonic()
        worker = stacks.worker(stack_name)
        try:
            hello = worker.start()
        except WorkerError as exc:
            return StackCheck(stack_name, False, time.monotonic() - started, error=exc.describe())
        finally:
            worker.close()
        return StackCheck(
            stack_name,
            True,
            time.monotonic() - started,
            python=f"{hello.get('python')} ({hello.get('executable')})",
            runtime=f"{hello.get('runtime_package')} {hello.get('runtime_version')}",
            warm=_warm_text(stacks, stack_name, worker.forked),
        )

    tasks = {
        s: (lambda s=s: one(s)) for s, st in config.stacks.items() if st.host in hosts and hosts[st.host].ok
    }
    size, tasks = stacks.parallel(tasks, release=True)
    with stacks, ThreadPoolExecutor(max_workers=size) as pool:
        futures = {s: pool.submit(fn) for s, fn in tasks.items()}
        for s, f in futures.items():
            hosts[config.stacks[s].host].stacks.append(f.result())
    CONNECTIONS.close_all()
    return list(hosts.values())


def _warm_text(stacks: Reach, name: str, forked: bool) -> str:
    """How the stack's workers start, and what its warm worker holds ([worker] warm)."""
    if not forked:
        return "cold: its interpreter imports the runtime for every worker"
    for info in stacks.warm.zygotes() if stacks.warm is not None else ():
        if name in info.stacks:
            rss = f"{info.rss_bytes / 2**20:.0f} MB" if info.rss_bytes else "? MB"
            pss = f", {info.pss_bytes / 2**20:.0f} MB proportional" if info.pss_bytes else ""
            return (
                f"warm: forked from a zygote (pid {info.pid}) that imported "
                f"{', '.join(info.preloaded) or 'the worker code'} in {info.import_cpu_seconds:.2f} CPU-s "
                f"and holds {rss}{pss}; {len(info.threads)} thread(s) at fork"
            )
    return "warm: forked from a zygote another process keeps (AUDITOR_ZYGOTES)"


@click.group("hosts")
def hosts_group() -> None:
    """The hosts the stacks live on ([hosts.NAME] in the config)."""


@hosts_group.command("check")
@click.argument("names", nargs=-1, metavar="[HOST]...")
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
@click.pass_obj
def check_command(obj: Context, names: tuple[str, ...], as_json: bool) -> None:
    """Reach each host and start each of its stacks' workers (interpreter, worker code,
    runtime import), without running a cycle. HOST: only these hosts ('local': this
    machine); default: every host a stack uses. Exit 1 if any check failed."""
    config = obj.config()
    used = list(dict.fromkeys(s.host for s in config.stacks.values()))
    unknown = [n for n in names if n != LOCAL and n not in config.hosts]
    if unknown:
        click.echo(
            f"auditor: no host named {', '.join(map(repr, unknown))} in {config.source} "
            f"(configured: {', '.join([LOCAL, *config.hosts])})",
            err=True,
        )
        sys.exit(EXIT_USAGE)
    chosen = list(dict.fromkeys(names)) or used
    runtimes: dict[str, Any] = obj.plugins().runtimes()
    results = check_hosts(config, chosen, runtimes)
    ok = all(h.ok and all(s.ok for s in h.stacks) for h in results)
    if as_json:
        click.echo(json.dumps([asdict(h) for h in results], indent=2))
    else:
        for h in results:
            state = f"reachable ({h.seconds:.2f} s)" if h.ok else "UNREACHABLE"
            click.echo(f"{h.host}  {h.how}  {state}")
            if h.error:
                click.echo("\n".join("  " + line for line in h.error.splitlines()))
            for s in h.stacks:
                if s.ok:
                    click.echo(f"  {s.stack:<14} ok  Python {s.python}  {s.runtime}  ({s.seconds:.1f} s)")
                    if s.warm:
                        click.echo(f"  {'':<14} {s.warm}")
                else:
                    lines = (s.error or "").splitlines()
                    click.echo(f"  {s.stack:<14} FAILED  {lines[0] if lines else ''}")
                    click.echo("\n".join("    " + line for line in lines[1:]))
            if not h.ok:
                skipped = [n for n, st in config.stacks.items() if st.host == h.host]
                click.echo(f"  not checked: {', '.join(skipped)}")
    sys.exit(EXIT_OK if ok else EXIT_FINDINGS)


@hosts_group.command("list")
@click.option(
    "--group", "groups", multiple=True, metavar="NAME", help="Only the members of this [groups.NAME]."
)
@click.option(
    "--failing",
    is_flag=True,
    help="Only the hosts to look at: never audited, unreached, not consistent, out of line, or stale.",
)
@click.option(
    "--stale-after",
    type=float,
    default=None,
    metavar="HOURS",
    help="A host whose newest audit is older is stale (default: twice [schedule] interval; cron: 2 days).",
)
@auditor_filter
@format_options
@click.pass_obj
def list_command(
    obj: Context,
    groups: tuple[str, ...],
    failing: bool,
    stale_after: float | None,
    auditors: tuple[str, ...],
    fmt: str,
    as_json: bool,
) -> None:
    """Every host of the config's stacks from the history: its group, its stacks, when it was
    last audited (run and auditor), the worst status there, its out-of-line findings and
    whether that audit is stale. A fleet's one table: `--failing` keeps the hosts to look at
    (the text report names the first few and points here)."""
    config = obj.config()
    known = sorted({s.group for s in config.stacks.values() if s.group})
    unknown = [g for g in groups if g not in known]
    if unknown:
        there = ", ".join(known) or "none"
        fail(f"no group {', '.join(map(repr, unknown))} in {config.source} (groups: {there})")
    if stale_after is None:
        seconds = 2 * (
            config.schedule.interval if not config.schedule.cron and config.schedule.interval else DAY
        )
    else:
        seconds = stale_after * 3600
    store = obj.store(read=True)
    now = datetime.now(UTC).replace(tzinfo=None)
    with store.engine.connect() as conn:
        found = host_statuses(conn, config, now, seconds, auditors)
    found = [h for h in found if (not groups or h.group in groups) and (not failing or h.failing)]
    fmt = chosen(fmt, as_json)
    if fmt == "json":
        click.echo(json.dumps([dict(asdict(h), failing=h.failing) for h in found], indent=2, default=str))
        return
    columns = ("host", "group", "stacks", "last audited", "run", "auditor", "status", "stale", "out of line")
    rows = [
        (
            h.host,
            h.group,
            ", ".join(h.stacks),
            h.audited_at.strftime("%Y-%m-%d %H:%M") if h.audited_at else "",
            h.run_id or "",
            h.auditor,
            h.status if not h.errors else f"{h.status}: {h.errors[0].splitlines()[0]}",
            "stale" if h.stale else "",
            "; ".join(h.out_of_line),
        )
        for h in found
    ]
    write_rows(fmt, columns, rows)
