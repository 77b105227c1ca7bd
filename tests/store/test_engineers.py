"""Engineer repository: put semantics, single-statement dispatch state and round robin's
turn under row locks."""

from __future__ import annotations

import functools
import itertools
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from ticket_dispatcher.domain.availability import TimeOff, on_time_off
from ticket_dispatcher.domain.model import Engineer
from ticket_dispatcher.domain.rotation import next_in_turn
from ticket_dispatcher.errors import NotFound
from ticket_dispatcher.store.connect import is_postgres
from ticket_dispatcher.store.database import unit_of_work
from ticket_dispatcher.store.models import time_param

T0 = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)


def test_put_creates_with_lower_cased_email_and_empty_defaults(store):
    engineer, created = store.engineers.put("Alice@Example.COM", dispatch_enabled=True, now=T0)

    assert created is True
    assert engineer == store.engineers.get("alice@example.com")
    assert (engineer.email, engineer.display_name, engineer.jira_account_id) == (
        "alice@example.com", "", "")
    assert engineer.last_dispatched_at is None and engineer.created_at == T0


def test_put_update_keeps_values_given_as_none(store):
    store.engineers.put("a@x.com", dispatch_enabled=True, display_name="Alice",
                        jira_account_id="acc-1", now=T0)

    engineer, created = store.engineers.put("A@X.com", dispatch_enabled=False,
                                            now=T0 + timedelta(1))
    renamed, _ = store.engineers.put("a@x.com", dispatch_enabled=False, display_name="Al",
                                     jira_account_id="", now=T0)

    assert created is False
    assert (engineer.display_name, engineer.jira_account_id, engineer.dispatch_enabled) == (
        "Alice", "acc-1", False)
    assert engineer.created_at == T0 and engineer.updated_at == T0 + timedelta(1)
    assert (renamed.display_name, renamed.jira_account_id) == ("Al", "")
    assert store.engineers.get("a@x.com") == renamed


def test_delete_removes_and_missing_is_not_found(store):
    store.engineers.put("a@x.com", dispatch_enabled=True, now=T0)

    store.engineers.delete("A@x.com")

    with pytest.raises(NotFound):
        store.engineers.get("a@x.com")
    with pytest.raises(NotFound, match="engineer a@x.com not found"):
        store.engineers.delete("a@x.com")


def test_deleting_an_engineer_deletes_their_time_off_and_a_new_one_starts_without(store):
    store.engineers.put("a@x.com", dispatch_enabled=True, now=T0)
    store.time_off.add(TimeOff(None, "a@x.com", T0, T0 + timedelta(days=40), "leave"), now=T0)

    store.engineers.delete("a@x.com")
    store.engineers.put("a@x.com", dispatch_enabled=True, now=T0)

    assert store.time_off.page("a@x.com", now=T0, past=True) == ([], 0)
    assert store.engineers.time_off(["a@x.com"], T0, T0 + timedelta(days=14)) == {}


def test_time_off_for_an_engineer_deleted_meanwhile_is_not_found(store):
    store.engineers.put("a@x.com", dispatch_enabled=True, now=T0)
    store.engineers.delete("a@x.com")

    with pytest.raises(NotFound, match="engineer a@x.com not found"):
        store.time_off.add(TimeOff(None, "a@x.com", T0, T0 + timedelta(days=1), ""), now=T0)


