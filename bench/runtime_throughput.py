"""Executions completed per second through the whole actor runtime (issue: runtime figures).

Each trigger goes through intake (a pending row), a TriggerActor (claim, issue load from an
in-memory Jira port, matching, the creation transaction in the pool) and an execution worker
(every checkpoint of one no-op action persisted). Run with 10 slots and with 1 slot:

    python bench/runtime_throughput.py [--triggers 400] [--postgres-url URL]
"""

from __future__ import annotations

import argparse
import time

from databases import fresh_database

from ticket_dispatcher.actors.runtime import Runtime
from ticket_dispatcher.clock import SystemClock
from ticket_dispatcher.config import load_config
from ticket_dispatcher.domain.actions.base import ActionRegistry, ActionResult
from ticket_dispatcher.domain.execution import ExecutionStatus
from ticket_dispatcher.domain.model import Issue, PolicySpec, PolicyTrigger, RuleSpec
from ticket_dispatcher.domain.ports import NotConfiguredJira, Ports
from ticket_dispatcher.store import Store


class NoopAction:
    type = "bench_noop"

    def validate_config(self, config, path):
        return []

    def build_context(self, issue, dispatch_context, config):
        return {}

    def plan(self, run):
        run.context["planned"] = True

    def execute(self, run):
        return ActionResult.proceed()


class MemoryJira(NotConfiguredJira):
    """A Jira that only loads issues (the no-op action writes nothing)."""

    def load_issue(self, key: str) -> Issue:
        return Issue(key=key, project_key=key.split("-")[0], priority="P1", status="Todo")


def run(url: str, slots: int, triggers: int) -> float:
    registry = ActionRegistry([NoopAction()])
    store = Store.for_url(url, registry=registry)
    store.migrate()
    clock = SystemClock()
    config = load_config(None, environ={"TICKET_DISPATCHER_EXECUTION_SLOTS": str(slots),
                                        "TICKET_DISPATCHER_DATABASE_URL": url})
    spec = PolicySpec(name="bench", trigger=PolicyTrigger(project_key_in=("BENCH",)),
                      rules=(RuleSpec("all", 10, {"always": True},
                                      [{"type": "bench_noop", "bench_noop": {}}]),))
    policy = store.policies.create(spec, now=clock.now())
    store.policies.activate(policy.id, now=clock.now())
    ports = Ports(jira=MemoryJira(), engineers=store.engineers, triggers=store.triggers,
                  contexts=store.contexts)
    runtime = Runtime(config, store, clock, ports=ports, registry=registry)
    runtime.start()
    started = time.perf_counter()
    for n in range(triggers):
        runtime.accept_trigger("bench", f"BENCH-{slots}{n + 1}")
    assert runtime.wait_idle(600), "did not settle"
    elapsed = time.perf_counter() - started
    done, total = store.executions.page(status=ExecutionStatus.SUCCEEDED, limit=1)
    runtime.stop()
    store.close()
    assert total >= triggers, f"only {total} of {triggers} executions succeeded"
    return triggers / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triggers", type=int, default=400)
    parser.add_argument("--postgres-url", help="run on PostgreSQL (a temporary schema) "
                                               "instead of a temporary SQLite file")
    args = parser.parse_args()
    engine = "postgresql" if args.postgres_url else "sqlite"
    print(f"{args.triggers} triggers, one no-op action each, in-memory Jira port, {engine}")
    for slots in (10, 1):
        with fresh_database(args.postgres_url) as url:
            rate = run(url, slots, args.triggers)
        print(f"  slots={slots:2d}: {rate:7.1f} executions/s")


if __name__ == "__main__":
    main()
