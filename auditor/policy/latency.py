"""Latency and throughput at several batch sizes, and regressions against a stack's own history.

The worker's ``time`` request measures around the runtime call only, after a warm-up
(auditor/worker/runtimes.py). Besides the probe's own batch, the cycle times every batch of
``[latency] batches`` (batch 1 is what a policy server sees per request; a large batch is
throughput): the train stack times its built cell at that batch, and exports a MindIR with
that input shape for the infer stack (an exported MindIR has a fixed input shape). The
batches of ``[latency] sweep`` are timed on the serving side only.

Throughput is the serving side's samples per second at each batch it was timed at, batch /
p50 (``throughput``); over three or more batches it flattens out where the runtime stops
gaining from larger batches: the saturation batch is the smallest batch whose throughput
reaches ``[latency] saturation`` (0.9) of the highest (``saturation_batch``). Both are stored
with the result (metrics ``throughput`` per output ``b<batch>``, ``saturation_batch``) and
trended like any metric.

A single p50 says little on a shared machine; a step change against the same stack's recent
past does. A ``latency-regression`` finding is raised when a p50 exceeds
``regression_factor`` times the median p50 of the same series (stack, side, probe, variant,
batch and, on the infer side, the train stack whose export it runs) over the last
``regression_window`` complete runs, once ``regression_min_runs`` of them exist, and exceeds
that median by more than ``regression_spread`` run-to-run spreads (the series' own, or that of
every series of its host this run), after the whole host's slowdown is divided out (so a
runtime whose p50 jumps from process to process, or a busy machine, does not trip it), in
``regression_confirm`` runs in a row (2: a step change stays, one slow sample does not). Only the
sides of ``regression_sides`` are judged: the serving side by default. On the serving side a
regression is the same measurement as a throughput drop by the same factor, so one finding
says both (its details carry the samples/s then and now): one cause, one alert.
"""

from __future__ import annotations

import contextlib
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, aliased

from auditor.config.groups import member
from auditor.config.tables import LatencyConfig
from auditor.db import schema as m
from auditor.results import Finding, Latency, Throughput


def extra_batches(batches: Sequence[int], own_batch: int, params: dict[str, Any]) -> list[int]:
    """The configured batch sizes to time besides the probe's own; none for a probe without a
    "batch" parameter (its inputs cannot be made at another batch size)."""
    if "batch" not in params:
        return []
    return sorted({int(b) for b in batches} - {int(own_batch)})


def batch_params(params: dict[str, Any], batch: int) -> dict[str, Any]:
    return {**params, "batch": int(batch)}


def throughput(latencies: Iterable[Latency | None]) -> tuple[Throughput, ...]:
    """Samples/s at each batch timed (the first latency of a batch counts), smallest first."""
    seen: dict[int, Throughput] = {}
    for lat in latencies:
        if lat is not None and lat.p50_us > 0 and lat.batch not in seen:
            seen[lat.batch] = Throughput(lat.batch, lat.throughput)
    return tuple(seen[b] for b in sorted(seen))


def saturation_batch(points: Sequence[Throughput], share: float) -> int | None:
    """The smallest batch whose samples/s reach ``share`` of the highest; None below two batches."""
    if len(points) < 2:
        return None
    peak = max(t.samples_per_s for t in points)
    return min(t.batch for t in points if t.samples_per_s >= share * peak)


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


def history(engine: Engine | Session, series: Series, window: int) -> list[float]:
    """p50 of the series in its last ``window`` complete runs, newest first (one per run).
    ``engine``: the history's, or a session to read through (one for all of a cycle's
    series, instead of one session each)."""
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
    with contextlib.nullcontext(engine) if isinstance(engine, Session) else Session(engine) as s:
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


@dataclass(frozen=True)
class HostNoise:
    """How the whole host moved this run, from every series judged on it: the median of their
    log(p50 / own median) (a box that is busier now slows them all: divided out when positive)
    and 1.4826 × the median absolute deviation of those (how far series move by themselves
    from run to run on this host now)."""

    shift: float = 0.0
    spread: float = 0.0
    series: int = 0

    MIN_SERIES = 5
    """Fewer series than this say nothing about the host: no shift, no pooled spread."""

    @classmethod
    def of(cls, log_ratios: Sequence[float]) -> HostNoise:
        if len(log_ratios) < cls.MIN_SERIES:
            return cls(series=len(log_ratios))
        center = statistics.median(log_ratios)
        mad = statistics.median(abs(x - center) for x in log_ratios)
        return cls(center, MAD_TO_SIGMA * mad, len(log_ratios))


def judge(
    p50: float, previous: Sequence[float], cfg: LatencyConfig, host: HostNoise = HostNoise()
) -> float | None:
    """The rolling median when ``p50`` is a regression against it, else None. A regression is
    above ``regression_factor`` times the median (after dividing out the host's own slowdown
    this run) *and* more than ``regression_spread`` run-to-run spreads above it: the series'
    own spread over its window, or the spread of every series of the host this run, whichever
    is wider. So a p50 that moves between processes by itself, or a busy box that moves every
    series, is not a regression; one series slower than the rest of its host is."""
    if len(previous) < cfg.regression_min_runs:
        return None
    window = list(previous[: cfg.regression_window])
    median = statistics.median(window)
    if median <= 0 or p50 <= 0:
        return None
    excess = math.log(p50 / median) - max(host.shift, 0.0)
    if excess <= math.log(cfg.regression_factor):
        return None
    own = math.log1p(spread(window) / median)
    return median if excess > cfg.regression_spread * max(own, host.spread) else None


