"""Content-addressed metric sets and threshold tables; throughput derived from latencies

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06

A fleet's consistent hosts compute the same figures cycle after cycle and as their peers, and
every result of a probe variant is judged by the same tolerances; stored per result, those
copies were about 80 % of a cycle's history (auditor.db.content).

- metric_sets (id, digest, created_at): a set of figures, stored once; metrics rows belong to
  a set (set_id) instead of a result; probe_results.metric_set_id refers to it.
- threshold_sets (id, digest, created_at, document): probe_results.thresholds (JSON per
  result) becomes probe_results.thresholds_id.
- The ``throughput`` metric rows are dropped: each was the batch over the p50 of a stored
  serving-side latency, and is now derived from it when read (auditor.history.figures).

The existing rows are moved in order, a result at a time, with the digests the store uses, so
results stored before and after the migration share sets.
"""

import json
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from itertools import groupby

import sqlalchemy as sa
from alembic import op

from auditor.db.content import document_digest, metric_set_digest

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH = 5000

_results = sa.table(
    "probe_results",
    sa.column("id", sa.Integer),
    sa.column("thresholds", sa.Text),
    sa.column("thresholds_id", sa.Integer),
    sa.column("metric_set_id", sa.Integer),
)
_old = sa.table(
    "metrics_old",
    sa.column("id", sa.Integer),
    sa.column("result_id", sa.Integer),
    sa.column("output", sa.String),
    sa.column("name", sa.String),
    sa.column("value", sa.Float),
)
_sets = sa.table("metric_sets", sa.column("id", sa.Integer), sa.column("digest"), sa.column("created_at"))
_thresholds = sa.table(
    "threshold_sets",
    sa.column("id", sa.Integer),
    sa.column("digest"),
    sa.column("created_at"),
    sa.column("document", sa.JSON),
)
_metrics = sa.table(
    "metrics",
    sa.column("set_id", sa.Integer),
    sa.column("output", sa.String),
    sa.column("name", sa.String),
    sa.column("value", sa.Float),
)


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _in_batches(rows: Iterator[dict], conn: sa.Connection, stmt: sa.Executable) -> None:
    batch: list[dict] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= BATCH:
            conn.execute(stmt, batch)
            batch = []
    if batch:
        conn.execute(stmt, batch)


def _set_updates(conn: sa.Connection, now: datetime) -> list[dict]:
    """Move the old metric rows into sets (ids assigned here: the table is new); returns the
    results' set ids to write."""
    ids: dict[str, int] = {}
    updates: list[dict] = []
    new_rows: list[dict] = []
    rows = conn.execute(
        sa.select(_old.c.result_id, _old.c.output, _old.c.name, _old.c.value)
        .where(_old.c.name != "throughput")
        .order_by(_old.c.result_id, _old.c.id),
        execution_options={"yield_per": BATCH},
    )
    for result_id, group in groupby(rows, key=lambda r: r[0]):
        found = [(o, n, float(v)) for _, o, n, v in group if v is not None]
        if not found:
            continue
        digest = metric_set_digest(found)
        if digest not in ids:
            ids[digest] = len(ids) + 1
            conn.execute(sa.insert(_sets).values(id=ids[digest], digest=digest, created_at=now))
            new_rows.extend({"set_id": ids[digest], "output": o, "name": n, "value": v} for o, n, v in found)
            if len(new_rows) >= BATCH:
                conn.execute(sa.insert(_metrics), new_rows)
                new_rows = []
        updates.append({"rid": result_id, "sid": ids[digest]})
    if new_rows:
        conn.execute(sa.insert(_metrics), new_rows)
    return updates


def _threshold_updates(conn: sa.Connection, now: datetime) -> list[dict]:
    ids: dict[str, int] = {}
    updates: list[dict] = []
    for result_id, stored in conn.execute(sa.select(_results.c.id, _results.c.thresholds)).all():
        document = _document(stored)
        digest = document_digest(document)
        if digest not in ids:
            ids[digest] = len(ids) + 1
            conn.execute(
                sa.insert(_thresholds).values(
                    id=ids[digest], digest=digest, created_at=now, document=document
                )
            )
        updates.append({"rid": result_id, "tid": ids[digest]})
    return updates


def _document(stored: object) -> dict:
    """A stored thresholds value as a table (JSON text on SQLite, parsed by the driver on
    PostgreSQL); a damaged one as an empty table, as the history read it before."""
    if isinstance(stored, str):
        try:
            stored = json.loads(stored)
        except ValueError:
            return {}
    return stored if isinstance(stored, dict) else {}


