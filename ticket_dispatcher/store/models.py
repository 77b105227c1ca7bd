"""Peewee models of every table.

The schema itself is owned by ``migrations.py`` (explicit SQL, so an applied migration never
changes when this file does); these models only describe the columns for queries. Field names
are the column names. All models reach the database through ``database_proxy``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, ClassVar, TypeAlias, cast

import peewee

from ticket_dispatcher.domain.execution import Lease
from ticket_dispatcher.store.database import database_proxy

# A time column's value as the driver has it: SQLite's text, PostgreSQL's naive datetime, or
# NULL.
DriverTime: TypeAlias = str | datetime | None


class UTCDateTimeField(peewee.FieldDatabaseHook, peewee.Field):
    """Aware datetimes in, aware UTC datetimes out; stored as naive UTC.

    Naive datetimes are rejected: every time comes from the injected clock, which is aware.
    On SQLite the value is text with a fixed six-digit fraction, so text order is time order.
    """

    field_type = "DATETIME"

    def _db_hook(self, database: peewee.Database | None) -> None:
        self._as_text = isinstance(database, peewee.SqliteDatabase)

    def db_value(self, value: object) -> DriverTime | peewee.Node:
        if value is None or isinstance(value, peewee.Node):
            return value
        if not isinstance(value, datetime):
            raise TypeError(f"{self.name}: expected a datetime, got {type(value).__name__}")
        if value.tzinfo is None:
            raise ValueError(f"{self.name}: naive datetime; pass an aware UTC time")
        naive = value.astimezone(UTC).replace(tzinfo=None)
        # "YYYY-MM-DD HH:MM:SS.ffffff", as strftime("%Y-%m-%d %H:%M:%S.%f"), with no format to parse
        return naive.isoformat(" ", "microseconds") if self._as_text else naive

    def python_value(self, value: DriverTime) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):
            value = datetime.fromisoformat(value)
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class BaseModel(peewee.Model):
    class Meta:
        database = database_proxy
        legacy_table_names = False


def delete_where(model: type[BaseModel], condition: peewee.Expression) -> int:
    """Delete ``model``'s rows matching ``condition``; how many.

    Through a ``type[...]`` because the stubs type ``Model.delete`` with ``Self``, which mypy
    finds ambiguous on some concrete classes and not on others, by the order it reads them.
    """
    return int(model.delete().where(condition).execute())


class PolicyRow(BaseModel):
    id = peewee.AutoField()
    family_id = peewee.CharField(max_length=20)
    version = peewee.IntegerField()
    status = peewee.CharField(max_length=16)
    name = peewee.TextField()
    description = peewee.TextField(default="")
    trigger_json = peewee.JSONField()
    created_at = UTCDateTimeField()
    updated_at = UTCDateTimeField()
    activated_at = UTCDateTimeField(null=True)
    origin = peewee.TextField(default="")  # how the version was made (Policy.origin)

    class Meta:
        table_name = "dispatch_policies"


class RuleRow(BaseModel):
    id = peewee.AutoField()
    policy = peewee.ForeignKeyField(
        PolicyRow, column_name="policy_id", backref="rule_rows", on_delete="CASCADE"
    )
    name = peewee.TextField()
    priority = peewee.IntegerField()
    condition_json = peewee.JSONField()
    actions_json = peewee.JSONField()
    transition_json = peewee.JSONField()

    class Meta:
        table_name = "dispatch_rules"


class LeasedRow(BaseModel):
    """The lease columns of a row a process claims (actors/leases.py): its owner, the epoch of
    the claim and its expiry; no owner while nobody holds it (a trigger not being processed;
    an execution queued, parked or terminal). Only its subclasses have tables."""

    lease_owner = peewee.TextField(null=True)
    lease_epoch = peewee.IntegerField(default=0)
    lease_expires_at = UTCDateTimeField(null=True)

    # The columns of a lease given back.
    RELEASED: ClassVar[dict] = {"lease_owner": None, "lease_expires_at": None}

    @classmethod
    def under(cls, lease: Lease) -> peewee.Expression:
        """Rows still held under ``lease``: its owner and the epoch of its claim (fencing)."""
        return (cls.lease_owner == lease.owner) & (cls.lease_epoch == lease.epoch)

    @classmethod
    def unheld(cls, now: datetime) -> peewee.Expression:
        """Rows no live lease covers at ``now``: nobody holds them, or the lease expired."""
        return cls.lease_owner.is_null() | (cls.lease_expires_at < now)


class TriggerRow(LeasedRow):
    id = peewee.AutoField()
    source = peewee.TextField()
    issue_key = peewee.TextField()
    input_json = peewee.JSONField()
    policy_id = peewee.BigIntegerField(null=True)  # an explicit policy; no FK: history
    dryrun_json = peewee.JSONField(null=True)
    status = peewee.CharField(max_length=16)
    available_at = UTCDateTimeField()
    output_json = peewee.JSONField()
    failure_reason = peewee.TextField(default="")
    created_at = UTCDateTimeField()
    updated_at = UTCDateTimeField()
    completed_at = UTCDateTimeField(null=True)
    # Retries after passing faults of the issue load (docs/design.md, "Passing faults").
    retry_count = peewee.IntegerField(default=0)
    retry_reason = peewee.TextField(default="")
    retry_since = UTCDateTimeField(null=True)
    # The maintenance window that holds it (or last held it); no FK: history.
    maintenance_window_id = peewee.BigIntegerField(null=True)

    class Meta:
        table_name = "dispatch_triggers"


class ExecutionRow(LeasedRow):
    id = peewee.AutoField()
    trigger = peewee.ForeignKeyField(TriggerRow, column_name="trigger_id", backref="executions")
    issue_key = peewee.TextField()
    mode = peewee.CharField(max_length=16)  # live | dry_run
    policy_id = peewee.BigIntegerField()
    policy_family_id = peewee.CharField(max_length=20)
    policy_version = peewee.IntegerField()
    status = peewee.CharField(max_length=16)
    failure_code = peewee.CharField(max_length=64, default="")
    failure_reason = peewee.TextField(default="")
    overwrite_data_json = peewee.JSONField(null=True)
    business_now = UTCDateTimeField(null=True)  # frozen for dry-runs
    wake_at = UTCDateTimeField(null=True)
    # Set while a live execution is created/executing, cleared in the UPDATE that makes it
    # terminal; UNIQUE, and a CHECK refuses it on dry-runs and terminal rows.
    live_lock_key = peewee.TextField(null=True)
    restart_count = peewee.IntegerField(default=0)  # actor crashes survived
    load_attempts = peewee.IntegerField(default=0)  # failed issue/policy loads in a row
    load_failing_since = UTCDateTimeField(null=True)  # the first of them
    created_at = UTCDateTimeField()
    updated_at = UTCDateTimeField()
    completed_at = UTCDateTimeField(null=True)

    class Meta:
        table_name = "dispatch_executions"


class RuleExecutionRow(BaseModel):
    id = peewee.AutoField()
    execution = peewee.ForeignKeyField(
        ExecutionRow, column_name="execution_id", backref="rule_executions", on_delete="CASCADE"
    )
    sequence = peewee.IntegerField()
    rule_id = peewee.BigIntegerField()
    name = peewee.TextField()
    priority = peewee.IntegerField()
    when_json = peewee.JSONField()
    transition_json = peewee.JSONField()
    outcome = peewee.CharField(max_length=16)
    evaluation_json = peewee.JSONField(null=True)
    action_executions_json = peewee.JSONField()  # ordered array

    class Meta:
        table_name = "dispatch_rule_executions"


class ContextRow(BaseModel):
    issue_key = peewee.TextField(primary_key=True)
    assignee = peewee.TextField(default="")
    assignee_l2 = peewee.TextField(default="")
    # NULL (rows from before migration 2) reads as the empty state.
    assignment_notification_state_json = peewee.JSONField(null=True)
    created_at = UTCDateTimeField()
    updated_at = UTCDateTimeField()

    class Meta:
        table_name = "dispatch_contexts"


class EngineerRow(BaseModel):
    email = peewee.TextField(primary_key=True)  # lower-case
    display_name = peewee.TextField(default="")
    jira_account_id = peewee.TextField(default="")
    dispatch_enabled = peewee.BooleanField(default=True)
    last_dispatched_at = UTCDateTimeField(null=True)
    last_dispatched_issue = peewee.TextField(default="")
    timezone = peewee.TextField(default="")  # an IANA name; "" reads as UTC
    working_hours_json = peewee.JSONField(null=True)  # NULL: any time
    max_open_issues = peewee.IntegerField(null=True)  # NULL: no cap
    created_at = UTCDateTimeField()
    updated_at = UTCDateTimeField()

    class Meta:
        table_name = "engineers"


class TimeOffRow(BaseModel):
    id = peewee.AutoField()
    email = peewee.TextField()
    start_at = UTCDateTimeField()
    end_at = UTCDateTimeField()
    reason = peewee.TextField(default="")
    source = peewee.TextField()  # "api", or the calendar feed's name
    created_at = UTCDateTimeField()

    class Meta:
        table_name = "engineer_time_off"


class CalendarFeedRow(BaseModel):
    name = peewee.TextField(primary_key=True)
    email = peewee.TextField(null=True)  # one engineer's feed; NULL: events name their people
    status = peewee.TextField(default="never fetched")
    error = peewee.TextField(default="")
    entries = peewee.IntegerField(default=0)
    attempted_at = UTCDateTimeField(null=True)
    refreshed_at = UTCDateTimeField(null=True)  # the last good copy's fetch
    updated_at = UTCDateTimeField()

    class Meta:
        table_name = "calendar_feeds"


class WebhookDeliveryRow(BaseModel):
    """A Jira webhook delivery taken, by its identifier, so that a repeat starts nothing."""

    identifier = peewee.TextField(primary_key=True)
    received_at = UTCDateTimeField()

    class Meta:
        table_name = "jira_webhook_deliveries"


class CardPressRow(BaseModel):
    """A press of a card's button, answered: by Lark's event id, so that a repeat is answered
    the same and acts once. ``acts_on`` is the execution a press acts on (unique: one per
    wait), empty for one that changed nothing."""

    id = peewee.AutoField()
    event_id = peewee.TextField(unique=True)
    execution_id = peewee.BigIntegerField()
    action = peewee.CharField(max_length=16)
    outcome = peewee.CharField(max_length=16)
    acts_on = peewee.BigIntegerField(null=True, unique=True)
    operator_open_id = peewee.TextField()
    answer_json = peewee.TextField()
    pressed_at = UTCDateTimeField()

    class Meta:
        table_name = "lark_card_presses"


class ConsoleSignOutRow(BaseModel):
    """A console session signed out before it expired: refused on every replica until then."""

    session = peewee.TextField(primary_key=True)  # the session's nonce
    expires_at = UTCDateTimeField()

    class Meta:
        table_name = "console_sign_outs"


class AuditRow(BaseModel):
    """One change to the service's behaviour: who made it, how, to what, and its values
    before and after (secrets redacted). Written in the change's own transaction."""

    id = peewee.AutoField()
    at = UTCDateTimeField()
    actor = peewee.TextField()
    via = peewee.CharField(max_length=16)
    action = peewee.TextField()
    object_type = peewee.TextField()
    object_id = peewee.TextField()
    before_json = peewee.JSONField(null=True)
    after_json = peewee.JSONField(null=True)

    class Meta:
        table_name = "audit_records"


