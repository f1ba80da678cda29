"""The plugin author's reference: every hook the auditor calls, in one module.

A plugin is a module (or object) with functions named after these hooks and decorated with
``auditor.hookimpl``. It is found through the ``auditor`` entry-point group of an installed
package, or as a ``.py`` file in one of the ``[plugins] dirs`` of ``auditor.toml``. The
auditor's own probes, runtimes, collectors, rules, comparators and alert sinks are plugins
in ``auditor.plugins.default_*`` and use exactly these hooks.

Hooks that return lists are called on every plugin and their answers concatenated;
a name given twice is reported as a conflict and the later plugin's entry is skipped.
See docs/plugins.md for examples of each.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import click

PROJECT = "auditor"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def auditor_probes() -> list[str]:
    """Return the dotted import names of probe modules this plugin ships.

    A probe module defines ``NAME``, ``VERSION``, ``INPUTS``, ``OUTPUTS``, ``DEFAULT_PARAMS``,
    ``make_weights(params)``, ``make_inputs(params)`` (run in the auditor, numpy only) and
    ``build_cell(params, weights)`` (run inside the train stack's worker: Python 3.7
    compatible, framework imports inside the function). Optional:
    ``PARAMS`` (parameter name -> a plain dict declaring its type and range, a JSON Schema
    subset: ``{"type": "integer", "minimum": 1, "maximum": 65536}``, ``"number"`` with
    ``minimum``/``exclusiveMinimum``/``maximum``, ``"string"`` with ``enum``, ``"boolean"``,
    ``"array"`` with ``items``/``minItems``/``maxItems``; ``[probes.NAME.params]`` is validated
    against it, and a parameter left out gets its default's type),
    ``VARIANTS`` (variant name -> parameter overrides; each variant is exported and compared
    on its own), ``COMPARATORS`` (names of comparators, see ``auditor_comparators``, run on its
    outputs), ``comparator_options(params)`` (per-comparator options only the probe knows),
    ``RERUN_IN_FRESH_PROCESS`` (variants whose outputs must repeat in a new worker process,
    e.g. seeded random ops), and ``layer_names(params)`` with
    ``build_cell(params, weights, expose_layers=True)`` appending each layer's output, which
    lets the auditor name the first diverging layer when a variant drifts.
    The module must live in a package; the worker registers that package without running
    its ``__init__``.
    """


@hookspec
def auditor_runtimes() -> list[Any]:
    """Return ``auditor.runtime.RuntimeSpec`` objects: a runtime name usable as
    ``stacks.NAME.runtime``, whether it can ``"export"`` (train side) or ``"load"`` (infer side),
    the artifact format it loads (an ``auditor.runtime.ArtifactFormat``; MindIR by default) or
    the formats it exports, the failure patterns of its messages, its version facts, and
    ``worker_class``, ``"package.module:Class"`` of the class the worker instantiates with the
    stack's device string. The class runs inside the stack (Python 3.7 compatible) and
    implements ``auditor.worker.runtimes.Runtime``.
    """


@hookspec
def auditor_fingerprint_collectors() -> list[str]:
    """Return the dotted import names of fingerprint collector modules.

    A collector module runs inside every stack's worker (Python 3.7, standard library only).
    It defines ``NAME`` (its section in the fingerprint document) and ``collect(context)``
    returning a JSON-serialisable dict; ``context`` holds the stack's ``ascend_root``,
    ``system_root`` (where ``/etc`` is read from), ``npu_smi`` (the command), ``timeout`` (for
    commands) and ``environ`` (the worker's environment at start, before any framework import).
    Values that cannot be read are ``None`` with the reason under the section's ``"unknown"``.
    A collector that raises is recorded as ``{"error": ...}`` in its section; the others still run.
    """


@hookspec
def auditor_rules() -> list[Any]:
    """Return ``auditor.rules.engine.Rule`` objects: a ``name`` and ``check(context)`` yielding
    ``auditor.results.Finding`` objects from the stacks' fingerprints, the pairs and the
    exported artifacts in ``context`` (an ``auditor.rules.engine.RuleContext``). Rules run before
    probes; a finding with ``blocks`` set in its details stops the probes it names.
    """


@hookspec
def auditor_comparators() -> list[Any]:
    """Return ``auditor.compare.outputs.Comparator`` objects: a ``name`` and
    ``compare(train, infer, options)`` taking the train and infer outputs as dicts of
    numpy arrays by output name and returning a list of ``auditor.compare.outputs.MetricCheck``.
    They run in the auditor, on the outputs of probes that list the comparator's name in
    ``COMPARATORS``; ``options`` is the probe's ``[probes.NAME.comparators.COMPARATOR]`` table.
    """


@hookspec
def auditor_alert_sinks() -> list[Any]:
    """Return ``auditor.alerts.engine.SinkType`` objects: a ``type`` usable as
    ``[alerts.sinks.NAME] type = ...``, ``validate(options)`` returning a list of problems,
    and ``create(name, options)`` returning an object whose ``send(event)`` delivers one
    alert event (a dict, documented in docs/plugins.md) or raises to be retried later.
    """


@hookspec
def auditor_cli_commands(cli: click.Group) -> None:
    """Add commands to the ``auditor`` command line: ``cli.add_command(...)`` or
    ``@cli.command()``."""
