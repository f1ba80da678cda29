"""Prometheus metrics of the daemon: what the last cycle measured, open alerts, run status.

Served from a registry of our own (not prometheus_client's global one, which would add the
process and platform collectors of whatever imported it) and built at scrape time from a
snapshot that the daemon replaces after each cycle, so a scrape never sees half a cycle.

Metrics (all gauges unless said otherwise):

- ``auditor_divergence{pair,probe,variant,output,metric}``: each comparison metric of the
  last complete cycle (max_abs, max_rel, cosine, ...), NaN/Inf as they were measured;
- ``auditor_probe_status{pair,probe,variant,auditor_probe_status}``: state set over
  consistent / drift / incompatible / error;
- ``auditor_latency_seconds{stack,pair,probe,variant,quantile}``: per-call latency measured
  inside the stack's worker, quantile 0.5 / 0.9 / 0.99;
- ``auditor_throughput_samples_per_second{stack,pair,probe,variant,batch}``: the serving
  (infer) stack's samples/s at each batch it was timed at, and
  ``auditor_saturation_batch{stack,pair,probe,variant}`` where a ``[latency] sweep`` found one;
- ``auditor_ppo_ratio{pair,probe,variant,metric}``: importance-ratio figures (clip share, TIS
  share, ESS, ...) and ``auditor_ppo_limit{pair,probe,variant,metric}``: the limit each is held to;
- ``auditor_findings{kind,severity,subject}``: the last complete cycle's findings (a cause once);
- ``auditor_open_alerts{severity}``: open alerts by severity;
- ``auditor_last_run_timestamp_seconds``, ``auditor_last_run_duration_seconds``,
  ``auditor_last_run_id``, ``auditor_last_run_outcome{auditor_last_run_outcome}`` (state set
  over the outcomes and ``aborted``), ``auditor_last_complete_run_timestamp_seconds``,
  ``auditor_schedule_interval_seconds`` (the schedule's current period); a daemon's only:
  ``auditor_runs_total{status}`` (counter, this process), ``auditor_start_timestamp_seconds``;
- ``auditor_stack_info{stack,role,runtime,host,runtime_package,runtime_version,mindspore,
  mindspore_lite,cann,driver}``: the stack's runtime as its worker reported it, and the
  versions found in each stack's fingerprint (empty when unknown);
- ``auditor_build_info{version}``;
- the auditor's own warm workers (``[worker] warm = "daemon"``: one zygote per local stack kept
  between cycles, auditor.stacks.warm): ``auditor_warm_worker_resident_bytes{stacks,pid}`` and
  ``auditor_warm_worker_proportional_bytes{stacks,pid}`` (RSS and PSS: the pages a zygote
  shares with the workers it forked count once), ``auditor_warm_worker_forks{stacks,pid}``
  (workers forked so far); read at each scrape;
- NPU telemetry, the latest sample of each host (a cycle's or the daemon's ``[telemetry]
  interval``): ``auditor_npu_<metric>{host,npu,chip}`` per metric of
  auditor.worker.npu_metrics (``auditor_npu_power_watts``, ``auditor_npu_temperature_celsius``,
  ``auditor_npu_hbm_usage_percent``, ``auditor_npu_aicore_utilization_percent``,
  ``auditor_npu_ecc_hbm_double_bit_errors``, ``auditor_npu_health``, ...; chip ``mcu``: the
  card's MCU), ``auditor_npu_telemetry_up{host,npu}`` (0: a view failed for that NPU) and
  ``auditor_npu_telemetry_timestamp_seconds{host}``. A host without NPUs has none.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from auditor import __version__
from auditor.config.tables import SEVERITIES
from auditor.exposition.families import GAUGE, INFO, STATESET, CycleSummary, Family, cycle_families
from auditor.results import STATUS_ORDER, CycleResult, HostTelemetry
from auditor.stacks.warm import ZygoteInfo
from auditor.worker.npu_metrics import HEALTH_LEGEND, METRICS

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import Metric

# prometheus_client (about 10 MB resident) is imported when metrics are first rendered or
# served, not with this module: a daemon with [prometheus] disabled never loads it.

log = logging.getLogger(__name__)

RUN_OUTCOMES = (*STATUS_ORDER, "aborted")
EMPTY_CYCLE = cycle_families(CycleResult(0.0, 0.0, "", {}, [], []))
"""The families before the first complete cycle: each there, without samples."""


@dataclass(frozen=True)
class Snapshot:
    cycle: CycleSummary | None = None
    open_alerts: dict[str, int] = field(default_factory=dict)
    last_run_id: int | None = None
    last_run_finished: float | None = None
    last_run_duration: float | None = None
    last_run_outcome: str | None = None
    runs_total: dict[str, int] = field(default_factory=dict)
    telemetry: dict[str, HostTelemetry] = field(default_factory=dict)
    """The latest NPU telemetry sample of each host."""
    last_complete_finished: float | None = None
    schedule_period: float | None = None
    """Seconds from one scheduled cycle to the next (auditor.config.schedule.schedule_period)."""


class MetricsExporter:
    """Holds the latest snapshot and renders it; ``serve`` exposes it over HTTP."""

    def __init__(
        self, warm_workers: Callable[[], Iterable[ZygoteInfo]] = lambda: (), daemon: bool = True
    ) -> None:
        """``warm_workers``: the daemon's zygotes as they are now (read at each scrape).
        ``daemon``: a long-lived process, whose start time and run counters mean something
        (not for one ``audit --textfile``)."""
        self.warm_workers = warm_workers
        self.daemon = daemon
        self.started_at = time.time()
        self._registry: CollectorRegistry | None = None
        self._snapshot = Snapshot()
        self._lock = threading.Lock()
        self.server: Any = None
        self.address: tuple[str, int] | None = None

    @property
    def registry(self) -> CollectorRegistry:
        with self._lock:
            if self._registry is None:
                from prometheus_client import CollectorRegistry

                self._registry = CollectorRegistry(auto_describe=False)
                self._registry.register(_Collector(self))
            return self._registry

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    def _replace(self, **changes: Any) -> None:
        with self._lock:
            current = self._snapshot
            values = {f: getattr(current, f) for f in current.__dataclass_fields__}
            values.update(changes)
            self._snapshot = Snapshot(**values)

    def record_telemetry(self, samples: Iterable[HostTelemetry]) -> None:
        """NPU telemetry samples: each replaces its host's previous one."""
        latest = dict(self._snapshot.telemetry)
        latest.update({s.host: s for s in samples})
        self._replace(telemetry=latest)

    def record_cycle(self, summary: CycleSummary) -> None:
        """A complete, stored cycle (as the cycle child summarized it: auditor.exposition.families):
        its measurements replace the previous cycle's."""
        runs = dict(self._snapshot.runs_total)
        runs["complete"] = runs.get("complete", 0) + 1
        self.record_telemetry(summary.telemetry)
        self._replace(
            cycle=summary,
            last_run_id=summary.run_id,
            last_complete_finished=summary.finished_at,
            last_run_finished=summary.finished_at,
            last_run_duration=summary.finished_at - summary.started_at,
            last_run_outcome=summary.outcome,
            runs_total=runs,
        )

    def record_aborted(self, run_id: int | None, started: float, finished: float) -> None:
        """An aborted cycle: the last measurements stay (they are still the latest), the run
        status says aborted."""
        runs = dict(self._snapshot.runs_total)
        runs["aborted"] = runs.get("aborted", 0) + 1
        self._replace(
            last_run_id=run_id,
            last_run_finished=finished,
            last_run_duration=finished - started,
            last_run_outcome="aborted",
            runs_total=runs,
        )

    def record_alerts(self, open_by_severity: dict[str, int]) -> None:
        self._replace(open_alerts=dict(open_by_severity))

    def record_schedule(self, period: float) -> None:
        """The schedule's current period, against which a missed cycle is told (the shipped
        rule AuditorNoRecentCycle: none complete for twice it)."""
        self._replace(schedule_period=float(period))

    def render(self) -> bytes:
        from prometheus_client.exposition import generate_latest

        return generate_latest(self.registry)

    def write_textfile(self, path: Path) -> None:
        """The metrics as node_exporter's textfile collector reads them: written beside
        ``path`` and renamed onto it, so a scrape never reads half a file."""
        from prometheus_client.exposition import write_to_textfile

        write_to_textfile(str(path), self.registry)

    def serve(self, address: str, port: int) -> tuple[str, int]:
        """Listen on address:port (port 0: any free port); returns the bound address."""
        from prometheus_client import start_http_server

        server, _thread = start_http_server(port, addr=address, registry=self.registry)
        self.server = server
        host, bound = server.server_address[:2]
        self.address = (str(host), int(bound))
        return self.address

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