class MaintenanceWindowRow(BaseModel):
    """A maintenance window (domain/maintenance.py); ``last_end_at``: when its last occurrence
    ends, or when it was ended early, so that the current ones are read by one index."""

    id = peewee.AutoField()
    scope_json = peewee.JSONField()
    reason = peewee.TextField(default="")
    start_at = UTCDateTimeField()
    end_at = UTCDateTimeField()
    recurrence = peewee.CharField(max_length=16, default="none")  # none | daily | weekly
    until_at = UTCDateTimeField(null=True)
    effect = peewee.CharField(max_length=16)
    last_end_at = UTCDateTimeField()
    ended_at = UTCDateTimeField(null=True)
    created_at = UTCDateTimeField()

    class Meta:
        table_name = "maintenance_windows"


class BurdenEventRow(BaseModel):
    """One thing done to a person, as the burden report counts it
    (domain/burden_events.py); ``version``: the row's shape (``EVENT_VERSION``)."""

    id = peewee.AutoField()
    version = peewee.IntegerField()
    execution_id = peewee.BigIntegerField()
    rule_sequence = peewee.IntegerField()
    action_index = peewee.IntegerField()
    kind = peewee.CharField(max_length=16)
    email = peewee.TextField()
    leader = peewee.TextField(default="")
    issue_key = peewee.TextField()
    project = peewee.TextField()
    policy_id = peewee.BigIntegerField()
    policy_family_id = peewee.CharField(max_length=20)
    rotation = peewee.TextField(default="")
    members_json = peewee.JSONField(null=True)
    hours_required = peewee.BooleanField()
    open_counts_json = peewee.JSONField(null=True)
    sent_at = UTCDateTimeField()
    band = peewee.CharField(max_length=8, null=True)  # an interruption's, when it was sent
    ack_source = peewee.CharField(max_length=16, null=True)
    ack_at = UTCDateTimeField(null=True)
    ack_seconds = peewee.FloatField(null=True)  # from sent_at to ack_at

    class Meta:
        table_name = "burden_events"


