"""The ports served by client pools: one typed pool per integration, and the factory that builds
them from the configuration.

Each typed pool is a ``ClientPool`` (actors/client_pool.py) over the matching ``integrations/``
client and implements one port of domain/ports.py (``JiraPool`` the ``Jira`` port, and so on):
one method per port method, which names the client method of the same name
(``self.call(JiraClient.load_issue, key)``, checked by mypy) and runs it on one of the pool's
actors. The batches of ``JiraSearch`` and ``read_user_ids_each`` are the exception: each item
is one call of a single-item client method (``Call.of(JiraClient.approximate_count, jql)``),
all run concurrently (``call_each``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypedDict, TypeVar

from ticket_dispatcher.actors.call_queue import Call, Settled, SiteStats
from ticket_dispatcher.actors.client_pool import ClientPool
from ticket_dispatcher.clock import Clock
from ticket_dispatcher.config import Config
from ticket_dispatcher.domain.model import Issue, JiraUser
from ticket_dispatcher.domain.ports import (
    Answer,
    DirectoryUser,
    GroupMember,
    LarkCard,
    PageResult,
    Responder,
    TriageChange,
)
from ticket_dispatcher.errors import DispatcherError
from ticket_dispatcher.integrations.call_policy import ALONE, Pacer, RateGate, SiteLimits
from ticket_dispatcher.integrations.core import CoreClient
from ticket_dispatcher.integrations.jira import JiraClient, ScreenRefusals
from ticket_dispatcher.integrations.lark import LarkClient
from ticket_dispatcher.integrations.oncall import OncallClient
from ticket_dispatcher.metrics import Metrics

T = TypeVar("T")

# One line per port method, naming the client method it runs (actors/client_pool.py). An
# iterable argument is made a tuple here, so the actor's thread never consumes the caller's.


class JiraPool(ClientPool[JiraClient]):
    """The ``Jira`` port: ``integrations.jira.JiraClient`` on the pool's actors."""

    def load_issue(self, key: str) -> Issue:
        return self.call(JiraClient.load_issue, key)

    def load_issues(self, keys: Sequence[str]) -> dict[str, Issue]:
        return self.call(JiraClient.load_issues, tuple(keys))

    def assign(self, key: str, account_id: str | None) -> None:
        self.call(JiraClient.assign, key, account_id)

    def set_l2_assignee(self, key: str, account_id: str | None) -> None:
        self.call(JiraClient.set_l2_assignee, key, account_id)

    def assign_and_label(self, key: str, account_id: str, remove_labels: Iterable[str] = (),
                         *, l2: bool = False) -> bool:
        return self.call(JiraClient.assign_and_label, key, account_id, tuple(remove_labels),
                         l2=l2)

    def edit_labels(self, key: str, add: Iterable[str] = (), remove: Iterable[str] = ()) -> None:
        self.call(JiraClient.edit_labels, key, tuple(add), tuple(remove))

    def apply_triage(self, key: str, change: TriageChange) -> None:
        self.call(JiraClient.apply_triage, key, change)

    def find_user_by_email(self, email: str) -> JiraUser | None:
        return self.call(JiraClient.find_user_by_email, email)

    def add_internal_comment(self, key: str, text: str) -> None:
        self.call(JiraClient.add_internal_comment, key, text)

    # A batch runs concurrently on the pool's actors, each call one single-item client method.

    def count_issues(self, jqls: Sequence[str]) -> list[Answer[int]]:
        return _answers(self.call_each([Call.of(JiraClient.approximate_count, jql)
                                        for jql in jqls]))

    def find_users_by_email(self, emails: Sequence[str]) -> list[Answer[JiraUser | None]]:
        return _answers(self.call_each([Call.of(JiraClient.find_user_by_email, email)
                                        for email in emails]))


def _answers(settled: list[Settled[T]]) -> list[Answer[T]]:
    """A batch's outcomes as the port answers them. An error that is no ``DispatcherError`` (a
    bug in a client) is raised, as ``call`` would raise it."""
    answers: list[Answer[T]] = []
    for value, error in settled:
        if error is None:
            answers.append(Answer(value=value))
        elif isinstance(error, DispatcherError):
            answers.append(Answer(error=error))
        else:
            raise error
    return answers


class LarkPool(ClientPool[LarkClient]):
    """The ``Messenger`` port: ``integrations.lark.LarkClient`` on the pool's actors."""

    def open_ids_by_email(self, emails: Iterable[str]) -> dict[str, str]:
        return self.call(LarkClient.open_ids_by_email, tuple(emails))

    def send_card(self, open_id: str, card: LarkCard, uuid: str) -> str:
        return self.call(LarkClient.send_card, open_id, card, uuid)

    def urgent_app(self, message_id: str, open_id: str) -> list[str]:
        return self.call(LarkClient.urgent_app, message_id, open_id)

    def read_user_ids(self, message_id: str) -> list[str]:
        return self.call(LarkClient.read_user_ids, message_id)

    def read_user_ids_each(self, message_ids: Sequence[str],
                           at_once: int | None = None) -> list[Answer[list[str]]]:
        return _answers(self.call_each([Call.of(LarkClient.read_user_ids, message_id)
                                        for message_id in message_ids], at_once))


