"""A drifting result's first divergent layer

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07

- probe_results.localization: where a drifting result first diverges, in the words the live
  report printed (auditor.policy.localize.Localization.message), or why it was not localized;
  NULL for a result that was not (``auditor show RUN`` and the HTML report say it again).
  Added in place (a nullable column: no table rebuild, on SQLite either).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("probe_results", sa.Column("localization", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("probe_results") as batch_op:
        batch_op.drop_column("localization")
