"""history indexes: keep filtered history queries and retention fast on a long history

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02

- metrics (result_id, name, output) replaces metrics (result_id): one result's value of one
  metric is an index look-up (history by pair/time, trends).
- latencies (result_id, side) replaces latencies (result_id): the train/infer latency of a
  result without a temporary index per query.
- probe_results (pair, run_id) and (probe, status): a pair over a time window, a probe's
  failures.
- probe_results (artifact_sha256) and run_stacks (fingerprint_digest): finding the
  content-addressed rows no run refers to any more (retention) without a scan per row.

On SQLite the planner's statistics are collected at the end (about half a second per
million metric rows): without them SQLite may prefer the metric-name index and walk every row of a metric.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("metrics", schema=None) as batch_op:
        batch_op.create_index(
            "ix_metrics_result_id_name_output", ["result_id", "name", "output"], unique=False
        )
        batch_op.drop_index("ix_metrics_result_id")
    with op.batch_alter_table("latencies", schema=None) as batch_op:
        batch_op.create_index("ix_latencies_result_id_side", ["result_id", "side"], unique=False)
        batch_op.drop_index("ix_latencies_result_id")
    with op.batch_alter_table("probe_results", schema=None) as batch_op:
        batch_op.create_index("ix_probe_results_pair_run_id", ["pair", "run_id"], unique=False)
        batch_op.create_index("ix_probe_results_probe_status", ["probe", "status"], unique=False)
        batch_op.create_index("ix_probe_results_artifact_sha256", ["artifact_sha256"], unique=False)
    with op.batch_alter_table("run_stacks", schema=None) as batch_op:
        batch_op.create_index("ix_run_stacks_fingerprint_digest", ["fingerprint_digest"], unique=False)
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ANALYZE")


def downgrade() -> None:
    with op.batch_alter_table("run_stacks", schema=None) as batch_op:
        batch_op.drop_index("ix_run_stacks_fingerprint_digest")
    with op.batch_alter_table("probe_results", schema=None) as batch_op:
        batch_op.drop_index("ix_probe_results_artifact_sha256")
        batch_op.drop_index("ix_probe_results_probe_status")
        batch_op.drop_index("ix_probe_results_pair_run_id")
    with op.batch_alter_table("latencies", schema=None) as batch_op:
        batch_op.create_index("ix_latencies_result_id", ["result_id"], unique=False)
        batch_op.drop_index("ix_latencies_result_id_side")
    with op.batch_alter_table("metrics", schema=None) as batch_op:
        batch_op.create_index("ix_metrics_result_id", ["result_id"], unique=False)
        batch_op.drop_index("ix_metrics_result_id_name_output")
