"""Versioned, idempotent schema migrations (docs/operations.md, "Migrate").

Each migration is explicit SQL for both engines, so an applied migration never changes when
``models.py`` does: a later schema change is a new entry at the end of ``MIGRATIONS``. ``migrate``
applies the missing versions in order, each in its own transaction together with its
``schema_migrations`` row (DDL is transactional on SQLite and PostgreSQL), so a crash leaves
either all of a migration or none. Every statement is also guarded (``IF NOT EXISTS``, a column
check), so re-running a migration whose record was lost is harmless.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

import peewee

from ticket_dispatcher.store.burden_months import install as install_burden_months
from ticket_dispatcher.store.database import engine_of, unit_of_work, write_lock
from ticket_dispatcher.store.engine import ColumnTypes

logger = logging.getLogger(__name__)


def _types(db: peewee.Database) -> ColumnTypes:
    """The engine's column types (``Engine.column_types``)."""
    return engine_of(db).column_types


def _initial_schema(db: peewee.Database) -> None:
    """The first schema: policies, rules, triggers, executions, rule executions, contexts and
    engineers."""
    t = _types(db)
    for statement in (
        f"""CREATE TABLE IF NOT EXISTS dispatch_policies (
            id {t.pk},
            family_id VARCHAR(20) NOT NULL,
            version INTEGER NOT NULL,
            status VARCHAR(16) NOT NULL,
            name TEXT NOT NULL,
            description TEXT NOT NULL DEFAULT '',
            trigger_json {t.json} NOT NULL,
            created_at {t.time} NOT NULL,
            updated_at {t.time} NOT NULL,
            activated_at {t.time} NULL,
            CONSTRAINT uq_dispatch_policies_family_version UNIQUE (family_id, version))""",
        # At most one active version per family, enforced by the database.
        """CREATE UNIQUE INDEX IF NOT EXISTS uq_dispatch_policies_one_active
            ON dispatch_policies (family_id) WHERE status = 'active'""",
        "CREATE INDEX IF NOT EXISTS ix_dispatch_policies_status ON dispatch_policies (status)",
        f"""CREATE TABLE IF NOT EXISTS dispatch_rules (
            id {t.pk},
            policy_id {t.bigint} NOT NULL
                REFERENCES dispatch_policies (id) ON DELETE CASCADE,
            name TEXT NOT NULL,
            priority INTEGER NOT NULL,
            condition_json {t.json} NOT NULL,
            actions_json {t.json} NOT NULL,
            transition_json {t.json} NOT NULL)""",
        "CREATE INDEX IF NOT EXISTS ix_dispatch_rules_policy ON dispatch_rules (policy_id)",
        f"""CREATE TABLE IF NOT EXISTS dispatch_triggers (
            id {t.pk},
            source TEXT NOT NULL,
            issue_key TEXT NOT NULL,
            input_json {t.json} NOT NULL,
            policy_id {t.bigint} NULL,
            dryrun_json {t.json} NULL,
            status VARCHAR(16) NOT NULL,
            available_at {t.time} NOT NULL,
            output_json {t.json} NOT NULL,
            failure_reason TEXT NOT NULL DEFAULT '',
            created_at {t.time} NOT NULL,
            updated_at {t.time} NOT NULL,
            completed_at {t.time} NULL)""",
        """CREATE INDEX IF NOT EXISTS ix_dispatch_triggers_status_available
            ON dispatch_triggers (status, available_at)""",
        """CREATE INDEX IF NOT EXISTS ix_dispatch_triggers_issue_source
            ON dispatch_triggers (issue_key, source)""",
        f"""CREATE TABLE IF NOT EXISTS dispatch_executions (
            id {t.pk},
            trigger_id {t.bigint} NOT NULL REFERENCES dispatch_triggers (id),
            issue_key TEXT NOT NULL,
            mode VARCHAR(16) NOT NULL,
            policy_id {t.bigint} NOT NULL,
            policy_family_id VARCHAR(20) NOT NULL,
            policy_version INTEGER NOT NULL,
            status VARCHAR(16) NOT NULL,
            failure_code VARCHAR(64) NOT NULL DEFAULT '',
            failure_reason TEXT NOT NULL DEFAULT '',
            overwrite_data_json {t.json} NULL,
            business_now {t.time} NULL,
            wake_at {t.time} NULL,
            live_lock_key TEXT NULL,
            restart_count INTEGER NOT NULL DEFAULT 0,
            load_attempts INTEGER NOT NULL DEFAULT 0,
            created_at {t.time} NOT NULL,
            updated_at {t.time} NOT NULL,
            completed_at {t.time} NULL,
            CONSTRAINT ck_dispatch_executions_live_lock CHECK (
                live_lock_key IS NULL
                OR (mode = 'live' AND status IN ('created', 'executing'))))""",
        # NULLs are distinct on both engines, so only held keys collide.
        """CREATE UNIQUE INDEX IF NOT EXISTS uq_dispatch_executions_live_lock
            ON dispatch_executions (live_lock_key)""",
        """CREATE INDEX IF NOT EXISTS ix_dispatch_executions_issue
            ON dispatch_executions (issue_key)""",
        """CREATE INDEX IF NOT EXISTS ix_dispatch_executions_status
            ON dispatch_executions (status)""",
        """CREATE INDEX IF NOT EXISTS ix_dispatch_executions_running
            ON dispatch_executions (issue_key, policy_id, mode, status)""",
        """CREATE INDEX IF NOT EXISTS ix_dispatch_executions_trigger
            ON dispatch_executions (trigger_id)""",
        f"""CREATE TABLE IF NOT EXISTS dispatch_rule_executions (
            id {t.pk},
            execution_id {t.bigint} NOT NULL
                REFERENCES dispatch_executions (id) ON DELETE CASCADE,
            sequence INTEGER NOT NULL,
            rule_id {t.bigint} NOT NULL,
            name TEXT NOT NULL,
            priority INTEGER NOT NULL,
            when_json {t.json} NOT NULL,
            transition_json {t.json} NOT NULL,
            outcome VARCHAR(16) NOT NULL,
            evaluation_json {t.json} NULL,
            action_executions_json {t.json} NOT NULL,
            CONSTRAINT uq_dispatch_rule_executions_sequence UNIQUE (execution_id, sequence))""",
        f"""CREATE TABLE IF NOT EXISTS dispatch_contexts (
            issue_key TEXT PRIMARY KEY,
            assignee TEXT NOT NULL DEFAULT '',
            assignee_l2 TEXT NOT NULL DEFAULT '',
            created_at {t.time} NOT NULL,
            updated_at {t.time} NOT NULL)""",
        f"""CREATE TABLE IF NOT EXISTS engineers (
            email TEXT PRIMARY KEY,
            display_name TEXT NOT NULL DEFAULT '',
            jira_account_id TEXT NOT NULL DEFAULT '',
            dispatch_enabled {t.bool} NOT NULL,
            last_dispatched_at {t.time} NULL,
            last_dispatched_issue TEXT NOT NULL DEFAULT '',
            created_at {t.time} NOT NULL,
            updated_at {t.time} NOT NULL)""",
    ):
        db.execute_sql(statement)


