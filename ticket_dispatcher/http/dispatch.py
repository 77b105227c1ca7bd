"""Trigger intake and the execution read API (docs/design.md, "The life of a trigger")."""

from __future__ import annotations

import base64
import binascii
import re
from datetime import datetime
from typing import Any, TypedDict

import falcon

from ticket_dispatcher.domain.admission import AdmissionOutcome, LockCandidate, admit
from ticket_dispatcher.domain.catalog import SOURCE
from ticket_dispatcher.domain.execution import (
    DryRun,
    ExecutionMode,
    ExecutionStatus,
    Trigger,
    TriggerStatus,
)
from ticket_dispatcher.domain.fanout import reserved_role
from ticket_dispatcher.domain.matching import lock_key
from ticket_dispatcher.domain.replay import Replay, replay_of_execution
from ticket_dispatcher.errors import Conflict, InvalidInput, NotFound, Problem, StoreUnavailable
from ticket_dispatcher.http import API_BASE
from ticket_dispatcher.http.auth import AUTOMATION, AUTOMATION_READ, OPERATOR, VIEWER
from ticket_dispatcher.http.binding import (
    MAX_ID,
    QueryParams,
    bind_object,
    flag,
    page,
    paging,
    query_choice,
    query_int,
    read_json,
)
from ticket_dispatcher.http.changes import author_of
from ticket_dispatcher.http.contexts import checked_issue_key
from ticket_dispatcher.http.errors import ApiError
from ticket_dispatcher.http.ratelimit import TokenBuckets, retry_after_header
from ticket_dispatcher.http.services import Services
from ticket_dispatcher.store import Store
from ticket_dispatcher.store.audit import Author
from ticket_dispatcher.timeutil import parse_business_now, parse_rfc3339, to_utc

TRIGGER_BODY_LIMIT = 65536  # triggers are always capped at 64 KiB
# The intake, the list filter and policy validation (source_in) judge a source by one rule.
_SOURCE_PROBLEM = f"must be {SOURCE.what}"


def _bind_trigger(raw: Any) -> tuple[str, str, int | None, DryRun | None]:
    body = bind_object(raw, required={"source": str, "input": dict},
                       optional={"policy_id": int, "dryrun": dict})
    problems: list[Problem] = []
    if not SOURCE(body["source"]):
        problems.append(Problem("source", _SOURCE_PROBLEM))
    trigger_input = bind_object(body["input"], required={"issue_key": str}, optional={},
                                path="input")
    try:
        issue_key = checked_issue_key(trigger_input["issue_key"], "input.issue_key")
    except InvalidInput as exc:
        problems.extend(exc.problems)
        issue_key = ""
    dryrun = None if body.get("dryrun") is None else _bind_dryrun(body["dryrun"], problems)
    policy_id = body.get("policy_id")
    if policy_id is not None and not 0 < policy_id <= MAX_ID:
        problems.append(Problem("policy_id", "must be a positive policy id"))
    if policy_id is not None and reserved_role(body["source"]):
        problems.append(Problem("policy_id", "a reserved source is routed by policy matching; "
                                             "it cannot name a policy"))
    if problems:
        raise InvalidInput("the trigger is not valid", problems)
    return body["source"], issue_key, policy_id, dryrun


def _bind_dryrun(raw: dict, problems: list[Problem]) -> DryRun:
    dryrun = bind_object(raw, required={}, optional={"overwrite_data": dict}, path="dryrun")
    overwrite = bind_object(dryrun.get("overwrite_data") or {}, required={},
                            optional={"now": str}, path="dryrun.overwrite_data")
    now = overwrite.get("now")
    if now is not None:
        try:
            parse_business_now(now)
        except ValueError as exc:
            problems.append(Problem("dryrun.overwrite_data.now", str(exc)))
    return {"overwrite_data": {"now": now} if "now" in overwrite else {}}