def test_back_to_back_time_off_is_read_to_its_real_end_past_the_window(store, query_counter):
    """Leave in three entries, the last starting after the window asked for: read on to its
    end, for the reads and for an assignment's; an engineer whose leave ends inside the window
    costs no second query."""
    store.engineers.put("a@x.com", dispatch_enabled=True, now=T0)
    store.engineers.put("b@x.com", dispatch_enabled=True, now=T0)
    day = timedelta(days=1)
    for start, end in ((-5, 9), (9, 19), (19, 50), (50, 420), (420, 425)):
        store.time_off.add(TimeOff(None, "a@x.com", T0 + start * day, T0 + end * day, "away"),
                           now=T0)
    store.time_off.add(TimeOff(None, "a@x.com", T0 + 500 * day, T0 + 501 * day, "later"), now=T0)
    store.time_off.add(TimeOff(None, "b@x.com", T0 - day, T0 + 3 * day, "short"), now=T0)

    read = store.engineers.time_off(["a@x.com", "b@x.com"], T0, T0 + 14 * day)
    _, judged = store.engineers.hindered(["a@x.com", "b@x.com"], T0, T0 + 14 * day, hours=False)

    for entries in (read, judged):
        assert on_time_off(None, entries["a@x.com"], T0).until == T0 + 425 * day
        assert [entry.end for entry in entries["b@x.com"]] == [T0 + 3 * day]
    with query_counter() as counted:
        store.engineers.time_off(["b@x.com"], T0, T0 + 14 * day)
    assert len(counted.statements) == 1


def test_list_filters_by_switch_and_pages_by_email_and_named_reads_given_emails(
        store, query_counter):
    for email, enabled in [("c@x.com", True), ("a@x.com", False), ("b@x.com", True)]:
        store.engineers.put(email, dispatch_enabled=enabled, now=T0)

    everything, total = store.engineers.page()
    enabled, _ = store.engineers.page(dispatch_enabled=True)
    with query_counter() as counted:
        chosen = store.engineers.named(["C@x.com", "a@x.com", "zz@x.com"])
    page, page_total = store.engineers.page(limit=1, offset=1)

    assert ([e.email for e in everything], total) == (["a@x.com", "b@x.com", "c@x.com"], 3)
    assert [e.email for e in enabled] == ["b@x.com", "c@x.com"]
    assert [e.email for e in chosen] == ["a@x.com", "c@x.com"]
    assert len(counted.statements) == 1
    assert ([e.email for e in page], page_total) == (["b@x.com"], 3)
    assert store.engineers.named([]) == []


def test_enabled_by_email_returns_only_dispatch_enabled_engineers_in_one_query(
    store, query_counter
):
    store.engineers.put("a@x.com", dispatch_enabled=True, now=T0)
    store.engineers.put("b@x.com", dispatch_enabled=False, now=T0)

    with query_counter() as queries:
        found = store.engineers.enabled_by_email(["B@x.com", "A@x.com", "nobody@x.com"])

    assert [e.email for e in found] == ["a@x.com"]
    assert queries.count == 1
    assert store.engineers.enabled_by_email([]) == []


def test_dispatch_state_is_one_update_statement(store, query_counter):
    store.engineers.put("a@x.com", dispatch_enabled=True, display_name="Alice", now=T0)
    dispatched = T0 + timedelta(minutes=5)

    with query_counter() as queries:
        updated = store.engineers.update_dispatch_state(
            "A@x.com", dispatched_at=dispatched, issue_key="TCID-1", now=dispatched)

    assert updated is True
    assert len(queries.statements) == 1 and queries.statements[0].startswith("UPDATE")
    engineer = store.engineers.get("a@x.com")
    assert (engineer.last_dispatched_at, engineer.last_dispatched_issue) == (dispatched, "TCID-1")
    assert engineer.display_name == "Alice"


def test_dispatch_state_of_a_missing_engineer_reports_false(store):
    assert store.engineers.update_dispatch_state(
        "ghost@x.com", dispatched_at=T0, issue_key="TCID-1", now=T0) is False
    assert store.engineers.set_jira_account_id("ghost@x.com", "acc", T0) is False


def test_jira_account_cache_is_one_update_of_its_column(store, query_counter):
    store.engineers.put("a@x.com", dispatch_enabled=True, display_name="Alice", now=T0)

    with query_counter() as queries:
        assert store.engineers.set_jira_account_id("a@x.com", "acc-9", T0) is True

    assert queries.count == 1
    engineer = store.engineers.get("a@x.com")
    assert (engineer.jira_account_id, engineer.display_name) == ("acc-9", "Alice")