def _notification_state(db: peewee.Database) -> None:
    """The one schema change of assignment notification (the escalation slots). Existing rows
    keep NULL, which reads as the empty state (no backfill)."""
    columns = {column.name for column in db.get_columns("dispatch_contexts")}
    if "assignment_notification_state_json" not in columns:
        db.execute_sql(
            "ALTER TABLE dispatch_contexts ADD COLUMN assignment_notification_state_json "
            f"{_types(db).json} NULL"
        )


def _leases(db: peewee.Database) -> None:
    """The lease of a claimed trigger or a running execution: owner, epoch, expiry. Rows that
    exist keep no owner, which reads as unclaimed."""
    t = _types(db)
    for table in ("dispatch_triggers", "dispatch_executions"):
        columns = {column.name for column in db.get_columns(table)}
        for name, kind in (("lease_owner", "TEXT NULL"),
                           ("lease_epoch", "INTEGER NOT NULL DEFAULT 0"),
                           ("lease_expires_at", f"{t.time} NULL")):
            if name not in columns:
                db.execute_sql(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")


def _trigger_list_indexes(db: peewee.Database) -> None:
    """``GET /dispatch/triggers`` reads newest first (by id) under a filter: by status (the
    failed ones of a long history), by source, or by a time range of ``created_at``. Without
    these it would walk the whole table for a rare value. ``issue_key`` is served by
    ``ix_dispatch_triggers_issue_source`` already."""
    for statement in (
        """CREATE INDEX IF NOT EXISTS ix_dispatch_triggers_status_id
            ON dispatch_triggers (status, id)""",
        """CREATE INDEX IF NOT EXISTS ix_dispatch_triggers_source_id
            ON dispatch_triggers (source, id)""",
        """CREATE INDEX IF NOT EXISTS ix_dispatch_triggers_created
            ON dispatch_triggers (created_at)""",
    ):
        db.execute_sql(statement)


def _replicas(db: peewee.Database) -> None:
    """The processes serving this database, each by its lease owner identity, with its last
    heartbeat: what the admin view shows of the cluster."""
    t = _types(db)
    db.execute_sql(f"""CREATE TABLE IF NOT EXISTS dispatch_replicas (
        owner TEXT PRIMARY KEY,
        host TEXT NOT NULL,
        pid INTEGER NOT NULL,
        version TEXT NOT NULL,
        started_at {t.time} NOT NULL,
        heartbeat_at {t.time} NOT NULL,
        slots INTEGER NOT NULL,
        busy INTEGER NOT NULL,
        parked INTEGER NOT NULL)""")


def _shadows(db: peewee.Database) -> None:
    """Shadow policies: at most one draft version per family evaluated beside the active one
    (``dispatch_shadows``), and each decision it made next to the live one
    (``dispatch_shadow_decisions``; ``verdict`` NULL until the live execution has ended)."""
    t = _types(db)
    for statement in (
        f"""CREATE TABLE IF NOT EXISTS dispatch_shadows (
            family_id VARCHAR(20) PRIMARY KEY,
            policy_id {t.bigint} NOT NULL UNIQUE,
            started_at {t.time} NOT NULL,
            dropped INTEGER NOT NULL DEFAULT 0)""",
        f"""CREATE TABLE IF NOT EXISTS dispatch_shadow_decisions (
            id {t.pk},
            policy_id {t.bigint} NOT NULL,
            family_id VARCHAR(20) NOT NULL,
            trigger_id {t.bigint} NOT NULL,
            issue_key TEXT NOT NULL,
            live_execution_id {t.bigint} NOT NULL,
            shadow_json {t.json} NOT NULL,
            live_json {t.json} NULL,
            verdict VARCHAR(32) NULL,
            created_at {t.time} NOT NULL,
            decided_at {t.time} NULL)""",
        """CREATE INDEX IF NOT EXISTS ix_dispatch_shadow_decisions_policy
            ON dispatch_shadow_decisions (policy_id, id)""",
        """CREATE INDEX IF NOT EXISTS ix_dispatch_shadow_decisions_live
            ON dispatch_shadow_decisions (live_execution_id)""",
    ):
        db.execute_sql(statement)


def _site_holds(db: peewee.Database) -> None:
    """Until when a service's rate limit holds every call, shared by the replicas: written on
    a 429 that holds every call, read before calls (``store/replicas.py``)."""
    db.execute_sql(f"""CREATE TABLE IF NOT EXISTS dispatch_site_holds (
        site TEXT PRIMARY KEY,
        held_until {_types(db).time} NOT NULL)""")


def _card_presses(db: peewee.Database) -> None:
    """The presses of the cards' buttons (store/card_presses.py): one row per Lark event, at
    most one acting on each execution's wait."""
    t = _types(db)
    db.execute_sql(f"""CREATE TABLE IF NOT EXISTS lark_card_presses (
        id {t.pk},
        event_id TEXT NOT NULL UNIQUE,
        execution_id BIGINT NOT NULL,
        action VARCHAR(16) NOT NULL,
        outcome VARCHAR(16) NOT NULL,
        acts_on BIGINT NULL UNIQUE,
        operator_open_id TEXT NOT NULL,
        answer_json TEXT NOT NULL,
        pressed_at {t.time} NOT NULL)""")


Migration = tuple[int, str, Callable[[peewee.Database], None]]

def _wake_index(db: peewee.Database) -> None:
    """The parked executions by ``wake_at``: the soonest wake (``next_wake``), the due ones
    another replica left (``adopt_due``, ``claim_due``), and the admin view's and the console's
    parked list, each a range of the rows that carry a ``wake_at``; and the others by status and
    ``created_at``, the new executions a claim takes first (``claim_due``). Neither claim nor
    list reads every running row, however many are parked."""
    for statement in (
        """CREATE INDEX IF NOT EXISTS ix_dispatch_executions_wake
            ON dispatch_executions (wake_at, id) WHERE wake_at IS NOT NULL""",
        """CREATE INDEX IF NOT EXISTS ix_dispatch_executions_unparked
            ON dispatch_executions (status, created_at, id) WHERE wake_at IS NULL""",
    ):
        db.execute_sql(statement)


def _passing_fault_retries(db: peewee.Database) -> None:
    """A trigger's retries after a passing fault of its issue load (how many, the last
    reason, since when), and since when an execution's loads have failed: the retry budget
    counts from the first failure. Existing rows keep none."""
    t = _types(db)
    for table, added in (("dispatch_triggers", (("retry_count", "INTEGER NOT NULL DEFAULT 0"),
                                                ("retry_reason", "TEXT NOT NULL DEFAULT ''"),
                                                ("retry_since", f"{t.time} NULL"))),
                         ("dispatch_executions", (("load_failing_since", f"{t.time} NULL"),))):
        columns = {column.name for column in db.get_columns(table)}
        for name, kind in added:
            if name not in columns:
                db.execute_sql(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")


def _availability(db: peewee.Database) -> None:
    """Each engineer's time zone, working hours and cap of open issues (none: any time, no
    cap), their time off, and the calendar feeds time off is imported from. A time-off entry
    is the API's (``source`` "api") or a feed's (``source`` its name), which a refresh of that
    feed replaces; entries are read by engineer and end, so past ones cost no read."""
    t = _types(db)
    columns = {column.name for column in db.get_columns("engineers")}
    for name, kind in (("timezone", "TEXT NOT NULL DEFAULT ''"),
                       ("working_hours_json", f"{t.json} NULL"),
                       ("max_open_issues", "INTEGER NULL")):
        if name not in columns:
            db.execute_sql(f"ALTER TABLE engineers ADD COLUMN {name} {kind}")
    for statement in (
        f"""CREATE TABLE IF NOT EXISTS engineer_time_off (
            id {t.pk},
            email TEXT NOT NULL,
            start_at {t.time} NOT NULL,
            end_at {t.time} NOT NULL,
            reason TEXT NOT NULL DEFAULT '',
            source TEXT NOT NULL,
            created_at {t.time} NOT NULL)""",
        """CREATE INDEX IF NOT EXISTS ix_engineer_time_off_email_end
            ON engineer_time_off (email, end_at)""",
        """CREATE INDEX IF NOT EXISTS ix_engineer_time_off_source
            ON engineer_time_off (source)""",
        f"""CREATE TABLE IF NOT EXISTS calendar_feeds (
            name TEXT PRIMARY KEY,
            email TEXT NULL,
            status TEXT NOT NULL DEFAULT 'never fetched',
            error TEXT NOT NULL DEFAULT '',
            entries INTEGER NOT NULL DEFAULT 0,
            attempted_at {t.time} NULL,
            refreshed_at {t.time} NULL,
            updated_at {t.time} NOT NULL)""",
    ):
        db.execute_sql(statement)


def _webhook_deliveries(db: peewee.Database) -> None:
    """The Jira webhook deliveries taken, by the identifier Jira keeps across a delivery's
    retries (its triggers carry it in their input); read by received time only to forget old
    ones."""
    t = _types(db)
    for statement in (
        f"""CREATE TABLE IF NOT EXISTS jira_webhook_deliveries (
            identifier TEXT PRIMARY KEY,
            received_at {t.time} NOT NULL)""",
        """CREATE INDEX IF NOT EXISTS ix_jira_webhook_deliveries_received
            ON jira_webhook_deliveries (received_at)""",
    ):
        db.execute_sql(statement)


def _console_sign_outs(db: peewee.Database) -> None:
    """The console sessions signed out before they expired, until they would have; read by
    the session, forgotten by expiry."""
    t = _types(db)
    for statement in (
        f"""CREATE TABLE IF NOT EXISTS console_sign_outs (
            session TEXT PRIMARY KEY,
            expires_at {t.time} NOT NULL)""",
        """CREATE INDEX IF NOT EXISTS ix_console_sign_outs_expires
            ON console_sign_outs (expires_at)""",
    ):
        db.execute_sql(statement)


def _audit_records(db: peewee.Database) -> None:
    """The audit trail: read newest first (by id), filtered by actor or object, pruned by
    time."""
    t = _types(db)
    for statement in (
        f"""CREATE TABLE IF NOT EXISTS audit_records (
            id {t.pk},
            at {t.time} NOT NULL,
            actor TEXT NOT NULL,
            via VARCHAR(16) NOT NULL,
            action TEXT NOT NULL,
            object_type TEXT NOT NULL,
            object_id TEXT NOT NULL,
            before_json {t.json},
            after_json {t.json})""",
        "CREATE INDEX IF NOT EXISTS ix_audit_records_at ON audit_records (at)",
        """CREATE INDEX IF NOT EXISTS ix_audit_records_object
            ON audit_records (object_type, object_id, id)""",
        "CREATE INDEX IF NOT EXISTS ix_audit_records_actor ON audit_records (actor, id)",
    ):
        db.execute_sql(statement)


def _policy_origin(db: peewee.Database) -> None:
    """How each policy version was made, so that ``policy plan`` tells the versions it
    applied from those made elsewhere; "" for the versions made before."""
    if "origin" not in {column.name for column in db.get_columns("dispatch_policies")}:
        db.execute_sql("ALTER TABLE dispatch_policies ADD COLUMN origin TEXT NOT NULL "
                       "DEFAULT ''")


def _maintenance_windows(db: peewee.Database) -> None:
    """Maintenance windows, read by the time they end (the current ones, each trigger), and
    the window that holds a trigger."""
    t = _types(db)
    for statement in (
        f"""CREATE TABLE IF NOT EXISTS maintenance_windows (
            id {t.pk},
            scope_json {t.json} NOT NULL,
            reason TEXT NOT NULL DEFAULT '',
            start_at {t.time} NOT NULL,
            end_at {t.time} NOT NULL,
            recurrence VARCHAR(16) NOT NULL DEFAULT 'none',
            until_at {t.time} NULL,
            effect VARCHAR(16) NOT NULL,
            last_end_at {t.time} NOT NULL,
            ended_at {t.time} NULL,
            created_at {t.time} NOT NULL)""",
        """CREATE INDEX IF NOT EXISTS ix_maintenance_windows_last_end
            ON maintenance_windows (last_end_at)""",
    ):
        db.execute_sql(statement)
    if "maintenance_window_id" not in {c.name for c in db.get_columns("dispatch_triggers")}:
        db.execute_sql("ALTER TABLE dispatch_triggers ADD COLUMN maintenance_window_id "
                       "BIGINT NULL")


def _burden_events(db: peewee.Database) -> None:
    """What the burden report counts: each assignment, card, App-urgent, page and escalation,
    one row per action, written with the checkpoint that records it (store/burden.py). Read
    by time, alone or within a policy family, a project or a rotation; a notification finds
    its rotation by the issue's latest assignment of the person. ``band``: an interruption's
    band in the person's hours when it was sent."""
    t = _types(db)
    for statement in (
        f"""CREATE TABLE IF NOT EXISTS burden_events (
            id {t.pk},
            version INTEGER NOT NULL,
            execution_id {t.bigint} NOT NULL,
            rule_sequence INTEGER NOT NULL,
            action_index INTEGER NOT NULL,
            kind VARCHAR(16) NOT NULL,
            email TEXT NOT NULL,
            leader TEXT NOT NULL DEFAULT '',
            issue_key TEXT NOT NULL,
            project TEXT NOT NULL,
            policy_id {t.bigint} NOT NULL,
            policy_family_id VARCHAR(20) NOT NULL,
            rotation TEXT NOT NULL DEFAULT '',
            members_json {t.json} NULL,
            hours_required {t.bool} NOT NULL,
            open_counts_json {t.json} NULL,
            sent_at {t.time} NOT NULL,
            band VARCHAR(8) NULL,
            ack_source VARCHAR(16) NULL,
            ack_at {t.time} NULL,
            CONSTRAINT uq_burden_events_action
                UNIQUE (execution_id, rule_sequence, action_index))""",
        "CREATE INDEX IF NOT EXISTS ix_burden_events_sent ON burden_events (sent_at)",
        """CREATE INDEX IF NOT EXISTS ix_burden_events_family
            ON burden_events (policy_family_id, sent_at)""",
        """CREATE INDEX IF NOT EXISTS ix_burden_events_project
            ON burden_events (project, sent_at)""",
        """CREATE INDEX IF NOT EXISTS ix_burden_events_rotation
            ON burden_events (rotation, sent_at)""",
        """CREATE INDEX IF NOT EXISTS ix_burden_events_issue
            ON burden_events (issue_key, email, kind, sent_at)""",
    ):
        db.execute_sql(statement)


def _burden_months(db: peewee.Database) -> None:
    """What makes a long burden report fast: each card's time to acknowledge stored beside its
    ACK, read along an index of the ACKed cards alone; and the monthly tallies the database
    keeps of every event (store/burden_months.py), filled here from the events so far."""
    engine = engine_of(db)
    if "ack_seconds" not in {c.name for c in db.get_columns("burden_events")}:
        db.execute_sql("ALTER TABLE burden_events ADD COLUMN ack_seconds DOUBLE PRECISION NULL")
    db.execute_sql(f"UPDATE burden_events SET ack_seconds = "
                   f"{engine.epoch_seconds('ack_at')} - {engine.epoch_seconds('sent_at')} "
                   "WHERE ack_at IS NOT NULL AND ack_seconds IS NULL")
    for statement in (
        """CREATE INDEX IF NOT EXISTS ix_burden_events_acks
            ON burden_events (sent_at, email, ack_source, ack_seconds)
            WHERE ack_seconds IS NOT NULL""",
        # the time index, now holding what the tallies of the period's ends read
        """CREATE INDEX IF NOT EXISTS ix_burden_events_tallies
            ON burden_events (sent_at, kind, email, band, leader, policy_family_id, rotation)""",
        "DROP INDEX IF EXISTS ix_burden_events_sent",
    ):
        db.execute_sql(statement)
    for statement in install_burden_months(engine):
        db.execute_sql(statement)


MIGRATIONS: tuple[Migration, ...] = (
    (1, "initial schema", _initial_schema),
    (2, "dispatch_contexts.assignment_notification_state_json", _notification_state),
    (3, "leases on dispatch_triggers and dispatch_executions", _leases),
    (4, "indexes for listing dispatch_triggers", _trigger_list_indexes),
    (5, "dispatch_replicas", _replicas),
    (6, "shadow policies", _shadows),
    (7, "indexes of the parked executions by wake_at, and of the others", _wake_index),
    # the name is recorded in every database's schema_migrations: it stays as first written
    (8, "retries after transient failures", _passing_fault_retries),
    (9, "engineers' availability: hours, caps, time off and calendar feeds", _availability),
    (10, "jira_webhook_deliveries", _webhook_deliveries),
    (11, "console_sign_outs", _console_sign_outs),
    (12, "audit_records", _audit_records),
    (13, "dispatch_policies.origin", _policy_origin),
    (14, "maintenance_windows", _maintenance_windows),
    (15, "dispatch_site_holds", _site_holds),
    (16, "lark_card_presses", _card_presses),
    (17, "burden_events", _burden_events),
    (18, "burden_months and burden_events.ack_seconds", _burden_months),
)


def _ensure_ledger(db: peewee.Database) -> None:
    db.execute_sql(
        f"""CREATE TABLE IF NOT EXISTS schema_migrations (
            version INTEGER PRIMARY KEY,
            name TEXT NOT NULL,
            applied_at {_types(db).time} NOT NULL)"""
    )


def _applied(db: peewee.Database) -> set[int]:
    return {row[0] for row in db.execute_sql("SELECT version FROM schema_migrations")}


def _record(db: peewee.Database, version: int, name: str) -> None:
    # Audit time of an operator action: migrations run before the service's Clock exists.
    applied_at = engine_of(db).stored_time(datetime.now(UTC).replace(tzinfo=None))
    p = db.param
    db.execute_sql(
        f"INSERT INTO schema_migrations (version, name, applied_at) VALUES ({p}, {p}, {p})",
        (version, name, applied_at),
    )


def migrate(db: peewee.Database, upto: int | None = None) -> list[int]:
    """Apply the missing migrations (up to ``upto``, default all) in order; return their
    versions. Running it again applies nothing and returns ``[]``."""
    applied_now: list[int] = []
    with unit_of_work(db):
        with write_lock(db):
            _ensure_ledger(db)
        for version, name, apply in MIGRATIONS:
            if upto is not None and version > upto:
                break
            with write_lock(db):
                engine_of(db).lock_migrations(db)  # another process's migration waits
                # Re-read inside the lock: another process may have just applied it.
                if version in _applied(db):
                    continue
                apply(db)
                _record(db, version, name)
            logger.info("applied schema migration %d: %s", version, name)
            applied_now.append(version)
    return applied_now


def current_version(db: peewee.Database) -> int:
    """The highest applied migration, 0 for an empty database."""
    with unit_of_work(db):
        if not db.table_exists("schema_migrations"):
            return 0
        row = db.execute_sql("SELECT MAX(version) FROM schema_migrations").fetchone()
        return int(row[0] or 0)


def latest_version() -> int:
    return MIGRATIONS[-1][0]
