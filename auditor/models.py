"""The history database schema (SQLAlchemy 2 ORM).

Metrics are stored in long format, one row per (result, output, metric), so any metric of
any probe can be filtered and trended with one indexed query, and new metrics need no
migration. Fingerprints and artifacts are content-addressed: a stack that did not change
adds no fingerprint row, and a MindIR exported twice is stored once.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    JSON,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Run(Base):
    """One audit cycle. status: running, complete or aborted."""

    __tablename__ = "runs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    started_at: Mapped[datetime] = mapped_column(DateTime, index=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime)
    status: Mapped[str] = mapped_column(String(16), index=True)
    outcome: Mapped[str | None] = mapped_column(String(16))
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    config_path: Mapped[str] = mapped_column(Text)
    note: Mapped[str | None] = mapped_column(Text)

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


class Fingerprint(Base):
    """A canonical JSON description of a stack, stored once per distinct content."""

    __tablename__ = "fingerprints"
    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    document: Mapped[dict] = mapped_column(JSON)


class RunStack(Base):
    """Which fingerprint a stack had in a run (or why it had none)."""

    __tablename__ = "run_stacks"
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    stack_id: Mapped[int] = mapped_column(ForeignKey("stacks.id"), primary_key=True, index=True)
    fingerprint_digest: Mapped[str | None] = mapped_column(ForeignKey("fingerprints.digest"))
    error: Mapped[str | None] = mapped_column(Text)

    run: Mapped[Run] = relationship(back_populates="stacks")
    stack: Mapped[Stack] = relationship()


class Artifact(Base):
    """An exported model (MindIR) by sha256, with what was read from it."""

    __tablename__ = "artifacts"
    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    size: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    info: Mapped[dict] = mapped_column(JSON)
    data: Mapped[bytes | None] = mapped_column(LargeBinary)


class ProbeResultRow(Base):
    """One probe variant on one pair in one run. status: consistent, drift, incompatible, error."""

    __tablename__ = "probe_results"
    __table_args__ = (Index("ix_probe_results_pair_probe", "pair", "probe", "variant"),)
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
    artifact_sha256: Mapped[str | None] = mapped_column(ForeignKey("artifacts.sha256"))
    thresholds: Mapped[dict] = mapped_column(JSON)

    run: Mapped[Run] = relationship(back_populates="results")
    metrics: Mapped[list[MetricRow]] = relationship(back_populates="result", cascade="all, delete-orphan")
    latencies: Mapped[list[LatencyRow]] = relationship(back_populates="result", cascade="all, delete-orphan")


class MetricRow(Base):
    """One metric of one output of a probe result (long format)."""

    __tablename__ = "metrics"
    __table_args__ = (Index("ix_metrics_name_result", "name", "result_id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    result_id: Mapped[int] = mapped_column(ForeignKey("probe_results.id", ondelete="CASCADE"), index=True)
    output: Mapped[str] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(64))
    value: Mapped[float] = mapped_column(Float)

    result: Mapped[ProbeResultRow] = relationship(back_populates="metrics")


class LatencyRow(Base):
    """Latency of one side of a probe result, measured inside the worker."""

    __tablename__ = "latencies"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    result_id: Mapped[int] = mapped_column(ForeignKey("probe_results.id", ondelete="CASCADE"), index=True)
    stack_id: Mapped[int] = mapped_column(ForeignKey("stacks.id"), index=True)
    side: Mapped[str] = mapped_column(String(8))
    batch: Mapped[int] = mapped_column(Integer)
    samples: Mapped[int] = mapped_column(Integer)
    p50_us: Mapped[float] = mapped_column(Float)
    p90_us: Mapped[float] = mapped_column(Float)
    p99_us: Mapped[float] = mapped_column(Float)
    mean_us: Mapped[float] = mapped_column(Float)

    result: Mapped[ProbeResultRow] = relationship(back_populates="latencies")


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