# --- the trigger list: filters and its cursor -------------------------------------------------

# A cursor is "t1:<the last id of the page>" in unpadded base64url: opaque to clients, so the
# key it pages by can change without breaking them (the "t1" names this version of it).
_CURSOR_TEXT = re.compile(r"[A-Za-z0-9_-]{1,64}")
_CURSOR = re.compile(r"t1:([1-9][0-9]{0,18})")


def encode_cursor(last_id: int) -> str:
    return base64.urlsafe_b64encode(f"t1:{last_id}".encode()).decode().rstrip("=")


def decode_cursor(text: str) -> int:
    """The id a page continues below; ``InvalidInput`` for anything this server did not give
    out (a cursor is never parsed leniently: a wrong page would look like a right one)."""
    decoded = None
    if _CURSOR_TEXT.fullmatch(text):
        try:
            raw = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_",
                                   validate=True)
            decoded = _CURSOR.fullmatch(raw.decode("ascii"))
        except (binascii.Error, UnicodeDecodeError):
            decoded = None
    if decoded is None or int(decoded[1]) > MAX_ID:
        raise InvalidInput("query parameter cursor is not a cursor this server gave out; "
                           "start again without it", [Problem("cursor", "is not a valid "
                                                                       "cursor")])
    return int(decoded[1])


def query_time(req: QueryParams, name: str) -> datetime | None:
    text = req.get_param(name)
    if text is None:
        return None
    try:
        # A time beyond year 9999 or before year 1 in UTC cannot be compared: refused here.
        return to_utc(parse_rfc3339(text))
    except (ValueError, OverflowError):
        pass
    message = ("must be an RFC 3339 time with an offset, like 2026-12-01T02:00:00Z (in a URL, "
               "write the + of an offset as %2B)")
    raise InvalidInput(f"query parameter {name} {message}", [Problem(name, message)])


class TriggerFilters(TypedDict):
    """``TriggerRepository.page``'s keywords."""

    status: TriggerStatus | None
    retrying: bool
    source: str | None
    issue_key: str | None
    created_after: datetime | None
    created_before: datetime | None
    execution_failed: bool | None
    before_id: int | None
    limit: int


# The list's ``status`` filter: a stored status, or ``retrying``, the ``pending`` triggers that
# wait for their next try after a passing fault (their own status stays ``pending``).
RETRYING = "retrying"
STATUS_FILTERS = (*TriggerStatus, RETRYING)


def trigger_filters(req: QueryParams) -> TriggerFilters:
    """The ``GET /dispatch/triggers`` filters as ``TriggerRepository.page`` keywords; every
    bad value is a 400 naming its parameter."""
    if req.get_param("offset") is not None:  # a client paging by offset would loop forever
        raise InvalidInput("this list pages with cursor, not offset: pass the next_cursor of "
                           "the previous page", [Problem("offset", "use cursor")])
    source, issue_key = req.get_param("source"), req.get_param("issue_key")
    if source is not None and not SOURCE(source):
        raise InvalidInput(f"query parameter source {_SOURCE_PROBLEM}",
                           [Problem("source", _SOURCE_PROBLEM)])
    after, before = query_time(req, "created_after"), query_time(req, "created_before")
    if after is not None and before is not None and after >= before:
        raise InvalidInput("created_after must be earlier than created_before",
                           [Problem("created_before", "must be later than created_after")])
    cursor = req.get_param("cursor")
    retrying = req.get_param("status") == RETRYING
    return {
        "status": None if retrying else query_choice(
            req, "status", TriggerStatus, "one of " + ", ".join(STATUS_FILTERS)),
        "retrying": retrying,
        "source": source,
        "issue_key": checked_issue_key(issue_key) if issue_key is not None else None,
        "created_after": after, "created_before": before,
        "execution_failed": query_choice(req, "execution_failed", flag, "true or false"),
        "before_id": decode_cursor(cursor) if cursor is not None else None,
        "limit": query_int(req, "limit", default=50, minimum=1, maximum=200),
    }


