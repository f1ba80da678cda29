"""The history database schema (SQLAlchemy 2 ORM).

Metrics are stored in long format, one row per (output, metric), so any metric of any probe
can be filtered and trended with one indexed query, and new metrics need no migration.
Fingerprints, artifacts, metric sets and threshold tables are content-addressed: a stack
that did not change adds no fingerprint row, a MindIR exported twice keeps its bytes once
(auditor.db.blobs: even where the export's bytes differ in order only), and a
result whose figures (or thresholds) are those of an earlier result refers to that one's
rows instead of adding its own. A fleet's consistent hosts compute the same figures cycle
after cycle and as their peers, so a cycle of a hundred hosts adds a few metric sets, not a
hundred (auditor.db.content).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import (
    ForeignKey,
    Index,
    LargeBinary,
    MetaData,
    UniqueConstraint,
    insert,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, relationship

# A damaged value (unparsable timestamp or JSON, a blob where text belongs) reads as None
# or as text instead of failing a whole query: auditor.db.columns.
from auditor.db.columns import TolerantDateTime as DateTime
from auditor.db.columns import TolerantFloat as Float
from auditor.db.columns import TolerantInteger as Integer
from auditor.db.columns import TolerantJSON as JSON
from auditor.db.columns import TolerantString as String
from auditor.db.columns import TolerantText as Text

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {  # noqa: RUF012 - SQLAlchemy's declarative API
        str: String(),
        int: Integer(),
        float: Float(),
        datetime: DateTime(),
        dict: JSON(),
    }


class Run(Base):
    """One audit cycle. status: running, complete or aborted."""

    __tablename__ = "runs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    started_at: Mapped[datetime] = mapped_column(DateTime, index=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime)
    status: Mapped[str] = mapped_column(String(16), index=True)
    outcome: Mapped[str | None] = mapped_column(String(16))
    host: Mapped[str] = mapped_column(String(255))
    auditor_id: Mapped[str] = mapped_column(String(255), index=True, server_default="")
    """Which auditor wrote the run (``[storage] auditor_id``, default the host name): retention
    and alerts are per auditor when several share one database."""
    pid: Mapped[int] = mapped_column(Integer)
    config_path: Mapped[str] = mapped_column(Text)
    note: Mapped[str | None] = mapped_column(Text)
    selection: Mapped[dict | None] = mapped_column(JSON(none_as_null=True))
    """What a narrowed run covered (auditor.config.selection.Scope); NULL: the whole config."""

    stacks: Mapped[list[RunStack]] = relationship(back_populates="run", cascade="all, delete-orphan")
    results: Mapped[list[ProbeResultRow]] = relationship(back_populates="run", cascade="all, delete-orphan")
    findings: Mapped[list[FindingRow]] = relationship(back_populates="run", cascade="all, delete-orphan")


class Stack(Base):
    """A configured runtime environment, identified by (host, name)."""

    __tablename__ = "stacks"
    __table_args__ = (UniqueConstraint("host", "name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    name: Mapped[str] = mapped_column(String(255))
    role: Mapped[str] = mapped_column(String(16))
    runtime: Mapped[str] = mapped_column(String(64))
    python: Mapped[str] = mapped_column(Text)
    device: Mapped[str] = mapped_column(String(32))


class FingerprintTemplate(Base):
    """What fingerprint documents share once their own parts are taken out (a group's hosts:
    auditor.db.fingerprints), stored once per distinct content."""

    __tablename__ = "fingerprint_templates"
    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    document: Mapped[dict] = mapped_column(JSON)


class Fingerprint(Base):
    """A stack's fingerprint document, by the digest of the whole document (what drift and the
    reports compare), stored once per distinct content: its template and its own part
    (auditor.db.fingerprints.join makes the document of them)."""

    __tablename__ = "fingerprints"
    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    template_digest: Mapped[str] = mapped_column(ForeignKey("fingerprint_templates.digest"), index=True)
    own: Mapped[dict | None] = mapped_column(JSON(none_as_null=True))


class RunStack(Base):
    """Which fingerprint a stack had in a run (or why it had none)."""

    __tablename__ = "run_stacks"
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    stack_id: Mapped[int] = mapped_column(ForeignKey("stacks.id"), primary_key=True, index=True)
    fingerprint_digest: Mapped[str | None] = mapped_column(ForeignKey("fingerprints.digest"), index=True)
    error: Mapped[str | None] = mapped_column(Text)

    run: Mapped[Run] = relationship(back_populates="stacks")
    stack: Mapped[Stack] = relationship()


class ArtifactBlob(Base):
    """An artifact's bytes, once per content digest: exports that differ only in what a runtime
    writes in no fixed order share one (auditor.db.blobs)."""

    __tablename__ = "artifact_blobs"
    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    size: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class Artifact(Base):
    """A file (an exported or served model, a golden's outputs, ...) by the sha256 of its exact
    bytes, with what was read from it; its bytes, when stored, in the blob of their content."""

    __tablename__ = "artifacts"
    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    size: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    info: Mapped[dict] = mapped_column(JSON)
    blob_digest: Mapped[str | None] = mapped_column(ForeignKey("artifact_blobs.digest"), index=True)
    """None: metadata only (the bytes were not at hand)."""

    blob: Mapped[ArtifactBlob | None] = relationship(lazy="joined")
    """Loaded with the row: the ORM reads artifacts where their bytes are wanted (publications,
    goldens); listings select columns."""

    @property
    def data(self) -> bytes | None:
        """The bytes, if stored."""
        return None if self.blob is None else bytes(self.blob.data)


class ProbeResultRow(Base):
    """One probe variant on one pair in one run. status: consistent, drift, incompatible, error."""

    __tablename__ = "probe_results"
    __table_args__ = (
        # a series' result in one run is one look-up (auditor.history.series walks runs newest first)
        Index("ix_probe_results_pair_probe_variant_run_id", "pair", "probe", "variant", "run_id"),
        Index("ix_probe_results_pair_run_id", "pair", "run_id"),
        Index("ix_probe_results_probe_status", "probe", "status"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    pair: Mapped[str] = mapped_column(String(255))
    train_stack_id: Mapped[int] = mapped_column(ForeignKey("stacks.id"))
    infer_stack_id: Mapped[int] = mapped_column(ForeignKey("stacks.id"))
    probe: Mapped[str] = mapped_column(String(128))
    probe_version: Mapped[str] = mapped_column(String(32))
    variant: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16), index=True)
    message: Mapped[str] = mapped_column(Text)
    artifact_sha256: Mapped[str | None] = mapped_column(ForeignKey("artifacts.sha256"), index=True)
    thresholds_id: Mapped[int | None] = mapped_column(ForeignKey("threshold_sets.id"), index=True)
    """The tolerances it was judged by (content-addressed: ThresholdSet)."""
    metric_set_id: Mapped[int | None] = mapped_column(ForeignKey("metric_sets.id"), index=True)
    """Its figures (content-addressed: MetricSet; None: it has none, e.g. an error)."""
    converted_sha256: Mapped[str | None] = mapped_column(ForeignKey("artifacts.sha256"), index=True)
    """The model the serving stack's converter made of the artifact and ran instead (the
    artifact's info holds the options and the converter's version)."""
    localization: Mapped[str | None] = mapped_column(Text, nullable=True)
    """Where a drifting result first diverges, as the live report said it (None: not localized)."""

    run: Mapped[Run] = relationship(back_populates="results")
    latencies: Mapped[list[LatencyRow]] = relationship(back_populates="result", cascade="all, delete-orphan")


class ThresholdSet(Base):
    """The tolerances of a probe variant (per output: atol, rtol, ...), stored once for every
    result judged by them (content-addressed by auditor.db.content.document_digest)."""

    __tablename__ = "threshold_sets"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    document: Mapped[dict] = mapped_column(JSON)


class MetricSet(Base):
    """The figures of one or more probe results, stored once: results whose figures are equal
    (the same outputs compared the same way: a fleet's peers, an unchanged stack cycle after
    cycle) refer to one set (content-addressed by auditor.db.content.metric_set_digest)."""

    __tablename__ = "metric_sets"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    rows: Mapped[list[MetricRow]] = relationship(back_populates="metric_set", cascade="all, delete-orphan")


class MetricRow(Base):
    """One metric of one output in a metric set (long format). A result's metrics are the rows
    of its set (probe_results.metric_set_id), in the order they were computed (id)."""

    __tablename__ = "metrics"
    __table_args__ = (
        Index("ix_metrics_name_set_id", "name", "set_id"),
        Index("ix_metrics_set_id_name_output", "set_id", "name", "output"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    set_id: Mapped[int] = mapped_column(ForeignKey("metric_sets.id", ondelete="CASCADE"))
    output: Mapped[str] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(64))
    value: Mapped[float] = mapped_column(Float)

    metric_set: Mapped[MetricSet] = relationship(back_populates="rows")

    @classmethod
    def insert_many(cls, session: Session, figures: Iterable[tuple[int, tuple[str, str, float]]]) -> None:
        """Rows for (set id, (output, name, value)) in one executemany (no ORM object each).
        The figures come through auditor.db.content.figures, which leaves out NaN (SQL has
        none)."""
        rows = [{"set_id": sid, "output": o, "name": n, "value": float(v)} for sid, (o, n, v) in figures]
        if rows:
            session.execute(insert(cls), rows)


class SeriesRow(Base):
    """A (metric, pair, probe, variant, output) that has at least one stored value: the list of
    trend series, so "the latest N points of every series" walks each series' newest runs
    through indexes instead of ranking every row of the metric (auditor.history.series)."""

    __tablename__ = "series"
    __table_args__ = (UniqueConstraint("metric", "pair", "probe", "variant", "output"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    metric: Mapped[str] = mapped_column(String(64))
    pair: Mapped[str] = mapped_column(String(255))
    probe: Mapped[str] = mapped_column(String(128))
    variant: Mapped[str] = mapped_column(String(64))
    output: Mapped[str] = mapped_column(String(128))


class LatencySeriesRow(Base):
    """A (pair, probe, variant, side) that has at least one stored latency: the list of latency
    trend series, walked like the metric series (auditor.history.series)."""

    __tablename__ = "latency_series"
    __table_args__ = (UniqueConstraint("pair", "probe", "variant", "side"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    pair: Mapped[str] = mapped_column(String(255))
    probe: Mapped[str] = mapped_column(String(128))
    variant: Mapped[str] = mapped_column(String(64))
    side: Mapped[str] = mapped_column(String(8))


class LatencyRow(Base):
    """Latency of one side of a probe result, measured inside the worker."""

    __tablename__ = "latencies"
    __table_args__ = (Index("ix_latencies_result_id_side", "result_id", "side"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    result_id: Mapped[int] = mapped_column(ForeignKey("probe_results.id", ondelete="CASCADE"))
    stack_id: Mapped[int] = mapped_column(ForeignKey("stacks.id"), index=True)
    side: Mapped[str] = mapped_column(String(8))
    batch: Mapped[int] = mapped_column(Integer)
    samples: Mapped[int] = mapped_column(Integer)
    p50_us: Mapped[float] = mapped_column(Float)
    p90_us: Mapped[float] = mapped_column(Float)
    p99_us: Mapped[float] = mapped_column(Float)
    mean_us: Mapped[float] = mapped_column(Float)

    result: Mapped[ProbeResultRow] = relationship(back_populates="latencies")


class TelemetrySeriesRow(Base):
    """One NPU telemetry series: a metric of one chip of one NPU of a host, sampled by one
    auditor (auditor.history.telemetry). Not tied to runs: the daemon also samples between
    cycles; retention deletes points by age."""

    __tablename__ = "telemetry_series"
    __table_args__ = (UniqueConstraint("auditor_id", "host", "npu", "chip", "metric"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    auditor_id: Mapped[str] = mapped_column(String(255))
    host: Mapped[str] = mapped_column(String(255))
    npu: Mapped[int] = mapped_column(Integer)
    chip: Mapped[str] = mapped_column(String(16))
    metric: Mapped[str] = mapped_column(String(64))


class TelemetryPoint(Base):
    """One value of a telemetry series at one time (naive UTC)."""

    __tablename__ = "telemetry_points"
    __table_args__ = (
        # a series' newest points and a series over a time range: one walk of this index each,
        # which holds the values too: the table's pages (a sample's series side by side) are
        # never read, so a walk costs the same on a history larger than the page cache
        Index("ix_telemetry_points_series_id_at_value", "series_id", "at", "value"),
        # everything since a time (the worst value since the previous run): the newest entries only
        Index("ix_telemetry_points_at_series_id_value", "at", "series_id", "value"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    series_id: Mapped[int] = mapped_column(ForeignKey("telemetry_series.id", ondelete="CASCADE"))
    at: Mapped[datetime] = mapped_column(DateTime)
    value: Mapped[float] = mapped_column(Float)


class FindingRow(Base):
    """Something a rule or a comparison concluded in a run."""

    __tablename__ = "findings"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(64))
    severity: Mapped[str] = mapped_column(String(16))
    subject: Mapped[str] = mapped_column(String(255))
    key: Mapped[str] = mapped_column(String(512), index=True)
    message: Mapped[str] = mapped_column(Text)
    details: Mapped[dict] = mapped_column(JSON)

    run: Mapped[Run] = relationship(back_populates="findings")


class Alert(Base):
    """The lifecycle of a finding over runs (auditor.alerts.engine): pending while its key has
    been seen in fewer than ``open_after`` complete runs in a row, open after that, resolved
    once ``resolve_after`` covering runs in a row no longer have it. A key that comes back
    after being resolved opens a new alert. state: pending, open or resolved."""

    __tablename__ = "alerts"
    __table_args__ = (Index("ix_alerts_auditor_id_key", "auditor_id", "key"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    auditor_id: Mapped[str] = mapped_column(String(255), server_default="")
    """The auditor whose runs open, update and resolve this alert (one lifecycle per auditor
    and key, so two auditors never resolve each other's alerts)."""
    key: Mapped[str] = mapped_column(String(512), index=True)
    state: Mapped[str] = mapped_column(String(16), index=True)
    kind: Mapped[str] = mapped_column(String(64))
    severity: Mapped[str] = mapped_column(String(16))
    subject: Mapped[str] = mapped_column(String(255))
    message: Mapped[str] = mapped_column(Text)
    details: Mapped[dict] = mapped_column(JSON)
    opened_at: Mapped[datetime] = mapped_column(DateTime)
    opened_run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    last_seen_at: Mapped[datetime] = mapped_column(DateTime)
    last_seen_run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    resolved_at: Mapped[datetime | None] = mapped_column(DateTime)
    resolved_run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    last_notified_at: Mapped[datetime | None] = mapped_column(DateTime)
    notifications: Mapped[int] = mapped_column(Integer)
    streak: Mapped[int] = mapped_column(Integer, server_default="0", default=0)
    """Consecutive covering runs that agree with the change the alert waits for: with its
    finding while pending (opens after ``open_after``), without it while open (resolves after
    ``resolve_after``)."""

    deliveries: Mapped[list[AlertDelivery]] = relationship(
        back_populates="alert", cascade="all, delete-orphan"
    )


class AlertDelivery(Base):
    """One alert event for one sink. state: pending (not yet delivered: retried at the next
    notification round), delivered, failed (gave up after max_attempts) or dropped (the sink
    is no longer configured)."""

    __tablename__ = "alert_deliveries"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    alert_id: Mapped[int] = mapped_column(ForeignKey("alerts.id", ondelete="CASCADE"), index=True)
    sink: Mapped[str] = mapped_column(String(255), index=True)
    event: Mapped[str] = mapped_column(String(16))
    payload: Mapped[dict] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    attempts: Mapped[int] = mapped_column(Integer)
    last_attempt_at: Mapped[datetime | None] = mapped_column(DateTime)
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime)
    last_error: Mapped[str | None] = mapped_column(Text)

    alert: Mapped[Alert] = relationship(back_populates="deliveries")


