"""NPU telemetry series and points; the converted model a probe result ran

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04

- telemetry_series: (auditor_id, host, npu, chip, metric), one row per series that has
  points (auditor.history.telemetry);
- telemetry_points: (series_id, at, value); indexed by (series_id, at, value) for a series'
  newest points and its time range, and by (at, series_id, value) for everything since a
  time, both covering: the table's pages (a sample's series side by side) are not read.
  Points do not belong to runs (the daemon samples between cycles too); retention deletes
  them by age.
- probe_results.converted_sha256: the artifact the serving stack's MindSpore Lite converter made
  of the export (or the model's file) and ran in its place.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "telemetry_series",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("auditor_id", sa.String(length=255), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("npu", sa.Integer(), nullable=False),
        sa.Column("chip", sa.String(length=16), nullable=False),
        sa.Column("metric", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_telemetry_series")),
        sa.UniqueConstraint(
            "auditor_id",
            "host",
            "npu",
            "chip",
            "metric",
            name=op.f("uq_telemetry_series_auditor_id_host_npu_chip_metric"),
        ),
    )
    op.create_table(
        "telemetry_points",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("series_id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["series_id"],
            ["telemetry_series.id"],
            name=op.f("fk_telemetry_points_series_id_telemetry_series"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_telemetry_points")),
    )
    op.create_index(
        "ix_telemetry_points_series_id_at_value",
        "telemetry_points",
        ["series_id", "at", "value"],
        unique=False,
    )
    op.create_index(
        "ix_telemetry_points_at_series_id_value",
        "telemetry_points",
        ["at", "series_id", "value"],
        unique=False,
    )

    with op.batch_alter_table("probe_results", schema=None) as batch_op:
        batch_op.add_column(sa.Column("converted_sha256", sa.String(length=64), nullable=True))
        batch_op.create_index("ix_probe_results_converted_sha256", ["converted_sha256"], unique=False)
        batch_op.create_foreign_key(
            batch_op.f("fk_probe_results_converted_sha256_artifacts"),
            "artifacts",
            ["converted_sha256"],
            ["sha256"],
        )


def downgrade() -> None:
    with op.batch_alter_table("probe_results", schema=None) as batch_op:
        batch_op.drop_constraint(
            batch_op.f("fk_probe_results_converted_sha256_artifacts"), type_="foreignkey"
        )
        batch_op.drop_index("ix_probe_results_converted_sha256")
        batch_op.drop_column("converted_sha256")
    op.drop_index("ix_telemetry_points_at_series_id_value", table_name="telemetry_points")
    op.drop_index("ix_telemetry_points_series_id_at_value", table_name="telemetry_points")
    op.drop_table("telemetry_points")
    op.drop_table("telemetry_series")