class SchemaMigrationRow(BaseModel):
    version = peewee.IntegerField(primary_key=True)
    name = peewee.TextField()
    applied_at = UTCDateTimeField()

    class Meta:
        table_name = "schema_migrations"


ALL_MODELS = (
    PolicyRow,
    RuleRow,
    TriggerRow,
    ExecutionRow,
    RuleExecutionRow,
    ContextRow,
    EngineerRow,
    SchemaMigrationRow,
)


class ReplicaRow(BaseModel):
    owner = peewee.TextField(primary_key=True)  # the lease owner identity (host:pid:random)
    host = peewee.TextField()
    pid = peewee.IntegerField()
    version = peewee.TextField()
    started_at = UTCDateTimeField()
    heartbeat_at = UTCDateTimeField()
    slots = peewee.IntegerField()
    busy = peewee.IntegerField()
    parked = peewee.IntegerField()

    class Meta:
        table_name = "dispatch_replicas"


class SiteHoldRow(BaseModel):
    site = peewee.TextField(primary_key=True)  # the service: "jira"
    held_until = UTCDateTimeField()

    class Meta:
        table_name = "dispatch_site_holds"


class ShadowRow(BaseModel):
    family_id = peewee.CharField(max_length=20, primary_key=True)
    policy_id = peewee.BigIntegerField(unique=True)
    started_at = UTCDateTimeField()
    dropped = peewee.IntegerField(default=0)

    class Meta:
        table_name = "dispatch_shadows"


