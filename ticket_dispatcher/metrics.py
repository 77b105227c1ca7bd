"""The service's Prometheus metrics, exposed by ``GET /metrics`` (docs/operations.md, "Metrics").

One ``Metrics`` per service, on its own ``CollectorRegistry`` (never the global one), so two
services in one test process never share a sample. Everything here is written by the layer
that sees the fact happen:

- ``execution_finished``: once, from the behavior, right after the save that made an execution
  terminal (a recovered terminal execution is never saved terminal again, so never counted
  twice); the notification action, ACK and workflow families count live executions only;
- ``interrupted``: the pages and App-urgent messages of a finished live workflow, as its burden
  rows hold them (store/burden.py), right after ``execution_finished``;
- ``call_settled``: each card, App-urgent and page call of a live workflow, right after the
  checkpoint that saved its result (the ``NotificationCalls`` port, wired by the runtime), so
  the prompt alerts need not wait for the terminal families;
- ``backlog``: the job that reads the database every 60 s (first 1 s after the start); a failed
  read keeps the whole previous sample and counts the failure;
- the intake, trigger results, pool gauges and integration calls, as they happen;
- ``database_available`` and ``store_failed``: the store's health (``Metrics`` is a
  ``StoreHealthListener``; service.py subscribes it), on every database failure and at the
  start and end of each outage;
- ``calendar_feed_refreshed``: each refresh of a calendar feed, by the refresher
  (calendars/refresher.py); the feeds' ages are read from it at each scrape
  (``calendar_feeds``).

No label ever carries an issue key or an ID; ``source`` is capped at ``MAX_SOURCES``
distinct values (later ones are ``other``), since any caller may name a source.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ticket_dispatcher.domain.catalog import NOTIFICATION_ROLES
from ticket_dispatcher.domain.execution import Execution, ExecutionMode
from ticket_dispatcher.domain.observations import summarize

log = logging.getLogger(__name__)

PREFIX = "ticket_manager_dispatch_"
MAX_SOURCES = 32
MODES = tuple(mode.value for mode in ExecutionMode)
TRIGGER_STATUSES = ("pending", "processing")
# ACK waits last seconds to the whole ack_timeout (minutes); workflows up to three of them.
WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)
WORKFLOW_BUCKETS = (1, 10, 60, 300, 600, 1200, 1800, 3600, 7200, 14400)
CALL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
# The kinds of StoreUnavailable (StoreFaultKind in store/faults.py; a test keeps the two
# equal): metrics may not import the store, and every series exists from the first scrape.
STORE_ERROR_KINDS = ("connection", "locked", "timeout", "serialization", "too_many_connections",
                     "pool_exhausted", "other")
# assignment_calls_total: the calls counted as they happen, and their results.
CALLS = ("card", "urgent", "page")
CALL_RESULTS = ("succeeded", "failed", "unknown")
PAGE_ATTEMPTS = ("1", "2", "3")


def _call_series() -> list[tuple[str, str, str, str]]:
    """Every ``assignment_calls_total`` series that exists from the start: each call and
    result for each role, pages for the attempts 1–3 the docs describe (a fourth attempt
    still counts, its series born at its first call)."""
    roles = [role.role for role in NOTIFICATION_ROLES]
    attempts = {"card": ("",), "urgent": ("",), "page": PAGE_ATTEMPTS}
    return [(call, result, role, attempt) for call in CALLS for result in CALL_RESULTS
            for role in roles for attempt in attempts[call]]


FEED_AGE = PREFIX + "calendar_feed_age_seconds"
FEED_RESULTS = ("ok", "failed")


def rotation_label(rotation: str) -> str:
    """A rotation as a metric's label: ``group:sre`` as it is, ``users:…`` (emails) as
    ``users:`` and the first 8 hex digits of their SHA-256, "none" when there is none."""
    if rotation.startswith("users:"):
        return "users:" + hashlib.sha256(rotation.encode()).hexdigest()[:8]
    return rotation or "none"


class _FeedAges(Collector):
    """``calendar_feed_age_seconds``, computed when scraped from what ``ages`` says then: feed
    name → seconds since its last good copy, None for a feed without one (+Inf)."""

    def __init__(self) -> None:
        self.ages: Callable[[], Mapping[str, float | None]] = dict

    def collect(self) -> Iterator[Metric]:
        family = self.describe_family()
        try:
            ages = self.ages()
        except Exception:  # one family must never fail the whole scrape
            log.exception("reading the calendar feeds' ages failed")
            ages = {}
        for feed, age in sorted(ages.items()):
            family.add_metric([feed], math.inf if age is None else age)
        yield family

    def describe(self) -> Iterator[Metric]:
        yield self.describe_family()

    @staticmethod
    def describe_family() -> GaugeMetricFamily:
        return GaugeMetricFamily(FEED_AGE, "Seconds since each calendar feed's last good "
                                 "copy; +Inf while it has none", labels=("feed",))


@dataclass(frozen=True)
class Backlog:
    """One sample of the database's backlog: counts and oldest ages in seconds."""

    created: dict[str, tuple[int, float]]  # mode → (count, oldest age)
    executing: dict[str, tuple[int, float]]
    triggers: dict[str, tuple[int, float]]  # status → (count, oldest age)
    # (current maintenance windows, those current for longer than maintenance.max_duration)
    maintenance: tuple[int, int] = (0, 0)


