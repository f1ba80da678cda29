"""Cycle results shaped like the shipped config's (four pairs, eight probe variants each,
rollouts, rule and side findings), built from real comparisons of numpy arrays: the report
snapshots and the summary tests read them."""

from __future__ import annotations

import numpy as np

from auditor.compare.outputs import MetricCheck, Tolerance, compare_output, failure_text
from auditor.results import (
    CONSISTENT,
    DRIFT,
    INCOMPATIBLE,
    UNSUPPORTED,
    CycleResult,
    Episode,
    Finding,
    Latency,
    ProbeResult,
    RolloutResult,
    StackReport,
)

VARIANTS = {
    "ppo_policy": ("fp32", "fp16", "tanh-fp32", "tanh-fp16"),
    "action_sampler": ("reparam", "seeded-normal"),
    "obs_normalizer": ("fp32", "fp16"),
}
OUTPUTS = {"ppo_policy": ("mean", "std", "logp", "action"), "action_sampler": ("sample", "noise")}
PAIRS = ("ms210->ms210-graph", "ms210->lite20", "ms20->lite20", "ms20->ms210-graph")
STACKS = (
    ("ms210", "train", "mindspore", "mindspore", "2.10.0", "3.11.7"),
    ("ms210-graph", "infer", "mindspore-graph", "mindspore", "2.10.0", "3.11.7"),
    ("ms20", "train", "mindspore", "mindspore", "2.0.0", "3.7.16"),
    ("lite20", "infer", "mindspore-lite", "mindspore-lite", "2.0.0", "3.7.16"),
)
MINDIR = (
    "lite20 (mindspore-lite 2.0.0) cannot load the MindIR exported by ms210 (MindSpore 2.10.0): the file "
    "has MindIR version 3, the runtime reads at most version 1; the load was not attempted (8 probe variants)"
)
STANDARD_NORMAL = (
    "unsupported operator: StandardNormal: lite20 (mindspore-lite 2.0.0) cannot run the MindIR exported "
    "by ms20: MindSpore Lite 2.0.0 has no CPU kernel for it; the load was not attempted"
)


def _latency(p50: float, batch: int = 256) -> Latency:
    return Latency(batch, 50, p50, p50 * 1.2, p50 * 1.5, p50 * 1.05)


def _outputs(probe: str, diff: dict[str, np.ndarray] | None = None) -> tuple:
    rng = np.random.default_rng(0)
    out = []
    for name in OUTPUTS.get(probe, ("normalized",)):
        train = rng.normal(size=256).astype(np.float32)
        infer = train + (diff or {}).get(name, 0)
        out.append(compare_output(name, train, infer.astype(np.float32), Tolerance(1e-5, 1e-5)))
    return tuple(out)


def probe_result(pair: str, probe: str, variant: str, status: str = CONSISTENT, **kw: object) -> ProbeResult:
    train, infer = pair.split("->")
    outputs = kw.pop("outputs", None)
    if outputs is None and status in (CONSISTENT, DRIFT):
        outputs = _outputs(probe)
    checks = kw.pop("checks", (MetricCheck("kl_max", 0.0, True, 1e-4, None, "", "<="),) if outputs else ())
    message = kw.pop("message", "all outputs within tolerance")
    return ProbeResult(
        pair,
        train,
        infer,
        probe,
        "1",
        variant,
        status,
        str(message),
        outputs=tuple(outputs or ()),
        checks=tuple(checks),  # type: ignore[arg-type]
        thresholds={o: {"atol": 1e-5, "rtol": 1e-5} for o in OUTPUTS.get(probe, ("normalized",))},
        train_latency=_latency(2500.0),
        infer_latency=_latency(213.0) if status in (CONSISTENT, DRIFT) else None,
        samples=256,
        **kw,  # type: ignore[arg-type]
    )


def _rollout(pair: str, status: str = CONSISTENT) -> RolloutResult:
    train, infer = pair.split("->")
    steps = (6.03e-07, 1e-07)
    episodes = tuple(
        Episode(seed, 2, steps, steps, (9.6e-05, 0.0), -1026.42, -1026.42, None, None) for seed in range(3)
    )
    return RolloutResult(
        pair, train, infer, "ppo_policy", "fp32", "Pendulum-v1", status, "", 1e-5, 0.1, episodes
    )


def _stacks(problem: str | None = None) -> dict[str, StackReport]:
    out = {}
    for name, role, runtime, package, version, py in STACKS:
        fp = {"runtime": {"runtime_package": package, "runtime_version": version, "python": py}}
        problems = (problem,) if problem and name == "lite20" else ()
        out[name] = StackReport(name, role, runtime, "/p", "cpu", "local", fp, None, problems)
    return out


