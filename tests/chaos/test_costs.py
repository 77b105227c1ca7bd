"""The Jira cost per issue of each kind of work in a chaos run (tests/chaos/costs.py)."""

from __future__ import annotations

import json

from tests.chaos.checker import Call
from tests.chaos.costs import cost_lines, jira_costs, kinds_of


def call(method: str, path: str, body: object = None, *, fault: int | None = None,
         service: str = "jira") -> Call:
    return Call(line=0, t=0.0, service=service, method=method, path=path, route=None,
                body=body, status=fault or 200, applied=fault is None, fault=fault, key=None)


def request(key: str, mix: str, attempt: int = 1) -> dict:
    return {"issue_key": key, "mix": mix, "attempt": attempt, "status": 202}


def search(*keys: str, fault: int | None = None) -> Call:
    jql = "key in (" + ", ".join(json.dumps(key) for key in keys) + ")"
    return call("POST", "/rest/api/2/search/jql", {"jql": jql, "maxResults": len(keys)},
                fault=fault)


def test_kinds_come_from_the_mix_and_the_number_of_triggers():
    requests = [request("CHAOS-1", "assign"), request("CHAOS-2", "assign"),
                request("CHAOS-2", "assign", attempt=2),  # the same trigger tried again
                request("CHAOS-3", "assign"), request("CHAOS-3", "assign"),  # a second trigger
                request("PAGE-1", "notify")]

    assert kinds_of(requests) == {"CHAOS-1": "ordinary assign", "CHAOS-2": "ordinary assign",
                                  "CHAOS-3": "ordinary assign, triggered again",
                                  "PAGE-1": "notification workflow"}


def test_reads_searches_and_writes_are_counted_per_issue_of_each_kind():
    requests = [request("CHAOS-1", "assign"), request("CHAOS-2", "assign"),
                request("PAGE-1", "notify"), request("PAGE-2", "notify"),
                request("CHAOS-3", "assign")]
    calls = [
        # two ordinary assigns: a read and the one edit each
        call("GET", "/rest/api/2/issue/CHAOS-1"), call("PUT", "/rest/api/2/issue/CHAOS-1"),
        call("GET", "/rest/api/2/issue/CHAOS-2"), call("PUT", "/rest/api/2/issue/CHAOS-2"),
        # an assign whose first edit met an injected 503: it read again and wrote again
        call("GET", "/rest/api/2/issue/CHAOS-3"),
        call("PUT", "/rest/api/2/issue/CHAOS-3", fault=503),
        call("GET", "/rest/api/2/issue/CHAOS-3"), call("PUT", "/rest/api/2/issue/CHAOS-3"),
        # two notification workflows: reads, a label edit, comments, the batched ACK looks
        call("GET", "/rest/api/2/issue/PAGE-1"), call("GET", "/rest/api/2/issue/PAGE-1"),
        call("PUT", "/rest/api/2/issue/PAGE-1"),
        call("POST", "/rest/servicedeskapi/request/PAGE-1/comment", {"body": "card"}),
        call("GET", "/rest/api/2/issue/PAGE-2"), call("PUT", "/rest/api/2/issue/PAGE-2"),
        search("PAGE-1", "PAGE-2"), search("PAGE-1", "PAGE-2"), search("PAGE-1"),
        # about no issue, and another peer's call: apart, and not at all
        call("GET", "/rest/api/2/user/search"),
        call("POST", "/rest/api/2/search/approximate-count", {"jql": "assignee = x"},
             fault=429),
        call("POST", "/open-apis/im/v1/messages", service="lark"),
    ]

    costs = jira_costs(calls, requests)

    assert costs == {
        "notification workflow": {"issues": 2, "reads": 1.5, "searches": 1.5, "writes": 1.5,
                                  "faulted": 0.0},
        "ordinary assign": {"issues": 2, "reads": 1.0, "searches": 0.0, "writes": 1.0,
                            "faulted": 0.0},
        "ordinary assign, met a Jira fault": {"issues": 1, "reads": 2.0, "searches": 0.0,
                                              "writes": 2.0, "faulted": 1.0},
        "about no issue": {"calls": 2, "faulted": 1},
    }
    # the searches' shares add up to the searches made: 3 searches over 2 issues
    assert costs["notification workflow"]["searches"] * 2 == 3


def test_a_faulted_batched_search_marks_each_issue_it_names():
    requests = [request("PAGE-1", "notify"), request("PAGE-2", "notify"),
                request("PAGE-3", "notify")]
    calls = [search("PAGE-1", "PAGE-2", fault=429), search("PAGE-1", "PAGE-2"),
             call("GET", "/rest/api/2/issue/PAGE-3")]

    costs = jira_costs(calls, requests)

    assert costs["notification workflow, met a Jira fault"] == {
        "issues": 2, "reads": 0.0, "searches": 1.0, "writes": 0.0, "faulted": 0.5}
    assert costs["notification workflow"] == {
        "issues": 1, "reads": 1.0, "searches": 0.0, "writes": 0.0, "faulted": 0.0}


def test_the_lines_name_each_kind_with_its_figures():
    costs = jira_costs([call("GET", "/rest/api/2/issue/CHAOS-1"),
                        call("PUT", "/rest/api/2/issue/CHAOS-1")],
                       [request("CHAOS-1", "assign")])

    lines = cost_lines(costs)

    assert lines[0].split()[-5:] == ["issues", "reads", "searches", "writes", "faulted"]
    assert lines[1].split() == ["ordinary", "assign", "1", "1.00", "0.00", "1.00", "0.00"]
    assert lines[2].strip() == "about no issue (user searches, counts): 0 calls, 0 faulted"