class Metrics:
    def __init__(self, version: str = "", *, mode: str = "single"):
        """``mode`` is the process's ``cluster.mode``, ``single`` or ``shared`` (the service
        passes it; metrics does not read the configuration)."""
        self.registry = CollectorRegistry(auto_describe=True)
        self._sources: set[str] = set()
        self._lock = threading.Lock()

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(PREFIX + name, doc, labels, registry=self.registry)

        def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
            return Gauge(PREFIX + name, doc, labels, registry=self.registry)

        def histogram(name: str, doc: str, labels: tuple[str, ...],
                      buckets: Sequence[float]) -> Histogram:
            return Histogram(PREFIX + name, doc, labels, buckets=buckets, registry=self.registry)

        # -- notification families and backlog gauges -----------------------------------------
        self.events = counter("assignment_notification_events", "Notification warnings and "
                              "escalations of finished live executions", ("event",))
        self.actions = counter("assignment_action", "Results of card, App-urgent, page and "
                               "leader escalation actions", ("action", "result", "role",
                                                             "attempt"))
        self.call_results = counter("assignment_calls", "Card, App-urgent and page calls "
                                    "of live notification workflows, counted when their "
                                    "result is saved", ("call", "result", "role", "attempt"))
        self.acks = counter("assignment_ack", "ACK guard outcomes by attempt "
                            "(0 = before App-urgent)", ("outcome", "role", "attempt"))
        self.ack_wait = histogram("assignment_ack_wait_seconds", "Time from the start of a "
                                  "wait to its ACK guard outcome", ("outcome", "role", "attempt"),
                                  WAIT_BUCKETS)
        self.workflow = histogram("assignment_workflow_duration_seconds", "Notification "
                                  "execution from creation to terminal", ("outcome", "role"),
                                  WORKFLOW_BUCKETS)
        self.interruptions = counter("interruptions", "Pages and App-urgent messages of "
                                     "finished live notification workflows, by the rotation of "
                                     "the person's assignment and the band of the moment each "
                                     "was sent in their hours (business, off, sleep)",
                                     ("rotation", "band"))
        self.created = gauge("created_executions", "Executions created, not yet executing",
                             ("mode",))
        self.created_age = gauge("oldest_created_execution_age_seconds", "Age of the oldest "
                                 "created execution", ("mode",))
        self.executing = gauge("executing_executions", "Executions executing (running or "
                               "parked)", ("mode",))
        self.executing_age = gauge("oldest_executing_execution_age_seconds", "Time since the "
                                   "oldest executing execution was last saved", ("mode",))
        self.maintenance_windows = gauge("maintenance_windows", "Maintenance windows current "
                                         "now")
        self.maintenance_overdue = gauge("maintenance_windows_overdue", "Maintenance windows "
                                         "current for longer than maintenance.max_duration")
        self.triggers = gauge("triggers", "Open triggers, deferred ones included", ("status",))
        self.trigger_age = gauge("oldest_trigger_age_seconds", "Age of the oldest open trigger",
                                 ("status",))
        # -- intake, outcomes, pool, integrations, store, instance ----------------------------
        self.intake = counter("trigger_intake", "Trigger requests by source and outcome",
                              ("source", "outcome"))
        self.webhooks = counter("jira_webhooks", "Jira webhook deliveries by event and outcome: "
                                "accepted, duplicate, ignored, unauthorized, rate_limited, "
                                "invalid, too_large, unavailable", ("event", "outcome"))
        self.card_presses = counter("lark_card_presses", "Presses of the notification cards' "
                                    "buttons by action (ack, escalate, unknown) and outcome: "
                                    "acknowledged, escalated, not_yours, ended, duplicate, "
                                    "unauthorized, invalid, too_large, rate_limited, "
                                    "not_configured, unavailable", ("action", "outcome"))
        self.trigger_results = counter("trigger_results", "Triggers processed, by outcome",
                                       ("outcome",))
        self.intake_priority = counter("trigger_intake_priority_seconds", "Time trigger "
                                       "actors held back their next trigger while trigger "
                                       "requests were being accepted")
        self.outcomes = counter("execution_outcomes", "Finished executions by policy and "
                                "failure code", ("mode", "status", "failure_code", "policy"))
        self.pool_slots = gauge("pool_slots", "Execution slots")
        self.pool_busy = gauge("pool_busy", "Execution slots in use")
        self.pool_queued = gauge("pool_queued", "Executions waiting for a slot")
        self.pool_parked = gauge("pool_parked", "Executions parked until their wake_at")
        self.lane_queued = gauge("lane_queued", "Work waiting in its lane: triggers for a "
                                 "trigger actor, executions for a slot", ("queue", "lane"))
        # What each queue's lanes were last set to: the pool and the trigger router report
        # their lanes after every message, and most leave them as they were. Each queue is
        # reported from one thread (or under one lock), so its entries need no lock.
        self._lanes_reported: dict[tuple[str, str], int] = {}
        self.calls = histogram("integration_call_duration_seconds", "Integration calls by "
                               "client, operation and outcome", ("client", "operation",
                                                                 "outcome"), CALL_BUCKETS)
        self.rate_limited = counter("integration_rate_limited_seconds", "Time each "
                                    "integration's calls were held back because the service "
                                    "answered 429 with Retry-After", ("client",))
        self.calls_held = counter("integration_calls_held", "Integration calls held back by a "
                                  "rate limit (waited, or refused unsent), by the limit's scope "
                                  "(all, endpoint, issue) and RateLimit-Reason",
                                  ("client", "scope", "reason"))
        self.retries = counter("transient_retries", "Work put off for a passing fault of a "
                               "service (no answer, a failed connection, 429, 5xx) and tried "
                               "again later: a trigger's issue load, an execution's load or "
                               "write", ("work", "cause"))
        self.queue_wait = histogram("client_queue_wait_seconds", "Time a call waited for a "
                                    "free client actor", ("client",), CALL_BUCKETS)
        self.shadow = counter("shadow_decisions", "Shadow decisions by policy family and "
                              "result: agreed, differed, or dropped (not evaluated: busy)",
                              ("family", "result"))
        self.ack_looks = counter("ack_watch_looks", "Looks of the ACK watcher at parked page "
                                 "waits by result: parked (nothing to decide), woken (the "
                                 "guard had something to say), deadline, gone (the wait had "
                                 "moved on)", ("result",))
        self.ack_watched = gauge("ack_watch_waits", "Parked page waits the ACK watcher "
                                 "watches")
        self.ack_round = gauge("ack_watch_round_seconds", "How long the ACK watcher takes to "
                               "look once at every wait it watches at ack_watch."
                               "looks_per_second (0: no limit); a wait's looks are this far "
                               "apart when that is longer than its poll_interval")
        self.job_failures = counter("metrics_job_failures", "Failed backlog samples")
        self.database_up = gauge("database_up", "1 while the database answers, 0 from the "
                                 "first failure of an outage to the next success")
        self.database_up.set(1)  # until the store says otherwise (it does on subscription)
        self.store_errors = counter("store_errors", "Database failures (StoreUnavailable) by "
                                    "kind", ("kind",))
        self.feed_refreshes = counter("calendar_feed_refreshes", "Refreshes of each calendar "
                                      "feed by result: ok (its time off replaced) or failed "
                                      "(the last good copy kept)", ("feed", "result"))
        self._feed_ages = _FeedAges()
        self.registry.register(self._feed_ages)
        for kind in STORE_ERROR_KINDS:
            self.store_errors.labels(kind=kind)
        # mode: a single-mode process must run alone, shared replicas are meant to be several;
        # the alert on more than one process counts the single ones only (docs/operations.md).
        self.instance = gauge("instance_info", "1 per running process", ("version", "mode"))
        self.instance.labels(version=version, mode=mode).set(1)
        for execution_mode in MODES:  # every series exists from the first scrape, at 0
            for family in (self.created, self.created_age, self.executing, self.executing_age):
                family.labels(mode=execution_mode)
        for status in TRIGGER_STATUSES:
            self.triggers.labels(status=status)
            self.trigger_age.labels(status=status)
        # At 0 from the first scrape, so increase() sees the very first failed call (a series
        # born at 1 would show no increase, and the prompt alerts would miss it).
        for call, result, role, attempt in _call_series():
            self.call_results.labels(call=call, result=result, role=role, attempt=attempt)

    # -- writers ------------------------------------------------------------------------------

    def execution_finished(self, execution: Execution, policy: str) -> None:
        self.outcomes.labels(mode=execution.mode.value, status=execution.status.value,
                             failure_code=execution.failure_code, policy=policy).inc()
        if execution.mode is not ExecutionMode.LIVE:
            return  # dry-runs never pollute the notification families
        summary = summarize(execution)
        if summary is None:
            return
        role = summary.role
        for action, result, attempt in summary.actions:
            self.actions.labels(action=action, result=result, role=role, attempt=attempt).inc()
        for event in summary.events:
            self.events.labels(event=event).inc()
        for ack in summary.acks:
            self.acks.labels(outcome=ack.outcome, role=role, attempt=ack.attempt).inc()
            if ack.wait_seconds is not None:
                self.ack_wait.labels(outcome=ack.outcome, role=role,
                                     attempt=ack.attempt).observe(ack.wait_seconds)
        if summary.workflow_seconds is not None:
            self.workflow.labels(outcome=summary.workflow_outcome,
                                 role=role).observe(summary.workflow_seconds)

    def interrupted(self, bands: Sequence[tuple[str, str]]) -> None:
        """The interruptions of one finished workflow: (rotation, band) each. No label names
        a person: a ``users`` receiver, which lists emails, is named by a digest of them."""
        for rotation, band in bands:
            self.interruptions.labels(rotation=rotation_label(rotation), band=band).inc()

    def call_settled(self, call: str, result: str, role: str, attempt: str) -> None:
        """The ``NotificationCalls`` port (domain/ports.py): one card, urgent or page call
        whose result was just saved; never raises into the action that made it."""
        try:
            self.call_results.labels(call=call, result=result, role=role,
                                     attempt=attempt).inc()
        except Exception:  # counting must never change how a notification goes on
            log.exception("counting a notification call failed")

    def backlog(self, sample: Backlog) -> None:
        """Replace the whole sample at once (the job computed all of it first)."""
        for mode in MODES:
            count, age = sample.created.get(mode, (0, 0.0))
            self.created.labels(mode=mode).set(count)
            self.created_age.labels(mode=mode).set(age)
            count, age = sample.executing.get(mode, (0, 0.0))
            self.executing.labels(mode=mode).set(count)
            self.executing_age.labels(mode=mode).set(age)
        self.maintenance_windows.set(sample.maintenance[0])
        self.maintenance_overdue.set(sample.maintenance[1])
        for status in TRIGGER_STATUSES:
            count, age = sample.triggers.get(status, (0, 0.0))
            self.triggers.labels(status=status).set(count)
            self.trigger_age.labels(status=status).set(age)

    def backlog_failed(self) -> None:
        self.job_failures.inc()

    def trigger_received(self, source: str, outcome: str) -> None:
        self.intake.labels(source=self._source(source), outcome=outcome).inc()

    def webhook_received(self, event: str, outcome: str) -> None:
        """``event``: one this service takes, "other" or "unknown" (never the body's text)."""
        self.webhooks.labels(event=event, outcome=outcome).inc()

    def card_press(self, action: str, outcome: str) -> None:
        """``action``: ack, escalate, or unknown (never the body's text)."""
        self.card_presses.labels(action=action, outcome=outcome).inc()

    def trigger_processed(self, outcome: str) -> None:
        self.trigger_results.labels(outcome=outcome).inc()

    def trigger_held(self, seconds: float) -> None:
        self.intake_priority.inc(seconds)

    def shadow_decision(self, family: str, result: str) -> None:
        """``result``: agreed, differed or dropped. A family ID, never an issue key."""
        self.shadow.labels(family=family, result=result).inc()

    def ack_looks_counted(self, result: str, count: int = 1) -> None:
        if count:
            self.ack_looks.labels(result).inc(count)

    def ack_watch(self, watched: int, round_: timedelta) -> None:
        self.ack_watched.set(watched)
        self.ack_round.set(round_.total_seconds())

    def pool(self, *, slots: int, busy: int, queued: int, parked: int) -> None:
        self.pool_slots.set(slots)
        self.pool_busy.set(busy)
        self.pool_queued.set(queued)
        self.pool_parked.set(parked)

    def lanes(self, queue: str, lengths: dict[str, int]) -> None:
        """``queue``: triggers or executions; ``lengths``: lane → how many wait in it."""
        reported = self._lanes_reported
        for lane, count in lengths.items():
            if reported.get((queue, lane)) != count:
                reported[(queue, lane)] = count
                self.lane_queued.labels(queue=queue, lane=lane).set(count)

    def integration_call(self, client: str, operation: str, outcome: str,
                         seconds: float) -> None:
        self.calls.labels(client=client, operation=operation, outcome=outcome).observe(seconds)

    def integration_rate_limited(self, client: str, seconds: float) -> None:
        self.rate_limited.labels(client=client).inc(seconds)

    def integration_call_held(self, client: str, scope: str, reason: str) -> None:
        self.calls_held.labels(client=client, scope=scope, reason=reason).inc()

    def passing_fault_retry(self, work: str, cause: str) -> None:
        """``work``: trigger, execution_load or execution_write; ``cause``: rate_limited,
        server_error, no_answer or connection (``errors.FaultCause``)."""
        self.retries.labels(work=work, cause=cause).inc()

    def client_queue_wait(self, client: str, seconds: float) -> None:
        self.queue_wait.labels(client=client).observe(seconds)

    def database_available(self, available: bool) -> None:
        self.database_up.set(1 if available else 0)

    def store_failed(self, kind: str) -> None:
        self.store_errors.labels(kind=kind if kind in STORE_ERROR_KINDS else "other").inc()

    def calendar_feeds(self, feeds: Sequence[str],
                       ages: Callable[[], Mapping[str, float | None]]) -> None:
        """The configured calendar feeds: their refresh counters exist at 0 from now on, and
        each scrape reads their ages from ``ages`` (feed → seconds since its last good copy,
        None without one; cheap and never raising: it is called on the scrape's thread)."""
        for feed in feeds:
            for result in FEED_RESULTS:
                self.feed_refreshes.labels(feed=feed, result=result)
        self._feed_ages.ages = ages

    def calendar_feed_refreshed(self, feed: str, ok: bool) -> None:
        self.feed_refreshes.labels(feed=feed, result="ok" if ok else "failed").inc()

    # -- reading ------------------------------------------------------------------------------

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    def _source(self, source: str) -> str:
        with self._lock:
            if source in self._sources or len(self._sources) < MAX_SOURCES:
                self._sources.add(source)
                return source
        return "other"
