"""initial schema: runs, stacks, fingerprints, results, metrics

Revision ID: 0001
Revises:
Create Date: 2026-12-02

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""

    op.create_table(
        "artifacts",
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("info", sa.JSON(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=True),
        sa.PrimaryKeyConstraint("sha256", name=op.f("pk_artifacts")),
    )
    op.create_table(
        "fingerprints",
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("document", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("digest", name=op.f("pk_fingerprints")),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=True),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("config_path", sa.Text(), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_runs_started_at"), ["started_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_runs_status"), ["status"], unique=False)

    op.create_table(
        "stacks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("runtime", sa.String(length=64), nullable=False),
        sa.Column("python", sa.Text(), nullable=False),
        sa.Column("device", sa.String(length=32), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stacks")),
        sa.UniqueConstraint("host", "name", name=op.f("uq_stacks_host_name")),
    )
    op.create_table(
        "findings",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("subject", sa.String(length=255), nullable=False),
        sa.Column("key", sa.String(length=512), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_findings_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_findings")),
    )
    with op.batch_alter_table("findings", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_findings_key"), ["key"], unique=False)
        batch_op.create_index(batch_op.f("ix_findings_run_id"), ["run_id"], unique=False)

    op.create_table(
        "probe_results",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("pair", sa.String(length=255), nullable=False),
        sa.Column("train_stack_id", sa.Integer(), nullable=False),
        sa.Column("infer_stack_id", sa.Integer(), nullable=False),
        sa.Column("probe", sa.String(length=128), nullable=False),
        sa.Column("probe_version", sa.String(length=32), nullable=False),
        sa.Column("variant", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("artifact_sha256", sa.String(length=64), nullable=True),
        sa.Column("thresholds", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["artifact_sha256"], ["artifacts.sha256"], name=op.f("fk_probe_results_artifact_sha256_artifacts")
        ),
        sa.ForeignKeyConstraint(
            ["infer_stack_id"], ["stacks.id"], name=op.f("fk_probe_results_infer_stack_id_stacks")
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_probe_results_run_id_runs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["train_stack_id"], ["stacks.id"], name=op.f("fk_probe_results_train_stack_id_stacks")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_probe_results")),
    )
    with op.batch_alter_table("probe_results", schema=None) as batch_op:
        batch_op.create_index("ix_probe_results_pair_probe", ["pair", "probe", "variant"], unique=False)
        batch_op.create_index(batch_op.f("ix_probe_results_run_id"), ["run_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_probe_results_status"), ["status"], unique=False)

    op.create_table(
        "run_stacks",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("stack_id", sa.Integer(), nullable=False),
        sa.Column("fingerprint_digest", sa.String(length=64), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["fingerprint_digest"],
            ["fingerprints.digest"],
            name=op.f("fk_run_stacks_fingerprint_digest_fingerprints"),
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_run_stacks_run_id_runs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["stack_id"], ["stacks.id"], name=op.f("fk_run_stacks_stack_id_stacks")),
        sa.PrimaryKeyConstraint("run_id", "stack_id", name=op.f("pk_run_stacks")),
    )
    with op.batch_alter_table("run_stacks", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_run_stacks_stack_id"), ["stack_id"], unique=False)

    op.create_table(
        "latencies",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("result_id", sa.Integer(), nullable=False),
        sa.Column("stack_id", sa.Integer(), nullable=False),
        sa.Column("side", sa.String(length=8), nullable=False),
        sa.Column("batch", sa.Integer(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("p50_us", sa.Float(), nullable=False),
        sa.Column("p90_us", sa.Float(), nullable=False),
        sa.Column("p99_us", sa.Float(), nullable=False),
        sa.Column("mean_us", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["result_id"],
            ["probe_results.id"],
            name=op.f("fk_latencies_result_id_probe_results"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(["stack_id"], ["stacks.id"], name=op.f("fk_latencies_stack_id_stacks")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_latencies")),
    )
    with op.batch_alter_table("latencies", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_latencies_result_id"), ["result_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_latencies_stack_id"), ["stack_id"], unique=False)

    op.create_table(
        "metrics",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("result_id", sa.Integer(), nullable=False),
        sa.Column("output", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["result_id"],
            ["probe_results.id"],
            name=op.f("fk_metrics_result_id_probe_results"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_metrics")),
    )
    with op.batch_alter_table("metrics", schema=None) as batch_op:
        batch_op.create_index("ix_metrics_name_result", ["name", "result_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_metrics_result_id"), ["result_id"], unique=False)


def downgrade() -> None:
    """Downgrade schema."""

    with op.batch_alter_table("metrics", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_metrics_result_id"))
        batch_op.drop_index("ix_metrics_name_result")

    op.drop_table("metrics")
    with op.batch_alter_table("latencies", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_latencies_stack_id"))
        batch_op.drop_index(batch_op.f("ix_latencies_result_id"))

    op.drop_table("latencies")
    with op.batch_alter_table("run_stacks", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_run_stacks_stack_id"))

    op.drop_table("run_stacks")
    with op.batch_alter_table("probe_results", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_probe_results_status"))
        batch_op.drop_index(batch_op.f("ix_probe_results_run_id"))
        batch_op.drop_index("ix_probe_results_pair_probe")

    op.drop_table("probe_results")
    with op.batch_alter_table("findings", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_findings_run_id"))
        batch_op.drop_index(batch_op.f("ix_findings_key"))

    op.drop_table("findings")
    op.drop_table("stacks")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runs_status"))
        batch_op.drop_index(batch_op.f("ix_runs_started_at"))

    op.drop_table("runs")
    op.drop_table("fingerprints")
    op.drop_table("artifacts")