class Baseline(Base):
    """The golden result of a probe variant on one stack: the first accepted (consistent) one,
    kept so that later runs see drift over time even when both sides of a pair moved together.
    An infer stack has one per train stack whose export it runs (``source``; "" on a train
    stack). The outputs themselves are an artifact of kind "outputs" (content-addressed)."""

    __tablename__ = "baselines"
    __table_args__ = (UniqueConstraint("stack_id", "probe", "variant", "source"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    stack_id: Mapped[int] = mapped_column(ForeignKey("stacks.id"), index=True)
    probe: Mapped[str] = mapped_column(String(128))
    variant: Mapped[str] = mapped_column(String(64))
    source: Mapped[str] = mapped_column(String(255))
    side: Mapped[str] = mapped_column(String(8))
    probe_version: Mapped[str] = mapped_column(String(32))
    inputs_sha256: Mapped[str] = mapped_column(String(64))
    outputs_sha256: Mapped[str] = mapped_column(ForeignKey("artifacts.sha256"))
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(DateTime)
    summary: Mapped[dict] = mapped_column(JSON)

    stack: Mapped[Stack] = relationship()


class MindIRLimit(Base):
    """The highest MindIR version a runtime build loads, learned from its own rejection
    message, so that later runs check it before attempting a load (auditor.rules.engine)."""

    __tablename__ = "mindir_limits"
    package: Mapped[str] = mapped_column(String(64), primary_key=True)
    version: Mapped[str] = mapped_column(String(64), primary_key=True)
    max_mind_ir_version: Mapped[int] = mapped_column(Integer)
    learned_at: Mapped[datetime] = mapped_column(DateTime)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    message: Mapped[str] = mapped_column(Text)


class OperatorLimit(Base):
    """A MindIR operator a runtime build failed to load (its error named the node), so that
    later runs and checks skip the load (auditor.rules.operator_support)."""

    __tablename__ = "operator_limits"
    package: Mapped[str] = mapped_column(String(64), primary_key=True)
    version: Mapped[str] = mapped_column(String(64), primary_key=True)
    target: Mapped[str] = mapped_column(String(16), primary_key=True)
    operator: Mapped[str] = mapped_column(String(128), primary_key=True)
    learned_at: Mapped[datetime] = mapped_column(DateTime)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    message: Mapped[str] = mapped_column(Text)


class FixRow(Base):
    """What `auditor fix` found for a policy on one serving stack (auditor.fix): the cells kept
    in float32, the change, the fixed file's digest and its audit's verdict, with the serving
    runtime's release it was proved on. The gate reads it by the file's digest; a cycle by the
    policy, variant and stacks, to say that a fixed export exists."""

    __tablename__ = "fixes"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, index=True)
    kind: Mapped[str] = mapped_column(String(8))
    name: Mapped[str] = mapped_column(String(128))
    variant: Mapped[str] = mapped_column(String(64))
    train: Mapped[str] = mapped_column(String(255))
    stack: Mapped[str] = mapped_column(String(255))
    runtime: Mapped[str] = mapped_column(String(64))
    runtime_version: Mapped[str] = mapped_column(String(64))
    found: Mapped[int] = mapped_column(Integer)
    sha256: Mapped[str | None] = mapped_column(String(64), index=True)
    status: Mapped[str | None] = mapped_column(String(32))
    exports: Mapped[int] = mapped_column(Integer)
    summary: Mapped[dict] = mapped_column(JSON)


class CycleHost(Base):
    """A serving host of one shared cycle, stored once (auditor.queue): the run that holds its
    results and its auditor. Written in the run's own transaction, after the auditor proved it
    still holds the host's job; the key refuses a second store of the same host in the same
    cycle, whatever happened to the job."""

    __tablename__ = "cycle_hosts"
    pool: Mapped[str] = mapped_column(String(128), primary_key=True)
    cycle: Mapped[str] = mapped_column(String(255), primary_key=True)
    host: Mapped[str] = mapped_column(String(255), primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    auditor_id: Mapped[str] = mapped_column(String(255))
    stored_at: Mapped[datetime] = mapped_column(DateTime)


class Publication(Base):
    """What a train-side auditor exported from one train stack in one run, for infer-side
    auditors that cannot reach that stack (split mode, auditor.history.publication). ``completed_at``
    is set last, in the same transaction as the items: a set without it is never consumed."""

    __tablename__ = "publications"
    __table_args__ = (Index("ix_publications_stack_completed_at", "stack", "completed_at"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    auditor_id: Mapped[str] = mapped_column(String(255))
    stack: Mapped[str] = mapped_column(String(255))
    host: Mapped[str] = mapped_column(String(255))
    fingerprint_digest: Mapped[str | None] = mapped_column(ForeignKey("fingerprints.digest"), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    completed_at: Mapped[datetime | None] = mapped_column(DateTime)

    items: Mapped[list[PublicationItem]] = relationship(
        back_populates="publication", cascade="all, delete-orphan"
    )


class PublicationItem(Base):
    """One probe variant of a publication: the exported MindIR, the inputs and the train
    stack's outputs on them, each an artifact (content-addressed: published twice, stored once)."""

    __tablename__ = "publication_items"
    __table_args__ = (UniqueConstraint("publication_id", "job_key"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    publication_id: Mapped[int] = mapped_column(ForeignKey("publications.id", ondelete="CASCADE"))
    job_key: Mapped[str] = mapped_column(String(255))
    probe: Mapped[str] = mapped_column(String(128))
    probe_version: Mapped[str] = mapped_column(String(32))
    variant: Mapped[str] = mapped_column(String(64))
    mindir_sha256: Mapped[str] = mapped_column(ForeignKey("artifacts.sha256"), index=True)
    inputs_sha256: Mapped[str] = mapped_column(ForeignKey("artifacts.sha256"), index=True)
    outputs_sha256: Mapped[str] = mapped_column(ForeignKey("artifacts.sha256"), index=True)
    rerun_sha256: Mapped[str | None] = mapped_column(ForeignKey("artifacts.sha256"), index=True)
    """The train stack's outputs again in a fresh process (variants checked for repeatability)."""
    latency: Mapped[dict | None] = mapped_column(JSON)

    publication: Mapped[Publication] = relationship(back_populates="items")
