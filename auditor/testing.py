"""Testing helpers for plugin authors: run one probe through a pair of real stacks, in process,
and get its results back (as pytest's ``pytester`` runs a plugin).

    from auditor.testing import Stack, run_probe

    def test_my_probe_agrees():
        results = run_probe("my_policies.probe", Stack.reference("ms20"), Stack.reference("lite20"))
        assert [r.status for r in results] == ["consistent"]

``run_probe`` makes a small config (one pair, the probe with its ``[probes.NAME]`` table from
your auditor.toml, so its thresholds are the ones the auditor uses; no rollout, short latency
timing), validates it like `auditor config check`, runs one cycle without storing it, and
returns the probe's ``auditor.results.ProbeResult`` per variant. The ``probe_runner`` pytest
fixture is the same function with the test's temporary directory. ``Plugins`` loads plugins the way the
auditor does (``Plugins(["plugins"], entry_points=False).problems == []``).
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from auditor.cli.context import Context
from auditor.common.paths import stacks_dir
from auditor.config.load import parse, read_document
from auditor.config.tables import Config, ConfigError
from auditor.cycle.cycle import Cycle
from auditor.extend.manager import Plugins

if TYPE_CHECKING:
    from auditor.results import CycleResult, ProbeResult

__all__ = ["Plugins", "Stack", "probe_config", "probe_runner", "run_cycle", "run_probe"]

# The reference stacks' runtimes by name (scripts/install-stacks installs them).
REFERENCE = {
    "ms210": ("train", "mindspore", "ms210"),
    "ms210-graph": ("infer", "mindspore-graph", "ms210"),
    "ms20": ("train", "mindspore", "ms20"),
    "lite20": ("infer", "mindspore-lite", "lite20"),
}


@dataclass(frozen=True)
class Stack:
    """A stack to run a probe on: its name, runtime and interpreter (and optional device, env)."""

    name: str
    runtime: str
    python: str
    device: str = "cpu"
    env: tuple[tuple[str, str], ...] = ()

    @classmethod
    def reference(cls, name: str) -> Stack:
        """One of the reference stacks (ms210, ms210-graph, ms20, lite20) under the stacks directory."""

        if name not in REFERENCE:
            raise ValueError(f"no reference stack {name!r} (known: {', '.join(REFERENCE)})")
        _, runtime, folder = REFERENCE[name]
        return cls(name, runtime, str(stacks_dir() / folder / "bin" / "python"))

    def table(self, role: str) -> dict[str, Any]:
        """The stack's ``[stacks.NAME]`` table."""
        table: dict[str, Any] = {
            "role": role,
            "runtime": self.runtime,
            "python": self.python,
            "device": self.device,
        }
        if self.env:
            table["env"] = dict(self.env)
        return table


def _probe_name(probe: str) -> str:
    """A probe's NAME from its module name, or the name itself."""
    if "." not in probe:
        return probe
    return str(importlib.import_module(probe).NAME)


ConfigChoice = str | Path | bool | None
"""Where ``run_probe`` takes the probe's settings from: None, the config the auditor would read
($AUDITOR_CONFIG, ./auditor.toml, ~/.config/auditor/auditor.toml, /etc/auditor/auditor.toml),
if there is one; a path, that file; False, none (the probe's and the auditor's defaults)."""


def run_probe(
    probe: str,
    train: Stack,
    infer: Stack,
    *,
    variants: Sequence[str] = (),
    params: dict[str, Any] | None = None,
    thresholds: dict[str, Any] | None = None,
    config: ConfigChoice = None,
    plugin_dirs: Iterable[str | Path] = (),
    workdir: str | Path | None = None,
) -> list[ProbeResult]:
    """Run ``probe`` (its NAME, or its module's dotted name) from train to infer, one cycle,
    not stored; returns its results, one per variant run.

    The probe is judged as the auditor judges it: by the ``[probes.NAME]`` table of ``config``
    (thresholds per output, dtype and variant, comparator options, ``params``, ``variants``;
    see ``ConfigChoice`` for where it is found), else by the built-in defaults (1e-5, fp16
    1e-3). ``variants``, ``params`` and ``thresholds`` (keys of ``[probes.NAME]``: ``atol``,
    ``rtol``, ``outputs``, ``dtype``, ``variant``, ``comparators``) override that table for
    this run. ``plugin_dirs``: where the plugin that registers the probe lives, when it is not
    installed; ``workdir``: where the cycle's temporary files (staged exports) go."""
    return [r for r in run_cycle(probe, train, infer, variants=variants, params=params,
                                 thresholds=thresholds, config=config, plugin_dirs=plugin_dirs,
                                 workdir=workdir).results
            if r.probe == _probe_name(probe)]  # fmt: skip


