"""Races around the escalation role slots with real threads on both engines (docs/design.md,
"The escalation slot"): the row lock keeps Assignee and L2 apart, one of two executions racing
for one role writes Jira, and an owner's reconcile never lets a non-owner write or escalate.

The escalations run through the real behavior and ``escalate_assignment_to_leader`` against
the plain fakes of tests/domain (one Jira, Lark and Core shared by both executions) and the
store's context repository. Threads meet at barriers and events, every wait is bounded.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from tests.domain.test_notification_card import Crash, Crashing
from tests.domain.test_notification_escalate import CAROL, EscalateWorld, _execution, escalation
from tests.domain.test_notification_page import TIMEOUT
from ticket_dispatcher.domain.execution import Execution, ExecutionStatus

T0 = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)
WAIT = 10  # seconds any thread waits for another before the test fails


# -- threads ----------------------------------------------------------------------------------


def run_threads(*work: Callable[[], object]) -> list[object]:
    """Run each callable in its own thread; their results in order (a thread's exception is
    raised here)."""
    results: list[object] = [None] * len(work)

    def target(index: int) -> None:
        try:
            results[index] = work[index]()
        except BaseException as exc:  # handed back and asserted by the caller
            results[index] = exc

    threads = [threading.Thread(target=target, args=(i,), daemon=True)
               for i in range(len(work))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert not any(thread.is_alive() for thread in threads), "a thread never finished"
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


def waited(event: threading.Event) -> None:
    assert event.wait(WAIT), "the other thread never got there"


class Gate:
    """A port whose ``method`` first runs ``before`` (on the calling thread), then the real
    call, then ``after``; every other attribute is the port's own."""

    def __init__(self, port, method: str, before: Callable[[], None] = lambda: None,
                 after: Callable[[], None] = lambda: None):
        self._port, self._method, self._before, self._after = port, method, before, after

    def __getattr__(self, name):
        real = getattr(self._port, name)
        if name != self._method:
            return real

        def call(*args, **kwargs):
            self._before()
            answer = real(*args, **kwargs)
            self._after()
            return answer
        return call


class CountingSlots:
    """The store's contexts; ``stored`` is set once ``expected`` slot updates have returned."""

    def __init__(self, contexts, expected: int):
        self._contexts, self._expected = contexts, expected
        self._lock = threading.Lock()
        self.updates = 0
        self.stored = threading.Event()

    def find(self, issue_key):
        return self._contexts.find(issue_key)

    def update_notification_slot(self, issue_key, role, mutate, now):
        context = self._contexts.update_notification_slot(issue_key, role, mutate, now)
        with self._lock:
            self.updates += 1
            if self.updates >= self._expected:
                self.stored.set()
        return context


# -- two executions of one role ---------------------------------------------------------------


class Race:
    """Executions 7 and 8 of Alice's Assignee workflow on TCID-1 (card, urgent, one page, the
    escalation), sharing Jira, Lark and Core, with the store's context repository. Each is
    driven to its ACK deadline in the main thread; only the last step runs in the threads."""

    def __init__(self, store):
        self.store = store
        self.first = EscalateWorld()
        self.first.contexts = store.contexts
        self.jira, self.core = self.first.jira, self.first.core
        self.second = self.world(8)

    def world(self, execution_id: int) -> EscalateWorld:
        """Another execution of the same policy on the same issue and services."""
        world = EscalateWorld()
        world.execution = _execution(execution_id)
        world.jira, world.lark = self.first.jira, self.first.lark
        world.core, world.triggers = self.first.core, self.first.triggers
        world.contexts = self.store.contexts
        return world

    def to_the_deadline(self, world: EscalateWorld, **ports) -> Execution:
        """Card, urgent and the page, parked in its wait; the clock at its deadline."""
        ex = world.run(**ports)
        assert ex.status is ExecutionStatus.EXECUTING
        world.clock.advance(TIMEOUT)
        return ex

    def slot(self) -> dict | None:
        return self.store.contexts.get("TCID-1").assignment_notification_state.get("assignee")

    def role_writes(self) -> list[tuple]:
        return self.jira.calls("assign") + self.jira.calls("set_l2_assignee")


def applied(owner: int) -> dict:
    return {"escalation_intent": {"owner_execution_id": owner, "from_account_id": "acc-alice",
                                  "to_account_id": "acc-bob", "to_email": "bob@example.com",
                                  "state": "applied"},
            "auto_escalated_to_account_id": "acc-bob"}


