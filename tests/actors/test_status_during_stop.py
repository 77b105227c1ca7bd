"""``GET /admin/actors`` is answered on a waitress thread while SIGTERM may be stopping the
runtime on another: a status asked meanwhile answers, or says the runtime is unavailable (a
503), and never fails on what the stop has already taken down."""

from __future__ import annotations

import threading

from tests.fakes import RecordingAction
from tests.harness import rule
from ticket_dispatcher.errors import RuntimeUnavailable

WAIT = 10  # seconds: the bound on every wait for the other thread


def signalling(stopping: threading.Event, monkeypatch) -> threading.Event:
    """The runtime's ``stopping`` flag, made to tell the test (the event returned) when the
    stop has set it."""
    was_set, set_flag = threading.Event(), stopping.set

    def set_and_signal() -> None:
        set_flag()
        was_set.set()

    monkeypatch.setattr(stopping, "set", set_and_signal)
    return was_set


def test_a_status_asked_while_the_runtime_stops_answers_or_says_unavailable(make_harness,
                                                                            monkeypatch):
    h = make_harness(RecordingAction())
    h.policy(rule("test_noop"))
    h.post_trigger()
    runtime, deps = h.runtime, h.runtime.deps
    stopped = signalling(deps.stopping, monkeypatch)
    # Hold the execution pool inside its answer to the status, so the stop begins (and takes
    # the supervisor away) while ``status`` is between its pool answer and its reply.
    answering, resume = threading.Event(), threading.Event()
    gauges = deps.metrics.pool

    def held_gauges(**counts) -> None:
        if not answering.is_set():
            answering.set()
            resume.wait(WAIT)
        gauges(**counts)

    deps.metrics.pool = held_gauges
    outcome: list[object] = []

    def status() -> None:
        try:
            outcome.append(runtime.status())
        except Exception as exc:  # the assertion below names it
            outcome.append(exc)

    asking = threading.Thread(target=status)
    asking.start()
    assert answering.wait(WAIT)
    stopping_thread = threading.Thread(target=runtime.stop)
    stopping_thread.start()
    assert stopped.wait(WAIT)  # the supervisor is gone by now
    resume.set()
    asking.join(WAIT)
    stopping_thread.join(WAIT)
    h.runtime = None  # stopped here

    [answer] = outcome
    assert isinstance(answer, (dict, RuntimeUnavailable)), repr(answer)
    if isinstance(answer, dict):
        assert answer["supervisor"]["alive"] in (True, False)