def test_concurrent_writers_of_different_columns_lose_nothing(store):
    store.engineers.put("a@x.com", dispatch_enabled=True, now=T0)
    rounds = 15
    barrier = threading.Barrier(3)
    errors = []

    def dispatch():
        for i in range(rounds):
            store.engineers.update_dispatch_state(
                "a@x.com", dispatched_at=T0 + timedelta(minutes=i), issue_key=f"TCID-{i}",
                now=T0)

    def cache_account():
        for i in range(rounds):
            store.engineers.set_jira_account_id("a@x.com", f"acc-{i}", T0)

    def rename():
        for i in range(rounds):
            store.engineers.put("a@x.com", dispatch_enabled=True, display_name=f"Alice {i}",
                                now=T0)

    def run(work):
        barrier.wait()
        try:
            work()
        except Exception as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(w,)) for w in (dispatch, cache_account, rename)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    last = rounds - 1
    engineer = store.engineers.get("a@x.com")
    assert errors == []
    assert engineer.last_dispatched_issue == f"TCID-{last}"
    assert engineer.last_dispatched_at == T0 + timedelta(minutes=last)
    assert engineer.jira_account_id == f"acc-{last}"
    assert engineer.display_name == f"Alice {last}"


# -- round robin's turn: chosen and advanced in one transaction under row locks -------------


def enable(store, *emails: str, enabled: bool = True) -> None:
    for email in emails:
        store.engineers.put(email, dispatch_enabled=enabled, now=T0)


