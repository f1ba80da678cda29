"""Testing helpers for plugin authors: run one probe through a pair of real stacks, in process,
and get its results back (as pytest's ``pytester`` runs a plugin).

    from auditor.testing import Stack, run_probe

    def test_my_probe_agrees():
        results = run_probe("my_policies.probe", Stack.reference("ms20"), Stack.reference("lite20"))
        assert [r.status for r in results] == ["consistent"]

``run_probe`` writes a small config (one pair, the probe, no rollout, short latency timing),
validates it like `auditor config check`, runs one cycle without storing it, and returns the
probe's ``auditor.results.ProbeResult`` per variant. The ``probe_runner`` pytest fixture is the
same function with the test's temporary directory. ``Plugins`` loads plugins the way the
auditor does (``Plugins(["plugins"], entry_points=False).problems == []``).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from auditor.common.paths import stacks_dir
from auditor.config.load import load
from auditor.config.tables import ConfigError
from auditor.cycle.cycle import Cycle
from auditor.extend.manager import Plugins

if TYPE_CHECKING:
    from auditor.results import CycleResult, ProbeResult

__all__ = ["Plugins", "Stack", "probe_runner", "run_probe"]

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

    def toml(self, role: str) -> str:
        text = (
            f"[stacks.{json.dumps(self.name)}]\nrole = {json.dumps(role)}\n"
            f"runtime = {json.dumps(self.runtime)}\n"
            f"python = {json.dumps(self.python)}\ndevice = {json.dumps(self.device)}\n"
        )
        if self.env:
            text += f"[stacks.{json.dumps(self.name)}.env]\n" + "".join(
                f"{json.dumps(k)} = {json.dumps(v)}\n" for k, v in self.env
            )
        return text


def _probe_name(probe: str) -> str:
    """A probe's NAME from its module name, or the name itself."""
    if "." not in probe:
        return probe
    return str(importlib.import_module(probe).NAME)


def run_probe(
    probe: str,
    train: Stack,
    infer: Stack,
    *,
    variants: Sequence[str] = (),
    params: dict[str, Any] | None = None,
    thresholds: dict[str, float] | None = None,
    plugin_dirs: Iterable[str | Path] = (),
    workdir: str | Path | None = None,
) -> list[ProbeResult]:
    """Run ``probe`` (its NAME, or its module's dotted name) from train to infer, one cycle,
    not stored; returns its results, one per variant run. ``params``: the probe's parameters
    (``[probes.NAME] params``); ``thresholds``: ``atol``/``rtol``; ``plugin_dirs``: where
    the plugin that registers the probe lives, when it is not installed."""
    return [r for r in run_cycle(probe, train, infer, variants=variants, params=params,
                                 thresholds=thresholds, plugin_dirs=plugin_dirs, workdir=workdir).results
            if r.probe == _probe_name(probe)]  # fmt: skip


def run_cycle(
    probe: str,
    train: Stack,
    infer: Stack,
    *,
    variants: Sequence[str] = (),
    params: dict[str, Any] | None = None,
    thresholds: dict[str, float] | None = None,
    plugin_dirs: Iterable[str | Path] = (),
    workdir: str | Path | None = None,
) -> CycleResult:
    """As ``run_probe``, returning the whole cycle's result (fingerprints and rule findings too)."""
    import tempfile

    name = _probe_name(probe)
    dirs = [str(Path(d).resolve()) for d in plugin_dirs]
    text = (
        f"[plugins]\ndirs = {json.dumps(dirs)}\n[rollout]\nenabled = false\n"
        "[latency]\nwarmup = 1\niterations = 5\nbatches = []\n"
        + train.toml("train")
        + infer.toml("infer")
        + f"[[pairs]]\ntrain = {json.dumps(train.name)}\ninfer = {json.dumps(infer.name)}\n"
        f"probes = [{json.dumps(name)}]\n[probes.{json.dumps(name)}]\n"
    )
    if variants:
        text += f"variants = {json.dumps(list(variants))}\n"
    for key, value in (thresholds or {}).items():
        text += f"{key} = {json.dumps(value)}\n"
    if params:
        text += f"[probes.{json.dumps(name)}.params]\n" + "".join(
            f"{k} = {json.dumps(v)}\n" for k, v in params.items()
        )
    with tempfile.TemporaryDirectory(prefix="auditor-test-", dir=workdir) as tmp:
        path = Path(tmp) / "auditor.toml"
        path.write_text(text)
        plugins = Plugins(dirs)
        specs = plugins.probes()
        if name not in specs:
            problems = "; ".join(plugins.problems) or "no plugin registers it"
            raise LookupError(f"probe {name!r} is not loaded ({problems})")
        try:
            config = load(
                path,
                known_probes={n: p.default_params for n, p in specs.items()},
                runtimes=plugins.runtimes(),
                probe_variants={n: p.variants for n, p in specs.items()},
            )
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return Cycle(config, specs, plugins.runtimes(), plugins.comparators(), plugins=plugins).run()


try:  # the fixture, when pytest is there (plugin authors' test suites)
    import pytest

    @pytest.fixture
    def probe_runner(tmp_path: Path):  # type: ignore[no-untyped-def]
        """``run_probe`` with the test's temporary directory for the config and workers' files."""

        def run(probe: str, train: Stack, infer: Stack, **options: Any) -> list[ProbeResult]:
            return run_probe(probe, train, infer, workdir=tmp_path, **options)

        return run

except ImportError:  # pragma: no cover - pytest is a test dependency only
    pass
