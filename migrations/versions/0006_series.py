"""series: the list of trend series, filled from the stored metrics

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03

"The latest N points of every series" ranked every row of a metric (about a tenth of the
metric table) to keep N per series: one second on a million metric rows, growing with the
history. With the list of series in its own table, each series is answered by walking the
newest runs through ix_runs_started_at and the (pair, run_id) and (result_id, name, output)
indexes, stopping after N points (auditor.history.series). The store adds a run's new series in the
run's own transaction.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "series",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("metric", sa.String(length=64), nullable=False),
        sa.Column("pair", sa.String(length=255), nullable=False),
        sa.Column("probe", sa.String(length=128), nullable=False),
        sa.Column("variant", sa.String(length=64), nullable=False),
        sa.Column("output", sa.String(length=128), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_series")),
        sa.UniqueConstraint(
            "metric",
            "pair",
            "probe",
            "variant",
            "output",
            name=op.f("uq_series_metric_pair_probe_variant_output"),
        ),
    )
    op.execute(
        "INSERT INTO series (metric, pair, probe, variant, output) "
        "SELECT DISTINCT m.name, p.pair, p.probe, p.variant, m.output "
        "FROM metrics m JOIN probe_results p ON p.id = m.result_id"
    )


def downgrade() -> None:
    op.drop_table("series")