def check_explicit_policy(store: Store, policy_id: int, issue_key: str, *, live: bool) -> None:
    """A trigger naming ``policy_id`` is refused before it is stored: 400 when the policy does
    not exist, 409 when a live execution holds its lock key for the issue. The pool decides
    again when it creates the execution; this answers early."""
    try:
        policy = store.policies.get(policy_id)
    except NotFound:
        raise InvalidInput(f"policy {policy_id} does not exist",
                           [Problem("policy_id", "no such policy")]) from None
    if not live:
        return  # dry-runs are never excluded
    live_lock_key = lock_key(policy, issue_key)
    candidate = LockCandidate(policy_id, issue_key, live_lock_key)
    admission = admit([candidate], store.executions.busy_lock_keys([live_lock_key]),
                      explicit=True)
    if admission.outcome is AdmissionOutcome.CONFLICT:
        raise Conflict(admission.reason)


def post_replay(services: Services, replay: Replay, by: Author, of: tuple[str, int]) -> Trigger:
    """Post the trigger ``replay`` describes, as ``POST /dispatch/triggers`` would, checks
    included, and record that ``by`` replayed ``of`` (``("execution", 7)``) in the
    transaction that stores the new trigger; the console's replays and the API's go through
    here."""
    object_type, object_id = of

    def audit(store: Store, trigger: Trigger, now: datetime) -> None:
        store.audit.record(by, f"{object_type}.replayed", object_type, str(object_id),
                           after={"replay_trigger_id": trigger.id}, now=now)

    store = services.store
    with store.connection():
        if replay.policy_id is not None:
            if not store.policies.exists(replay.policy_id):
                raise Conflict(f"policy {replay.policy_id} no longer exists; post a trigger "
                               "for another policy instead")
            check_explicit_policy(store, replay.policy_id, replay.issue_key,
                                  live=replay.dryrun is None)
        return services.running().accept_trigger(
            replay.source, replay.issue_key, policy_id=replay.policy_id, dryrun=replay.dryrun,
            audit=audit)


# The trigger intake counter's outcome of a refused request (docs/operations.md, "Metrics").
_INTAKE_OUTCOMES = {429: "rate_limited", 503: "unavailable"}


class TriggerCollection:
    """``POST /dispatch/triggers``: 202 once the pending trigger is committed. While the
    database is unavailable: 503 with ``Retry-After``, nothing stored, counted as
    ``unavailable``.

    ``GET /dispatch/triggers`` (viewer): triggers newest first, filtered, a page at a time by
    an opaque cursor: ``{"items": [...], "next_cursor": "..." | null}``. No ``total``: with a
    cursor it would cost a COUNT over the whole filtered history on every page, and be stale
    by the next one; follow ``next_cursor`` until it is null."""

    roles = {"POST": AUTOMATION, "GET": VIEWER}
    # Takes its connection itself, after the rate limit and the body are judged, so a 429 or
    # 400 costs none and a database failure is counted in the intake metric (http/middleware.py
    # would refuse the request before the handler could count it). A GET takes one in its
    # single repository call, after its parameters are judged.
    uses_database = False

    def __init__(self, services: Services) -> None:
        self._services = services
        rate = services.config.http.trigger_rate
        self._buckets = TokenBuckets(rate, services.config.http.trigger_burst,
                                     services.clock.now)

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        intake = {"source": "unknown", "outcome": "invalid"}  # before the body is read
        try:
            self._accept(req, resp, intake)
            intake["outcome"] = "accepted"
        except ApiError as exc:
            intake["outcome"] = _INTAKE_OUTCOMES.get(exc.status_code, "invalid")
            raise
        except Conflict:
            intake["outcome"] = "conflict"
            raise
        except StoreUnavailable:
            intake["outcome"] = "unavailable"
            raise
        finally:
            self._services.metrics.trigger_received(intake["source"], intake["outcome"])

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        items, following = self._services.store.triggers.page(**trigger_filters(req))
        resp.media = {"items": [trigger.to_json() for trigger in items],
                      "next_cursor": encode_cursor(following) if following else None}

    def _accept(self, req: falcon.Request, resp: falcon.Response, intake: dict) -> None:
        wait = self._buckets.take(req.context.api_key_name or req.remote_addr or "")
        if wait:
            raise ApiError(falcon.HTTP_429, "too many triggers from this key; slow down",
                           headers={"Retry-After": retry_after_header(wait)})
        limit = min(TRIGGER_BODY_LIMIT, self._services.max_body_bytes)
        source, issue_key, policy_id, dryrun = _bind_trigger(
            read_json(req, limit, max_depth=self._services.max_json_depth))
        intake["source"] = source
        with self._services.store.connection():  # one check-out for the checks and the insert
            if policy_id is not None:
                check_explicit_policy(self._services.store, policy_id, issue_key,
                                      live=dryrun is None)
            trigger = self._services.running().accept_trigger(
                source, issue_key, policy_id=policy_id, dryrun=dryrun)
        resp.status = falcon.HTTP_202
        resp.location = f"{API_BASE}/dispatch/triggers/{trigger.id}"
        resp.media = trigger.to_json()

