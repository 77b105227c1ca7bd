"""The actor harness: the real actor system on a fresh database, driven by a test.

Time moves only by ``advance``; settling is the explicit, bounded ``wait_idle``. Nothing sleeps.
"""

from __future__ import annotations

from tests.clocks import ManualClock
from tests.fakes import FakeDirectory, FakeJira, FakeOnCall, issue
from ticket_dispatcher.actors.runtime import Runtime
from ticket_dispatcher.config import load_config
from ticket_dispatcher.domain.actions.registry import product_registry
from ticket_dispatcher.domain.catalog import OnSuccess
from ticket_dispatcher.domain.execution import Execution, Trigger
from ticket_dispatcher.domain.model import Policy, PolicySpec, PolicyTrigger, RuleSpec
from ticket_dispatcher.domain.ports import Ports
from ticket_dispatcher.metrics import Metrics
from ticket_dispatcher.store import Store
from ticket_dispatcher.store.maintenance import ExecutionWindows

SETTLE_SECONDS = 20


class Harness:
    def __init__(self, store: Store, *actions, slots: int = 10, clock: ManualClock | None = None,
                 jira: FakeJira | None = None, **config: str):
        self.clock = clock or ManualClock()
        self.jira = jira or FakeJira(issue())
        self.directory = FakeDirectory()  # Core groups and users
        self.oncall = FakeOnCall()  # Oncall teams and pages
        environ = {"TICKET_DISPATCHER_EXECUTION_SLOTS": str(slots)}
        environ.update({f"TICKET_DISPATCHER_{k.upper()}": v for k, v in config.items()})
        self.config = load_config(None, environ=environ)
        # the real actions, plus the test-only ones
        self.registry = product_registry(retry_budget=self.config.transient_retry_budget)
        for action in actions:
            self.registry.register(action)
        # The same database, judged by the same actions the runtime runs: the store validates
        # every activation, so the test-only actions must be known to it.
        self.store = Store(store.db, self.registry)
        self.metrics = Metrics()  # one per harness: a restart keeps it, like a process's
        self.runtime: Runtime | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> Harness:
        self.runtime = Runtime(self.config, self.store, self.clock, ports=self.ports(),
                               registry=self.registry, metrics=self.metrics)
        self.runtime.start()
        return self

    def ports(self) -> Ports:
        """The fakes for Jira, Core and Oncall, and the store's repositories."""
        return Ports(jira=self.jira, core=self.directory, oncall=self.oncall,
                     engineers=self.store.engineers, triggers=self.store.triggers,
                     contexts=self.store.contexts, maintenance=self.maintenance())

    def maintenance(self) -> ExecutionWindows:
        """The maintenance windows' port over the harness's store, as the service wires it."""
        return ExecutionWindows(self.store.maintenance, self.store.policies,
                                self.store.triggers)

    def stop(self) -> None:
        if self.runtime is not None:
            self.runtime.stop()
            self.runtime = None

    def restart(self) -> None:
        """Drop the actor system and boot a new one on the same database (a process restart)."""
        self.stop()
        self.start()

    # -- driving ------------------------------------------------------------------------------

    def post_trigger(self, issue_key: str = "TCID-1", source: str = "jira_automation", *,
                     policy_id: int | None = None, dryrun: dict | None = None,
                     settle: bool = True) -> Trigger:
        trigger = self.runtime.accept_trigger(source, issue_key, policy_id=policy_id,
                                              dryrun=dryrun)
        if settle:
            self.wait_idle()
        return self.trigger(trigger.id)

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.wait_idle()

    def wait_idle(self, timeout: float = SETTLE_SECONDS) -> None:
        assert self.runtime.wait_idle(timeout), "the actor system did not settle"

    def wait_until(self, predicate, timeout: float = SETTLE_SECONDS) -> None:
        """Bounded wait for a condition on the store, re-checked as units of work finish."""
        assert self.runtime.activity.wait_for(predicate, timeout), "condition never held"

    def record_tells(self, monkeypatch, actor_class: type) -> list[object]:
        """Every message told (through the runtime's activity) to an actor of
        ``actor_class`` from now on, in order; the tells still go through."""
        told: list[object] = []
        activity = self.runtime.deps.activity
        tell = activity.tell

        def recording_tell(actor, message):
            if actor.actor_class is actor_class:
                told.append(message)
            return tell(actor, message)

        monkeypatch.setattr(activity, "tell", recording_tell)
        return told

    # -- store access --------------------------------------------------------------------------

    def trigger(self, trigger_id: int) -> Trigger:
        return self.store.triggers.get(trigger_id)

    def execution(self, execution_id: int) -> Execution:
        return self.store.executions.get(execution_id)

    def executions(self, **filters) -> list[Execution]:
        items, _ = self.store.executions.page(limit=200, **filters)
        return sorted(items, key=lambda e: e.id)

    def policy(self, *rules: dict, active: bool = True, projects=("TCID",), source_in=(),
               labels=()) -> Policy:
        """Create (and activate) a policy whose rules are given as ``rule(...)`` dicts; the
        activation validates it against the harness's actions, like the service's."""
        spec = PolicySpec(
            name="test policy",
            trigger=PolicyTrigger(source_in=tuple(source_in), project_key_in=tuple(projects),
                                  issue_label_all=tuple(labels)),
            rules=tuple(RuleSpec(r["name"], r["priority"], r["when"], r["then"],
                                 OnSuccess(r.get("on_success", "terminate"))) for r in rules),
        )
        policy = self.store.policies.create(spec, now=self.clock.now())
        if active:
            policy = self.store.policies.activate(policy.id, now=self.clock.now())
        return policy


def rule(*actions: str | dict, name: str = "rule", priority: int = 10,
         when: dict | None = None, on_success: str = "terminate") -> dict:
    """A rule dict; an action is a type name (empty config) or a full action object."""
    then = [a if isinstance(a, dict) else {"type": a, a: {}} for a in actions]
    return {"name": name, "priority": priority, "when": when or {"always": True},
            "then": then, "on_success": on_success}


def assign(*emails: str, strategy: str = "round_robin", action_type: str = "assign") -> dict:
    receiver = {"type": "users", "users": list(emails)}
    return {"type": action_type, action_type: {"receiver": receiver, "strategy": strategy}}
