"""The chaos checker finds each broken promise in a history, and none in a clean one.

Every test writes a small run directory into ``tmp_path`` (``RunDirectory``: the files of the
soak's contract) and reads it back with ``check``. The shapes are those a real ``serve
--sandbox`` gave: the execution JSON of ``GET /dispatch/executions`` (an assign round robin,
the notification workflow's card, App-urgent, page and ACK), the triggers, and the calls the
fakes record (tests/chaos/fakes.py). ``clean`` is a history with a little of everything that
must pass, faults included; each test adds one wrong thing to it and expects exactly that to
be reported, with its trigger, issue and execution named.
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.chaos.checker import RETRY_MAX_S, check, main

T0 = 1_796_000_000.0  # the run's start, epoch seconds
END = T0 + 120.0
ACK_BOUND_S = 5.0
LEASE_SECONDS = 4
ENGINEERS = [f"eng{n}@example.com" for n in (1, 2, 3)]
ASSIGN_FAMILY, NOTIFY_FAMILY = "pf_8E8EMC436H6A", "pf_0SZTE5THZ6AS"
TARGET = {"account_id": "acc-carol", "email": "carol@example.com",
          "display_name": "Carol Example", "active": True}
CARD_COMMENT = ("[ticket-manager] Assignment notification sent\n"
                "Target: Carol Example (carol@example.com)\nUrgent: no")
PAGE_COMMENT = ("[ticket-manager] Assignment notification sent\n"
                "Target: Carol Example (carol@example.com)\nUrgent: yes\nAttempt: 1")
ACK_COMMENT = ("[ticket-manager] Assignment notification acknowledged\n"
               "Target: Carol Example (carol@example.com)")


def iso(t: float | None) -> str | None:
    """As the API writes times: ``2026-12-03T12:12:13.726Z``."""
    if t is None:
        return None
    at = datetime.fromtimestamp(t, UTC)
    return f"{at:%Y-%m-%dT%H:%M:%S}.{at.microsecond // 1000:03d}Z"


def account(email: str) -> str:
    return "acc-" + email.split("@")[0]


# -- executions as GET /dispatch/executions/{id} gives them ------------------------------------


def execution(execution_id: int, issue_key: str, trigger_id: int, *, created: float,
              completed: float | None, rules: list[dict], policy_id: int = 1,
              family: str = ASSIGN_FAMILY, status: str = "succeeded", mode: str = "live",
              wake_at: float | None = None) -> dict:
    return {"id": execution_id, "trigger_id": trigger_id, "issue_key": issue_key, "mode": mode,
            "policy_id": policy_id, "policy_family_id": family, "policy_version": 1,
            "status": status, "failure_code": "", "failure_reason": "", "overwrite_data": None,
            "business_now": iso(created), "wake_at": iso(wake_at), "created_at": iso(created),
            "updated_at": iso(completed or created), "completed_at": iso(completed),
            "rule_executions": rules, "lease_owner": None}


def rule(sequence: int, name: str, actions: list[dict], rule_id: int = 1) -> dict:
    return {"sequence": sequence, "rule_id": rule_id, "name": name, "priority": 10 * (sequence + 1),
            "when": {"always": True}, "transition": {"on_success": "continue"},
            "outcome": "matched", "evaluation": {"matched": True, "reason": "always"},
            "action_executions": actions}


def action(index: int, kind: str, config: dict | None, context: dict, *, status: str,
           started: float | None, finished: float | None) -> dict:
    body = {"type": kind, **({kind: config} if config is not None else {})}
    return {"index": index, "type": kind, "status": status, "action": body,
            "context": context, "result": "continue" if status == "succeeded" else "",
            "error": "", "started_at": iso(started), "planned_at": iso(started),
            "finished_at": iso(finished)}


def assign_execution(execution_id: int, issue_key: str, trigger_id: int, *, t: float,
                     assignee: str, candidates: list[str] = ENGINEERS, policy_id: int = 1,
                     strategy: str = "round_robin", status: str = "succeeded") -> dict:
    """A round-robin assign as the sandbox's TCID policy runs it (rule "everything else")."""
    receiver = {"type": "users", "users": list(candidates)}
    context = {"assign": {
        "receiver": receiver, "strategy": strategy, "current_assignee": "",
        "candidates": list(candidates), "assignee": assignee,
        **({"turn_taken": True} if strategy == "round_robin" else {}),
        "reason": "round_robin: oldest last_dispatched_at", "account_id": account(assignee),
        "jira_updated": True, "label_removed": "auto-dispatch", "version": 1}}
    assign = action(0, "assign", {"receiver": receiver, "strategy": strategy}, context,
                    status=status, started=t + 0.004, finished=t + 0.4)
    return execution(execution_id, issue_key, trigger_id, created=t, completed=t + 0.4,
                     rules=[rule(0, "everything else", [assign])], policy_id=policy_id,
                     status=status)


def expected(message_id: str) -> dict:
    return {"role": "assignee", "project": "PAGE", "target": dict(TARGET),
            "message_id": message_id, "target_lark_id": "ou_carol"}


