"""The smallest mismatch each importance-ratio check sees at 1,024 samples (#51 point 5), and
how often it pages on no mismatch at all.

The training side is ppo_policy [fp32] (its float64 forward pass from the probe's own weights,
rounded to float32: what a correct fp32 stack returns). The serving side is the same policy
perturbed by a known amount:

- ``std x (1 + e)``: its std scaled;
- ``mean + e * std``: its mean moved by e of its std;
- ``fc<k> in fp16``: one layer's weights rounded to float16 (a layer served in half precision);
- ``bit <b> of a weight``: bit b of one weight of the last layer flipped.

For each perturbation and check (the default checks: PPO's clip share, truncation share, ESS
and the training side's draws; and each trainer preset, judging alone), the smallest e on a
grid whose check fails in at least 90% of the seeds (the draws' seed: 1,024 fresh samples each),
with the false-alarm rate on unperturbed runs: the serving side is the training side's float64
outputs rounded to float32 with half-ULP noise of another seed, 200 runs. The goal: any
perturbation that moves the share PPO would clip at epsilon 0.2 by 0.1% or more (measured on 10^6
draws in float64) is detected by the default checks.

    .venv/bin/python bench/detection_power.py          # 20 seeds, 13 steps per decade
    .venv/bin/python bench/detection_power.py --quick  # 5 seeds, 4 steps per decade
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from auditor.plugins import default_comparators as dc  # noqa: E402
from auditor.probes import ppo_policy  # noqa: E402

from auditor.compare import floor, presets, ratios  # noqa: E402

GAUSS = {"kind": "gaussian", "mean": "mean", "std": "std"}
DEFAULT = ("ppo_clip_share", "tis_share", "ess", "train_drawn_ppo_clip_share")


def policy_outputs(weights: dict[str, np.ndarray], params: dict, inputs: list[np.ndarray]) -> dict:
    out = ppo_policy.reference(params, weights, inputs)
    return {"mean": out["mean"], "std": out["std"]}


def failing(train: dict, infer: dict, seed: int, trainer: str) -> set[str]:
    """The checks that fail on this pair of outputs (trainer "ppo": the default checks)."""
    options = {**GAUSS, "seed": seed, "trainer": trainer}
    checks = dc.importance_ratios(train, infer, options)
    return {c.metric for c in checks if not c.passed}


def judged(trainer: str) -> tuple[str, ...]:
    if trainer == presets.PPO:
        return DEFAULT
    return (presets.BY_NAME[trainer].metric, "train_drawn_removed_share")


def detected(train: dict, infer: dict, seeds: int, trainer: str) -> float:
    """The share of seeds on which any check judged for ``trainer`` fails."""
    names = set(judged(trainer))
    return sum(bool(failing(train, infer, s, trainer) & names) for s in range(seeds)) / seeds


def true_clip_share(train: dict, infer: dict, n: int = 10**6) -> float:
    """The share PPO clips at 0.2 under the serving side's policy, on n float64 draws."""
    t = ratios.distribution(ratios.Policy("gaussian"), train)
    i = ratios.distribution(ratios.Policy("gaussian"), infer)
    k = max(1, n // t.valid.size)
    lw = ratios.log_weights_from_params(t, i, ratios.draw(i, k, 12345))
    return float(np.mean(np.abs(np.exp(lw) - 1.0) > 0.2))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="5 seeds, 4 steps per decade, 40 alarm runs")
    args = ap.parse_args()
    seeds, steps, alarms = (5, 4, 40) if args.quick else (20, 13, 200)
    params = dict(ppo_policy.DEFAULT_PARAMS)
    weights = ppo_policy.make_weights(params)
    inputs = ppo_policy.make_inputs(params)
    exact = policy_outputs(weights, params, inputs)
    train = {k: v.astype(np.float32) for k, v in exact.items()}
    trainers = presets.TRAINERS
    grid = np.logspace(-7, 0, 7 * steps + 1)

    rows = []
    for label, perturb in (
        (
            "std x (1 + e)",
            lambda e: {"mean": train["mean"], "std": (exact["std"] * (1 + e)).astype(np.float32)},
        ),
        (
            "mean + e * std",
            lambda e: {"mean": (exact["mean"] + e * exact["std"]).astype(np.float32), "std": train["std"]},
        ),
    ):
        goal = next((e for e in grid if true_clip_share(train, perturb(e)) >= 0.001), None)
        found = {}
        for trainer in trainers:
            found[trainer] = next(
                (e for e in grid if detected(train, perturb(e), seeds, trainer) >= 0.9), None
            )
        rows.append((label, goal, found))

    print(f"Detection power of the importance-ratio checks: ppo_policy [fp32], 1,024 samples, {seeds} seeds")
    print("smallest e detected in >= 90% of the seeds (- : not within e <= 1)")
    print()
    print("| perturbation | PPO clip share moves 0.1% at e | " + " | ".join(trainers) + " |")
    print("|---|---|" + "---|" * len(trainers))
    for label, goal, found in rows:
        cells = [f"{found[t]:.2g}" if found[t] is not None else "-" for t in trainers]
        print(
            f"| {label} | {goal:.2g} | " + " | ".join(cells) + " |"
            if goal
            else f"| {label} | - | " + " | ".join(cells) + " |"
        )

    discrete = []
    last = len(ppo_policy.layer_sizes(params)) - 2
    for k in range(last + 1):
        w16 = dict(weights)
        for part in ("weight", "bias"):
            w16[f"fc{k}.{part}"] = weights[f"fc{k}.{part}"].astype(np.float16).astype(np.float32)
        discrete.append((f"fc{k} in fp16", policy_outputs(w16, params, inputs)))
    for bit in (10, 16, 20, 23, 26, 30):
        flipped = dict(weights)
        w = weights[f"fc{last}.weight"].copy()
        w.view(np.uint32)[0, 0] ^= np.uint32(1 << bit)
        flipped[f"fc{last}.weight"] = w
        discrete.append((f"bit {bit} of fc{last}.weight[0, 0]", policy_outputs(flipped, params, inputs)))
    print()
    print("| perturbation | PPO clip share moves | detected by (share of seeds) |")
    print("|---|---|---|")
    misses = 0
    for label, served in discrete:
        infer = {k: v.astype(np.float32) for k, v in served.items()}
        moved = true_clip_share(train, infer)
        seen = {t: detected(train, infer, seeds, t) for t in trainers}
        said = ", ".join(f"{t} {v:.0%}" for t, v in seen.items() if v > 0) or "none"
        if moved >= 0.001 and seen[presets.PPO] < 0.9:
            misses += 1
        print(f"| {label} | {100 * moved:.3f}% | {said} |")

    print()
    print("| false alarms on no mismatch | " + " | ".join(trainers) + " |")
    print("|---|" + "---|" * len(trainers))
    rates = {}
    for trainer in trainers:
        names, hits = set(judged(trainer)), 0
        for s in range(alarms):
            infer = floor.rounded(exact, ["mean", "std"], np.dtype(np.float32), seed=1000 + s)
            infer = {k: v.astype(np.float32) for k, v in infer.items()}
            hits += bool(failing(train, infer, s, trainer) & names)
        rates[trainer] = hits / alarms
    print(f"| {alarms} runs | " + " | ".join(f"{100 * rates[t]:.1f}%" for t in trainers) + " |")

    missed = [
        label for label, goal, found in rows if goal is not None and not (found[presets.PPO] or 2) <= goal
    ]
    missed += [f"{misses} discrete perturbation(s)"] if misses else []
    verdict = "met" if not missed else f"NOT met: {', '.join(missed)}"
    print()
    print(f"goal (a 0.1% move of PPO's clip share is detected by the default checks): {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