def test_concurrent_turns_spread_evenly_over_the_engineers(store):
    enable(store, "a@x.com", "b@x.com", "c@x.com")
    threads, turns = 8, 300
    clock = itertools.count()  # each turn reads its time before it waits for the lock,
    guard = threading.Lock()   # so the lock is often won by a later time: as in production
    barrier = threading.Barrier(threads)
    chosen: list[str] = []
    errors: list[Exception] = []

    def take_turns(count: int) -> None:
        barrier.wait()
        try:
            for _ in range(count):
                with guard:
                    tick = next(clock)
                engineer = store.engineers.take_turn(
                    ["a@x.com", "b@x.com", "c@x.com"], issue_key=f"TCID-{tick}",
                    now=T0 + timedelta(milliseconds=tick))
                chosen.append(engineer.chosen.email)
        except Exception as exc:  # collected and asserted below
            errors.append(exc)

    workers = [threading.Thread(target=take_turns, args=(turns // threads + (i < turns % threads),))
               for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()

    assert errors == []
    assert Counter(chosen) == {"a@x.com": 100, "b@x.com": 100, "c@x.com": 100}


def test_turn_goes_to_the_never_dispatched_then_the_oldest_and_advances_it(store):
    enable(store, "a@x.com", "b@x.com")
    store.engineers.update_dispatch_state("a@x.com", dispatched_at=T0, issue_key="X-1", now=T0)
    later = T0 + timedelta(minutes=5)

    first = store.engineers.take_turn(["A@x.com", "b@x.com"], issue_key="TCID-1", now=later)
    second = store.engineers.take_turn(["a@x.com", "b@x.com"], issue_key="TCID-2",
                                       now=later + timedelta(1))

    # each answer is the engineer as it was before its turn: why it was chosen
    assert (first.chosen.email, first.chosen.last_dispatched_at) == ("b@x.com", None)
    assert (second.chosen.email, second.chosen.last_dispatched_at) == ("a@x.com", T0)
    b, a = store.engineers.get("b@x.com"), store.engineers.get("a@x.com")
    assert (b.last_dispatched_at, b.last_dispatched_issue, b.updated_at) == (
        later, "TCID-1", later)
    assert (a.last_dispatched_at, a.last_dispatched_issue) == (later + timedelta(1), "TCID-2")


def test_turn_ties_follow_the_configured_order(store):
    enable(store, "a@x.com", "b@x.com", "c@x.com")
    for email in ("a@x.com", "b@x.com", "c@x.com"):
        store.engineers.update_dispatch_state(email, dispatched_at=T0, issue_key="X-1", now=T0)
    order = ["c@x.com", "a@x.com", "b@x.com"]

    turns = [store.engineers.take_turn(order, issue_key=f"TCID-{i}",
                                       now=T0 + timedelta(minutes=i)).chosen.email
             for i in range(1, 7)]

    assert turns == order * 2


def test_turn_skips_disabled_and_unknown_engineers_and_none_left_writes_nothing(store):
    enable(store, "a@x.com", "c@x.com")
    enable(store, "b@x.com", enabled=False)

    turns = [store.engineers.take_turn(["b@x.com", "ghost@x.com", "a@x.com", "c@x.com"],
                                       issue_key=f"TCID-{i}",
                                       now=T0 + timedelta(minutes=i)).chosen.email
             for i in range(1, 5)]
    nobody = store.engineers.take_turn(["b@x.com", "ghost@x.com"], issue_key="TCID-9", now=T0)
    among = store.engineers.take_turn(["c@x.com", "ghost@x.com", "A@x.com", "b@x.com"],
                                      issue_key="TCID-10", now=T0 + timedelta(minutes=9))

    assert turns == ["a@x.com", "c@x.com", "a@x.com", "c@x.com"]
    assert nobody is None
    assert store.engineers.get("b@x.com").last_dispatched_at is None
    # the candidates the turn chose among: the enabled ones, in the order asked
    assert [e.email for e in among.candidates] == ["c@x.com", "a@x.com"]
    assert store.engineers.take_turn([], issue_key="TCID-9", now=T0) is None


def test_turn_sends_the_chosen_to_the_back_even_when_another_took_a_later_time_first(store):
    # Another replica (or a thread that read the clock later) marked a ahead of this turn's
    # ``now``: b must still land behind a, or b would have the next turn after c too.
    enable(store, "a@x.com", "b@x.com", "c@x.com")
    order = ["a@x.com", "b@x.com", "c@x.com"]
    store.engineers.take_turn(order, issue_key="TCID-1", now=T0 + timedelta(seconds=10))

    store.engineers.take_turn(order, issue_key="TCID-2", now=T0)
    marked = store.engineers.get("b@x.com").last_dispatched_at
    turns = [store.engineers.take_turn(order, issue_key=f"TCID-{i}",
                                       now=T0 + timedelta(seconds=i)).chosen.email
             for i in range(3, 7)]

    assert marked == T0 + timedelta(seconds=10, microseconds=1)
    assert turns == ["c@x.com", "a@x.com", "b@x.com", "c@x.com"]


def test_turn_locks_the_candidate_rows_in_one_transaction(store, query_counter):
    enable(store, "a@x.com", "b@x.com")

    with query_counter() as queries:
        store.engineers.take_turn(["b@x.com", "a@x.com"], issue_key="TCID-1", now=T0)

    if is_postgres(store.db):  # one statement: the rows locked, the chosen one marked
        [turn] = queries.statements
        assert "ORDER BY email FOR UPDATE" in turn and "UPDATE engineers SET" in turn
        return
    select, update = queries.statements  # in SQLite's BEGIN IMMEDIATE
    assert select.startswith("SELECT") and update.startswith("UPDATE")
    assert "FOR UPDATE" not in select and "ORDER BY" in select


def test_turns_follow_the_one_rule_of_the_round_robin_whatever_the_marks(store):
    # PostgreSQL chooses and marks in SQL: it must agree with ``next_in_turn`` and the mark
    # rule on every kind of state (never dispatched, equal marks, a mark ahead of ``now``).
    emails = [f"{name}@x.com" for name in "abcde"]
    for email in emails:  # with what an assignment needs of the one chosen
        store.engineers.put(email, dispatch_enabled=True, display_name=email.upper(),
                            jira_account_id=f"acc-{email}", now=T0)
    marks = [None, T0, T0 + timedelta(seconds=5), T0 + timedelta(seconds=30)]
    for round_ in range(40):
        with unit_of_work(store.db):
            for i, email in enumerate(emails):
                mark = marks[(round_ * 7 + i * 3) % len(marks) if round_ % 5 else 0]
                store.db.execute_sql("UPDATE engineers SET last_dispatched_at = "
                                     f"{store.db.param} WHERE email = {store.db.param}",
                                     (time_param(mark), email))
        order = emails[round_ % 5:] + emails[:round_ % 5]
        before = [store.engineers.get(email) for email in order]
        now = T0 + timedelta(seconds=10)

        turn = store.engineers.take_turn(order, issue_key=f"TCID-{round_}", now=now)

        def turn_fields(engineer: Engineer) -> tuple:  # what a turn reads of a candidate
            return (engineer.email, engineer.display_name, engineer.jira_account_id,
                    engineer.last_dispatched_at, engineer.last_dispatched_issue)

        assert turn_fields(turn.chosen) == turn_fields(next_in_turn(before))
        assert [turn_fields(e) for e in turn.candidates] == [turn_fields(e) for e in before]
        newest = max((e.last_dispatched_at for e in before if e.last_dispatched_at),
                     default=None)
        expected = now if newest is None or newest < now else newest + timedelta(microseconds=1)
        assert store.engineers.get(turn.chosen.email).last_dispatched_at == expected


def test_a_dispatch_record_never_moves_a_later_mark_back(store):
    """Concurrent executions: an engineer's turn for one issue may be taken (or another
    dispatch recorded) before an earlier dispatch is recorded; the rotation must not go back."""
    enable(store, "a@x.com", "b@x.com")
    order = ["a@x.com", "b@x.com"]
    store.engineers.take_turn(order, issue_key="TCID-1", now=T0 + timedelta(seconds=10))
    store.engineers.take_turn(order, issue_key="TCID-2", now=T0)  # b, marked after a
    turn = T0 + timedelta(seconds=10, microseconds=1)

    for issue_key in ("TCID-2", "TCID-3"):  # its own issue's record, or another's
        store.engineers.update_dispatch_state("b@x.com", dispatched_at=T0, issue_key=issue_key,
                                              now=T0)
        kept = store.engineers.get("b@x.com")
        assert (kept.last_dispatched_at, kept.last_dispatched_issue) == (turn, "TCID-2")
    later = T0 + timedelta(seconds=20)
    store.engineers.update_dispatch_state("b@x.com", dispatched_at=later, issue_key="TCID-3",
                                          now=later)
    moved = store.engineers.get("b@x.com")
    assert (moved.last_dispatched_at, moved.last_dispatched_issue) == (later, "TCID-3")


def test_the_record_of_the_issue_whose_turn_was_taken_keeps_the_turns_place(store):
    """An assignment lands after its turn, and after turns others took meanwhile: recording it
    must not move the engineer behind them, or the rotation goes out of order."""
    enable(store, "a@x.com", "b@x.com")
    order = ["a@x.com", "b@x.com"]
    assert store.engineers.take_turn(order, issue_key="TCID-1", now=T0).chosen.email == "a@x.com"
    later = T0 + timedelta(seconds=1)
    assert store.engineers.take_turn(order, issue_key="TCID-2", now=later).chosen.email == "b@x.com"

    landed = T0 + timedelta(seconds=2)  # a's assignment of TCID-1 lands after b's turn
    assert store.engineers.update_dispatch_state("a@x.com", dispatched_at=landed,
                                                 issue_key="TCID-1", now=landed)

    kept = store.engineers.get("a@x.com")
    assert (kept.last_dispatched_at, kept.last_dispatched_issue) == (T0, "TCID-1")
    third = T0 + timedelta(seconds=3)
    assert store.engineers.take_turn(order, issue_key="TCID-3", now=third).chosen.email == "a@x.com"


def test_a_rotation_of_two_hundred_reads_and_turns_like_one_of_three(store):
    """A large organisation's rotation: a long list of candidates is one parameter on
    PostgreSQL, whatever its length; the reads and the turn answer as for a short one."""
    emails = [f"eng{n:03}@x.com" for n in range(200)]
    for n, email in enumerate(emails):
        store.engineers.put(email, dispatch_enabled=n != 7, jira_account_id=f"acc-{n}",
                            availability={"max_open_issues": 3} if n == 150 else None, now=T0)
    store.time_off.add(TimeOff(None, emails[42], T0 - timedelta(hours=1), T0 + timedelta(days=2),
                               "holiday"), now=T0)
    store.time_off.add(TimeOff(None, emails[43], T0 + timedelta(days=5), T0 + timedelta(days=6),
                               "later"), now=T0)
    rotation = list(reversed(emails))

    hindered, away = store.engineers.hindered(rotation, T0, T0 + timedelta(days=1), hours=False)
    assert sorted(e.email for e in hindered) == [emails[42], emails[150]]
    assert [entry.reason for entry in away[emails[42]]] == ["holiday"] and emails[43] not in away
    enabled = store.engineers.enabled_by_email(rotation)
    assert len(enabled) == 199 and emails[7] not in {e.email for e in enabled}

    chosen = [store.engineers.take_turn(rotation, issue_key=f"TCID-{n}",
                                        now=T0 + timedelta(seconds=n)).chosen
              for n in range(3)]
    assert [e.email for e in chosen] == [emails[199], emails[198], emails[197]]
    assert [e.jira_account_id for e in chosen] == ["acc-199", "acc-198", "acc-197"]
    turn = store.engineers.take_turn(rotation, issue_key="TCID-3", now=T0 + timedelta(seconds=3))
    assert len(turn.candidates) == 199 and turn.chosen.email == emails[196]


def test_a_list_parameter_reaches_the_database_as_it_was_given(store):
    """Lists travel as one parameter on PostgreSQL (an array literal the statement casts):
    whatever an element holds, the row it names is the one found, and no other."""
    awkward = ['a,b@x.com', 'quote"d@x.com', 'back\\slash@x.com', '{brace}@x.com',
               'sp ace@x.com', 'NULL', 'ünïcode@x.com', "o'brien@x.com"]
    for email in awkward + ["a@x.com", "b@x.com"]:
        store.engineers.put(email, dispatch_enabled=True, now=T0)

    found = store.engineers.enabled_by_email(awkward)

    assert sorted(e.email for e in found) == sorted(e.lower() for e in awkward)
    turn = store.engineers.take_turn(list(reversed(awkward)), issue_key="TCID-1", now=T0)
    assert turn.chosen.email == awkward[-1]
    assert [e.email for e in turn.candidates] == [e.lower() for e in reversed(awkward)]


def test_dispatch_switches_name_the_engineers_among_the_emails(store):
    now = datetime(2026, 1, 1, tzinfo=UTC)
    store.engineers.put("on@x.com", dispatch_enabled=True, now=now)
    store.engineers.put("off@x.com", dispatch_enabled=False, now=now)

    assert store.engineers.dispatch_switches(["ON@x.com", "off@x.com", "none@x.com"]) == {
        "on@x.com": True, "off@x.com": False}
    assert store.engineers.dispatch_switches([]) == {}


def test_time_off_is_counted_by_feed_for_one_engineer_in_one_query(store, query_counter):
    for email in ("a@x.com", "b@x.com"):
        store.engineers.put(email, dispatch_enabled=True, now=T0)
    entry = functools.partial(TimeOff, None, start=T0, end=T0 + timedelta(days=1))
    store.calendar_feeds.replace_feed("hr", None, [
        entry(email="a@x.com", source="hr"), entry(email="b@x.com", source="hr"),
        entry(email="b@x.com", source="hr")], T0)
    store.calendar_feeds.replace_feed("b-own", "b@x.com", [
        entry(email="b@x.com", source="b-own")], T0)
    store.time_off.add(entry(email="a@x.com", source="api"), T0)

    with query_counter() as counted:
        counts = store.time_off.count_by_source("a@x.com", ["hr", "b-own"])

    assert counts == {"hr": 1, "b-own": 0}
    assert store.time_off.count_by_source("b@x.com", ["hr"]) == {"hr": 2}
    assert store.time_off.count_by_source("a@x.com", []) == {}
    assert counted.count == 1
