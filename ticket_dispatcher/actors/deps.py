"""What the actors are built from: handed down at start-up, never looked up globally."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ticket_dispatcher.actors.activity import Activity
from ticket_dispatcher.actors.scheduler import Scheduler
from ticket_dispatcher.clock import Clock
from ticket_dispatcher.config import Config
from ticket_dispatcher.domain.actions.base import ActionRegistry
from ticket_dispatcher.domain.behavior import Behavior
from ticket_dispatcher.domain.ports import Ports
from ticket_dispatcher.store import Store


@dataclass
class RuntimeDeps:
    config: Config
    store: Store
    clock: Clock
    registry: ActionRegistry
    ports: Ports  # the integrations and the engineer store (domain/ports.py)
    scheduler: Scheduler
    activity: Activity
    # Set once the shutdown begins: no new step, claim or execution actor starts after it.
    stopping: threading.Event = field(default_factory=threading.Event)

    def behavior(self) -> Behavior:
        return Behavior(self.registry, self.store.executions, self.clock.now, ports=self.ports)
