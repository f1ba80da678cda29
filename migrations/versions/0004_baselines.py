"""golden baselines per (stack, probe, variant, source)

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "baselines",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("stack_id", sa.Integer(), nullable=False),
        sa.Column("probe", sa.String(length=128), nullable=False),
        sa.Column("variant", sa.String(length=64), nullable=False),
        sa.Column("source", sa.String(length=255), nullable=False),
        sa.Column("side", sa.String(length=8), nullable=False),
        sa.Column("probe_version", sa.String(length=32), nullable=False),
        sa.Column("inputs_sha256", sa.String(length=64), nullable=False),
        sa.Column("outputs_sha256", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("summary", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["outputs_sha256"], ["artifacts.sha256"], name=op.f("fk_baselines_outputs_sha256_artifacts")
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_baselines_run_id_runs"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(["stack_id"], ["stacks.id"], name=op.f("fk_baselines_stack_id_stacks")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_baselines")),
        sa.UniqueConstraint(
            "stack_id", "probe", "variant", "source", name=op.f("uq_baselines_stack_id_probe_variant_source")
        ),
    )
    with op.batch_alter_table("baselines", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_baselines_stack_id"), ["stack_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("baselines", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_baselines_stack_id"))
    op.drop_table("baselines")
