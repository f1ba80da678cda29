"""What do the stacks' differences do to a PPO update, and what does finding out cost?

Runs one audit cycle of the ppo_policy probe (every variant: Gaussian and tanh heads, fp32 and
fp16) on every pair of the default config plus ms20 -> ort (the ONNX Runtime block of
docs/own-policy.md), and prints per pair and variant the importance-ratio checks
(auditor.compare.ratios: the infer side's policy draws the actions, both models score them)
next to the log-probability check they complement: ppo_clip_share, tis_share, ess,
kl_behaviour, the ratio's range, and whether logp_diff passed.

Cost, side by side in one run: the same cycle with and without the ratios (no actions drawn, no
extra runs, the comparator off), interleaved for ``--rounds``, then the medians of the CPU
seconds (this process and everything it started) and of the wall seconds spent drawing and
scoring. With ``--full`` the
two cycles are the default config's full cycle (every probe, rollouts on), the figure the
issue's goal is about (ratios at most 2% of a default cycle).

Last, sampled episodes (``[rollout] mode = "sampled"``) against deterministic ones: the wall
seconds inside the rollouts of the same cycle in each mode, and each pair's sampled verdict.

usage: .venv/bin/python bench/importance_ratios.py [--full] [--rounds N] [--quick]
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_config import reference_config  # noqa: E402

from auditor.cycle import serving  # noqa: E402
from auditor.cycle.cycle import Cycle  # noqa: E402
from auditor.cycle.probes import ProbeAudit  # noqa: E402

ORT = """
[stacks.ort]
role = "infer"
runtime = "ort"
python = "${AUDITOR_STACKS_DIR:-${XDG_CACHE_HOME:-~/.cache}/auditor/stacks}/ort/bin/python"
device = "cpu"

