"""fleet: auditor identity on runs and alerts, publications for split mode

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03

- runs.auditor_id: which auditor wrote the run (existing runs: their host name, which is what
  an auditor without ``[storage] auditor_id`` calls itself).
- alerts.auditor_id: an alert's lifecycle belongs to one auditor (existing alerts: the
  auditor of the run that opened them).
- publications / publication_items: MindIR, inputs and reference outputs that a train-side
  auditor publishes for infer-side auditors (split mode); pruned with their run.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("auditor_id", sa.String(length=255), server_default="", nullable=False))
        batch_op.create_index(batch_op.f("ix_runs_auditor_id"), ["auditor_id"], unique=False)
    op.execute("UPDATE runs SET auditor_id = host")
    with op.batch_alter_table("alerts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("auditor_id", sa.String(length=255), server_default="", nullable=False))
        batch_op.create_index("ix_alerts_auditor_id_key", ["auditor_id", "key"], unique=False)
    op.execute(
        "UPDATE alerts SET auditor_id = COALESCE("
        "(SELECT runs.auditor_id FROM runs WHERE runs.id = alerts.opened_run_id), '')"
    )
    op.create_table(
        "publications",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("auditor_id", sa.String(length=255), nullable=False),
        sa.Column("stack", sa.String(length=255), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("fingerprint_digest", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("completed_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["fingerprint_digest"],
            ["fingerprints.digest"],
            name=op.f("fk_publications_fingerprint_digest_fingerprints"),
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_publications_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_publications")),
    )
    with op.batch_alter_table("publications", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_publications_run_id"), ["run_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_publications_fingerprint_digest"), ["fingerprint_digest"], unique=False
        )
        batch_op.create_index("ix_publications_stack_completed_at", ["stack", "completed_at"], unique=False)
    op.create_table(
        "publication_items",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("publication_id", sa.Integer(), nullable=False),
        sa.Column("job_key", sa.String(length=255), nullable=False),
        sa.Column("probe", sa.String(length=128), nullable=False),
        sa.Column("probe_version", sa.String(length=32), nullable=False),
        sa.Column("variant", sa.String(length=64), nullable=False),
        sa.Column("mindir_sha256", sa.String(length=64), nullable=False),
        sa.Column("inputs_sha256", sa.String(length=64), nullable=False),
        sa.Column("outputs_sha256", sa.String(length=64), nullable=False),
        sa.Column("rerun_sha256", sa.String(length=64), nullable=True),
        sa.Column("latency", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(
            ["publication_id"],
            ["publications.id"],
            name=op.f("fk_publication_items_publication_id_publications"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["mindir_sha256"], ["artifacts.sha256"], name=op.f("fk_publication_items_mindir_sha256_artifacts")
        ),
        sa.ForeignKeyConstraint(
            ["inputs_sha256"], ["artifacts.sha256"], name=op.f("fk_publication_items_inputs_sha256_artifacts")
        ),
        sa.ForeignKeyConstraint(
            ["outputs_sha256"],
            ["artifacts.sha256"],
            name=op.f("fk_publication_items_outputs_sha256_artifacts"),
        ),
        sa.ForeignKeyConstraint(
            ["rerun_sha256"], ["artifacts.sha256"], name=op.f("fk_publication_items_rerun_sha256_artifacts")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_publication_items")),
        sa.UniqueConstraint(
            "publication_id", "job_key", name=op.f("uq_publication_items_publication_id_job_key")
        ),
    )
    with op.batch_alter_table("publication_items", schema=None) as batch_op:
        for col in ("mindir_sha256", "inputs_sha256", "outputs_sha256", "rerun_sha256"):
            batch_op.create_index(f"ix_publication_items_{col}", [col], unique=False)


def downgrade() -> None:
    op.drop_table("publication_items")
    op.drop_table("publications")
    with op.batch_alter_table("alerts", schema=None) as batch_op:
        batch_op.drop_index("ix_alerts_auditor_id_key")
        batch_op.drop_column("auditor_id")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runs_auditor_id"))
        batch_op.drop_column("auditor_id")
