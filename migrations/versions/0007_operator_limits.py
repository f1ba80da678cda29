"""learned operator limits: MindIR operators a runtime build failed to load

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03

One row per (runtime package, version, device kind, operator), from a load whose error named
a node without a kernel; the operator-support rule checks it before later loads.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "operator_limits",
        sa.Column("package", sa.String(length=64), nullable=False),
        sa.Column("version", sa.String(length=64), nullable=False),
        sa.Column("target", sa.String(length=16), nullable=False),
        sa.Column("operator", sa.String(length=128), nullable=False),
        sa.Column("learned_at", sa.DateTime(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_operator_limits_run_id_runs"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("package", "version", "target", "operator", name=op.f("pk_operator_limits")),
    )


def downgrade() -> None:
    op.drop_table("operator_limits")
