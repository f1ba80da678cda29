"""series walks: latency series listed, a series' result in a run found by one look-up

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03

- latency_series: the (pair, probe, variant, side) that have latencies, so that the latency
  trend ("the latest N points of every series") walks each series' newest runs like the
  metric trend (0006) instead of ranking every latency row (auditor.history.series).
- probe_results (pair, probe, variant, run_id) replaces (pair, probe, variant): a series'
  result in one run is one look-up, and an index that matches all four terms is the
  planner's plain choice with or without statistics (with only (pair, run_id) and
  (pair, probe, variant), SQLite without statistics scanned a million metric rows per run).

On SQLite the planner's statistics are collected again at the end, for the new index.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "latency_series",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("pair", sa.String(length=255), nullable=False),
        sa.Column("probe", sa.String(length=128), nullable=False),
        sa.Column("variant", sa.String(length=64), nullable=False),
        sa.Column("side", sa.String(length=8), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_latency_series")),
        sa.UniqueConstraint(
            "pair", "probe", "variant", "side", name=op.f("uq_latency_series_pair_probe_variant_side")
        ),
    )
    op.execute(
        "INSERT INTO latency_series (pair, probe, variant, side) "
        "SELECT DISTINCT p.pair, p.probe, p.variant, l.side "
        "FROM latencies l JOIN probe_results p ON p.id = l.result_id"
    )
    with op.batch_alter_table("probe_results", schema=None) as batch_op:
        batch_op.create_index(
            "ix_probe_results_pair_probe_variant_run_id", ["pair", "probe", "variant", "run_id"], unique=False
        )
        batch_op.drop_index("ix_probe_results_pair_probe")
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ANALYZE")


def downgrade() -> None:
    with op.batch_alter_table("probe_results", schema=None) as batch_op:
        batch_op.create_index("ix_probe_results_pair_probe", ["pair", "probe", "variant"], unique=False)
        batch_op.drop_index("ix_probe_results_pair_probe_variant_run_id")
    op.drop_table("latency_series")