def notification_execution(execution_id: int, issue_key: str, trigger_id: int, *, t: float,
                           message_id: str, acked_at: float | None) -> dict:
    """The assignee family of ops/examples: the card, then App-urgent and page 1 (a 60 s
    wait). ``acked_at``: the card read then, which ends the workflow; None: still waiting."""
    card = action(0, "send_assignment_notification",
                  {"role": "assignee", "label": "notify-assignee"}, {"notification": {
                      "role": "assignee", "label": "notify-assignee", "snapshot": {
                          "role": "assignee", "label": "notify-assignee", "project": "PAGE",
                          "target": dict(TARGET),
                          "urgency": {"field": "issue.priority", "value": "P0",
                                      "urgent": True}, "status": "Todo"},
                      "card_uuid": f"td-{execution_id}-0-0", "card_phase": "finished",
                      "card_status": "sent", "target_lark_id": "ou_carol",
                      "message_id": message_id, "notification_comment_phase": "finished",
                      "notification_comment_status": "written", "label_phase": "removed",
                      "label_check": {"after_delete": "unchanged"}, "outcome": "sent",
                      "version": 1}}, status="succeeded", started=t + 0.003,
                  finished=t + 0.25)
    urgent = action(0, "mark_assignment_message_urgent", None, {"urgent": {
        "expected": expected(message_id), "outcome": "continued", "urgent_phase": "finished",
        "urgent_status": "sent", "invalid_user_ids": [], "version": 1}},
        status="succeeded", started=t + 0.25, finished=t + 0.35)
    page_state = {"expected": expected(message_id), "attempt": 1,
                  "deadline": iso(t + 60.4), "page_phase": "finished",
                  "page_status": "accepted", "call_id": f"call-{execution_id}", "call_error": "",
                  "notification_comment_phase": "finished",
                  "notification_comment_status": "written", "polls": 2, "version": 1}
    if acked_at is not None:
        page_state.update({"outcome": "ack", "reason": "read", "ack_comment_phase": "finished",
                           "ack_comment_status": "written"})
    config = {"attempt": 1, "ack_pending_statuses": ["Todo"], "ack_timeout": "60s",
              "poll_interval": "1s"}
    page = action(1, "page_assignment", config, {"page": page_state},
                  status="succeeded" if acked_at is not None else "executing",
                  started=t + 0.35, finished=acked_at)
    rules = [rule(0, "send-assignment-notification", [card], rule_id=2),
             rule(1, "urgent-assignment-notification", [urgent, page], rule_id=3)]
    return execution(execution_id, issue_key, trigger_id, created=t, completed=acked_at,
                     rules=rules, policy_id=2, family=NOTIFY_FAMILY,
                     status="succeeded" if acked_at is not None else "executing",
                     wake_at=None if acked_at is not None else END + 1)


# -- the run directory -------------------------------------------------------------------------


