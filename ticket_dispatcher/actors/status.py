"""What ``GET /admin/actors`` shows of the runtime, as typed records: the runtime builds a
``RuntimeStatus`` from what each part reports (the pool's ``PoolView``: actors/messages.py;
the client pools' ``ClientStats``: actors/call_queue.py), and the HTTP layer writes it out as
JSON unchanged."""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

from ticket_dispatcher.actors.call_queue import ClientStats
from ticket_dispatcher.actors.lanes import LaneView
from ticket_dispatcher.actors.messages import PoolFigures, RunningView


class SupervisorView(TypedDict):
    alive: bool
    recovered: bool  # boot recovery has handed every recovered execution to the pool
    in_flight: int  # messages told and not yet handled


class SchedulerView(TypedDict):
    timers: int
    next_at: str | None


class LeasesView(TypedDict):
    owner: str
    heartbeat_seconds: float
    duration_seconds: float


class AckWatchView(TypedDict):
    watched: int
    round_seconds: float
    looks_per_second: float


class ClusterView(TypedDict):
    mode: str
    draining: bool


class ReplicaView(TypedDict):
    """A process serving the database, as its last heartbeat left it."""

    owner: str
    self: bool  # this process
    host: str
    pid: int
    version: str
    started_at: str | None
    last_heartbeat: str | None
    alive: bool
    slots: int
    busy: int
    parked: int


class StoreUnreadable(TypedDict):
    """In place of what the store holds, while the database cannot be read."""

    unavailable: str


class WaitingIn(TypedDict, total=False):
    """The action a parked execution waits in, and its ACK wait's attempt and deadline (or
    the issue load it retries and how many loads failed)."""

    action: str
    attempt: int | None
    deadline: str | None


class ParkedExecutionView(TypedDict):
    """A parked execution as an operator wants it: what it waits in, and for what; or, while
    the database cannot be read, what the pool knows and ``details``."""

    execution_id: int
    wake_at: str | None
    issue_key: NotRequired[str]
    action: NotRequired[str]
    attempt: NotRequired[int | None]
    deadline: NotRequired[str | None]
    details: NotRequired[str]


class TriggerLeaseView(TypedDict):
    trigger_id: int
    epoch: int
    expires_at: str | None


class TriggerActorsView(TypedDict):
    """The trigger actors: how many, how busy, what waits for them and what they hold."""

    actors: int
    busy: int
    queue_length: int
    lanes: dict[str, LaneView]
    database_waits: int
    leases: list[TriggerLeaseView]
    reclaimed_total: int
    waiting_for_intake: int
    alive: int


class Unconfigured(TypedDict):
    """An integration served by no client pool: ``configured`` False when not configured at
    all, True for any other port (a test fake)."""

    configured: bool


ClientView = ClientStats | Unconfigured
Integration = Literal["jira", "lark", "oncall", "core"]


class RetriesView(TypedDict):
    """Work waiting to be tried again: for the database (in this process's memory), and
    for Jira (from the database: None while it cannot be read)."""

    database_waits: int
    jira_retries: int | None


class RuntimeStatus(TypedDict):
    supervisor: SupervisorView
    scheduler: SchedulerView
    leases: LeasesView
    pool: PoolFigures
    executions: list[RunningView]
    parked_executions: list[ParkedExecutionView]
    ack_watch: AckWatchView
    cluster: ClusterView
    replicas: list[ReplicaView] | StoreUnreadable
    trigger_actors: TriggerActorsView
    retries: RetriesView
    clients: dict[str, ClientView]