class _Collector:
    def __init__(self, exporter: MetricsExporter):
        self.exporter = exporter

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            InfoMetricFamily,
            StateSetMetricFamily,
        )

        snap = self.exporter.snapshot
        build = InfoMetricFamily("auditor_build", "The auditor's version.", labels=["version"])
        build.add_metric([__version__], {})
        yield build
        yield from _families(snap.cycle.families if snap.cycle is not None else EMPTY_CYCLE)
        yield from _telemetry_metrics(snap.telemetry.values())
        yield from _warm_metrics(self.exporter.warm_workers())
        alerts = GaugeMetricFamily("auditor_open_alerts", "Open alerts by severity.", labels=["severity"])
        for severity in (*SEVERITIES, *sorted(set(snap.open_alerts) - set(SEVERITIES))):
            alerts.add_metric([severity], snap.open_alerts.get(severity, 0))
        yield alerts
        if self.exporter.daemon:
            runs = CounterMetricFamily(
                "auditor_runs", "Audit cycles run by this daemon, by how they ended.", labels=["status"]
            )
            for status in ("complete", "aborted"):
                runs.add_metric([status], snap.runs_total.get(status, 0))
            yield runs
            yield GaugeMetricFamily(
                "auditor_start_timestamp_seconds",
                "When this daemon started (Unix time).",
                value=self.exporter.started_at,
            )
        if snap.schedule_period is not None:
            yield GaugeMetricFamily(
                "auditor_schedule_interval_seconds",
                "Seconds from the current scheduled cycle to the next ([schedule]: its interval, or "
                "the cron line's current gap; jitter included).",
                value=snap.schedule_period,
            )
        if snap.last_complete_finished is not None:
            yield GaugeMetricFamily(
                "auditor_last_complete_run_timestamp_seconds",
                "When the last complete audit cycle ended (Unix time).",
                value=snap.last_complete_finished,
            )
        if snap.last_run_finished is not None:
            yield GaugeMetricFamily(
                "auditor_last_run_timestamp_seconds",
                "When the last audit cycle ended (Unix time).",
                value=snap.last_run_finished,
            )
            yield GaugeMetricFamily(
                "auditor_last_run_duration_seconds",
                "How long the last audit cycle took.",
                value=snap.last_run_duration or 0.0,
            )
            if snap.last_run_id is not None:
                yield GaugeMetricFamily(
                    "auditor_last_run_id", "History database id of the last run.", value=snap.last_run_id
                )
            outcome = StateSetMetricFamily(
                "auditor_last_run_outcome", "Outcome of the last audit cycle (aborted: it did not finish)."
            )
            outcome.add_metric([], {o: o == snap.last_run_outcome for o in RUN_OUTCOMES})
            yield outcome


