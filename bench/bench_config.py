"""The configuration the benches run: the default config (auditor.toml, the reference stacks),
optionally narrowed for ``--quick`` runs that only check that a bench still works.

Narrowed with dataclasses.replace on the parsed config, so a bench follows the config's own
stacks and pairs rather than a copy of them.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from auditor.config.load import load  # noqa: E402
from auditor.config.tables import Config  # noqa: E402
from auditor.extend.manager import Plugins  # noqa: E402


def reference_config(
    path: str | Path = REPO / "auditor.toml",
    *,
    probes: tuple[str, ...] = (),
    variants: dict[str, tuple[str, ...]] | None = None,
    pairs: tuple[str, ...] = (),
    rollout: bool | None = None,
    batches: tuple[int, ...] | None = None,
    iterations: int | None = None,
    parallel: int | None = None,
) -> tuple[Config, Plugins]:
    """The parsed config with the built-in and configured plugins, narrowed to the given
    probes (per pair), variants (per probe), pairs ("train->infer"), rollout switch, extra
    latency batches, timed iterations and stacks driven at once. Empty or None keeps what the file says."""
    plugins = Plugins()
    specs = plugins.probes()
    config = load(
        path,
        known_probes={n: p.default_params for n, p in specs.items()},
        runtimes=plugins.runtimes(),
    )
    chosen = tuple(p for p in config.pairs if not pairs or p.name in pairs)
    if probes:
        chosen = tuple(
            dataclasses.replace(p, probes=tuple(x for x in p.probes if x in probes)) for p in chosen
        )
    chosen = tuple(p for p in chosen if p.probes)
    used = {s for p in chosen for s in (p.train, p.infer)}
    config = dataclasses.replace(
        config, pairs=chosen, stacks={n: s for n, s in config.stacks.items() if n in used}
    )
    if variants:
        config = dataclasses.replace(
            config,
            probes={
                n: dataclasses.replace(pc, variants=variants.get(n, pc.variants))
                for n, pc in config.probes.items()
            },
        )
    latency = config.latency
    if batches is not None:
        latency = dataclasses.replace(latency, batches=batches)
    if iterations is not None:
        latency = dataclasses.replace(latency, iterations=iterations)
    config = dataclasses.replace(config, latency=latency)
    if parallel is not None:
        config = dataclasses.replace(config, worker=dataclasses.replace(config.worker, parallel=parallel))
    if rollout is not None:
        config = dataclasses.replace(config, rollout=dataclasses.replace(config.rollout, enabled=rollout))
    return config, plugins
