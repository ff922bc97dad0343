"""Initial schema: DAGs and versions, runs, task instances, tries, pools, jobs, outbox.

Revision ID: 0001
Revises:
Create Date: 2026-12-03 01:05:16.370078
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "dag",
        sa.Column("dag_id", sa.Text(), nullable=False),
        sa.Column("namespace", sa.Text(), nullable=True),
        sa.Column("current_version_id", sa.Integer(), nullable=True),
        sa.Column("is_paused", sa.Boolean(), nullable=False),
        sa.Column("is_active", sa.Boolean(), nullable=False),
        sa.Column("schedule", sa.Text(), nullable=True),
        sa.Column("timezone", sa.Text(), nullable=False),
        sa.Column("catchup", sa.Boolean(), nullable=False),
        sa.Column("max_active_runs", sa.Integer(), nullable=False),
        sa.Column("max_active_tasks", sa.Integer(), nullable=False),
        sa.Column("next_logical_date", sa.DateTime(timezone=True), nullable=True),
        sa.Column("next_data_interval_start", sa.DateTime(timezone=True), nullable=True),
        sa.Column("next_data_interval_end", sa.DateTime(timezone=True), nullable=True),
        sa.Column("next_run_after", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("dag_id", name=op.f("pk_dag")),
    )
    op.create_index(
        "ix_dag_due",
        "dag",
        ["next_run_after"],
        unique=False,
        postgresql_where=sa.text("NOT is_paused AND is_active AND next_run_after IS NOT NULL"),
    )
    op.create_table(
        "outbox",
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("payload", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "not_before",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_outbox")),
    )
    op.create_index("ix_outbox_ready", "outbox", ["not_before", "id"], unique=False)
    op.create_table(
        "scheduler_job",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("hostname", sa.Text(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column(
            "started_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "latest_heartbeat",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_scheduler_job")),
    )
    op.create_table(
        "scheduler_metric",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_scheduler_metric")),
    )
    op.create_table(
        "slot_pool",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("slots", sa.Integer(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.CheckConstraint("slots >= 0", name=op.f("ck_slot_pool_slots_nonnegative")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_slot_pool")),
        sa.UniqueConstraint("name", name=op.f("uq_slot_pool_name")),
    )
    op.create_table(
        "backfill",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("dag_id", sa.Text(), nullable=False),
        sa.Column("from_date", sa.DateTime(timezone=True), nullable=False),
        sa.Column("to_date", sa.DateTime(timezone=True), nullable=False),
        sa.Column("max_active_runs", sa.Integer(), nullable=False),
        sa.Column("rerun_failed", sa.Boolean(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["dag_id"], ["dag.dag_id"], name=op.f("fk_backfill_dag_id_dag"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_backfill")),
    )
    op.create_table(
        "dag_version",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("dag_id", sa.Text(), nullable=False),
        sa.Column("version_number", sa.Integer(), nullable=False),
        sa.Column("spec_hash", sa.Text(), nullable=False),
        sa.Column("spec", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["dag_id"], ["dag.dag_id"], name=op.f("fk_dag_version_dag_id_dag"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dag_version")),
        sa.UniqueConstraint("dag_id", "spec_hash", name="uq_dag_version_hash"),
        sa.UniqueConstraint("dag_id", "version_number", name="uq_dag_version_number"),
    )
    op.create_table(
        "dag_run",
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("dag_id", sa.Text(), nullable=False),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("run_type", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("dag_version_id", sa.Integer(), nullable=False),
        sa.Column("backfill_id", sa.Integer(), nullable=True),
        sa.Column("logical_date", sa.DateTime(timezone=True), nullable=False),
        sa.Column("data_interval_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("data_interval_end", sa.DateTime(timezone=True), nullable=False),
        sa.Column("conf", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("start_date", sa.DateTime(timezone=True), nullable=True),
        sa.Column("end_date", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_scheduling_decision", sa.DateTime(timezone=True), nullable=True),
        sa.Column("tasks_total", sa.Integer(), nullable=False),
        sa.Column("tasks_done", sa.Integer(), nullable=False),
        sa.CheckConstraint(
            "run_type IN ('scheduled', 'manual', 'backfill')", name=op.f("ck_dag_run_run_type")
        ),
        sa.CheckConstraint(
            "state IN ('queued', 'running', 'success', 'failed')", name=op.f("ck_dag_run_state")
        ),
        sa.ForeignKeyConstraint(
            ["backfill_id"], ["backfill.id"], name=op.f("fk_dag_run_backfill_id_backfill")
        ),
        sa.ForeignKeyConstraint(
            ["dag_id"], ["dag.dag_id"], name=op.f("fk_dag_run_dag_id_dag"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["dag_version_id"],
            ["dag_version.id"],
            name=op.f("fk_dag_run_dag_version_id_dag_version"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dag_run")),
        sa.UniqueConstraint("dag_id", "logical_date", "run_type", name="uq_dag_run_logical_date"),
        sa.UniqueConstraint("dag_id", "run_id", name="uq_dag_run_run_id"),
    )
    op.create_index(
        "ix_dag_run_active",
        "dag_run",
        ["dag_id", "state", "logical_date"],
        unique=False,
        postgresql_where=sa.text("state IN ('queued', 'running')"),
    )
    op.create_index(
        "ix_dag_run_dag_logical_date", "dag_run", ["dag_id", "logical_date"], unique=False
    )
    op.create_index(
        "ix_dag_run_examine",
        "dag_run",
        ["last_scheduling_decision"],
        unique=False,
        postgresql_where=sa.text("state = 'running'"),
    )
    op.create_table(
        "task_instance",
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("dag_run_id", sa.BigInteger(), nullable=False),
        sa.Column("dag_id", sa.Text(), nullable=False),
        sa.Column("task_id", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("try_number", sa.Integer(), nullable=False),
        sa.Column("max_tries", sa.Integer(), nullable=False),
        sa.Column("logical_date", sa.DateTime(timezone=True), nullable=False),
        sa.Column("priority_weight", sa.Integer(), nullable=False),
        sa.Column("pool", sa.Text(), nullable=False),
        sa.Column("pool_slots", sa.Integer(), nullable=False),
        sa.Column("trigger_rule", sa.Text(), nullable=False),
        sa.Column("upstream_task_ids", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("downstream_task_ids", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("upstream_states", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("n_success", sa.Integer(), nullable=False),
        sa.Column("n_failed", sa.Integer(), nullable=False),
        sa.Column("n_skipped", sa.Integer(), nullable=False),
        sa.Column("n_upstream_failed", sa.Integer(), nullable=False),
        sa.Column("needs_eval", sa.Boolean(), nullable=False),
        sa.Column("depends_on_past", sa.Boolean(), nullable=False),
        sa.Column("wait_for_downstream", sa.Boolean(), nullable=False),
        sa.Column("queued_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("start_date", sa.DateTime(timezone=True), nullable=True),
        sa.Column("end_date", sa.DateTime(timezone=True), nullable=True),
        sa.Column("next_retry_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("queued_by_job_id", sa.Integer(), nullable=True),
        sa.Column("running_by_job_id", sa.Integer(), nullable=True),
        sa.Column("external_id", sa.Text(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("evidence", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.CheckConstraint(
            "state IN ('none', 'scheduled', 'queued', 'running', 'success', 'failed', "
            "'skipped', 'upstream_failed', 'up_for_retry')",
            name=op.f("ck_task_instance_state"),
        ),
        sa.ForeignKeyConstraint(
            ["dag_run_id"],
            ["dag_run.id"],
            name=op.f("fk_task_instance_dag_run_id_dag_run"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_task_instance")),
        sa.UniqueConstraint("dag_run_id", "task_id", name="uq_task_instance_run_task"),
    )
    op.create_index(
        "ix_ti_dag_task", "task_instance", ["dag_id", "task_id", "logical_date"], unique=False
    )
    op.create_index(
        "ix_ti_needs_eval",
        "task_instance",
        ["dag_run_id"],
        unique=False,
        postgresql_where=sa.text("needs_eval"),
    )
    op.create_index(
        "ix_ti_occupying",
        "task_instance",
        ["pool", "dag_id"],
        unique=False,
        postgresql_where=sa.text("state IN ('queued', 'running')"),
    )
    op.create_index(
        "ix_ti_retry",
        "task_instance",
        ["next_retry_at"],
        unique=False,
        postgresql_where=sa.text("state = 'up_for_retry'"),
    )
    op.create_index(
        "ix_ti_scheduled",
        "task_instance",
        [sa.literal_column("priority_weight DESC"), "logical_date", "id"],
        unique=False,
        postgresql_where=sa.text("state = 'scheduled'"),
    )
    op.create_table(
        "task_try",
        sa.Column("task_instance_id", sa.BigInteger(), nullable=False),
        sa.Column("try_number", sa.Integer(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("queued_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("start_date", sa.DateTime(timezone=True), nullable=True),
        sa.Column("end_date", sa.DateTime(timezone=True), nullable=True),
        sa.Column("scheduler_job_id", sa.Integer(), nullable=True),
        sa.Column("external_id", sa.Text(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["task_instance_id"],
            ["task_instance.id"],
            name=op.f("fk_task_try_task_instance_id_task_instance"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("task_instance_id", "try_number", name=op.f("pk_task_try")),
    )
    op.execute(
        "INSERT INTO slot_pool (name, slots, description) "
        "VALUES ('default', 128, 'Tasks without a pool run here.')"
    )


def downgrade() -> None:
    op.drop_table("task_try")
    op.drop_index(
        "ix_ti_scheduled",
        table_name="task_instance",
        postgresql_where=sa.text("state = 'scheduled'"),
    )
    op.drop_index(
        "ix_ti_retry",
        table_name="task_instance",
        postgresql_where=sa.text("state = 'up_for_retry'"),
    )
    op.drop_index(
        "ix_ti_occupying",
        table_name="task_instance",
        postgresql_where=sa.text("state IN ('queued', 'running')"),
    )
    op.drop_index(
        "ix_ti_needs_eval", table_name="task_instance", postgresql_where=sa.text("needs_eval")
    )
    op.drop_index("ix_ti_dag_task", table_name="task_instance")
    op.drop_table("task_instance")
    op.drop_index(
        "ix_dag_run_examine", table_name="dag_run", postgresql_where=sa.text("state = 'running'")
    )
    op.drop_index("ix_dag_run_dag_logical_date", table_name="dag_run")
    op.drop_index(
        "ix_dag_run_active",
        table_name="dag_run",
        postgresql_where=sa.text("state IN ('queued', 'running')"),
    )
    op.drop_table("dag_run")
    op.drop_table("dag_version")
    op.drop_table("backfill")
    op.drop_table("slot_pool")
    op.drop_table("scheduler_metric")
    op.drop_table("scheduler_job")
    op.drop_index("ix_outbox_ready", table_name="outbox")
    op.drop_table("outbox")
    op.drop_index(
        "ix_dag_due",
        table_name="dag",
        postgresql_where=sa.text("NOT is_paused AND is_active AND next_run_after IS NOT NULL"),
    )
    op.drop_table("dag")
