"""The selectors every command that runs or reads part of the config takes: ``--stack``,
``--pair``, ``--probe``, ``--model``, ``--host``, ``--group`` (repeatable), one click option set for
``audit``, ``check``, ``golden record``, ``fingerprint`` and ``history``, resolved by
auditor.config.selection."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from auditor.cli.context import fail
from auditor.config.selection import Narrowed, Selection, SelectionError, Universe, narrow, validate
from auditor.config.tables import Config

HELP = {
    "stack": (
        "stacks",
        "NAME",
        "Only what runs on this stack (its pairs, the models it serves).",
    ),
    "pair": ("pairs", "TRAIN->INFER", "Only this pair (a model's pair is NAME:REFERENCE->STACK)."),
    "probe": ("probes", "NAME", "Only this probe ([[pairs]] probes)."),
    "model": ("models", "NAME", "Only this [models.NAME]."),
    "host": ("hosts", "NAME", "Only stacks on this host ([hosts] name, or 'local')."),
    "group": ("groups", "NAME", "Only the members of this host group ([groups.NAME])."),
}


def selector_options(
    kinds: tuple[str, ...] = ("stack", "pair", "probe", "model", "host", "group"),
    texts: dict[str, str] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The selectors as click options (each repeatable: any of its values matches; different
    selectors must all hold). ``texts`` overrides a selector's help text for one command."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        for kind in reversed(kinds):
            dest, metavar, text = HELP[kind]
            fn = click.option(
                f"--{kind}", dest, multiple=True, metavar=metavar, help=(texts or {}).get(kind, text)
            )(fn)
        return fn

    return decorate


def selection_of(kw: dict[str, Any]) -> Selection:
    """The selectors of a command's keyword arguments (taken out of ``kw``)."""
    return Selection(
        *(tuple(kw.pop(HELP[k][0], ()) or ()) for k in ("stack", "pair", "probe", "model", "host", "group"))
    )


def narrowed(config: Config, selection: Selection) -> Narrowed:
    """The config narrowed to the selection; a selector that names nothing is a usage error."""
    try:
        return narrow(config, selection)
    except SelectionError as exc:
        fail(str(exc))


def check_names(selection: Selection, universe: Universe) -> None:
    try:
        validate(selection, universe)
    except SelectionError as exc:
        fail(str(exc))
