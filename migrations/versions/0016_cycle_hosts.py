"""Shared cycles on a job queue: host leases retired, each shared cycle's hosts recorded once

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07

- host_leases is dropped: auditors sharing a fleet take its hosts as jobs of a job queue
  (procrastinate, auditor.queue), which creates its own tables when [queue] is first used.
  A lease is a period's claim on a host: none is worth keeping once the queue takes over.
- cycle_hosts: (pool, cycle, host) -> the run that stored its results and its auditor,
  written in that run's transaction; the key refuses a host stored twice in one cycle.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_index("ix_host_leases_claimed_at", table_name="host_leases")
    op.drop_table("host_leases")
    op.create_table(
        "cycle_hosts",
        sa.Column("pool", sa.String(length=128), nullable=False),
        sa.Column("cycle", sa.String(length=255), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("auditor_id", sa.String(length=255), nullable=False),
        sa.Column("stored_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_cycle_hosts_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("pool", "cycle", "host", name=op.f("pk_cycle_hosts")),
    )
    op.create_index(op.f("ix_cycle_hosts_run_id"), "cycle_hosts", ["run_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_cycle_hosts_run_id"), table_name="cycle_hosts")
    op.drop_table("cycle_hosts")
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