class TriggerItem:
    roles = {"GET": AUTOMATION_READ}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_get(self, req: falcon.Request, resp: falcon.Response, trigger_id: int) -> None:
        resp.media = self._services.store.triggers.get(trigger_id).to_json()


class ExecutionFilters(TypedDict):
    """``ExecutionRepository.page``'s keywords, paging aside."""

    issue_key: str | None
    status: ExecutionStatus | None
    mode: ExecutionMode | None
    policy_id: int | None
    trigger_id: int | None


def execution_filters(req: QueryParams) -> ExecutionFilters:
    """The ``GET /dispatch/executions`` filters as ``ExecutionRepository.page`` keywords; every
    bad value is a 400 naming its parameter."""
    issue_key = req.get_param("issue_key")
    return {
        "issue_key": checked_issue_key(issue_key) if issue_key else None,
        "status": query_choice(req, "status", ExecutionStatus,
                               "one of " + ", ".join(ExecutionStatus)),
        "mode": query_choice(req, "mode", ExecutionMode, "live or dry_run"),
        "policy_id": query_int(req, "policy_id", default=None, minimum=1, maximum=MAX_ID),
        "trigger_id": query_int(req, "trigger_id", default=None, minimum=1, maximum=MAX_ID),
    }


class ExecutionCollection:
    roles = {"GET": VIEWER}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        limit, offset = paging(req)
        items, total = self._services.store.executions.page(
            **execution_filters(req), limit=limit, offset=offset)
        resp.media = page(items, total)


class ExecutionItem:
    roles = {"GET": VIEWER}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_get(self, req: falcon.Request, resp: falcon.Response, execution_id: int) -> None:
        resp.media = self._services.store.executions.get(execution_id).to_json()


class ExecutionReplay:
    """``POST /dispatch/executions/{id}/replay`` (operator): a failed execution's trigger
    posted again on the live issue, for the execution's policy; 202 with the new trigger's id.
    409 for an execution that did not fail."""

    roles = {"POST": OPERATOR}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_post(self, req: falcon.Request, resp: falcon.Response, execution_id: int) -> None:
        store = self._services.store
        execution = store.executions.get(execution_id)
        replay = replay_of_execution(execution, store.triggers.get(execution.trigger_id))
        trigger = post_replay(self._services, replay, author_of(req),
                              ("execution", execution_id))
        resp.status = falcon.HTTP_202
        resp.location = f"{API_BASE}/dispatch/triggers/{trigger.id}"
        resp.media = {"trigger_id": trigger.id}