def passing_cycle() -> CycleResult:
    """Every pair consistent (ms210->lite20 left out, as a user would after reading the report)."""
    results = [
        probe_result(pair, probe, v)
        for pair in PAIRS
        if pair != "ms210->lite20"
        for probe, variants in VARIANTS.items()
        for v in variants
    ]
    rollouts = [_rollout(p) for p in PAIRS if p != "ms210->lite20"]
    return CycleResult(
        1767225600.0, 1767225642.5, "auditor.toml", _stacks(), results, [], 7, rollouts=rollouts
    )


PPO_CLIP = (
    "the stacks alone would clip 100.00% of PPO samples at epsilon 0.2 (0 expected), 1024 of 1024 "
    "without a valid weight"
)


def failing_cycle() -> CycleResult:
    """The shipped config's default cycle as measured: ms210->lite20 incompatible, Lite 2.0's
    fp16 std defect on ms20->lite20, StandardNormal unsupported on lite20, the seeded sampler
    drifting between MindSpore 2.0 and 2.10, rule and side findings."""
    std_defect = {"std": np.float32(0.606), "logp": np.float32(np.inf)}
    results: list[ProbeResult] = []
    findings: list[Finding] = []
    for pair in PAIRS:
        for probe, variants in VARIANTS.items():
            for v in variants:
                if pair == "ms210->lite20":
                    r = probe_result(pair, probe, v, INCOMPATIBLE, message=MINDIR)
                elif pair == "ms20->lite20" and v in ("fp16", "tanh-fp16") and probe == "ppo_policy":
                    outputs = _outputs(probe, std_defect)
                    checks = (
                        MetricCheck("kl_max", float("inf"), False, 1e-4, None, "", "<="),
                        MetricCheck("kl_mean", float("inf"), False, 1e-5, None, "", "<="),
                        MetricCheck("logp_diff_max", float("inf"), False, 1e-2, "logp", "", "<="),
                        MetricCheck("logp_diff_mean", float("inf"), False, 1e-3, "logp", "", "<="),
                        MetricCheck("action_agreement", 1.0, True, 1.0, "action", "", ">="),
                        MetricCheck("ratio_p99", float("inf"), True),
                        MetricCheck("ratio_max", float("inf"), True),
                        MetricCheck("ppo_clip_share", 1.0, False, 0.0, None, PPO_CLIP, "<="),
                        MetricCheck("ess", 0.0, False, 0.99, None, "", ">="),
                    )
                    message = "; ".join(failure_text(c) for c in outputs if not c.passed)
                    r = probe_result(pair, probe, v, DRIFT, outputs=outputs, checks=checks, message=message)
                elif pair == "ms20->lite20" and v == "seeded-normal":
                    r = probe_result(pair, probe, v, UNSUPPORTED, message=STANDARD_NORMAL)
                elif pair == "ms20->ms210-graph" and v == "seeded-normal":
                    outputs = _outputs(probe, {"sample": np.float32(2.5), "noise": np.float32(1.5)})
                    message = "; ".join(failure_text(c) for c in outputs if not c.passed)
                    r = probe_result(pair, probe, v, DRIFT, outputs=outputs, message=message)
                else:
                    r = probe_result(pair, probe, v)
                results.append(r)
                if r.status != CONSISTENT:
                    key = f"{pair}/{probe}/{v}/{r.status}"
                    findings.append(
                        Finding(r.status, "warning", pair, key, r.message, {"probe": probe, "variant": v})
                    )
    rule = {"rule": "mindir-version", "action": "export with MindSpore 1.7 to 2.2.x, or upgrade lite20"}
    findings.append(Finding(INCOMPATIBLE, "critical", "ms210->lite20", "ms210->lite20/mindir", MINDIR, rule))
    findings.append(
        Finding(
            UNSUPPORTED,
            "warning",
            "ms20->lite20",
            "ms20->lite20/operators",
            STANDARD_NORMAL,
            {"rule": "operator-support", "action": "draw random numbers outside the model and pass them in"},
        )
    )
    findings.append(
        Finding(
            "version-match",
            "info",
            "ms20->ms210-graph",
            "ms20->ms210-graph/version-match",
            "ms20->ms210-graph: exported by MindSpore 2.0.0, served by mindspore 2.10.0",
            {"rule": "version-match", "action": "serve with mindspore 2.0.0"},
        )
    )
    findings.append(
        Finding(
            "invariant",
            "error",
            "lite20",
            "lite20/ppo_policy/fp16/invariant/std",
            "lite20 computed std = 0 for input 0 of the random inputs of ppo_policy [fp16]: std must be > 0",
            {"probe": "ppo_policy", "variant": "fp16"},
        )
    )
    rollouts = [_rollout(p) for p in PAIRS if p != "ms210->lite20"]
    return CycleResult(
        1767225600.0, 1767225903.1, "auditor.toml", _stacks(), results, findings, 8, rollouts=rollouts
    )
