"""What the API's resources are handed at construction (no globals): the store, the
configuration, the clock, the actor runtime when there is one, the action registry and the
metrics. Every resource imports ``Services`` from here; ``app.py`` builds the resources."""

from __future__ import annotations

from dataclasses import dataclass

import falcon

from ticket_dispatcher.actors.runtime import Runtime
from ticket_dispatcher.clock import Clock
from ticket_dispatcher.config import Config
from ticket_dispatcher.domain.actions.base import ActionRegistry
from ticket_dispatcher.http.changes import Changes
from ticket_dispatcher.http.errors import ApiError
from ticket_dispatcher.metrics import Metrics
from ticket_dispatcher.store import Store


@dataclass(init=False)
class Services:
    """What the resources need, handed to each at construction (no globals)."""

    store: Store
    config: Config
    clock: Clock
    runtime: Runtime | None
    # The actions this service runs (service.py: the product registry). Defaults to the
    # store's, so validation answers what activation will decide.
    registry: ActionRegistry
    # The service's metrics (service.py hands the runtime the same object); a new one by default.
    metrics: Metrics
    # Every operator change, made and audited in one transaction.
    changes: Changes

    def __init__(self, store: Store, config: Config, clock: Clock, runtime: Runtime | None = None,
                 registry: ActionRegistry | None = None, metrics: Metrics | None = None) -> None:
        self.store = store
        self.config = config
        self.clock = clock
        self.runtime = runtime
        self.registry = registry if registry is not None else store.registry
        self.metrics = metrics if metrics is not None else Metrics()
        self.changes = Changes(store, clock)

    def draining(self) -> bool:
        """The shutdown has begun (shared mode drains before it stops taking requests)."""
        return self.runtime is not None and self.runtime.draining

    def recovery_done(self) -> bool:
        """Boot recovery has finished; an app built without a runtime recovers nothing."""
        return self.runtime.recovered if self.runtime is not None else True

    @property
    def max_body_bytes(self) -> int:
        return self.config.http.max_body_bytes

    @property
    def max_json_depth(self) -> int:
        return self.config.http.max_json_depth

    def running(self) -> Runtime:
        """The actor runtime, or a 503 when this app was built without one."""
        if self.runtime is None:
            raise ApiError(falcon.HTTP_503, "the actor runtime is not running")
        return self.runtime
