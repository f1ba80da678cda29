"""What every command that reads the history shares: ``--format table|json|csv`` (``--json``
kept as the short form of ``--format json``), ``--auditor ID`` (repeatable: the runs of those
auditors of a shared database), and one way to write rows with headers in any format."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import click

from auditor.report.tables import WRITERS

FORMATS = ("table", "json", "csv")


def format_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--format`` and its short form ``--json`` (the command receives ``fmt``)."""
    fn = click.option("--json", "as_json", is_flag=True, help="Print as JSON (the same as --format json).")(
        fn
    )
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(FORMATS),
        default="table",
        show_default=True,
        help="Output format: an aligned table with headers, JSON, or CSV with a header row.",
    )(fn)


def json_short(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--json`` for a command that already has ``--format`` (received as ``fmt``): the short
    form every read command has, so a program can always ask for JSON the same way."""

    @functools.wraps(fn)
    def wrapper(*args: Any, as_json: bool = False, **kw: Any) -> Any:
        if as_json:
            kw["fmt"] = "json"
        return fn(*args, **kw)

    return click.option("--json", "as_json", is_flag=True, help="Print as JSON (the same as --format json).")(
        wrapper
    )


def chosen(fmt: str, as_json: bool) -> str:
    return "json" if as_json else fmt


auditor_filter = click.option(
    "--auditor",
    "auditors",
    multiple=True,
    metavar="ID",
    help="Only the rows of this auditor ([storage] auditor_id, default the host name) of a shared database.",
)


def write_rows(fmt: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> int:
    """Rows under their column names, in ``fmt``; how many were written."""
    return WRITERS[fmt](sys.stdout, tuple(columns), iter(tuple(r) for r in rows))
