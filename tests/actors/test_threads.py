"""Kept threads for short-lived actors: a stopped actor's thread runs the next actor's loop,
and a busy one never holds the next actor back."""

from __future__ import annotations

import threading
from datetime import timedelta

from tests.process import wait_until
from ticket_dispatcher.actors.threads import ActorThreads

SETTLE = 10  # seconds: a bound for threads to get where they are going, never a wait for time


def run_and_wait(threads: ActorThreads, loop, *, waiting_after: int) -> threading.Thread:
    """Run ``loop``; the thread it ran on, once ``waiting_after`` threads wait again."""
    ran: list[threading.Thread] = []

    def recorded() -> None:
        ran.append(threading.current_thread())
        loop()

    threads.run(recorded)
    wait_until(lambda: ran and threads.waiting() == waiting_after, SETTLE,
               f"{waiting_after} threads waiting")
    return ran[0]


def test_the_next_actor_runs_on_the_thread_a_stopped_one_left():
    threads = ActorThreads("test")

    first = run_and_wait(threads, lambda: None, waiting_after=1)
    second = run_and_wait(threads, lambda: None, waiting_after=1)

    assert second is first
    assert first.name == "test-1" and first.daemon
    assert threads.waiting() == 1


def test_an_actor_still_running_never_holds_the_next_one_back():
    threads = ActorThreads("test")
    release, started = threading.Event(), threading.Event()

    def stuck() -> None:
        started.set()
        release.wait(SETTLE)

    threads.run(stuck)
    assert started.wait(SETTLE)
    other = run_and_wait(threads, lambda: None, waiting_after=1)  # the first still runs

    assert other.name == "test-2"
    release.set()


def test_a_thread_left_without_an_actor_ends_after_its_keep():
    threads = ActorThreads("test", keep=timedelta(0))

    thread = run_and_wait(threads, lambda: None, waiting_after=0)
    thread.join(SETTLE)

    assert not thread.is_alive()
    assert run_and_wait(threads, lambda: None, waiting_after=0).name == "test-2"
