"""Writes asked for together, done together (``GroupedWrites``), driven by events: no timing."""

from __future__ import annotations

import threading

import pytest

from ticket_dispatcher.errors import StoreUnavailable
from ticket_dispatcher.store.grouped import GroupedWrites

WAIT = 5  # seconds: the bound on every wait for something that should happen at once


class Writes:
    """write_one and write_many that record their calls; the first write_one waits for
    ``release`` once it has begun (``begun``), so callers can queue behind it."""

    def __init__(self, refuse: set[str] = frozenset(), many_fails: Exception | None = None):
        self.refuse, self.many_fails = refuse, many_fails
        self.ones: list[str] = []
        self.manys: list[list[str]] = []
        self.begun, self.release = threading.Event(), threading.Event()

    def one(self, item: str) -> str:
        self.ones.append(item)
        if len(self.ones) == 1:
            self.begun.set()
            assert self.release.wait(WAIT)
        if item in self.refuse:
            raise ValueError(f"{item} refused")
        return f"{item}:alone"

    def many(self, items: list[str]) -> list[str]:
        self.manys.append(list(items))
        if self.many_fails is not None:
            raise self.many_fails
        return [f"{item}:together" for item in items]


class Caller(threading.Thread):
    def __init__(self, grouped: GroupedWrites, item: str):
        super().__init__(daemon=True)
        self.grouped, self.item = grouped, item
        self.result: str | None = None
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self.result = self.grouped.write(self.item)
        except BaseException as exc:
            self.error = exc


def queued(grouped: GroupedWrites, count: int) -> None:
    """Wait until ``count`` callers queue behind the write under way."""
    done = threading.Event()
    for _ in range(WAIT * 1000):
        with grouped._lock:
            if len(grouped._queue) == count:
                return
        done.wait(0.001)
    raise AssertionError(f"{count} callers never queued")


def burst(writes: Writes, items: list[str]) -> tuple[GroupedWrites, Caller, list[Caller]]:
    """The first item's write under way, the others queued behind it, then released."""
    grouped = GroupedWrites(writes.one, writes.many)
    first = Caller(grouped, items[0])
    assert writes.begun.wait(WAIT)
    others = []
    for index, item in enumerate(items[1:], start=1):
        others.append(Caller(grouped, item))
        queued(grouped, index)
    writes.release.set()
    for caller in (first, *others):
        caller.join(WAIT)
        assert not caller.is_alive()
    return grouped, first, others


def test_a_lone_write_is_written_at_once_alone():
    writes = Writes()
    writes.release.set()
    grouped = GroupedWrites(writes.one, writes.many)

    assert grouped.write("a") == "a:alone"
    assert grouped.write("b") == "b:alone"
    assert writes.manys == []


def test_writes_that_queue_behind_one_are_written_together_each_getting_its_own():
    writes = Writes()

    _, first, others = burst(writes, ["a", "b", "c", "d"])

    assert first.result == "a:alone"
    assert [caller.result for caller in others] == ["b:together", "c:together", "d:together"]
    assert writes.manys == [["b", "c", "d"]]  # in the order they arrived


def test_when_the_database_fails_a_group_every_caller_in_it_raises_that_failure():
    writes = Writes(many_fails=StoreUnavailable("the database went away", kind="connection"))

    _, first, others = burst(writes, ["a", "b", "c"])

    assert first.result == "a:alone"
    for caller in others:
        assert isinstance(caller.error, StoreUnavailable)
        assert caller.error.kind == "connection"
    assert others[0].error is not others[1].error  # each its own copy
    assert writes.ones == ["a"]  # nobody wrote again


def test_when_a_group_fails_otherwise_each_row_is_written_alone_and_only_its_own_failure_raises():
    writes = Writes(refuse={"c"}, many_fails=ValueError("one row refused"))

    _, _, others = burst(writes, ["a", "b", "c", "d"])

    b, c, d = others
    assert (b.result, d.result) == ("b:alone", "d:alone")
    assert isinstance(c.error, ValueError) and str(c.error) == "c refused"
    assert sorted(writes.ones) == ["a", "b", "c", "d"]


@pytest.mark.parametrize("callers", [2, 9])
def test_after_a_group_the_next_lone_write_is_again_written_at_once(callers):
    writes = Writes()
    grouped, _, _ = burst(writes, [str(index) for index in range(callers)])

    assert grouped.write("z") == "z:alone"
    assert not grouped._busy and grouped._queue == []
