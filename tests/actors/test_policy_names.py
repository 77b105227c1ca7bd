"""The policy names behind the execution metrics: read once per version, bounded, and safe
to ask from every execution thread at once."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

from ticket_dispatcher.actors.cluster import SingleProcess
from ticket_dispatcher.actors.deps import POLICY_NAMES_KEPT, PolicyNames, RuntimeDeps
from ticket_dispatcher.domain.execution import Execution, ExecutionMode, ExecutionStatus
from ticket_dispatcher.errors import NotFound
from ticket_dispatcher.metrics import Metrics


class CountingPolicies:
    """``store.policies`` as the runtime reads names from it, counting each read."""

    def __init__(self, missing: frozenset[int] = frozenset()):
        self.reads: Counter[int] = Counter()
        self._missing = missing
        self._lock = threading.Lock()

    def get(self, policy_id: int) -> SimpleNamespace:
        with self._lock:
            self.reads[policy_id] += 1
        if policy_id in self._missing:
            raise NotFound(f"policy {policy_id} not found")
        return SimpleNamespace(name=f"policy {policy_id}")


def deps_over(policies: CountingPolicies) -> RuntimeDeps:
    """Runtime dependencies with only what a finished execution's metrics read."""
    return RuntimeDeps(config=None, store=SimpleNamespace(policies=policies), clock=None,
                       registry=None, ports=None, scheduler=None, activity=None,
                       cluster=SingleProcess(), metrics=Metrics())


def finished(policy_id: int) -> Execution:
    return Execution(id=policy_id, trigger_id=1, issue_key="TCID-1", mode=ExecutionMode.LIVE,
                     policy_id=policy_id, policy_family_id="pf_X", policy_version=1,
                     rule_executions=[], status=ExecutionStatus.SUCCEEDED)


def test_a_policy_name_is_read_once_while_it_is_in_use():
    policies = CountingPolicies()
    deps = deps_over(policies)

    for _ in range(3):
        deps.execution_finished(finished(1))

    assert policies.reads[1] == 1


def test_only_the_most_recently_used_policy_names_are_kept():
    policies = CountingPolicies()
    deps = deps_over(policies)

    for policy_id in range(POLICY_NAMES_KEPT + 1):  # one version more than are kept
        deps.execution_finished(finished(policy_id))
    deps.execution_finished(finished(0))  # the least recently used: forgotten, read again
    deps.execution_finished(finished(POLICY_NAMES_KEPT))  # still known

    assert policies.reads[0] == 2
    assert policies.reads[POLICY_NAMES_KEPT] == 1
    assert len(deps.policy_names) == POLICY_NAMES_KEPT


def test_a_deleted_policy_counts_under_no_name_and_is_not_remembered():
    policies = CountingPolicies(missing=frozenset({5}))
    deps = deps_over(policies)

    deps.execution_finished(finished(5))
    deps.execution_finished(finished(5))

    assert policies.reads[5] == 2 and len(deps.policy_names) == 0


def test_many_threads_asking_at_once_get_the_right_names_and_the_bound_holds():
    policies = CountingPolicies()
    names = PolicyNames(lambda policy_id: policies.get(policy_id).name, size=8)
    start = threading.Barrier(8)

    def ask(worker: int) -> list[tuple[int, str]]:
        start.wait()
        return [(policy_id, names.get(policy_id))
                for n in range(2000) for policy_id in [(worker * 7 + n) % 24]]

    with ThreadPoolExecutor(8) as pool:
        answers = [answer for result in pool.map(ask, range(8)) for answer in result]

    assert all(name == f"policy {policy_id}" for policy_id, name in answers)
    assert len(names) == 8