class OncallPool(ClientPool[OncallClient]):
    """The ``OnCall`` port: ``integrations.oncall.OncallClient`` on the pool's actors."""

    def responders(self, team: str) -> list[Responder]:
        return self.call(OncallClient.responders, team)

    def page(self, email: str, title: str, message: str, issue_key: str,
             dedup_key: str) -> PageResult:
        return self.call(OncallClient.page, email, title, message, issue_key, dedup_key)


class CorePool(ClientPool[CoreClient]):
    """The ``Directory`` port: ``integrations.core.CoreClient`` on the pool's actors."""

    def group_members(self, group: str) -> list[GroupMember]:
        return self.call(CoreClient.group_members, group)

    def user(self, email: str) -> DirectoryUser | None:
        return self.call(CoreClient.user, email)

    def leader(self, email: str) -> DirectoryUser | None:
        return self.call(CoreClient.leader, email)


def _seconds(value: Any) -> float:
    return value.total_seconds() if hasattr(value, "total_seconds") else float(value)


PoolT = TypeVar("PoolT", bound=ClientPool[Any])


class _ClientTimings(TypedDict):
    """What every integration client is built with besides its config."""

    connect_timeout: float
    read_timeout: float
    clock: Clock
    sleep: Callable[[float], None]


def build_client_pools(config: Config, clock: Clock, *, metrics: Metrics, start: bool = True,
                       sleep: Callable[[float], None] = time.sleep,
                       site_limits: SiteLimits = ALONE,
                       ) -> dict[str, ClientPool[Any]]:
    """A typed pool per configured integration (``JiraPool``, ``LarkPool``, ``OncallPool``,
    ``CorePool``; a service with an empty ``base_url``, or Lark without an ``app_id``, is left
    out), started unless ``start`` is False. ``site_limits``: the Jira site's limits as
    the processes serving the database share them (actors/cluster.py)."""
    timeouts: _ClientTimings = {
        "connect_timeout": _seconds(config.integrations.connect_timeout),
        "read_timeout": _seconds(config.integrations.read_timeout),
        "clock": clock, "sleep": sleep}
    # One rate gate and budget per Jira site, shared by every Jira client actor of the process.
    jira_gate = RateGate(
        clock, lambda seconds: metrics.integration_rate_limited("jira", seconds),
        pacer=Pacer(clock, config.jira.max_calls_per_second or None, site_limits.share),
        site=site_limits,
        on_held=lambda scope, reason: metrics.integration_call_held("jira", scope, reason))
    # The projects whose edit screen refused the one edit, remembered by every Jira client.
    refusals = ScreenRefusals(clock)
    # Lark's base_url has a default, so it counts as configured only with an app id.
    factories: dict[str, tuple[bool, type[ClientPool[Any]], Callable[[], object]]] = {
        "jira": (bool(config.jira.base_url), JiraPool,
                 lambda: JiraClient(config.jira, gate=jira_gate, refusals=refusals,
                                    **timeouts)),
        "lark": (bool(config.lark.base_url and config.lark.app_id), LarkPool,
                 lambda: LarkClient(config.lark, **timeouts)),
        "oncall": (bool(config.oncall.base_url), OncallPool,
                   lambda: OncallClient(config.oncall, **timeouts)),
        "core": (bool(config.core.base_url), CorePool,
                 lambda: CoreClient(config.core, **timeouts)),
    }
    call_timeout = _ask_timeout(timeouts["connect_timeout"], timeouts["read_timeout"])
    # The queue wait gets the same bound. With the default size (an actor per execution slot and
    # trigger actor) nobody queues; with a smaller configured pool, a caller still queued after
    # the longest time a call may take is behind something truly stuck, and giving up then is
    # safe: a queued call was never made.
    def jira_last_hour() -> SiteStats:
        calls, held = jira_gate.last_hour.totals()
        return {"calls": calls, "held_seconds": round(held, 1)}

    pools = {name: pool_class(name, factory, config.client_actors, call_timeout=call_timeout,
                              queue_timeout=call_timeout, metrics=metrics,
                              last_hour=jira_last_hour if name == "jira" else None)
             for name, (configured, pool_class, factory) in factories.items() if configured}
    if start:
        for pool in pools.values():
            pool.start()
    return pools


def configured_pool(pools: Mapping[str, ClientPool[Any]], name: str,
                    kind: type[PoolT]) -> PoolT | None:
    """``build_client_pools``'s pool for the integration ``name``, whose class is ``kind``;
    None when that integration is not configured."""
    pool = pools.get(name)
    assert pool is None or isinstance(pool, kind), f"the {name} pool is a {kind.__name__}"
    return pool


def _ask_timeout(connect: float, read: float) -> float:
    """Room for a call with its token fetch, its retries and their waits (HttpClient defaults:
    2 retries of at most 10 s), so a caller gives up only when something is truly stuck; the
    HttpClient's own connect/read timeouts end a normal slow call well before."""
    return 4 * (connect + read) + 2 * 10 + 5
