"""Fingerprints stored as a shared template and each document's own part

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06

A group's hosts have fingerprint documents that differ only where each names its machine (its
host name, machine id, board serials, connection); stored whole, each was a row of its own
(auditor.db.fingerprints).

- fingerprint_templates (digest, created_at, document): what documents share, stored once.
- fingerprints keeps the whole document's digest (what run_stacks and publications refer to,
  and what drift compares) and gets template_digest and own (the document's own part) in
  place of document.

Every stored document is split as the store splits a new one, so documents stored before and
after the migration share templates; going back down joins them again.
"""

import json
from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

from auditor.db.content import document_digest
from auditor.db.fingerprints import join, split

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH = 500

_fingerprints = sa.table(
    "fingerprints",
    sa.column("digest", sa.String),
    sa.column("document", sa.JSON),
    sa.column("template_digest", sa.String),
    sa.column("own", sa.JSON(none_as_null=True)),
)
_templates = sa.table(
    "fingerprint_templates",
    sa.column("digest", sa.String),
    sa.column("created_at", sa.DateTime),
    sa.column("document", sa.JSON),
)


UNREADABLE = {
    "fingerprint_error": "the stored document could not be read when the history was migrated (0014)"
}


def _document(stored: object) -> dict:
    """A stored document (JSON text on SQLite, parsed by the driver on PostgreSQL); a damaged
    one as a document that says so (drift is never judged against it)."""
    if isinstance(stored, str):
        try:
            stored = json.loads(stored)
        except ValueError:
            return dict(UNREADABLE)
    return stored if isinstance(stored, dict) else dict(UNREADABLE)


def _digests(conn: sa.Connection) -> list[str]:
    return list(conn.execute(sa.select(_fingerprints.c.digest).order_by(_fingerprints.c.digest)).scalars())


def upgrade() -> None:
    conn = op.get_bind()
    now = datetime.now(UTC).replace(tzinfo=None)
    op.create_table(
        "fingerprint_templates",
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("document", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("digest", name=op.f("pk_fingerprint_templates")),
    )
    with op.batch_alter_table("fingerprints", schema=None) as batch_op:
        batch_op.add_column(sa.Column("template_digest", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("own", sa.JSON(), nullable=True))
    stored: set[str] = set()
    digests = _digests(conn)
    for i in range(0, len(digests), BATCH):
        rows = conn.execute(
            sa.select(_fingerprints.c.digest, sa.literal_column("document", sa.Text)).where(
                _fingerprints.c.digest.in_(digests[i : i + BATCH])
            )
        ).all()
        updates = []
        for digest, document in rows:
            template, own = split(_document(document))
            shared = document_digest(template)
            if shared not in stored:
                stored.add(shared)
                conn.execute(sa.insert(_templates).values(digest=shared, created_at=now, document=template))
            updates.append({"d": digest, "t": shared, "o": own})
        if updates:
            conn.execute(
                _fingerprints.update()
                .where(_fingerprints.c.digest == sa.bindparam("d"))
                .values(template_digest=sa.bindparam("t"), own=sa.bindparam("o")),
                updates,
            )
    with op.batch_alter_table("fingerprints", schema=None) as batch_op:
        batch_op.alter_column("template_digest", existing_type=sa.String(length=64), nullable=False)
        batch_op.drop_column("document")
        batch_op.create_index("ix_fingerprints_template_digest", ["template_digest"], unique=False)
        batch_op.create_foreign_key(
            batch_op.f("fk_fingerprints_template_digest_fingerprint_templates"),
            "fingerprint_templates",
            ["template_digest"],
            ["digest"],
        )


def downgrade() -> None:
    conn = op.get_bind()
    with op.batch_alter_table("fingerprints", schema=None) as batch_op:
        batch_op.add_column(sa.Column("document", sa.JSON(), nullable=True))
    digests = _digests(conn)
    for i in range(0, len(digests), BATCH):
        rows = conn.execute(
            sa.select(_fingerprints.c.digest, _templates.c.document, _fingerprints.c.own)
            .join(_templates, _templates.c.digest == _fingerprints.c.template_digest)
            .where(_fingerprints.c.digest.in_(digests[i : i + BATCH]))
        ).all()
        updates = [{"d": digest, "doc": join(template, own)} for digest, template, own in rows]
        if updates:
            conn.execute(
                _fingerprints.update()
                .where(_fingerprints.c.digest == sa.bindparam("d"))
                .values(document=sa.bindparam("doc")),
                updates,
            )
    with op.batch_alter_table("fingerprints", schema=None) as batch_op:
        batch_op.drop_constraint(
            batch_op.f("fk_fingerprints_template_digest_fingerprint_templates"), type_="foreignkey"
        )
        batch_op.drop_index("ix_fingerprints_template_digest")
        batch_op.alter_column("document", existing_type=sa.JSON(), nullable=False)
        batch_op.drop_column("own")
        batch_op.drop_column("template_digest")
    op.drop_table("fingerprint_templates")