class RunDirectory:
    """A history in the making: what each file of the run directory will hold."""

    def __init__(self) -> None:
        self.run = {"seed": 7, "engine": "postgres", "replicas": 2, "duration_s": END - T0,
                    "started_at": T0, "ended_at": END, "settings": {"LEASES_DURATION": "4s"},
                    "schedule": [], "lease_seconds": LEASE_SECONDS, "ack_bound_s": ACK_BOUND_S}
        self.requests: list[dict] = []
        self.faults: list[dict] = []
        self.calls: list[dict] = []
        self.triggers: dict[int, dict] = {}
        self.executions: dict[int, dict] = {}
        self.logs: dict[str, list[str]] = defaultdict(list)

    # -- the load and the database --------------------------------------------------------------

    def request(self, t: float, issue_key: str, *, status: int | None, trigger_id: int | None
                = None, source: str = "jira_automation", mix: str = "assign", attempt: int = 1,
                retry_after: str | None = None, replica: int = 1) -> dict:
        request = {"t": t, "t_end": t + 0.01, "replica": replica, "kind": "trigger",
                   "issue_key": issue_key, "source": source, "mix": mix, "status": status,
                   "retry_after": retry_after, "trigger_id": trigger_id, "attempt": attempt,
                   "error": None if status is not None else "ConnectionError"}
        self.requests.append(request)
        return request

    def trigger(self, trigger_id: int, issue_key: str, t: float, *executions: dict,
                source: str = "jira_automation", mix: str = "assign", status: str = "completed",
                attempt: int = 1) -> None:
        """A trigger posted and answered 202, and the executions it made."""
        self.request(t, issue_key, status=202, trigger_id=trigger_id, source=source, mix=mix,
                     attempt=attempt)
        self.triggers[trigger_id] = {
            "id": trigger_id, "source": source, "issue_key": issue_key, "status": status,
            "failure_reason": "", "execution_ids": [e["id"] for e in executions],
            "created_at": iso(t + 0.005), "completed_at": iso(t + 0.008)}
        for made in executions:
            self.executions[made["id"]] = made

    # -- the peers ------------------------------------------------------------------------------

    def call(self, t: float, service: str, method: str, path: str, route: str, body: object,
             status: int, *, applied: bool = True, fault: int | None = None,
             key: str | None = None, issue_key: str | None = None) -> None:
        self.calls.append({"index": len(self.calls), "t": t, "t_end": t + 0.002,
                           "service": service, "method": method, "path": path, "route": route,
                           "body": body, "status": status, "applied": applied, "fault": fault,
                           "latency_ms": 0, "key": key, "issue_key": issue_key})

    def assign_call(self, t: float, issue_key: str, email: str, **options) -> None:
        self.call(t, "jira", "PUT", f"/rest/api/2/issue/{issue_key}/assignee", "ASSIGN",
                  {"accountId": account(email)}, options.pop("status", 204),
                  issue_key=issue_key, **options)

    def l2_call(self, t: float, issue_key: str, email: str) -> None:
        self.call(t, "jira", "PUT", f"/rest/api/2/issue/{issue_key}", "EDIT_ISSUE",
                  {"fields": {"customfield_10053": {"accountId": account(email)}}}, 204,
                  issue_key=issue_key)

    def comment_call(self, t: float, issue_key: str, text: str) -> None:
        self.call(t, "jira", "POST", f"/rest/servicedeskapi/request/{issue_key}/comment",
                  "ADD_COMMENT", {"body": text, "public": False}, 201, key=text,
                  issue_key=issue_key)

    def card_call(self, t: float, uuid: str, *, applied: bool = True) -> None:
        card = {"config": {"wide_screen_mode": True}, "elements": []}
        self.call(t, "lark", "POST", "/open-apis/im/v1/messages", "SEND",
                  {"receive_id": "ou_carol", "msg_type": "interactive",
                   "content": json.dumps(card), "uuid": uuid}, 200, applied=applied, key=uuid)

    def urgent_call(self, t: float, message_id: str) -> None:
        self.call(t, "lark", "PATCH", f"/open-apis/im/v1/messages/{message_id}/urgent_app",
                  "URGENT_APP", {"user_id_list": ["ou_carol"]}, 200)

    def page_call(self, t: float, issue_key: str, dedup_key: str) -> None:
        self.call(t, "oncall", "POST", "/api/v1/page", "PAGE", {
            "email": "carol@example.com", "title": f"Urgent {issue_key}: you are the Assignee",
            "message": f"{issue_key} {issue_key} is broken (attempt 1)", "issue_key": issue_key,
            "dedup_key": dedup_key}, 200, key=dedup_key, issue_key=issue_key)

    # -- the nemesis and the logs ---------------------------------------------------------------

    def fault(self, t_start: float, t_end: float, kind: str, target: str) -> None:
        self.faults.append({"t_start": t_start, "t_end": t_end, "kind": kind, "target": target,
                            "detail": {"planned_at": t_start - T0}})

    def log(self, file: str, t: float, level: str, msg: str, **fields) -> None:
        self.logs[file].append(json.dumps({"ts": iso(t), "level": level,
                                           "logger": "ticket_dispatcher.actors.execution",
                                           "msg": msg, **fields}))

    # -- on disk ----------------------------------------------------------------------------------

    def write(self, directory: Path) -> Path:
        (directory / "logs").mkdir(parents=True, exist_ok=True)
        (directory / "run.json").write_text(json.dumps(self.run))
        for name, records in (("requests", self.requests), ("faults", self.faults),
                              ("calls", self.calls), ("acks", [])):
            (directory / f"{name}.jsonl").write_text(
                "".join(json.dumps(record) + "\n" for record in records))
        for file, lines in self.logs.items():
            (directory / "logs" / file).write_text("".join(line + "\n" for line in lines))
        (directory / "final.json").write_text(json.dumps({
            "triggers": list(self.triggers.values()),
            "executions": list(self.executions.values()),
            "engineers": [{"email": e, "last_dispatched_at": None, "last_dispatched_issue": None}
                          for e in ENGINEERS],
            "policies": [{"id": 1, "family_id": ASSIGN_FAMILY, "name": "Assign HA tickets",
                          "status": "active", "version": 1},
                         {"id": 2, "family_id": NOTIFY_FAMILY, "status": "active",
                          "name": "Assignment Notification - PAGE Assignee", "version": 1}]}))
        return directory


@pytest.fixture
def clean() -> RunDirectory:
    """A run that keeps every promise: four round-robin assigns (one retried after a 503,
    one after no answer, one Jira write retried after a 429), a notification workflow ACKed
    by a card read, one still waiting in its page, a cut database link with the ERROR it
    caused, and a card send Lark deduplicated."""
    run = RunDirectory()
    run.trigger(1, "HA-1", T0 + 10, assign_execution(1, "HA-1", 1, t=T0 + 10.01,
                                                     assignee=ENGINEERS[0]))
    run.assign_call(T0 + 10.2, "HA-1", ENGINEERS[0])

    run.request(T0 + 20, "HA-2", status=503, retry_after="1")
    run.trigger(2, "HA-2", T0 + 21, assign_execution(2, "HA-2", 2, t=T0 + 21.01,
                                                     assignee=ENGINEERS[1]), attempt=2)
    run.fault(T0 + 20.9, T0 + 21.25, "jira_429", "jira")
    run.assign_call(T0 + 21.2, "HA-2", ENGINEERS[1], status=429, applied=False, fault=429)
    run.assign_call(T0 + 21.3, "HA-2", ENGINEERS[1])

    run.trigger(3, "HA-3", T0 + 30, assign_execution(3, "HA-3", 3, t=T0 + 30.01,
                                                     assignee=ENGINEERS[2]))
    run.assign_call(T0 + 30.2, "HA-3", ENGINEERS[2])

    run.trigger(4, "PAGE-1", T0 + 40, notification_execution(
        4, "PAGE-1", 4, t=T0 + 40.01, message_id="om_fake_1", acked_at=T0 + 43),
        source="jira_assignment_assignee", mix="notify")
    run.card_call(T0 + 40.1, "td-4-0-0")
    run.card_call(T0 + 40.15, "td-4-0-0", applied=False)  # the same uuid: the same message
    run.comment_call(T0 + 40.2, "PAGE-1", CARD_COMMENT)
    run.urgent_call(T0 + 40.3, "om_fake_1")
    run.page_call(T0 + 40.4, "PAGE-1", "td-4-1-1")
    run.comment_call(T0 + 40.5, "PAGE-1", PAGE_COMMENT)
    run.comment_call(T0 + 43.0, "PAGE-1", ACK_COMMENT)

    run.request(T0 + 50, "HA-4", status=None)
    run.trigger(6, "HA-4", T0 + 51, assign_execution(6, "HA-4", 6, t=T0 + 51.01,
                                                     assignee=ENGINEERS[0]), attempt=2)
    run.assign_call(T0 + 51.2, "HA-4", ENGINEERS[0])

    run.fault(T0 + 60, T0 + 65, "db_cut", "db-1")
    run.log("replica-1-1.log", T0 + 61, "INFO", "execution finished", execution_id=6)
    run.log("replica-1-1.log", T0 + 66, "ERROR", "execution pool failed on Wake",
            exc="psycopg2.OperationalError: server closed the connection unexpectedly")

    run.trigger(5, "PAGE-2", T0 + 100, notification_execution(
        5, "PAGE-2", 5, t=T0 + 100.01, message_id="om_fake_2", acked_at=None),
        source="jira_assignment_assignee", mix="notify")
    run.card_call(T0 + 100.1, "td-5-0-0")
    run.comment_call(T0 + 100.2, "PAGE-2", CARD_COMMENT)
    run.urgent_call(T0 + 100.3, "om_fake_2")
    run.page_call(T0 + 100.4, "PAGE-2", "td-5-1-1")
    run.comment_call(T0 + 100.5, "PAGE-2", PAGE_COMMENT)
    run.log("replica-2-1.log", T0 + 100.5, "INFO", "paged", execution_id=5)
    return run