def upgrade() -> None:
    conn = op.get_bind()
    now = _now()
    op.create_table(
        "metric_sets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_metric_sets")),
        sa.UniqueConstraint("digest", name=op.f("uq_metric_sets_digest")),
    )
    op.create_table(
        "threshold_sets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("document", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_threshold_sets")),
        sa.UniqueConstraint("digest", name=op.f("uq_threshold_sets_digest")),
    )
    # The old metrics table steps aside (its constraints renamed where names are global).
    op.drop_index("ix_metrics_name_result", table_name="metrics")
    op.drop_index("ix_metrics_result_id_name_output", table_name="metrics")
    op.rename_table("metrics", "metrics_old")
    if conn.dialect.name == "postgresql":
        op.execute("ALTER TABLE metrics_old RENAME CONSTRAINT pk_metrics TO pk_metrics_old")
        op.execute(
            "ALTER TABLE metrics_old RENAME CONSTRAINT fk_metrics_result_id_probe_results "
            "TO fk_metrics_old_result_id_probe_results"
        )
    op.create_table(
        "metrics",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("set_id", sa.Integer(), nullable=False),
        sa.Column("output", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["set_id"], ["metric_sets.id"], name=op.f("fk_metrics_set_id_metric_sets"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_metrics")),
    )
    with op.batch_alter_table("probe_results", schema=None) as batch_op:
        batch_op.add_column(sa.Column("thresholds_id", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("metric_set_id", sa.Integer(), nullable=True))

    set_updates = _set_updates(conn, now)
    threshold_updates = _threshold_updates(conn, now)
    by_id = sa.bindparam("rid")
    _in_batches(
        iter(set_updates),
        conn,
        sa.update(_results).where(_results.c.id == by_id).values(metric_set_id=sa.bindparam("sid")),
    )
    _in_batches(
        iter(threshold_updates),
        conn,
        sa.update(_results).where(_results.c.id == by_id).values(thresholds_id=sa.bindparam("tid")),
    )
    op.drop_table("metrics_old")
    op.create_index("ix_metrics_name_set_id", "metrics", ["name", "set_id"], unique=False)
    op.create_index("ix_metrics_set_id_name_output", "metrics", ["set_id", "name", "output"], unique=False)
    with op.batch_alter_table("probe_results", schema=None) as batch_op:
        batch_op.drop_column("thresholds")
        batch_op.create_index("ix_probe_results_thresholds_id", ["thresholds_id"], unique=False)
        batch_op.create_index("ix_probe_results_metric_set_id", ["metric_set_id"], unique=False)
        batch_op.create_foreign_key(
            batch_op.f("fk_probe_results_thresholds_id_threshold_sets"),
            "threshold_sets",
            ["thresholds_id"],
            ["id"],
        )
        batch_op.create_foreign_key(
            batch_op.f("fk_probe_results_metric_set_id_metric_sets"), "metric_sets", ["metric_set_id"], ["id"]
        )
    # The trend's list of series names the derived throughput of every serving-side latency
    # (results stored before throughput was, too).
    op.execute(
        "INSERT INTO series (metric, pair, probe, variant, output) "
        "SELECT DISTINCT 'throughput', p.pair, p.probe, p.variant, 'b' || l.batch "
        "FROM latencies l JOIN probe_results p ON p.id = l.result_id "
        "WHERE l.side = 'infer' AND l.p50_us > 0 AND NOT EXISTS (SELECT 1 FROM series s "
        "WHERE s.metric = 'throughput' AND s.pair = p.pair AND s.probe = p.probe "
        "AND s.variant = p.variant AND s.output = 'b' || l.batch)"
    )
    if conn.dialect.name == "sqlite":
        op.execute("ANALYZE")


def downgrade() -> None:
    """Each result's figures back as its own rows (without the derived throughput, which
    reads the same from the latencies either way), its thresholds back as JSON."""
    conn = op.get_bind()
    with op.batch_alter_table("probe_results", schema=None) as batch_op:
        batch_op.add_column(sa.Column("thresholds", sa.JSON(), nullable=True))
    op.execute(
        "UPDATE probe_results SET thresholds = "
        "(SELECT document FROM threshold_sets t WHERE t.id = probe_results.thresholds_id)"
    )
    op.execute("UPDATE probe_results SET thresholds = '{}' WHERE thresholds IS NULL")
    op.drop_index("ix_metrics_name_set_id", table_name="metrics")
    op.drop_index("ix_metrics_set_id_name_output", table_name="metrics")
    op.rename_table("metrics", "metric_set_rows")
    if conn.dialect.name == "postgresql":
        op.execute("ALTER TABLE metric_set_rows RENAME CONSTRAINT pk_metrics TO pk_metric_set_rows")
        op.execute(
            "ALTER TABLE metric_set_rows RENAME CONSTRAINT fk_metrics_set_id_metric_sets "
            "TO fk_metric_set_rows_set_id_metric_sets"
        )
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
    op.execute(
        "INSERT INTO metrics (result_id, output, name, value) "
        "SELECT p.id, r.output, r.name, r.value FROM probe_results p "
        "JOIN metric_set_rows r ON r.set_id = p.metric_set_id ORDER BY p.id, r.id"
    )
    op.create_index("ix_metrics_name_result", "metrics", ["name", "result_id"], unique=False)
    op.create_index(
        "ix_metrics_result_id_name_output", "metrics", ["result_id", "name", "output"], unique=False
    )
    with op.batch_alter_table("probe_results", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("fk_probe_results_metric_set_id_metric_sets"), type_="foreignkey")
        batch_op.drop_constraint(
            batch_op.f("fk_probe_results_thresholds_id_threshold_sets"), type_="foreignkey"
        )
        batch_op.drop_index("ix_probe_results_metric_set_id")
        batch_op.drop_index("ix_probe_results_thresholds_id")
        batch_op.drop_column("metric_set_id")
        batch_op.drop_column("thresholds_id")
        batch_op.alter_column("thresholds", existing_type=sa.JSON(), nullable=False)
    op.drop_table("metric_set_rows")
    op.drop_table("metric_sets")
    op.drop_table("threshold_sets")