def _families(families: Iterable[Family]) -> Iterable[Metric]:
    """The cycle child's plain families as prometheus_client's."""
    from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, StateSetMetricFamily

    kinds = {GAUGE: GaugeMetricFamily, INFO: InfoMetricFamily, STATESET: StateSetMetricFamily}
    for f in families:
        family = kinds[f.kind](f.name, f.documentation, labels=list(f.labels))
        for labels, value in f.samples:
            family.add_metric(list(labels), value)
        yield family


def _warm_metrics(zygotes: Iterable[ZygoteInfo]) -> Iterable[Metric]:
    from prometheus_client.core import GaugeMetricFamily

    labels = ["stacks", "pid"]
    rss = GaugeMetricFamily(
        "auditor_warm_worker_resident_bytes",
        "Resident memory of each warm worker (zygote) the daemon keeps between cycles.",
        labels=labels,
    )
    pss = GaugeMetricFamily(
        "auditor_warm_worker_proportional_bytes",
        "Proportional memory (PSS) of each warm worker the daemon keeps: pages shared with the "
        "workers it forked count once.",
        labels=labels,
    )
    forks = GaugeMetricFamily(
        "auditor_warm_worker_forks", "Workers each warm worker has forked so far.", labels=labels
    )
    for z in zygotes:
        key = [",".join(z.stacks), str(z.pid)]
        if z.rss_bytes is not None:
            rss.add_metric(key, float(z.rss_bytes))
        if z.pss_bytes is not None:
            pss.add_metric(key, float(z.pss_bytes))
        forks.add_metric(key, float(z.forks))
    if forks.samples:
        yield rss
        yield pss
        yield forks


def _telemetry_metrics(samples: Iterable[HostTelemetry]) -> Iterable[Metric]:
    from prometheus_client.core import GaugeMetricFamily

    families: dict[str, Any] = {}
    up = GaugeMetricFamily(
        "auditor_npu_telemetry_up",
        "1 when every npu-smi view of the NPU was read in the host's latest sample, 0 when one failed.",
        labels=["host", "npu"],
    )
    stamp = GaugeMetricFamily(
        "auditor_npu_telemetry_timestamp_seconds",
        "When the host's latest NPU telemetry sample arrived (Unix time).",
        labels=["host"],
    )
    for s in sorted(samples, key=lambda s: s.host):
        if not s.available:
            continue
        stamp.add_metric([s.host], s.at)
        for n in s.npus:
            up.add_metric([s.host, str(n.npu)], 0.0 if n.errors else 1.0)
            for c in n.chips:
                for metric, value in sorted(c.values.items()):
                    if metric not in families:
                        unit, name, what = METRICS[metric]
                        legend = f" ({HEALTH_LEGEND})" if metric == "health" else f" ({unit})" if unit else ""
                        families[metric] = GaugeMetricFamily(
                            name,
                            f"NPU {what}{legend}, the host's latest telemetry sample (chip mcu: the MCU).",
                            labels=["host", "npu", "chip"],
                        )
                    families[metric].add_metric([s.host, str(n.npu), c.chip], value)
    if stamp.samples:
        yield stamp
        yield up
    for metric in sorted(families):
        yield families[metric]