def only(report, promise: int):
    """The one violation of the report, which must be of ``promise``."""
    assert [v.promise for v in report.violations] == [promise], report.text()
    return report.violations[0]


# -- a clean history ---------------------------------------------------------------------------


def test_a_clean_history_with_faults_has_no_violation(clean, tmp_path, capsys):
    report = check(clean.write(tmp_path))

    assert report.violations == [], report.text()
    assert report.summary["requests"]["by_status"] == {"202": 6, "503": 1, "no answer": 1}
    assert report.summary["executions"]["by_status"] == {"succeeded": 5, "executing": 1}
    assert report.summary["calls"]["jira"] == {"calls": 10, "applied": 9, "faulted": 1}
    assert report.summary["faults"] == {"jira_429": 1, "db_cut": 1}
    [spread] = report.summary["round_robin"]
    assert spread["counts"] == {ENGINEERS[0]: 2, ENGINEERS[1]: 1, ENGINEERS[2]: 1}
    assert main([str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("chaos run ")
    assert printed.rstrip().endswith("0 violations")


# -- 1: every accepted trigger ended -----------------------------------------------------------


def test_an_accepted_trigger_left_processing_is_reported(clean, tmp_path):
    clean.triggers[3]["status"] = "processing"

    violation = only(check(clean.write(tmp_path)), 1)

    assert (violation.trigger_id, violation.issue_key) == (3, "HA-3")
    assert "still processing" in violation.title


def test_an_accepted_trigger_missing_from_the_database_is_reported(clean, tmp_path):
    clean.request(T0 + 70, "HA-9", status=202, trigger_id=99)

    violation = only(check(clean.write(tmp_path)), 1)

    assert (violation.trigger_id, violation.issue_key) == (99, "HA-9")
    assert "not in the database" in violation.title


# -- 2: every execution ended, or is parked as it should be ------------------------------------


def test_an_execution_neither_ended_nor_parked_is_reported(clean, tmp_path):
    clean.executions[3].update(status="executing", completed_at=None)

    violation = only(check(clean.write(tmp_path)), 2)

    assert (violation.execution_ids, violation.trigger_id, violation.issue_key) == \
        ([3], 3, "HA-3")
    assert "no wake_at" in "\n".join(violation.detail)


def test_a_wait_still_parked_past_its_deadline_is_reported(clean, tmp_path):
    page = clean.executions[5]["rule_executions"][1]["action_executions"][1]
    page["context"]["page"]["deadline"] = iso(END - ACK_BOUND_S - 2)

    violation = only(check(clean.write(tmp_path)), 2)

    assert (violation.execution_ids, violation.issue_key) == ([5], "PAGE-2")
    assert "past its deadline" in violation.title


# -- 3: no side effect twice -------------------------------------------------------------------


def second_assignee_write(run: RunDirectory) -> None:
    run.assign_call(T0 + 30.3, "HA-3", ENGINEERS[2])  # within execution 3, already written


def second_l2_write(run: RunDirectory) -> None:
    made = assign_execution(7, "HA-7", 7, t=T0 + 80.01, assignee=ENGINEERS[1])
    made["rule_executions"][0]["action_executions"][0]["type"] = "assign_l2"
    run.trigger(7, "HA-7", T0 + 80, made)
    run.l2_call(T0 + 80.2, "HA-7", ENGINEERS[1])
    run.l2_call(T0 + 80.3, "HA-7", ENGINEERS[1])


def second_card(run: RunDirectory) -> None:
    run.card_call(T0 + 40.12, "td-4-0-0")


def second_urgent(run: RunDirectory) -> None:
    run.urgent_call(T0 + 40.32, "om_fake_1")


def second_page(run: RunDirectory) -> None:
    run.page_call(T0 + 45, "PAGE-1", "td-4-1-1")


def second_card_comment(run: RunDirectory) -> None:
    run.comment_call(T0 + 40.22, "PAGE-1", CARD_COMMENT)


def second_ack_comment(run: RunDirectory) -> None:
    run.comment_call(T0 + 43.001, "PAGE-1", ACK_COMMENT)


@pytest.mark.parametrize("repeat, execution_id, issue_key, words", [
    (second_assignee_write, 3, "HA-3", "2 applied Jira assignee writes"),
    (second_l2_write, 7, "HA-7", "2 applied Jira L2 assignee writes"),
    (second_card, 4, "PAGE-1", "2 Lark messages for one card"),
    (second_urgent, 4, "PAGE-1", "2 applied App-urgent"),
    (second_page, 4, "PAGE-1", "2 Oncall pages for execution 4, attempt 1"),
    (second_card_comment, 4, "PAGE-1", "2 applied card comment"),
    (second_ack_comment, 4, "PAGE-1", "2 applied ACK comment"),
])
def test_a_side_effect_made_twice_is_reported(clean, tmp_path, repeat, execution_id,
                                              issue_key, words):
    repeat(clean)

    violation = only(check(clean.write(tmp_path)), 3)

    assert words in violation.title
    assert execution_id in violation.execution_ids
    assert violation.issue_key == issue_key
    assert len([c for c in violation.calls if c.applied]) == 2


def test_a_write_after_its_execution_ended_fits_no_execution(clean, tmp_path):
    clean.assign_call(T0 + 35, "HA-3", ENGINEERS[2])  # a paused replica's late request

    violation = only(check(clean.write(tmp_path)), 3)

    assert violation.execution_ids == [3]
    assert "it fits no execution" in "\n".join(violation.detail)


def test_two_executions_of_one_issue_each_write_once(clean, tmp_path):
    clean.trigger(8, "HA-3", T0 + 90, assign_execution(8, "HA-3", 8, t=T0 + 90.01,
                                                       assignee=ENGINEERS[1]))
    clean.assign_call(T0 + 90.2, "HA-3", ENGINEERS[1])

    assert check(clean.write(tmp_path)).violations == []


def test_a_card_no_execution_sent_is_reported(clean, tmp_path):
    clean.card_call(T0 + 70, "td-42-0-0")

    violation = only(check(clean.write(tmp_path)), 3)

    assert violation.execution_ids == [42]
    assert "no card in the database accounts for" in violation.title


def test_the_same_assignee_written_again_after_a_lost_answer_counts_once(clean, tmp_path):
    """The interleaving: execution 3's assignee PUT reaches a slow Jira and its answer is lost
    to the read timeout; the step is retried, re-reads the issue before the slow write has
    landed, and writes the same account again. Jira keeps one value: one write. The same
    repeat after a write that was answered is still a second write."""
    [first] = [c for c in clean.calls if c["path"].endswith("HA-3/assignee")]
    first["t_end"] = first["t"] + 10.0  # the whole read timeout
    clean.executions[3]["completed_at"] = iso(T0 + 30.01 + 12)
    clean.assign_call(T0 + 30.01 + 11, "HA-3", ENGINEERS[2])

    assert [v.title for v in check(clean.write(tmp_path)).violations] == []

    first["t_end"] = first["t"] + 0.05  # answered: the second write had no reason
    answered = tmp_path / "answered"
    answered.mkdir()
    violation = only(check(clean.write(answered)), 3)
    assert "HA-3: 2 applied Jira assignee writes" in violation.title


def test_a_late_stored_copy_that_assigned_again_after_the_label_went_is_reported(clean,
                                                                                  tmp_path):
    """The interleaving: a trigger posted to a paused replica gets no answer; the load sends it
    again to another replica, which assigns HA-4 and removes ``auto-dispatch``; the paused
    replica wakes, stores the first copy and assigns HA-4 again. With the label required by the
    policy, the second assignment is a violation; without the label removed, it is not."""
    clean.run["assign_label"] = "auto-dispatch"
    assert check(clean.write(tmp_path)).violations == []
    clean.trigger(7, "HA-4", T0 + 56, assign_execution(7, "HA-4", 7, t=T0 + 56.01,
                                                       assignee=ENGINEERS[1]))
    clean.assign_call(T0 + 56.2, "HA-4", ENGINEERS[1])
    late = tmp_path / "late"
    late.mkdir()

    violation = only(check(clean.write(late)), 3)

    assert violation.title == ("HA-4: assigned again by execution 7 after execution 6 "
                               "assigned it and removed 'auto-dispatch'")
    assert violation.execution_ids == [6, 7] and violation.trigger_id == 7
    clean.executions[6]["rule_executions"][0]["action_executions"][0]["context"]["assign"][
        "label_removed"] = None  # the removal failed: the label asks for another dispatch
    kept = tmp_path / "kept"
    kept.mkdir()
    assert check(clean.write(kept)).violations == []


# -- 4: no overlap -----------------------------------------------------------------------------


def test_two_live_executions_of_one_issue_and_family_at_once_are_reported(clean, tmp_path):
    clean.trigger(9, "PAGE-1", T0 + 42, notification_execution(
        9, "PAGE-1", 9, t=T0 + 42.0, message_id="om_fake_9", acked_at=T0 + 44),
        source="jira_assignment_assignee", mix="notify")

    violation = only(check(clean.write(tmp_path)), 4)

    assert violation.execution_ids == [4, 9]
    assert violation.issue_key == "PAGE-1"


def test_a_dry_run_beside_a_live_execution_is_no_overlap(clean, tmp_path):
    dry = notification_execution(9, "PAGE-1", 9, t=T0 + 42.0, message_id="", acked_at=T0 + 42.1)
    dry["mode"] = "dry_run"
    clean.trigger(9, "PAGE-1", T0 + 42, dry, source="jira_assignment_assignee", mix="notify")

    assert check(clean.write(tmp_path)).violations == []


# -- 5: ACK waits end on time ------------------------------------------------------------------


def test_a_wait_that_ended_after_its_deadline_and_the_bound_is_reported(clean, tmp_path):
    page = clean.executions[4]["rule_executions"][1]["action_executions"][1]
    page["context"]["page"]["deadline"] = iso(T0 + 43 - ACK_BOUND_S - 1)

    violation = only(check(clean.write(tmp_path)), 5)

    assert (violation.execution_ids, violation.trigger_id, violation.issue_key) == \
        ([4], 4, "PAGE-1")
    assert "6.0 s after its deadline" in violation.title


def test_a_wait_whose_deadline_a_database_cut_covered_may_end_after_it(clean, tmp_path):
    """The wait's deadline falls inside a database cut: nothing can end it until the database
    is back and the step's retry backoff (up to its cap) has passed. Within that it holds; a
    cut over before the deadline excuses nothing."""
    page = clean.executions[4]["rule_executions"][1]["action_executions"][1]
    finished = T0 + 43  # the action's finished_at in the clean history
    deadline = finished - ACK_BOUND_S - 8  # 8 s later than the bound alone allows
    page["context"]["page"]["deadline"] = iso(deadline)
    clean.fault(deadline - 5, deadline + 2, "db_cut", "replica-0")

    assert check(clean.write(tmp_path)).violations == []
    assert deadline + 2 + ACK_BOUND_S + RETRY_MAX_S > finished

    cut = clean.faults.pop()
    clean.fault(cut["t_start"], deadline - 1, "db_cut", "replica-0")  # over before it
    late = tmp_path / "late"
    late.mkdir()
    violation = only(check(clean.write(late)), 5)
    assert "13.0 s after its deadline" in violation.title
    assert "allowed until" in violation.detail[1]


def test_a_jira_outage_at_the_deadline_excuses_no_late_wait(clean, tmp_path):
    """Jira failing at the deadline is no verdict: the wait still ends within the bound (the
    next page goes out), so an outage covering the deadline extends nothing."""
    page = clean.executions[4]["rule_executions"][1]["action_executions"][1]
    deadline = T0 + 43 - ACK_BOUND_S - 8
    page["context"]["page"]["deadline"] = iso(deadline)
    clean.fault(deadline - 5, deadline + 2, "jira_5xx", "jira")

    violation = only(check(clean.write(tmp_path)), 5)

    assert f"{ACK_BOUND_S + 8:.1f} s after its deadline" in violation.title


# -- 6: the round robin is even ----------------------------------------------------------------


def test_an_uneven_round_robin_is_reported(clean, tmp_path):
    for n in (10, 11):
        clean.trigger(n, f"HA-{n}", T0 + n * 2, assign_execution(
            n, f"HA-{n}", n, t=T0 + n * 2 + 0.01, assignee=ENGINEERS[0]))
        clean.assign_call(T0 + n * 2 + 0.2, f"HA-{n}", ENGINEERS[0])

    violation = only(check(clean.write(tmp_path)), 6)

    assert "differ by 3" in violation.title
    assert set(violation.execution_ids) == {1, 2, 3, 6, 10, 11}
    assert f"{ENGINEERS[0]} 4, {ENGINEERS[1]} 1, {ENGINEERS[2]} 1" in violation.detail[0]


def test_a_round_robin_sharing_engineers_with_another_strategy_is_not_judged(clean, tmp_path):
    for n in (10, 11):
        clean.trigger(n, f"HA-{n}", T0 + n * 2, assign_execution(
            n, f"HA-{n}", n, t=T0 + n * 2 + 0.01, assignee=ENGINEERS[0], strategy="first",
            policy_id=3))
        clean.assign_call(T0 + n * 2 + 0.2, f"HA-{n}", ENGINEERS[0])
    clean.trigger(12, "HA-12", T0 + 26, assign_execution(12, "HA-12", 12, t=T0 + 26.01,
                                                         assignee=ENGINEERS[0]))
    clean.assign_call(T0 + 26.2, "HA-12", ENGINEERS[0])

    report = check(clean.write(tmp_path))

    assert report.violations == [], report.text()
    [spread] = report.summary["round_robin"]
    assert spread["not_judged"] == f"{ENGINEERS[0]} also dispatched elsewhere"


# -- 7: the intake degrades politely -----------------------------------------------------------


def test_a_500_and_a_503_without_retry_after_are_reported(clean, tmp_path):
    clean.request(T0 + 70, "HA-20", status=500)
    clean.request(T0 + 71, "HA-21", status=503, retry_after=None)

    report = check(clean.write(tmp_path))

    assert [(v.promise, v.issue_key) for v in report.violations] == [(7, "HA-20"), (7, "HA-21")]
    assert report.violations[0].title == "the intake answered 500"
    assert report.violations[1].title == "a 503 without Retry-After"


# -- 8: every ERROR has a cause ----------------------------------------------------------------


def test_an_error_with_no_fault_around_it_is_reported(clean, tmp_path):
    clean.log("replica-2-1.log", T0 + 90, "ERROR", "execution actor crashed", execution_id=3,
              issue_key="HA-3", trigger_id=3, exc="KeyError: 'assign'")

    violation = only(check(clean.write(tmp_path)), 8)

    assert (violation.execution_ids, violation.trigger_id, violation.issue_key) == \
        ([3], 3, "HA-3")
    assert "execution actor crashed" in violation.title


def test_an_error_of_another_kind_than_the_fault_is_reported(clean, tmp_path):
    clean.log("replica-1-1.log", T0 + 62, "ERROR", "trigger processing failed", trigger_id=2,
              exc="IntegrationError: jira GET /rest/api/2/issue/HA-2: 502")

    violation = only(check(clean.write(tmp_path)), 8)

    assert violation.trigger_id == 2
    assert [f.kind for f in violation.faults] == ["db_cut"]  # near it, but no cause of it


def test_a_database_error_of_a_replica_whose_link_was_not_cut_is_reported(clean, tmp_path):
    clean.log("replica-2-1.log", T0 + 62, "ERROR", "trigger lease heartbeat failed",
              exc="psycopg2.OperationalError: could not connect to server")

    violation = only(check(clean.write(tmp_path)), 8)

    assert "replica-2-1.log" in violation.title


def test_a_line_that_is_not_json_is_reported_but_a_torn_last_line_is_not(clean, tmp_path):
    clean.logs["replica-2-1.log"] += [
        "Traceback (most recent call last):", '  File "service.py", line 1, in stop',
        "OSError: [Errno 9] Bad file descriptor"]  # one traceback: one entry
    clean.log("replica-2-1.log", T0 + 101, "INFO", "paged", execution_id=5)
    directory = clean.write(tmp_path)
    with (directory / "logs" / "replica-1-1.log").open("a") as log:
        log.write('{"ts": "2026-12-03T12:1')  # killed while writing

    violation = only(check(directory), 8)

    assert "UNPARSED" in violation.title and "Traceback" in violation.title
    assert violation.title.startswith("1 UNPARSED line(s)")
    [block] = violation.log_lines
    assert block.text.endswith("OSError: [Errno 9] Bad file descriptor")
    assert block.t == pytest.approx(T0 + 100.5, abs=0.001)


def test_a_stopped_replica_explains_database_errors_elsewhere(clean, tmp_path):
    clean.fault(T0 + 70, T0 + 80, "sigstop", "replica-1")
    clean.log("replica-2-1.log", T0 + 75, "ERROR", "execution pool failed on Wake",
              exc="psycopg2.errors.QueryCanceled: canceling statement due to statement timeout")

    assert check(clean.write(tmp_path)).violations == []


# -- 9: a passing fault is never final ---------------------------------------------------------


LOAD_429 = ("issue load failed: jira GET /rest/api/2/issue/HA-3 failed: HTTP 429: Rate limit "
            "exceeded.")
BUDGET_S = 60.0


def failed_trigger(run: RunDirectory, trigger_id: int, reason: str, *, at: float,
                   retries: dict | None = None) -> None:
    """Trigger ``trigger_id`` (answered 202 at ``at``) failed one second later with
    ``reason``, no execution made."""
    run.trigger(trigger_id, f"HA-{trigger_id}", at, status="failed")
    run.triggers[trigger_id].update(
        failure_reason=reason, completed_at=iso(at + 1), updated_at=iso(at + 1),
        retries=retries or {"count": 0, "last_reason": "", "since": None, "next_at": None})


def test_a_trigger_failed_by_a_429_is_reported(clean, tmp_path):
    failed_trigger(clean, 12, LOAD_429, at=T0 + 70)
    clean.fault(T0 + 69, T0 + 75, "jira_429", "jira")

    violation = only(check(clean.write(tmp_path)), 9)

    assert (violation.trigger_id, violation.issue_key) == (12, "HA-12")
    assert violation.title == "trigger 12 failed for a transient cause (HTTP 429)"
    assert f"reason: {LOAD_429}" in violation.detail
    assert "does not say the retry budget (1800 s) was spent" in violation.detail[1]
    assert "jira_429" in [f.kind for f in violation.faults]


def test_a_trigger_failed_past_the_retry_budget_of_a_long_enough_fault_is_not(clean,
                                                                              tmp_path):
    """Jira answered 429 for longer than the budget (60 s here, from run.json): the trigger
    tried from the fault's start until the budget was spent, and ended failed saying so. The
    same words after a fault shorter than the budget, or one of another peer, are reported:
    the budget cannot have been spent."""
    clean.run["transient_retry_budget_s"] = BUDGET_S
    spent = LOAD_429 + "; past the retry budget (1m)"
    failed_trigger(clean, 12, spent, at=T0 + 72 + BUDGET_S - 1, retries={
        "count": 5, "last_reason": "HTTP 429", "since": iso(T0 + 71), "next_at": None})
    clean.fault(T0 + 70, T0 + 72 + BUDGET_S, "jira_429", "jira")

    report = check(clean.write(tmp_path))
    assert report.violations == [], report.text()
    assert report.summary["transient_failures"] == {"triggers": 1, "executions": 0,
                                                    "past_the_budget": 1}
    assert report.summary["bounds"]["retry_budget_s"] == BUDGET_S

    clean.faults[-1].update(t_end=T0 + 100, kind="jira_429")  # over long before the failure
    short = tmp_path / "short"
    short.mkdir()
    violation = only(check(clean.write(short)), 9)
    assert violation.trigger_id == 12
    assert "no fault of jira lasted from" in violation.detail[1]

    clean.faults[-1].update(t_end=T0 + 72 + BUDGET_S, kind="lark_fail", target="lark")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert only(check(clean.write(elsewhere)), 9).trigger_id == 12


def test_the_retry_budget_comes_from_the_replicas_setting_without_run_json(clean, tmp_path):
    clean.run["settings"]["TRANSIENT_RETRY_BUDGET"] = "1m"
    failed_trigger(clean, 12, LOAD_429 + "; past the retry budget (1m)",
                   at=T0 + 72 + BUDGET_S - 1)
    clean.fault(T0 + 70, T0 + 72 + BUDGET_S, "jira_5xx", "jira")

    assert check(clean.write(tmp_path)).violations == []


def test_faults_of_one_peer_closer_than_the_backoff_cap_count_as_one_stretch(clean, tmp_path):
    """Two Jira outages with a gap shorter than the backoff's cap: a trigger whose tries, a
    backoff apart, fell in both never saw Jira answer, and may have spent its budget."""
    clean.run["transient_retry_budget_s"] = BUDGET_S
    failed_trigger(clean, 12, "issue load failed: jira GET /rest/api/2/issue/HA-12: no answer "
                              "within the read timeout; the outcome is unknown; past the "
                              "retry budget (1m)", at=T0 + 72 + BUDGET_S - 1)
    clean.fault(T0 + 70, T0 + 90, "jira_slow", "jira")
    clean.fault(T0 + 95, T0 + 72 + BUDGET_S, "jira_5xx", "jira")

    assert check(clean.write(tmp_path)).violations == []


@pytest.mark.parametrize("reason", [
    "issue load failed: jira GET /rest/api/2/issue/HA-12 failed: HTTP 404: Issue does not "
    "exist or you do not have permission to see it.",
    "issue load failed: jira GET /rest/api/2/issue/HA-12 failed: HTTP 403",
    "policy load failed: policy 9 not found",
], ids=["404", "403", "policy-gone"])
def test_a_trigger_failed_for_a_permanent_cause_is_not_this_promises_business(clean, tmp_path,
                                                                              reason):
    failed_trigger(clean, 12, reason, at=T0 + 70)
    clean.fault(T0 + 69, T0 + 75, "jira_5xx", "jira")

    report = check(clean.write(tmp_path))

    assert report.violations == [], report.text()
    assert report.summary["transient_failures"]["triggers"] == 0


def test_an_execution_failed_by_a_jira_503_on_its_assign_is_reported(clean, tmp_path):
    """The assign action's PUT was refused 503 and the execution ended failed: a write refused
    for now must be tried again."""
    refused = ("Jira refused to set the assignee: jira PUT /rest/api/2/issue/HA-3/assignee "
               "failed: HTTP 503")
    failed = clean.executions[3]
    assign = failed["rule_executions"][0]["action_executions"][0]
    assign.update(status="failed", error=refused, result="")
    assign["context"]["assign"].update(jira_updated=False, label_removed=None)
    failed.update(status="failed", failure_code="execute_failed",
                  failure_reason=f"rule 'everything else' action 0 (assign): {refused}")
    clean.calls = [c for c in clean.calls if not c["path"].endswith("HA-3/assignee")]
    clean.assign_call(T0 + 30.2, "HA-3", ENGINEERS[2], status=503, applied=False, fault=503)
    clean.fault(T0 + 30, T0 + 31, "jira_5xx", "jira")

    violation = only(check(clean.write(tmp_path)), 9)

    assert (violation.execution_ids, violation.trigger_id, violation.issue_key) == \
        ([3], 3, "HA-3")
    assert violation.title == "execution 3 failed for a transient cause (HTTP 503)"
    assert f"failure execute_failed: rule 'everything else' action 0 (assign): {refused}" in \
        violation.detail
    assert "jira_5xx" in [f.kind for f in violation.faults]


def test_an_execution_whose_failed_action_alone_names_the_cause_is_reported(clean, tmp_path):
    failed = clean.executions[3]
    failed["rule_executions"][0]["action_executions"][0].update(
        status="failed", error="Jira user search for eng3@example.com failed: jira GET "
                               "/rest/api/2/user/search: connection failed (ConnectionError)")
    failed.update(status="failed", failure_code="plan_failed", failure_reason="")

    violation = only(check(clean.write(tmp_path)), 9)

    assert violation.title == "execution 3 failed for a transient cause (connection failed)"


# -- the printout and the exit status ----------------------------------------------------------


def test_a_violation_is_printed_with_its_trigger_execution_calls_and_faults(clean, tmp_path,
                                                                             capsys):
    clean.fault(T0 + 29, T0 + 31, "kill9", "replica-2")
    second_assignee_write(clean)

    assert main([str(clean.write(tmp_path))]) == 1

    printed = capsys.readouterr().out
    assert "promise 3 (no side effect twice): HA-3: 2 applied Jira assignee writes" in printed
    assert "trigger 3 (issue HA-3), execution 3" in printed
    assert "jira PUT /rest/api/2/issue/HA-3/assignee" in printed
    assert "kill9 replica-2" in printed
    assert printed.rstrip().endswith("1 violation")


def test_an_unreadable_history_exits_2(clean, tmp_path, capsys):
    directory = clean.write(tmp_path)
    with (directory / "calls.jsonl").open("a") as calls:
        calls.write("{not json\n")

    assert main([str(directory)]) == 2
    assert "calls.jsonl:" in capsys.readouterr().err
    (directory / "final.json").unlink()
    assert main([str(directory)]) == 2
    assert main([]) == 2
