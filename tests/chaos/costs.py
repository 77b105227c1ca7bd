"""What each kind of work cost the Jira site in a chaos run: reads, searches and writes per
issue, from the fakes' call log (calls.jsonl) and the load's requests (requests.jsonl).

An issue's kind is the load's mix for it (``assign``: an ordinary assign; ``notify``: a
notification workflow, its pages, escalation and the leader's workflow included), ``triggered
again`` when the load sent it more than one trigger, and ``met a Jira fault`` when a Jira call
about it was answered by an injected fault: so the extra cost of a fault shows beside the cost
of the same work without one. Per issue:

- ``reads``: GETs of the issue;
- ``searches``: the JQL searches naming it (the ACK watcher's batched looks), each search
  shared evenly among the issues it names, so the column adds up to the searches made;
- ``writes``: edits, the assignee endpoint, comments (whether applied or not: each is a call);
- ``faulted``: those of its calls answered by an injected fault.

The calls about no issue (user searches, counts) are counted apart.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any, Protocol

_ISSUE_PATH = re.compile(r"^/rest/(?:api/2/issue|servicedeskapi/request)/([^/]+)")
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')
SEARCH_PATH = "/rest/api/2/search/jql"
FIELDS = ("reads", "searches", "writes", "faulted")


class JiraCall(Protocol):
    """What is read of a call: tests/chaos/checker.py's ``Call`` has it."""

    service: str
    method: str
    path: str
    body: Any
    fault: int | None


def kinds_of(requests: Iterable[dict]) -> dict[str, str]:
    """Issue key -> its kind of work, from the load's requests (``mix``, and how many triggers
    it was sent: a trigger's first try has ``attempt`` 1)."""
    mixes: dict[str, str] = {}
    triggers: Counter = Counter()
    for request in requests:
        key = request.get("issue_key")
        if not isinstance(key, str):
            continue
        mixes.setdefault(key, str(request.get("mix")))
        triggers[key] += request.get("attempt") == 1
    names = {"assign": "ordinary assign", "notify": "notification workflow"}
    return {key: names.get(mix, mix) + (", triggered again" if triggers[key] > 1 else "")
            for key, mix in mixes.items()}


def jira_costs(calls: Iterable[JiraCall], requests: Iterable[dict]) -> dict[str, dict]:
    """Kind of work -> ``{"issues": n, "reads", "searches", "writes", "faulted": per issue}``,
    each kind also ``..., met a Jira fault`` for its issues a fault answered; and ``"about no
    issue"`` -> ``{"calls": n, "faulted": n}``."""
    kinds = kinds_of(requests)
    per_issue: dict[str, Counter] = defaultdict(Counter)
    apart: Counter = Counter()
    for call in calls:
        if call.service != "jira":
            continue
        found = _ISSUE_PATH.match(call.path)
        if found:
            what = "reads" if call.method == "GET" else "writes"
            shares = {found.group(1): 1.0}
        elif call.path == SEARCH_PATH and _searched(call.body):
            what, named = "searches", _searched(call.body)
            shares = {key: 1 / len(named) for key in named}
        else:
            apart["calls"] += 1
            apart["faulted"] += call.fault is not None
            continue
        for key, share in shares.items():
            per_issue[key][what] += share
            per_issue[key]["faulted"] += share if call.fault is not None else 0
    totals: dict[str, Counter] = defaultdict(Counter)
    for key, kind in kinds.items():
        counts = per_issue.get(key, Counter())
        if counts["faulted"]:
            kind += ", met a Jira fault"
        totals[kind]["issues"] += 1
        totals[kind].update({name: counts[name] for name in FIELDS})
    costs: dict[str, dict] = {
        kind: {"issues": total["issues"],
               **{name: round(total[name] / total["issues"], 2) for name in FIELDS}}
        for kind, total in sorted(totals.items())}
    costs["about no issue"] = {"calls": apart["calls"], "faulted": apart["faulted"]}
    return costs


def cost_lines(costs: dict[str, dict]) -> list[str]:
    """The costs as the checker's summary prints them."""
    lines = [f"jira        per issue: {'kind of work':<56} {'issues':>6} {'reads':>6} "
             f"{'searches':>8} {'writes':>6} {'faulted':>7}"]
    for kind, cost in costs.items():
        if kind == "about no issue":
            continue
        lines.append(f"                       {kind:<56} {cost['issues']:6d} {cost['reads']:6.2f} "
                     f"{cost['searches']:8.2f} {cost['writes']:6.2f} {cost['faulted']:7.2f}")
    apart = costs.get("about no issue") or {"calls": 0, "faulted": 0}
    lines.append(f"                       about no issue (user searches, counts): "
                 f"{apart['calls']} calls, {apart['faulted']} faulted")
    return lines


def _searched(body: Any) -> list[str]:
    """The keys a ``key in ("A-1", ...)`` JQL names."""
    jql = body.get("jql") if isinstance(body, dict) else None
    if not isinstance(jql, str):
        return []
    return [re.sub(r"\\(.)", r"\1", key) for key in _QUOTED.findall(jql)]
