"""The chaos soak's load: Jira Automation posting triggers, and people acknowledging pages.

``Load`` posts, at a steady modest rate (``LoadConfig.rate`` triggers a second), two mixes:

- ``assign``: ordinary triggers (source ``jira_automation``) for CHAOS issues, which the
  round-robin policy assigns; some issues get a second trigger later;
- ``notify``: ``jira_assignment_assignee`` triggers for PAGE issues prepared in the fake Jira
  with the ``notify-assignee`` label, an assignee, ``Todo`` and mostly an urgent priority, as
  Jira Automation sends them after it added the label.

Each issue is created in the fakes (control API) just before its first trigger. Requests go to
the replicas in turn, from a bounded pool of threads; a tick that finds every thread busy is
counted and dropped, so the load never queues up behind a stalled cluster. A trigger answered
503 (or 429) is sent again after its ``Retry-After``, and one that got no answer (refused,
reset, timed out) after a short backoff, to the next replica, up to ``attempts`` tries: what a
careful Jira Automation rule behind a load balancer does. An issue's next trigger waits until
its previous one was answered (or gave up), as Automation runs one rule per issue at a time.

Some notified assignees acknowledge at a random moment after the trigger was accepted: they
read the card (once Lark has it) or move the issue out of ``Todo``, through the fakes' control
API. Every request goes to ``requests.jsonl`` and every ACK to ``acks.jsonl`` (the run
directory's history, see tests/chaos/checker.py).
"""

from __future__ import annotations

import heapq
import itertools
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from tests.chaos.cluster import (
    ASSIGN_PROJECT,
    ASSIGNEES,
    AUTO_ASSIGN_LABEL,
    NOTIFY_LABEL,
    NOTIFY_PROJECT,
    PENDING_STATUS,
    Fakes,
)
from tests.process import BASE

ASSIGN_SOURCE, NOTIFY_SOURCE = "jira_automation", "jira_assignment_assignee"
REQUEST_TIMEOUT = (3.0, 10.0)  # connect, read: Jira Automation's web request gives up too
RETRY_STATUSES = (429, 503)
MAX_RETRY_AFTER_S = 10.0
CARD_READ_TRIES = 10  # a card read waits for the card to exist, once a second
STOP_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class LoadConfig:
    rate: float = 4.0  # triggers a second, both mixes
    notify_share: float = 0.25
    again_share: float = 0.1  # a further trigger for an issue triggered before
    urgent_share: float = 0.75  # notify issues with an urgent priority (pages, waits)
    threads: int = 16  # a paused replica holds each request it gets for the read timeout
    attempts: int = 6
    ack_share: float = 0.5
    ack_delay_s: tuple[float, float] = (0.0, 20.0)
    card_read_share: float = 0.6  # of the ACKs; the others are a status change