def verdict(ex: Execution) -> tuple[str, str | None]:
    context = escalation(ex)
    return context["outcome"], context.get("reason")


# -- (a) Assignee and L2 at once ----------------------------------------------------------------


def test_assignee_and_l2_slot_updates_from_two_threads_never_lose_one(store):
    """Each thread records every step in its own role's slot, on fresh contexts (the
    insert-on-conflict path) and on existing ones (the row lock), many times."""
    keys, rounds = [f"TCID-{n}" for n in range(1, 13)], 4
    barrier = threading.Barrier(2, timeout=WAIT)

    def record(step):
        def mutate(slot):
            slot = slot or {"escalation_intent": None, "steps": []}
            slot["steps"].append(step)
            return slot
        return mutate

    def work(role):
        def steps():
            for key in keys:
                barrier.wait()  # both threads on the same, not yet existing, row
                for step in range(rounds):
                    store.contexts.update_notification_slot(key, role, record(step), T0)
        return steps

    results = run_threads(work("assignee"), work("l2_assignee"))

    assert results == [None, None]
    expected = {"escalation_intent": None, "steps": list(range(rounds))}
    for key in keys:
        assert store.contexts.get(key).assignment_notification_state == {
            "assignee": expected, "l2_assignee": expected}


# -- (b) two executions persist an intent for the same role -----------------------------------


def test_two_executions_racing_for_one_role_write_jira_once_and_the_loser_fails_closed(store):
    race = Race(store)
    first, second = race.to_the_deadline(race.first), race.to_the_deadline(race.second)
    looked = threading.Barrier(2, timeout=WAIT)  # both passed the first look of the slot
    slots = CountingSlots(store.contexts, expected=2)  # both intents tried under the lock
    core = Gate(race.core, "leader", before=looked.wait)
    jira = Gate(race.jira, "assign", before=lambda: waited(slots.stored))

    results = run_threads(lambda: race.first.run(first, core=core, jira=jira, contexts=slots),
                          lambda: race.second.run(second, core=core, jira=jira, contexts=slots))

    verdicts = sorted(verdict(ex) for ex in results)
    assert verdicts == [("blocked", "pending_intent"), ("escalated", None)]
    winner, loser = sorted(results, key=lambda ex: verdict(ex)[0] != "escalated")
    assert escalation(loser)["warnings"]
    assert race.role_writes() == [("assign", "TCID-1", "acc-bob")]
    assert race.slot() == applied(winner.id)
    assert race.first.triggers.ensured == [("jira_assignment_assignee", "TCID-1")]


@pytest.mark.parametrize("leader", ["unchanged", "changed_meanwhile"])
def test_a_loser_storing_its_intent_after_the_winner_applied_takes_nothing_over(store, leader):
    """Both passed the first look; the loser reaches the lock only after the winner's write
    and marker. It must neither take the escalation over nor wake Bob again, and
    Bob's own workflow afterwards must still not go on to the Grand Leader."""
    race = Race(store)
    first, second = race.to_the_deadline(race.first), race.to_the_deadline(race.second)
    looked = threading.Barrier(2, timeout=WAIT)
    winner_done = threading.Event()

    def winner():
        try:
            return race.first.run(first, core=Gate(race.core, "leader", before=looked.wait))
        finally:
            winner_done.set()

    def hold():
        looked.wait()
        waited(winner_done)
        if leader == "changed_meanwhile":  # Core now names another manager for Alice
            race.core.leaders["alice@example.com"] = "dave@example.com"

    won, lost = run_threads(
        winner, lambda: race.second.run(second, core=Gate(race.core, "leader", before=hold)))
    bobs = race.world(9)
    bobs_own = bobs.finish(race.to_the_deadline(bobs))  # woken by the winner's hop

    assert verdict(won) == ("escalated", None)
    assert race.role_writes() == [("assign", "TCID-1", "acc-bob")]  # never Carol
    assert verdict(bobs_own) == ("blocked", "no_grand_leader")
    assert verdict(lost)[0] == "blocked"
    assert race.first.triggers.ensured == [("jira_assignment_assignee", "TCID-1")]
    assert race.slot() == applied(won.id)


# -- (c) the owner reconciles while a non-owner meets its intent ------------------------------


def crash_in_the_write(race: Race) -> Execution:
    """Execution 7 stored its intent and died before its Jira write; what boot
    recovery reloads."""
    ex = race.to_the_deadline(race.first)
    with pytest.raises(Crash):
        race.first.run(ex, jira=Crashing(race.jira, "assign", "before"))
    assert race.slot()["escalation_intent"]["state"] == "prepared"
    return race.first.restart()


