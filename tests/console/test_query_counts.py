"""Every console page sends as many SQL statements for a few rows as for many: rendered with
3 rows and with 40 (both within one page of its list), on SQLite and PostgreSQL.

A page that read something per row (an engineer per assignment, a report per shadow, a policy
per execution) would send more for 40 rows than for 3; the store's bulk reads
(``executions.get_many``, one ``IN`` query, a ``GROUP BY``) keep the count flat. The rows are
made the way the service makes them: triggers through the real runtime (tests/harness.py)
with real assignments, parked waits, shadows deciding beside live versions.

Each size is rendered twice and the second render counted, so a cache filled by the first
(the templates, the active policies) counts alike for both sizes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import count

import pytest
from falcon import testing

from tests.conftest import QueryCounter
from tests.console.conftest import Console, build_app, failed_trigger, main_text
from tests.fakes import RecordingAction, issue
from tests.harness import Harness, assign, rule
from ticket_dispatcher.config import load_config
from ticket_dispatcher.domain.catalog import OnSuccess
from ticket_dispatcher.domain.model import PolicySpec, RuleSpec
from ticket_dispatcher.http.services import Services
from ticket_dispatcher.store import Store

FEW, MANY = 3, 40  # rows on the page: both below every list's page size (50)
ENGINEERS = ("a@example.com", "b@example.com", "c@example.com")
NOT_P0 = {"field": "issue.priority", "operator": "in", "values": ["P0"]}  # never matches


class World:
    """The console (authentication off) over a real runtime, and the rows its pages show,
    grown on demand: each ``…(n)`` makes ``n`` of them exist and answers the page's path."""

    def __init__(self, store: Store):
        self.harness = Harness(store, RecordingAction("test_wait", park_for=60)).start()
        self.store = self.harness.store
        self.clock = self.harness.clock
        for email in ENGINEERS:
            self.store.engineers.put(email, dispatch_enabled=True, now=self.clock.now())
            self.harness.jira.add_user(email)
        services = Services(store=self.store, config=load_config(None, environ={}),
                            clock=self.clock, runtime=self.harness.runtime)
        self.console = Console(testing.TestClient(build_app(services, auth_enabled=False)),
                               services)
        self._numbers = count(1)
        self._made: dict[str, int] = {}
        self._assign_policy = None
        self._wait_policy = None
        self._shadowed = None  # (live policy, draft in shadow)

    def close(self) -> None:
        self.harness.wait_idle()
        self.harness.stop()

    # -- rendering ----------------------------------------------------------------------------

    def statements(self, path: str) -> tuple[int, str]:
        """Render ``path`` twice; the statements the second render sent, and its text."""
        assert self.console.get(path).status_code == 200
        with QueryCounter(self.store.db) as queries:
            page = self.console.get(path)
        assert page.status_code == 200, page.text[:2000]
        return queries.count, main_text(page.text)

    # -- rows -----------------------------------------------------------------------------------

    def _more(self, kind: str, wanted: int) -> range:
        """The numbers of the rows of ``kind`` still to make for ``wanted`` of them."""
        made = self._made.get(kind, 0)
        self._made[kind] = max(made, wanted)
        return range(made, wanted)

    def _issue(self, project: str = "TCID", **fields) -> str:
        key = f"{project}-{next(self._numbers)}"
        self.harness.jira.put(issue(key=key, project_key=project, priority="P3", **fields))
        return key

    def _post(self, keys: list[str]) -> None:
        for key in keys:
            self.harness.post_trigger(key, settle=False)
        self.harness.wait_idle()

    def assignments(self, n: int) -> str:
        """``n`` triggers each assigned round robin (one execution, succeeded)."""
        if self._assign_policy is None:
            self._assign_policy = self.harness.policy(rule(assign(*ENGINEERS)))
        self._post([self._issue() for _ in self._more("assignments", n)])
        return "/console/executions"

    def failed_triggers(self, n: int) -> str:
        for _ in self._more("failed", n):
            failed_trigger(self.store, self.clock, f"NOPE-{next(self._numbers)}")
        return "/console/triggers?status=failed"

    def triggers(self, n: int) -> str:
        """``n`` triggers: about half assigned, the rest failed."""
        self.assignments(n // 2)
        self.failed_triggers(n - n // 2)
        return "/console/triggers"

    def parked(self, n: int) -> str:
        """``n`` executions parked in a 60 s wait, each on an issue of its own."""
        if self._wait_policy is None:
            self._wait_policy = self.harness.policy(rule("test_wait"), projects=("WAIT",))
        self._post([self._issue("WAIT") for _ in self._more("parked", n)])
        return "/console/parked"

    def overview(self, n: int) -> str:
        self.failed_triggers(n)
        self.parked(n)
        return "/console/"

    def executing(self, n: int) -> str:
        self.parked(n)
        return "/console/executions?status=executing"

    def execution_with_rules(self, n: int) -> str:
        """One execution of a policy with ``n`` rules, each with an assignment: all but the
        last not matched, the last assigning."""
        project = f"RULES{n}"
        rules = [rule(assign(*ENGINEERS), name=f"rule {k}", priority=k,
                      when=NOT_P0 if k < n else None, on_success="continue")
                 for k in range(1, n + 1)]
        self.harness.policy(*rules, projects=(project,))
        trigger = self.harness.post_trigger(self._issue(project))
        [execution_id] = trigger.execution_ids
        return f"/console/executions/{execution_id}"

    def engineers(self, n: int) -> str:
        """``n`` engineers beside the three of the rotations, and ``n`` rotations (active
        round-robin policies of projects of their own, two engineers each)."""
        for k in self._more("engineers", n):
            email = f"engineer{k}@example.com"
            self.store.engineers.put(email, dispatch_enabled=k % 4 != 0,
                                     display_name=f"Engineer {k}", now=self.clock.now())
            self.harness.policy(rule(assign(email, ENGINEERS[k % 3])),
                                projects=(f"ROTA{k}",))
        return "/console/engineers"

    def policies(self, n: int) -> str:
        """``n`` policies, every other one active (each its own project)."""
        for k in self._more("policies", n):
            self.harness.policy(rule(assign(*ENGINEERS)), active=k % 2 == 0,
                                projects=(f"POL{k}",))
        return "/console/policies"

    def versions(self, n: int) -> str:
        """One family of ``n`` versions: the first active, the others drafts after it."""
        first = self.harness.policy(rule(assign(*ENGINEERS)), projects=(f"FAM{n}",))
        for k in range(1, n):
            self.store.policies.create_replacement(first.id, _spec(first, f"version {k + 1}"),
                                                   now=self.clock.now())
        return f"/console/policies/{first.id}"

    def diff(self, n: int) -> str:
        """Two versions of ``n`` rules each, every rule changed between them."""
        rules = [rule(assign(*ENGINEERS), name=f"rule {k}", priority=k) for k in range(n)]
        first = self.harness.policy(*rules, projects=(f"DIFF{n}",))
        other = self.store.policies.create_replacement(first.id, _spec(
            first, "changed", [dict(r, name=r["name"] + " (renamed)") for r in rules]),
            now=self.clock.now())
        return f"/console/policies/diff?a={first.id}&b={other.id}"

    def shadows(self, n: int) -> str:
        """``n`` families with a draft in shadow, each having decided beside one trigger."""
        keys = []
        for k in self._more("shadows", n):
            project = f"SHADOW{k}"
            live = self.harness.policy(rule(assign(ENGINEERS[0]), name="everything"),
                                       projects=(project,))
            draft = self.store.policies.create_replacement(live.id, _spec(live, "candidate", [
                rule(assign(ENGINEERS[1]), name="everything")]), now=self.clock.now())
            self.store.shadows.start(draft.id, now=self.clock.now())
            keys.append(self._issue(project))
        self._post(keys)
        return "/console/shadows"

    def shadow_report(self, n: int) -> str:
        """One shadow that chose another assignee than the live version, ``n`` times."""
        if self._shadowed is None:
            live = self.harness.policy(rule(assign(ENGINEERS[0]), name="everything"),
                                       projects=("REPORT",))
            draft = self.store.policies.create_replacement(live.id, _spec(live, "candidate", [
                rule(assign(ENGINEERS[1]), name="everything")]), now=self.clock.now())
            self.store.shadows.start(draft.id, now=self.clock.now())
            self._shadowed = (live, draft)
        self._post([self._issue("REPORT") for _ in self._more("decisions", n)])
        return f"/console/policies/{self._shadowed[1].id}/shadow"

    def validator(self, n: int) -> str:
        self.policies(n)  # nothing on the form reads them: its count must not move either
        return "/console/policies/validate"


def _spec(policy, name: str, rules: list[dict] | None = None) -> PolicySpec:
    """``policy``'s document under another name, with other rules when given."""
    if rules is None:
        return PolicySpec(name=name, trigger=policy.spec.trigger, rules=policy.spec.rules)
    return PolicySpec(name=name, trigger=policy.spec.trigger, rules=tuple(
        RuleSpec(r["name"], r["priority"], r["when"], r["then"], OnSuccess(r["on_success"]))
        for r in rules))


@dataclass(frozen=True)
class Case:
    page: str
    grow: Callable[[World, int], str]  # makes n rows exist; the page's path
    grows: bool = True  # whether the page shows more with more rows (a form does not)
    fresh: bool = False  # whether each size is a new object (another path), not more rows


CASES = [
    Case("overview", World.overview),
    Case("triggers", World.triggers),
    Case("triggers, failed", World.failed_triggers),
    Case("executions", World.assignments),
    Case("executions, executing", World.executing),
    Case("execution", World.execution_with_rules, fresh=True),
    Case("parked", World.parked),
    Case("engineers", World.engineers),
    Case("policies", World.policies),
    Case("policy", World.versions, fresh=True),
    Case("policy diff", World.diff, fresh=True),
    Case("policy validate", World.validator, grows=False),
    Case("shadows", World.shadows),
    Case("shadow report", World.shadow_report),
]


@pytest.fixture
def world(store):
    world = World(store)
    yield world
    world.close()


@pytest.mark.parametrize("case", CASES, ids=[case.page for case in CASES])
def test_a_page_sends_as_many_statements_for_many_rows_as_for_few(world, case):
    few_path = case.grow(world, FEW)
    few, few_text = world.statements(few_path)
    many_path = case.grow(world, MANY)
    if not case.fresh:
        assert many_path == few_path
    many, many_text = world.statements(many_path)

    print(f"{case.page}: {few} statements with {FEW} rows, {many} with {MANY}")
    assert many == few, (f"{case.page} sent {few} statements for {FEW} rows and {many} for "
                         f"{MANY}: one or more per row")
    if case.grows:
        assert len(many_text) > len(few_text), "the page shows no more with more rows"