def confirmed(previous: Sequence[float], cfg: LatencyConfig) -> bool:
    """Whether the ``regression_confirm`` - 1 runs before this one (``previous``, newest first)
    were each a regression against the runs before them: only then can this run's be said."""
    for i in range(cfg.regression_confirm - 1):
        if i >= len(previous) or judge(previous[i], previous[i + 1 :], cfg) is None:
            return False
    return True


def _cohort(series: Series) -> tuple[str, ...]:
    """A group member's series as its peers' series are keyed (() for another stack)."""
    grouped = member(series.stack)
    if grouped is None:
        return ()
    return (grouped[0], series.probe, series.variant, str(series.batch), series.side, series.source)


MIN_PEERS = 2
"""A member is judged against its peers this cycle where at least this many others were timed
alike (three members: a majority that can single one out)."""


def against_peers(p50: float, peers: Sequence[float], cfg: LatencyConfig, host: HostNoise) -> bool | None:
    """Whether ``p50`` is also a regression against its peers' this cycle (the same policy,
    batch and side on the group's other members): above ``regression_factor`` times their
    median *and* ``regression_spread`` times their spread (or the host's, whichever is wider)
    above it, the noise margin. None: too few peers to say. So members that all slowed
    together (one machine running every member, a fleet-wide load) page nobody."""
    if len(peers) < MIN_PEERS or p50 <= 0:
        return None
    logs = [math.log(p) for p in peers if p > 0]
    if len(logs) < MIN_PEERS:
        return None
    centre = statistics.median(logs)
    spread_ = 1.4826 * statistics.median(abs(x - centre) for x in logs)
    excess = math.log(p50) - centre
    return excess > math.log(cfg.regression_factor) and excess > cfg.regression_spread * max(
        spread_, host.spread
    )


def regressions(
    results: Iterable[Any], engine: Engine, cfg: LatencyConfig, host_of: dict[str, str]
) -> list[Finding]:
    """A ``latency-regression`` finding per series whose p50 regressed (train latencies shared
    by several pairs are judged once)."""
    judged: list[tuple[Series, Latency, list[float]]] = []
    seen: set[Series] = set()
    with Session(engine) as session:
        for r in results:
            for series, lat in series_of(r, host_of):
                if series in seen or series.side not in cfg.regression_sides:
                    continue
                seen.add(series)
                previous = history(session, series, cfg.regression_window + cfg.regression_confirm - 1)
                if len(previous) >= cfg.regression_min_runs and lat.p50_us > 0 and confirmed(previous, cfg):
                    judged.append((series, lat, previous))
    ratios: dict[str, list[float]] = {}
    for series, lat, previous in judged:
        median = statistics.median(previous[: cfg.regression_window])
        if median > 0:
            ratios.setdefault(series.host, []).append(math.log(lat.p50_us / median))
    noise = {host: HostNoise.of(values) for host, values in ratios.items()}
    cohorts: dict[tuple[str, ...], dict[str, float]] = {}  # a group's members timed alike, this cycle
    for r in results:
        for series, lat in series_of(r, host_of):
            if (cohort := _cohort(series)) and lat.p50_us > 0:
                cohorts.setdefault(cohort, {})[series.stack] = lat.p50_us
    found: list[Finding] = []
    for series, lat, previous in judged:
        host = noise.get(series.host, HostNoise())
        median = judge(lat.p50_us, previous, cfg, host)  # its window: the runs just before it
        if median is None:
            continue
        m = member(series.stack)
        cohort = (
            (m[0], series.probe, series.variant, str(series.batch), series.side, series.source) if m else ()
        )
        peers = [p for stack, p in cohorts.get(cohort, {}).items() if stack != series.stack]
        against = against_peers(lat.p50_us, peers, cfg, host)
        if against is False:
            continue  # its peers are as slow this cycle: the box, not this member
        key = f"{series.stack}/{series.probe}/{series.variant}/b{series.batch}/{series.side}"
        key += (f"/{series.source}" if series.source else "") + "/latency-regression"
        message = (
            f"{series.describe()}: p50 {lat.p50_us:.0f} µs is {lat.p50_us / median:.2f}× the median "
            f"{median:.0f} µs of the last {min(len(previous), cfg.regression_window)} runs"
            + (f", {cfg.regression_confirm} runs in a row" if cfg.regression_confirm > 1 else "")
            + f" (limit {cfg.regression_factor:g}× "
            f"and {cfg.regression_spread:g} run-to-run spreads; its own spread "
            f"{spread(previous[: cfg.regression_window]):.0f} µs, the host's "
            f"{math.expm1(host.spread):.0%} over {host.series} series, which moved "
            f"{math.expm1(host.shift):+.0%} together)"
        )
        details = {
            "probe": series.probe,
            "variant": series.variant,
            "side": series.side,
            "batch": series.batch,
            "source": series.source,
            "p50_us": lat.p50_us,
            "median_us": median,
            "runs": min(len(previous), cfg.regression_window),
            "confirm": cfg.regression_confirm,
            "factor": cfg.regression_factor,
            "host_shift": host.shift,
            "host_spread": host.spread,
        }
        if against is not None:
            peer_median = statistics.median(peers)
            message += (
                f"; {lat.p50_us / peer_median:.2f}× the median {peer_median:.0f} µs of its {len(peers)} "
                "peers this cycle"
            )
            details |= {"peers": len(peers), "peer_median_us": peer_median}
        if series.side == "infer":  # the serving side: the same figure as samples per second
            now, before = lat.batch / (lat.p50_us / 1e6), lat.batch / (median / 1e6)
            message += f"; throughput {now:,.0f} samples/s, down from {before:,.0f}"
            details |= {"throughput": now, "median_throughput": before}
        found.append(Finding("latency-regression", "warning", series.stack, key, message, details))
    return found
