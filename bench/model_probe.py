"""What do a model probe's deeper checks cost? (#34: a user's policy audited as deeply as the
built-in probes, goal <= 3x today's model probe.)

Exports the user's Pendulum policy (tests/model_fixtures/mypolicy, kind pendulum_gauss, batch
1) with ms20, then runs, interleaved for ``--rounds``, one cycle of a config holding only that
``[models.policy]`` (its training network on ms20 as the reference, served by lite20) three
ways:

- ``plain``: the model probe as it was: its own inputs, latency, the rerun in a fresh worker,
  the declared policy's ratios (``input_classes = []``, no rollout);
- ``classes``: plus every input class that applies (sweep, magnitude, nan-inf: 64 rows each,
  64 calls per class and side for a batch-1 file);
- ``episodes``: plus ``[models.policy.rollout]``, 3 episodes of 200 Pendulum steps.

Prints the medians of each cycle's wall and CPU seconds (this process and its children) and of
the wall seconds inside the model suite, and the ratios to ``plain``. The served policy drifts on
the sweep class (lite20's tanh), so ``classes`` and ``episodes`` also localize it (the file's
copy returning its inner values on lite20, the training network's cells by hooks on ms20).

With ``--against REV``: the episodes way's cycle run by this checkout and by REV in turn
(bench/revision.py): each side's CPU and wall medians, their paired ratio, and the outputs
bitwise.

usage: .venv/bin/python bench/model_probe.py [--rounds N] [--quick]
       .venv/bin/python bench/model_probe.py --against REV [--pairs N]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import revision  # noqa: E402

from auditor.config.load import load  # noqa: E402
from auditor.cycle.cycle import Cycle  # noqa: E402
from auditor.cycle.part import Part  # noqa: E402
from auditor.extend.manager import Plugins  # noqa: E402

FIXTURES = REPO / "tests" / "model_fixtures"
WAYS = {
    "plain": "",
    "classes": "",
    "episodes": (
        '[models.policy.rollout]\nenv = "Pendulum-v1"\nepisodes = 3\nmax_steps = 200\naction_atol = 1e-3\n'
    ),
}


def cpu() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def config_text(d: Path, way: str, steps: int) -> str:
    head = (REPO / "auditor.toml").read_text().split("# --- pairs")[0]
    head = head.replace("[rollout]\nenabled = true", "[rollout]\nenabled = false")
    model = f"""
[models.policy]
path = "{d / "pendulum_gauss.mindir"}"
stacks = ["lite20"]
output_names = ["mean", "std"]
policy = {{ kind = "gaussian", mean = "mean", std = "std" }}

[models.policy.train]
factory = "mypolicy.nets:build_actor"
checkpoint = "{d / "pendulum_gauss.ckpt"}"
stack = "ms20"
path = "{FIXTURES}"
kwargs = {{ kind = "pendulum_gauss" }}
"""
    if way == "plain":  # a key of [models.policy], before its subtables
        model = model.replace("\n\n[models.policy.train]", "\ninput_classes = []\n\n[models.policy.train]")
    extra = WAYS[way].replace("max_steps = 200", f"max_steps = {steps}")
    return head + model + extra


def run(path: Path, plugins: Plugins) -> tuple[object, float, float, float]:
    config = load(
        path, {n: p.default_params for n, p in plugins.probes().items()}, runtimes=plugins.runtimes()
    )
    cycle = Cycle(config, plugins.probes(), plugins=plugins)
    inner = Part.serve
    took = [0.0]

    def timed(self):
        t = time.perf_counter()
        try:
            return inner(self)
        finally:
            took[0] += time.perf_counter() - t

    # The config holds the model alone: what a part serves is the model's reference and serving
    # sides, its verdict, classes, hidden nodes, localization and episodes.
    Part.serve = timed
    try:
        c0, t0 = cpu(), time.perf_counter()
        result = cycle.run()
    finally:
        Part.serve = inner
    return result, time.perf_counter() - t0, cpu() - c0, took[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="cycles of each way, interleaved")
    ap.add_argument("--quick", action="store_true", help="one round, 20-step episodes: that it runs")
    ap.add_argument(
        "--against",
        metavar="REV",
        help="instead: the episodes way's cycle by this checkout and by REV (a git revision) side by "
        "side, in turn: CPU and wall medians, their paired ratio, and the outputs bitwise",
    )
    ap.add_argument("--pairs", type=int, default=3, help="with --against: runs of each, in turn")
    args = ap.parse_args()
    rounds, steps = (1, 20) if args.quick else (args.rounds, 200)
    stacks = Path.home() / ".cache" / "auditor" / "stacks"
    plugins = Plugins()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        subprocess.run(
            [str(stacks / "ms20" / "bin" / "python"), str(FIXTURES / "mypolicy" / "export.py"), tmp]
            + ["--kinds", "pendulum_gauss", "--batch", "1"],
            check=True,
            capture_output=True,
        )
        paths = {}
        for way in WAYS:
            paths[way] = d / f"{way}.toml"
            paths[way].write_text(config_text(d, way, steps))
        if args.against:
            title = "one cycle of [models.policy] with its classes and episodes"
            print(
                "\n".join(
                    revision.audits_side_by_side(args.against, str(paths["episodes"]), args.pairs, (), title)
                )
            )
            return 0
        figures: dict[str, list[tuple[float, float, float]]] = {w: [] for w in WAYS}
        for i in range(rounds):
            for way in WAYS:
                result, wall, cpu_s, inside = run(paths[way], plugins)
                figures[way].append((wall, cpu_s, inside))
                if i == 0:
                    [r] = [r for r in result.results if r.probe == "policy"]
                    classes = sorted(
                        {c.output.split("@")[1] for c in r.checks if c.output and "@" in c.output}
                    )
                    rolled = [f"{x.status} ({len(x.episodes)} episodes)" for x in result.rollouts]
                    located = r.localization.message if r.localization is not None else "none (no drift)"
                    print(
                        f"  {way:<9} {r.status:<10} classes: {', '.join(classes) or 'none'}; "
                        f"rollout: {', '.join(rolled) or 'none'}\n            localization: {located}",
                        flush=True,
                    )
    med = {w: [statistics.median(x) for x in zip(*rows, strict=True)] for w, rows in figures.items()}
    print(f"\none cycle of [models.policy] (ms20 training network -> lite20), median of {rounds}:")
    print(f"  {'way':<9} {'cycle wall':>11} {'cycle CPU':>10} {'model suite':>12} {'suite / plain':>14}")
    for way, (wall, cpu_s, inside) in med.items():
        ratio = inside / med["plain"][2]
        print(f"  {way:<9} {wall:>10.2f}s {cpu_s:>9.2f}s {inside:>11.2f}s {ratio:>13.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