[[pairs]]
train = "ms20"
infer = "ort"
probes = ["ppo_policy", "action_sampler", "obs_normalizer"]
"""

SHOWN = ("ratio_mean", "ratio_max", "ppo_clip_share", "tis_share", "ess", "kl_behaviour")


def cpu() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def run(config, plugins, ratios_on: bool) -> tuple[object, float, float, float]:
    """One cycle: (result, wall s, CPU s, wall s inside the ratio steps: each serving side's
    draws, the reference sides scoring them)."""
    spent = [0.0]
    cycle = Cycle(config, plugins.probes(), plugins=plugins)

    def timed(fn):
        def wrapper(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs) if ratios_on else None
            finally:
                spent[0] += time.perf_counter() - t

        return wrapper

    draw, score = serving.draw, serving.Serving._score
    serving.draw, serving.Serving._score = timed(draw), timed(score)
    if not ratios_on:
        cycle.comparators = {
            **cycle.comparators,
            "importance_ratios": dataclasses.replace(
                cycle.comparators["importance_ratios"], compare=lambda *a: []
            ),
        }
    try:
        c0, t0 = cpu(), time.perf_counter()
        result = cycle.run()
    finally:
        serving.draw, serving.Serving._score = draw, score
    return result, time.perf_counter() - t0, cpu() - c0, spent[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="cost on the default config's full cycle")
    ap.add_argument("--rounds", type=int, default=2, help="cycles with and without, interleaved")
    ap.add_argument("--quick", action="store_true", help="one pair, two variants, one round: that it runs")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.full = 1, False
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "auditor.toml"
        path.write_text((REPO / "auditor.toml").read_text() + ORT)
        two = {"ppo_policy": ("fp32", "fp16")}
        narrow = dict(pairs=("ms20->lite20",), variants=two) if args.quick else {}
        narrowed = reference_config(path, probes=("ppo_policy",), rollout=False, **narrow)
        full = reference_config() if args.full else narrowed  # the default config as shipped
    config, plugins = narrowed
    result, wall, cpu_s, spent = run(config, plugins, True)
    print("ppo_policy, every variant: the stacks' difference in PPO's terms (the infer side's policy")
    print("draws 4 actions per state of a 256-state batch; both models score them in their graphs)")
    head = f"  {'pair':<20} {'variant':<10} {'status':<11}" + "".join(f"{m:>15}" for m in SHOWN)
    print(head + f"{'logp_diff':>11}  basis")
    for r in result.results:
        checks = {c.metric: c for c in r.checks}
        if "ess" not in checks:
            print(f"  {r.pair:<20} {r.variant:<10} {r.status:<11} (no ratios: {r.message[:70]})")
            continue
        logp = checks.get("logp_diff_max")
        basis = "in-graph" if "own log-prob" in checks["ratio_mean"].message else "params"
        row = "".join(f"{checks[m].value:>15.6g}" for m in SHOWN)
        verdict = "pass" if logp is None or logp.passed else "FAIL"
        print(f"  {r.pair:<20} {r.variant:<10} {r.status:<11}{row}{verdict:>11}  {basis}")
        failing = [c for c in r.checks if not c.passed and c.metric in SHOWN]
        for c in failing:
            print(f"      {c.metric}: {c.message}")
    config, plugins = full
    # Interleaved (without, with, without, with, ...): the first cycle of a process pays for a
    # cold page cache whichever it is.
    rounds: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
    for _ in range(args.rounds):
        for on in (False, True):
            _, wall, cpu_s, spent = run(config, plugins, on)
            rounds[on].append((wall, cpu_s, spent))
            print(f"  {'with' if on else 'without'} ratios: wall {wall:.1f} s, CPU {cpu_s:.1f} s", flush=True)
    what = "default config's full cycle" if args.full else "ppo_policy cycle above"
    print(f"\ncost on the {what}, {args.rounds} rounds interleaved (median):")
    med = {on: [statistics.median(x) for x in zip(*rows, strict=True)] for on, rows in rounds.items()}
    print(
        f"  with ratios     wall {med[True][0]:6.1f} s  CPU {med[True][1]:6.1f} s  "
        f"(drawing and scoring: {med[True][2]:.2f} s wall)"
    )
    print(f"  without ratios  wall {med[False][0]:6.1f} s  CPU {med[False][1]:6.1f} s")
    print(
        f"  ratio steps / cycle wall: {100 * med[True][2] / med[True][0]:.1f}%   "
        f"CPU with / without: {med[True][1] / med[False][1]:.3f}"
    )
    episodes(args.rounds, args.quick)
    return 0


def episodes(rounds: int, quick: bool = False) -> None:
    """Sampled episodes against deterministic ones: the default config's rollout (ppo_policy
    fp32, 3 seeds of 200 Pendulum steps) on every pair, each mode a cycle of that variant
    alone, interleaved; the wall seconds inside the rollouts, and each pair's sampled verdict."""
    only = {"ppo_policy": ("fp32",)}
    pairs = ("ms20->lite20",) if quick else ()
    config, plugins = reference_config(probes=("ppo_policy",), variants=only, rollout=True, pairs=pairs)
    if quick:  # one short episode
        short = dataclasses.replace(config.rollout, seeds=(0,), steps=20)
        config = dataclasses.replace(config, rollout=short)
    spent: dict[str, list[float]] = {"deterministic": [], "sampled": []}
    said: list[str] = []
    for _ in range(rounds):
        for mode in spent:
            cfg = dataclasses.replace(config, rollout=dataclasses.replace(config.rollout, mode=mode))
            cycle = Cycle(cfg, plugins.probes(), plugins=plugins)
            inner = ProbeAudit.roll_out
            took = [0.0]

            def timed(*a, inner=inner, took=took):
                t = time.perf_counter()
                try:
                    return inner(*a)
                finally:
                    took[0] += time.perf_counter() - t

            ProbeAudit.roll_out = timed
            try:
                result = cycle.run()
            finally:
                ProbeAudit.roll_out = inner
            spent[mode].append(took[0])
            if mode == "sampled" and not said:
                said = [f"  {r.pair:<20} {r.status:<11} {r.message}" for r in result.rollouts]
    shape = "1 x 20" if quick else "3 x 200"
    print(f"\nsampled episodes (ppo_policy fp32, {shape} Pendulum steps per pair):")
    print("\n".join(said))
    det, smp = (statistics.median(spent[m]) for m in ("deterministic", "sampled"))
    print(
        f"  rollouts' wall per cycle, median of {rounds}: deterministic {det:.2f} s, sampled {smp:.2f} s "
        f"(sampled / deterministic {smp / det:.2f})"
    )


if __name__ == "__main__":
    sys.exit(main())
