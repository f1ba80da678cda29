"""learned MindIR limits of inference runtimes

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "mindir_limits",
        sa.Column("package", sa.String(length=64), nullable=False),
        sa.Column("version", sa.String(length=64), nullable=False),
        sa.Column("max_mind_ir_version", sa.Integer(), nullable=False),
        sa.Column("learned_at", sa.DateTime(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_mindir_limits_run_id_runs"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("package", "version", name=op.f("pk_mindir_limits")),
    )


def downgrade() -> None:
    op.drop_table("mindir_limits")
