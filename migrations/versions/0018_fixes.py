"""What auditor fix found, kept for the gate and the next cycle

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-08

- fixes (id, created_at, kind, name, variant, train, stack, runtime, runtime_version, found,
  sha256, status, exports, summary): one row per `auditor fix` run; ``sha256`` is the fixed
  file's (None when nothing passed), ``summary`` the cells kept, the change, the candidates and
  the costs as `auditor fix --json` says them (without the fixed export's full audit).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | Sequence[str] | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "fixes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("variant", sa.String(length=64), nullable=False),
        sa.Column("train", sa.String(length=255), nullable=False),
        sa.Column("stack", sa.String(length=255), nullable=False),
        sa.Column("runtime", sa.String(length=64), nullable=False),
        sa.Column("runtime_version", sa.String(length=64), nullable=False),
        sa.Column("found", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=True),
        sa.Column("status", sa.String(length=32), nullable=True),
        sa.Column("exports", sa.Integer(), nullable=False),
        sa.Column("summary", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_fixes")),
    )
    op.create_index(op.f("ix_fixes_created_at"), "fixes", ["created_at"], unique=False)
    op.create_index(op.f("ix_fixes_sha256"), "fixes", ["sha256"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_fixes_sha256"), table_name="fixes")
    op.drop_index(op.f("ix_fixes_created_at"), table_name="fixes")
    op.drop_table("fixes")