class ShadowDecisionRow(BaseModel):
    id = peewee.AutoField()
    policy_id = peewee.BigIntegerField()
    family_id = peewee.CharField(max_length=20)
    trigger_id = peewee.BigIntegerField()
    issue_key = peewee.TextField()
    live_execution_id = peewee.BigIntegerField()
    shadow_json = peewee.JSONField()
    live_json = peewee.JSONField(null=True)
    verdict = peewee.CharField(max_length=32, null=True)
    created_at = UTCDateTimeField()
    decided_at = UTCDateTimeField(null=True)

    class Meta:
        table_name = "dispatch_shadow_decisions"


# For the statements the repositories write out by hand (their hot paths), not built by peewee.

def time_param(value: datetime | None) -> DriverTime:
    """A time as the driver takes it for any time column (every model's time fields convert
    alike)."""
    # cast: db_value returns a peewee.Node only when given one, and this is given a datetime
    # or None.
    return cast(DriverTime, ExecutionRow.updated_at.db_value(value))


def json_param(value: Any) -> str | None:
    """A JSON column's value as the driver takes it: the text (both engines' JSON columns take
    it), or NULL."""
    return None if value is None else json.dumps(value)


def placeholders(param: str, count: int) -> str:
    """``count`` parameter marks in the engine's style (``db.param``), comma-separated: the
    values of an INSERT or the list of an IN."""
    return ", ".join([param] * count)


def array_literal(values: Iterable[Any]) -> str:
    """``values`` as a PostgreSQL array literal, for a text parameter the statement casts
    (``%s::text[]``, ``PostgresEngine.among``): each element double-quoted, its backslashes
    and double quotes escaped, as the array syntax asks. psycopg sends the text as it is; its
    own dumping of a list goes element by element in Python, CPU that a dispatch would pay for
    each list it sends (bench/README.md, the diary of people-aware dispatch)."""
    quoted = (str(value).replace("\\", "\\\\").replace('"', '\\"') for value in values)
    return "{" + ",".join(f'"{element}"' for element in quoted) + "}"
