"""Host leases: auditors on one database split a fleet's serving hosts per cycle slot

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06

- host_leases: (slot, host) -> the auditor holding it (holder, auditor_id), when it was claimed,
  until when it holds without a renewal, when the holder's part on the host was done and when
  (and in which run) its results were stored (auditor.history.leases).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "host_leases",
        sa.Column("slot", sa.String(length=128), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("holder", sa.String(length=255), nullable=False),
        sa.Column("auditor_id", sa.String(length=255), nullable=False),
        sa.Column("claimed_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.Column("served_at", sa.DateTime(), nullable=True),
        sa.Column("done_at", sa.DateTime(), nullable=True),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_host_leases_run_id_runs"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("slot", "host", name=op.f("pk_host_leases")),
    )
    op.create_index("ix_host_leases_claimed_at", "host_leases", ["claimed_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_host_leases_claimed_at", table_name="host_leases")
    op.drop_table("host_leases")
