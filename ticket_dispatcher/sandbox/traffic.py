"""What reaches the fake services: the faults an operator injected (make a call fail, make an
endpoint slow or return 429/500) and the log of requests.

Shared by the four services: ``base.guard`` takes a fault and logs every request before a
responder runs. Injected latency really sleeps (``sleep`` is injectable so tests do not).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

from ticket_dispatcher.timeutil import format_time

SERVICES = ("jira", "lark", "oncall", "core")
REQUEST_LOG_SIZE = 500


@dataclass
class InjectedFault:
    id: int
    service: str
    path_contains: str = ""
    status: int | None = None
    retry_after: int | None = None
    latency_ms: int | None = None
    times: int = 1  # how many more requests it hits

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "service": self.service,
            "path_contains": self.path_contains,
            "status": self.status,
            "retry_after": self.retry_after,
            "latency_ms": self.latency_ms,
            "times": self.times,
        }


class Traffic:
    """Faults waiting for their requests, and the last ``REQUEST_LOG_SIZE`` requests."""

    def __init__(self, *, now: Callable[[], datetime], sleep: Callable[[float], None]):
        self.now = now
        self.sleep = sleep
        self._lock = threading.Lock()
        self._counter = 0
        self._faults: list[InjectedFault] = []
        self._requests: deque[dict] = deque(maxlen=REQUEST_LOG_SIZE)

    def add_fault(self, service: str, *, path_contains: str = "", status: int | None = None,
                  retry_after: int | None = None, latency_ms: int | None = None,
                  times: int = 1) -> InjectedFault:
        if service not in SERVICES:
            raise ValueError(f"unknown service {service}")
        with self._lock:
            self._counter += 1
            fault = InjectedFault(self._counter, service, path_contains, status, retry_after,
                                  latency_ms, times)
            self._faults.append(fault)
            return replace(fault)

    def take_fault(self, service: str, path: str) -> InjectedFault | None:
        """The first fault for this request, used up by one; None when none applies."""
        with self._lock:
            for fault in self._faults:
                if fault.service == service and fault.path_contains in path:
                    fault.times -= 1
                    if fault.times <= 0:
                        self._faults.remove(fault)
                    return replace(fault)
            return None

    def faults(self) -> list[InjectedFault]:
        with self._lock:
            return [replace(fault) for fault in self._faults]

    def clear_faults(self) -> int:
        with self._lock:
            count = len(self._faults)
            self._faults.clear()
            return count

    def record_request(self, service: str, method: str, path: str,
                       fault_status: int | None) -> None:
        """Remember a call, so tests can count retries."""
        with self._lock:
            self._requests.append({"at": format_time(self.now()), "service": service,
                                   "method": method, "path": path, "fault": fault_status})

    def requests(self) -> list[dict]:
        with self._lock:
            return [dict(entry) for entry in self._requests]
