"""Latency at several batch sizes, and regressions against a stack's own history.

The worker's ``time`` request measures around the runtime call only, after a warm-up
(auditor/worker/runtimes.py). Besides the probe's own batch, the cycle times every batch of
``[latency] batches`` (batch 1 is what a policy server sees per request; a large batch is
throughput): the train stack times its built cell at that batch, and exports a MindIR with
that input shape for the infer stack (an exported MindIR has a fixed input shape).

A single p50 says little on a shared machine; a step change against the same stack's recent
past does. A ``latency-regression`` finding is raised when a p50 exceeds
``regression_factor`` times the median p50 of the same series (stack, side, probe, variant,
batch and, on the infer side, the train stack whose export it runs) over the last
``regression_window`` complete runs, once ``regression_min_runs`` of them exist, and exceeds
that median by more than ``regression_spread`` times the window's run-to-run spread (so a
runtime whose p50 jumps from process to process, or a busy machine, does not trip it). Only the
sides of ``regression_sides`` are judged: the serving side by default.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, aliased

from auditor.config.tables import LatencyConfig
from auditor.db import schema as m
from auditor.results import Finding, Latency


def extra_batches(batches: Sequence[int], own_batch: int, params: dict[str, Any]) -> list[int]:
    """The configured batch sizes to time besides the probe's own; none for a probe without a
    "batch" parameter (its inputs cannot be made at another batch size)."""
    if "batch" not in params:
        return []
    return sorted({int(b) for b in batches} - {int(own_batch)})


def batch_params(params: dict[str, Any], batch: int) -> dict[str, Any]:
    return {**params, "batch": int(batch)}


def batch_model(model: str, batch: int) -> str:
    """The worker's id for the model exported at another batch size."""
    return f"{model}@b{batch}"


@dataclass(frozen=True)
class Series:
    """One latency time series: what a regression is judged against."""

    host: str
    stack: str
    side: str
    probe: str
    variant: str
    batch: int
    source: str = ""
    """Infer side: the train stack whose export ran; "" on the train side."""

    def describe(self) -> str:
        where = (
            f"{self.stack} ({self.side}, {self.source} export)" if self.source else f"{self.stack} (train)"
        )
        return f"{where} {self.probe} [{self.variant}] batch {self.batch}"


def series_of(result: Any, host_of: dict[str, str]) -> list[tuple[Series, Latency]]:
    """Every latency of a probe result with its series."""
    out = []
    for side, stack, source, main, more in (
        ("train", result.train, "", result.train_latency, getattr(result, "train_latencies", ())),
        ("infer", result.infer, result.train, result.infer_latency, getattr(result, "infer_latencies", ())),
    ):
        for lat in ([main] if main is not None else []) + list(more):
            series = Series(
                host_of.get(stack, "local"), stack, side, result.probe, result.variant, lat.batch, source
            )
            out.append((series, lat))
    return out


def history(engine: Engine, series: Series, window: int) -> list[float]:
    """p50 of the series in its last ``window`` complete runs, newest first (one per run)."""
    stack = aliased(m.Stack)
    stmt = (
        select(m.Run.id, m.LatencyRow.p50_us)
        .join(m.ProbeResultRow, m.LatencyRow.result_id == m.ProbeResultRow.id)
        .join(m.Run, m.ProbeResultRow.run_id == m.Run.id)
        .join(stack, m.LatencyRow.stack_id == stack.id)
        .where(
            m.Run.status == "complete",
            stack.name == series.stack,
            stack.host == series.host,
            m.LatencyRow.side == series.side,
            m.LatencyRow.batch == series.batch,
            m.ProbeResultRow.probe == series.probe,
            m.ProbeResultRow.variant == series.variant,
        )
        .order_by(m.Run.id.desc())
    )
    if series.source:
        train = aliased(m.Stack)
        stmt = stmt.join(train, m.ProbeResultRow.train_stack_id == train.id).where(
            train.name == series.source
        )
    values: dict[int, float] = {}
    with Session(engine) as s:
        for run_id, p50 in s.execute(stmt):
            if run_id not in values:
                if len(values) == window:
                    break
                values[run_id] = float(p50)
    return list(values.values())


MAD_TO_SIGMA = 1.4826
"""The median absolute deviation times this estimates a normal spread's standard deviation."""


def spread(values: Sequence[float]) -> float:
    """The run-to-run spread of a window of p50s: 1.4826 × their median absolute deviation
    (robust: one slow run does not widen it)."""
    if len(values) < 2:
        return 0.0
    median = statistics.median(values)
    return MAD_TO_SIGMA * statistics.median(abs(v - median) for v in values)


def judge(p50: float, previous: Sequence[float], cfg: LatencyConfig) -> float | None:
    """The rolling median when ``p50`` is a regression against it, else None: above
    ``regression_factor`` times the median *and* more than ``regression_spread`` run-to-run
    spreads above it, so that a p50 that moves between processes by itself is not one."""
    if len(previous) < cfg.regression_min_runs:
        return None
    window = list(previous[: cfg.regression_window])
    median = statistics.median(window)
    if p50 <= cfg.regression_factor * median:
        return None
    return median if p50 - median > cfg.regression_spread * spread(window) else None


def regressions(
    results: Iterable[Any], engine: Engine, cfg: LatencyConfig, host_of: dict[str, str]
) -> list[Finding]:
    """A ``latency-regression`` finding per series whose p50 regressed (train latencies shared
    by several pairs are judged once)."""
    found: list[Finding] = []
    seen: set[Series] = set()
    for r in results:
        for series, lat in series_of(r, host_of):
            if series in seen or series.side not in cfg.regression_sides:
                continue
            seen.add(series)
            previous = history(engine, series, cfg.regression_window)
            median = judge(lat.p50_us, previous, cfg)
            if median is None:
                continue
            key = f"{series.stack}/{series.probe}/{series.variant}/b{series.batch}/{series.side}"
            key += (f"/{series.source}" if series.source else "") + "/latency-regression"
            found.append(
                Finding(
                    "latency-regression",
                    "warning",
                    series.stack,
                    key,
                    f"{series.describe()}: p50 {lat.p50_us:.0f} µs is {lat.p50_us / median:.2f}× the median "
                    f"{median:.0f} µs of the last {len(previous)} runs (limit {cfg.regression_factor:g}×, "
                    f"and {cfg.regression_spread:g} run-to-run spreads of "
                    f"{spread(previous[: cfg.regression_window]):.0f} µs)",
                    {
                        "probe": series.probe,
                        "variant": series.variant,
                        "side": series.side,
                        "batch": series.batch,
                        "source": series.source,
                        "p50_us": lat.p50_us,
                        "median_us": median,
                        "runs": len(previous),
                        "factor": cfg.regression_factor,
                    },
                )
            )
    return found
