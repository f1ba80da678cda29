"""An artifact's bytes stored once per content

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07

MindSpore writes a MindIR's primitive definitions in another order at every export (and Lite's
converter at every conversion), so a probe exported each cycle was a new row with its bytes
every time (about 30 KB per cycle and per auditor for the PPO policy probe).

- artifact_blobs (digest, size, created_at, data): the bytes, by a digest of their content
  (auditor.db.blobs.content_digest: a MindIR's with those definitions sorted).
- artifacts keeps each file's own sha256 and what was read from it, and gets blob_digest in
  place of data.

Every stored artifact's bytes move to the blob of their content (artifacts that differ only in
that order share one); going back down copies each blob back to its artifacts (an artifact
then holds the bytes its content was first stored with: the same model, those definitions in
another order).
"""

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

from auditor.db.blobs import content_digest

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_artifacts = sa.table(
    "artifacts",
    sa.column("sha256", sa.String),
    sa.column("kind", sa.String),
    sa.column("data", sa.LargeBinary),
    sa.column("blob_digest", sa.String),
)
_blobs = sa.table(
    "artifact_blobs",
    sa.column("digest", sa.String),
    sa.column("size", sa.Integer),
    sa.column("created_at", sa.DateTime),
    sa.column("data", sa.LargeBinary),
)


def upgrade() -> None:
    conn = op.get_bind()
    now = datetime.now(UTC).replace(tzinfo=None)
    op.create_table(
        "artifact_blobs",
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("digest", name=op.f("pk_artifact_blobs")),
    )
    with op.batch_alter_table("artifacts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("blob_digest", sa.String(length=64), nullable=True))
    stored: set[str] = set()
    shas = list(conn.scalars(sa.select(_artifacts.c.sha256).where(_artifacts.c.data.is_not(None))))
    for sha in shas:  # one at a time: a served model's bytes may be hundreds of MB
        kind, data = conn.execute(
            sa.select(_artifacts.c.kind, _artifacts.c.data).where(_artifacts.c.sha256 == sha)
        ).one()
        data = bytes(data)
        digest = content_digest(kind or "", data)
        if digest not in stored:
            stored.add(digest)
            conn.execute(sa.insert(_blobs).values(digest=digest, size=len(data), created_at=now, data=data))
        conn.execute(_artifacts.update().where(_artifacts.c.sha256 == sha).values(blob_digest=digest))
    with op.batch_alter_table("artifacts", schema=None) as batch_op:
        batch_op.drop_column("data")
        batch_op.create_index("ix_artifacts_blob_digest", ["blob_digest"], unique=False)
        batch_op.create_foreign_key(
            batch_op.f("fk_artifacts_blob_digest_artifact_blobs"),
            "artifact_blobs",
            ["blob_digest"],
            ["digest"],
        )


def downgrade() -> None:
    conn = op.get_bind()
    with op.batch_alter_table("artifacts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("data", sa.LargeBinary(), nullable=True))
    for digest in list(conn.scalars(sa.select(_blobs.c.digest))):
        data = conn.scalar(sa.select(_blobs.c.data).where(_blobs.c.digest == digest))
        conn.execute(_artifacts.update().where(_artifacts.c.blob_digest == digest).values(data=data))
    with op.batch_alter_table("artifacts", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("fk_artifacts_blob_digest_artifact_blobs"), type_="foreignkey")
        batch_op.drop_index("ix_artifacts_blob_digest")
        batch_op.drop_column("blob_digest")
    op.drop_table("artifact_blobs")