class History:
    """One JSON-lines file, appended from many threads, each line flushed."""

    def __init__(self, path: Path):
        self._file = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, record: dict[str, Any]) -> None:
        with self._lock:
            self._file.write(json.dumps(record) + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


@dataclass
class _Issue:
    key: str
    mix: str
    assignee: str | None = None  # notify: the assignee's email
    busy: bool = False  # a trigger for it is being sent
    triggers: int = 0
    fields: dict[str, Any] | None = None  # until it is created in the fakes


class Load:
    """Posts the triggers and gives the ACKs from ``start`` until ``stop``."""

    def __init__(self, urls: Sequence[tuple[int, str]], automation_key: str, fakes: Fakes,
                 run_dir: Path, seed: int, config: LoadConfig | None = None, *,
                 say: Callable[[str], None] = print):
        self.urls = list(urls)
        self.key = automation_key
        self.fakes = fakes
        self.config = config = config or LoadConfig()
        self.say = say
        self.rng = random.Random(f"{seed}/load")
        self.requests = History(run_dir / "requests.jsonl")
        self.acks = History(run_dir / "acks.jsonl")
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._issues: list[_Issue] = []
        self._numbers = {"assign": itertools.count(1), "notify": itertools.count(1)}
        self._turn = itertools.cycle(range(len(self.urls)))
        self._slots = threading.BoundedSemaphore(config.threads)
        self._pool = ThreadPoolExecutor(max_workers=config.threads, thread_name_prefix="load")
        self._local = threading.local()
        self._stop = threading.Event()  # no new trigger, no ACK still to come
        self._abort = threading.Event()  # cut retries short too (cleanup)
        self._ack_due: list[tuple[float, int, _Issue, str]] = []
        self._ack_wake = threading.Condition(self._lock)
        self._ack_seq = itertools.count()
        self._threads = [threading.Thread(target=self._tick, name="load-ticks", daemon=True),
                         threading.Thread(target=self._ack_loop, name="load-acks",
                                          daemon=True)]

    # -- life cycle ---------------------------------------------------------------------------

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """No new trigger from now on; the ones in flight finish their tries (bounded), ACKs
        not yet due are dropped."""
        self._stop.set()
        with self._ack_wake:
            self.counts["acks_dropped"] += len(self._ack_due)
            self._ack_due.clear()
            self._ack_wake.notify_all()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        for _ in range(self.config.threads):  # every slot back: every trigger job ended
            if not self._slots.acquire(timeout=max(0.0, deadline - time.monotonic())):
                self._abort.set()
                self.say("load: triggers still being sent at the stop bound; cut short")
                break
        self._pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        self._abort.set()
        self._stop.set()
        self.requests.close()
        self.acks.close()

    def summary(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)

    # -- the triggers -------------------------------------------------------------------------

    def _tick(self) -> None:
        """One trigger every 1/rate seconds, whenever a thread is free for it."""
        period = 1.0 / self.config.rate
        next_at = time.monotonic()
        while not self._stop.is_set():
            next_at += period
            if self._stop.wait(max(0.0, next_at - time.monotonic())):
                return
            if not self._slots.acquire(blocking=False):
                with self._lock:
                    self.counts["ticks_dropped"] += 1
                continue
            issue = self._choose()
            if issue is None:
                self._slots.release()
                continue
            try:
                self._pool.submit(self._send, issue)
            except RuntimeError:  # the pool shut down: stopping
                self._release(issue)
                return

    def _choose(self) -> _Issue | None:
        """The issue of the next trigger (marked busy), new or one triggered before."""
        with self._lock:
            again = self.rng.random() < self.config.again_share
            if again:
                idle = [issue for issue in self._issues if not issue.busy]
                if idle:
                    issue = self.rng.choice(idle)
                    issue.busy = True
                    return issue
            mix = "notify" if self.rng.random() < self.config.notify_share else "assign"
            if mix == "assign":
                issue = _Issue(f"{ASSIGN_PROJECT}-{next(self._numbers[mix])}", mix)
                fields = {"key": issue.key, "labels": [AUTO_ASSIGN_LABEL], "priority": "P3",
                          "status": "Open"}
            else:
                email = self.rng.choice(ASSIGNEES)[0]
                issue = _Issue(f"{NOTIFY_PROJECT}-{next(self._numbers[mix])}", mix, email)
                urgent = self.rng.random() < self.config.urgent_share
                fields = {"key": issue.key, "labels": [NOTIFY_LABEL], "assignee": email,
                          "priority": "P0" if urgent else "P3", "status": PENDING_STATUS}
            issue.busy = True
            issue.fields = fields  # created in the fakes by the sending thread
            self._issues.append(issue)
            return issue

    def _send(self, issue: _Issue) -> None:
        try:
            if issue.fields is not None:
                try:
                    self.fakes.add_issues([issue.fields])
                except Exception as exc:  # noqa: BLE001 (the fakes are part of the soak)
                    self.say(f"load: could not create {issue.key} in the fakes: {exc}")
                    with self._lock:
                        self.counts["issues_not_created"] += 1
                    return
                issue.fields = None
            accepted = self._post(issue)
            if accepted and issue.mix == "notify" and issue.triggers == 1:
                self._maybe_ack(issue)
        finally:
            self._release(issue)

    def _release(self, issue: _Issue) -> None:
        with self._lock:
            issue.busy = False
        self._slots.release()

    def _post(self, issue: _Issue) -> bool:
        """Send the trigger until it is accepted, refused for good, or out of tries."""
        source = ASSIGN_SOURCE if issue.mix == "assign" else NOTIFY_SOURCE
        body = {"source": source, "input": {"issue_key": issue.key}}
        issue.triggers += 1
        turn = None
        for attempt in range(1, self.config.attempts + 1):
            with self._lock:  # the first try takes the next turn, a re-send the next replica
                turn = next(self._turn) if turn is None else (turn + 1) % len(self.urls)
                index, url = self.urls[turn]
            record: dict[str, Any] = {
                "t": time.time(), "t_end": None, "replica": index, "kind": "trigger",
                "issue_key": issue.key, "source": source, "mix": issue.mix, "status": None,
                "retry_after": None, "trigger_id": None, "attempt": attempt, "error": None}
            wait = min(MAX_RETRY_AFTER_S, 0.5 * attempt)
            try:
                response = self._session().post(
                    url + BASE + "/dispatch/triggers", json=body, timeout=REQUEST_TIMEOUT,
                    headers={"X-API-KEY": self.key})
                record["status"] = response.status_code
                record["retry_after"] = response.headers.get("Retry-After")
                if response.status_code == 202:
                    record["trigger_id"] = response.json().get("id")
                wait = _retry_after(record["retry_after"], wait)
            except (requests.RequestException, ValueError) as exc:
                record["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            record["t_end"] = time.time()
            self.requests.write(record)
            status = record["status"]
            with self._lock:
                self.counts[f"answered_{status}" if status else "no_answer"] += 1
            if status == 202:
                with self._lock:
                    self.counts["accepted"] += 1
                return True
            if status is not None and status not in RETRY_STATUSES:
                return False
            if attempt < self.config.attempts and self._abort.wait(wait):
                return False
        with self._lock:
            self.counts["gave_up"] += 1
        return False

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
        return session

    # -- the ACKs -----------------------------------------------------------------------------

    def _maybe_ack(self, issue: _Issue) -> None:
        with self._ack_wake:
            if self._stop.is_set() or self.rng.random() >= self.config.ack_share:
                return
            low, high = self.config.ack_delay_s
            due = time.monotonic() + self.rng.uniform(low, high)
            how = "card_read" if self.rng.random() < self.config.card_read_share \
                else "status_change"
            heapq.heappush(self._ack_due, (due, next(self._ack_seq), issue, how))
            self._ack_wake.notify_all()

    def _ack_loop(self) -> None:
        while True:
            with self._ack_wake:
                while not self._stop.is_set():
                    now = time.monotonic()
                    if self._ack_due and self._ack_due[0][0] <= now:
                        break
                    timeout = self._ack_due[0][0] - now if self._ack_due else 1.0
                    self._ack_wake.wait(timeout=min(1.0, timeout))
                if self._stop.is_set():
                    return
                _, _, issue, how = heapq.heappop(self._ack_due)
            self._ack(issue.key, issue.assignee, how)

    def _ack(self, key: str, email: str | None, how: str) -> None:
        sent = time.time()
        detail: dict[str, Any] = {"t_sent": sent, "email": email}
        try:
            if how == "status_change":
                detail.update(self.fakes.call("POST", "/ack/status",
                                              {"issue_key": key, "status": "In Progress"}))
            else:
                answer = self._card_read(key, email, detail)
                if answer is None:
                    with self._lock:
                        self.counts["acks_without_card"] += 1
                    return
                detail.update(answer)
        except Exception as exc:  # noqa: BLE001 (an ACK that could not be given is counted)
            with self._lock:
                self.counts["acks_failed"] += 1
            self.say(f"load: ACK {how} of {key} failed: {exc}")
            return
        self.acks.write({"t": time.time(), "issue_key": key, "how": how, "detail": detail})
        with self._lock:
            self.counts[f"acks_{how}"] += 1

    def _card_read(self, key: str, email: str, detail: dict[str, Any]) -> dict | None:
        """The assignee reads the newest card about ``key``, once one exists (bounded)."""
        for tries in range(1, CARD_READ_TRIES + 1):
            try:
                answer = self.fakes.call("POST", "/ack/card-read",
                                         {"issue_key": key, "email": email})
                detail["tries"] = tries
                return answer
            except RuntimeError as exc:
                if "404" not in str(exc):
                    raise
            if self._stop.wait(1.0):
                return None
        return None


def _retry_after(header: str | None, default: float) -> float:
    """The seconds a ``Retry-After`` asks for (bounded), or ``default``."""
    try:
        return min(MAX_RETRY_AFTER_S, max(0.0, float(header))) if header else default
    except ValueError:
        return default