def test_a_non_owner_meeting_the_pending_intent_while_the_owner_reconciles_fails_closed(store):
    race = Race(store)
    owner = crash_in_the_write(race)
    other = race.to_the_deadline(race.second)
    lookups = len(race.jira.calls("find_user_by_email"))
    other_done = threading.Event()

    def non_owner():
        try:
            return race.second.run(other)
        finally:
            other_done.set()

    reconciled, met = run_threads(
        lambda: race.first.run(owner, jira=Gate(race.jira, "assign",
                                                before=lambda: waited(other_done))),
        non_owner)

    assert verdict(met) == ("blocked", "pending_intent")
    assert len(race.jira.calls("find_user_by_email")) == lookups  # no leader asked for
    assert verdict(reconciled) == ("escalated", None)
    assert race.role_writes() == [("assign", "TCID-1", "acc-bob")]
    assert race.slot() == applied(owner.id)


def test_the_leaders_workflow_meeting_the_intent_after_the_owners_write_completes_it(store):
    race = Race(store)
    owner = crash_in_the_write(race)
    written, leader_done = threading.Event(), threading.Event()

    def leaders_workflow():  # Bob's own workflow, woken by the write: card to escalation
        waited(written)
        try:
            return race.second.run(race.to_the_deadline(race.second))
        finally:
            leader_done.set()

    def hold_after_the_write():
        written.set()
        waited(leader_done)

    reconciled, completed = run_threads(
        lambda: race.first.run(owner, jira=Gate(race.jira, "assign",
                                                after=hold_after_the_write)),
        leaders_workflow)

    assert verdict(completed) == ("blocked", "no_grand_leader")
    assert verdict(reconciled) == ("escalated", None)
    assert race.role_writes() == [("assign", "TCID-1", "acc-bob")]
    assert all(call[2] != CAROL.account_id for call in race.role_writes())
    assert race.slot() == applied(owner.id)


def test_a_non_owner_that_read_jira_before_the_owners_write_does_not_take_it_over(store):
    """The non-owner's guard read Alice before the owner's reconcile wrote Bob; it reaches
    the slot only after the owner's marker. It must not escalate, nor wake Bob again."""
    race = Race(store)
    owner = crash_in_the_write(race)
    other = race.to_the_deadline(race.second)
    at_the_slot, owner_done = threading.Event(), threading.Event()
    looks: list[int] = []

    def hold():  # the escalation reads the slot for its own intent, guards, then judges
        looks.append(1)
        if len(looks) == 2:
            at_the_slot.set()
            waited(owner_done)

    def owner_reconciles():
        waited(at_the_slot)
        try:
            return race.first.run(owner)
        finally:
            owner_done.set()

    slots = Gate(store.contexts, "find", before=hold)
    reconciled, met = run_threads(owner_reconciles,
                                  lambda: race.second.run(other, contexts=slots))

    assert verdict(reconciled) == ("escalated", None)
    assert race.role_writes() == [("assign", "TCID-1", "acc-bob")]
    assert verdict(met)[0] in ("blocked", "invalidated")
    assert race.first.triggers.ensured == [("jira_assignment_assignee", "TCID-1")]
    assert race.slot() == applied(owner.id)


@pytest.mark.parametrize("round_", range(5))
def test_an_owner_reconciling_while_a_non_owner_runs_leaves_jira_to_the_owner(store, round_):
    """Free-running: whatever the interleaving, only the owner writes Jira, once, nobody goes
    on to the Grand Leader, and the marker ends at the direct leader."""
    race = Race(store)
    owner = crash_in_the_write(race)
    other = race.to_the_deadline(race.second)
    start = threading.Barrier(2, timeout=WAIT)
    writers: list[str] = []

    def as_thread(name, run):
        def work():
            threading.current_thread().name = name
            start.wait()
            return run()
        return work

    jira = Gate(race.jira, "assign",
                before=lambda: writers.append(threading.current_thread().name))
    reconciled, met = run_threads(
        as_thread("owner", lambda: race.first.run(owner, jira=jira)),
        as_thread("non-owner", lambda: race.second.run(other, jira=jira)))

    assert met.status is ExecutionStatus.SUCCEEDED
    assert verdict(reconciled) == ("escalated", None)
    assert writers == ["owner"]
    assert race.role_writes() == [("assign", "TCID-1", "acc-bob")]
    assert race.slot()["auto_escalated_to_account_id"] == "acc-bob"
