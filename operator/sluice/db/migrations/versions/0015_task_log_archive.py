"""Task logs outlive their pods: a log outbox filled by a trigger, and where each went.

When a started try ends (`task_try.end_date` set on a row with an external id),
a statement-level trigger writes one `log_outbox` row per try in the same
transaction, so no path that ends a try (a report, a zombie verdict, a run
timeout or mark, a cancel) can forget its log, and a replica dying right after
loses nothing. As with `status_sink`, the rows are written only once a log
archiver runs (`log_sink`), so `sluice standalone` and the benchmarks leave
nothing behind; and as with `status_outbox`, a table of its own, so the
dispatcher's hot claim of `outbox` never wades through them.

`task_log` says what became of each try's log: archived (where, how big, cut
or not, read from which pod on which node, or which file) or lost (why).

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "log_sink",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column(
            "enabled_at", sa.DateTime(timezone=True), server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint("id = 1", name=op.f("ck_log_sink_one_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_log_sink")),
    )  # fmt: skip
    op.create_table(
        "log_outbox",
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("task_instance_id", sa.BigInteger(), nullable=False),
        sa.Column("try_number", sa.Integer(), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "not_before", sa.DateTime(timezone=True), server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_log_outbox")),
    )  # fmt: skip
    op.create_index("ix_log_outbox_ready", "log_outbox", ["not_before", "id"])
    op.create_table(
        "task_log",
        sa.Column("task_instance_id", sa.BigInteger(), nullable=False),
        sa.Column("try_number", sa.Integer(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("location", sa.Text(), nullable=True),
        sa.Column("raw_bytes", sa.BigInteger(), nullable=True),
        sa.Column("stored_bytes", sa.BigInteger(), nullable=True),
        sa.Column("truncated", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("source", sa.Text(), nullable=True),
        sa.Column("node", sa.Text(), nullable=True),
        sa.Column(
            "archived_at", sa.DateTime(timezone=True), server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["task_instance_id"], ["task_instance.id"],
            name=op.f("fk_task_log_task_instance_id_task_instance"), ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("task_instance_id", "try_number", name=op.f("pk_task_log")),
    )  # fmt: skip
    op.create_index("ix_task_log_archived_at", "task_log", ["archived_at"])
    op.execute(
        "CREATE FUNCTION sluice_log_tries_ended() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "IF NOT EXISTS (SELECT 1 FROM log_sink) THEN RETURN NULL; END IF; "
        "INSERT INTO log_outbox (task_instance_id, try_number) "
        "SELECT n.task_instance_id, n.try_number FROM new_rows n JOIN old_rows o"
        " ON o.task_instance_id = n.task_instance_id AND o.try_number = n.try_number"
        " WHERE o.end_date IS NULL AND n.end_date IS NOT NULL AND n.external_id IS NOT NULL; "
        "RETURN NULL; END $$"
    )
    op.execute(
        "CREATE TRIGGER log_on_try_end AFTER UPDATE ON task_try"
        " REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows"
        " FOR EACH STATEMENT EXECUTE FUNCTION sluice_log_tries_ended()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER log_on_try_end ON task_try")
    op.execute("DROP FUNCTION sluice_log_tries_ended()")
    op.drop_index("ix_task_log_archived_at", table_name="task_log")
    op.drop_table("task_log")
    op.drop_index("ix_log_outbox_ready", table_name="log_outbox")
    op.drop_table("log_outbox")
    op.drop_table("log_sink")
