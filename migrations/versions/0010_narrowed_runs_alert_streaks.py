"""narrowed runs and alert streaks

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04

- runs.selection: what a run narrowed to (``audit --stack/--pair/--probe/--model/--host``):
  the selectors given and the pairs, stacks and probes it covered (JSON); NULL for a run of
  the whole config (every run before this revision). An alert is resolved only by a run that
  covered what it is about.
- alerts.streak: consecutive runs that agree with the change the alert is waiting for: a
  pending alert's runs with its finding (it opens after ``[alerts] open_after``), an open
  alert's runs without it (it resolves after ``[alerts] resolve_after``). Existing alerts
  start at 0.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("selection", sa.JSON(), nullable=True))
    with op.batch_alter_table("alerts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("streak", sa.Integer(), server_default="0", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("alerts", schema=None) as batch_op:
        batch_op.drop_column("streak")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("selection")