def probe_table(name: str, config: ConfigChoice) -> tuple[dict[str, Any], str | None]:
    """The ``[probes.NAME]`` table of the config ``config`` chooses (empty without one), and
    that config's path."""
    if config is False:
        return {}, None
    path = Context(None if config in (None, True) else str(config), None).find_config(
        required=config is not None
    )
    if path is None:
        return {}, None
    probes = read_document(path).get("probes")
    table = probes.get(name) if isinstance(probes, dict) else None
    return (copy.deepcopy(table) if isinstance(table, dict) else {}), path


def run_cycle(
    probe: str, train: Stack, infer: Stack, *, workdir: str | Path | None = None, **options: Any
) -> CycleResult:
    """As ``run_probe`` (the same keyword arguments), returning the whole cycle's result
    (fingerprints and rule findings too)."""
    cfg, plugins = probe_config(probe, train, infer, **options)
    with _temporary_files_in(workdir):
        return Cycle(cfg, plugins.probes(), plugins.runtimes(), plugins.comparators(), plugins=plugins).run()


def probe_config(
    probe: str,
    train: Stack,
    infer: Stack,
    *,
    variants: Sequence[str] = (),
    params: dict[str, Any] | None = None,
    thresholds: dict[str, Any] | None = None,
    config: ConfigChoice = None,
    plugin_dirs: Iterable[str | Path] = (),
) -> tuple[Config, Plugins]:
    """The one-pair config ``run_probe`` runs (validated like `auditor config check`), and the
    plugins it was validated with. ValueError names what is wrong with it."""
    name = _probe_name(probe)
    dirs = [str(Path(d).resolve()) for d in plugin_dirs]
    try:
        table, source = probe_table(name, config)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    if variants:
        table["variants"] = list(variants)
    table.update(copy.deepcopy(thresholds or {}))
    if params:
        table["params"] = {**(table.get("params") or {}), **params}
    doc: dict[str, Any] = {
        "plugins": {"dirs": dirs},
        "rollout": {"enabled": False},
        "latency": {"warmup": 1, "iterations": 5, "batches": []},
        "stacks": {train.name: train.table("train"), infer.name: infer.table("infer")},
        "pairs": [{"train": train.name, "infer": infer.name, "probes": [name]}],
        "probes": {name: table},
    }
    plugins = Plugins(dirs)
    specs = plugins.probes()
    if name not in specs:
        problems = "; ".join(plugins.problems) or "no plugin registers it"
        raise LookupError(f"probe {name!r} is not loaded ({problems})")
    try:
        cfg = parse(
            doc,
            source or "<auditor.testing>",
            known_probes={n: p.default_params for n, p in specs.items()},
            runtimes=plugins.runtimes(),
            probe_variants={n: p.variants for n, p in specs.items()},
            param_schemas={n: p.param_schema for n, p in specs.items()},
        )
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    return cfg, plugins


@contextlib.contextmanager
def _temporary_files_in(workdir: str | Path | None) -> Iterator[None]:
    """The cycle's temporary directories (staged exports) under ``workdir`` while it runs."""
    if workdir is None:
        yield
        return
    before = tempfile.tempdir
    tempfile.tempdir = str(workdir)
    try:
        yield
    finally:
        tempfile.tempdir = before


try:  # the fixture, when pytest is there (plugin authors' test suites)
    import pytest

    @pytest.fixture
    def probe_runner(tmp_path: Path):  # type: ignore[no-untyped-def]
        """``run_probe`` with the cycle's temporary files in the test's temporary directory."""

        def run(probe: str, train: Stack, infer: Stack, **options: Any) -> list[ProbeResult]:
            return run_probe(probe, train, infer, workdir=tmp_path, **options)

        return run

except ImportError:  # pragma: no cover - pytest is a test dependency only
    pass
