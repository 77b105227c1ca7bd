"""The ports are declared once (domain/ports.py) and every implementation keeps to them: the
clients, the client pools, the engineer repository, the test fakes and ``NotConfigured``."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest

from tests.fakes import (
    FakeCalls,
    FakeContexts,
    FakeDirectory,
    FakeJira,
    FakeOnCall,
    NotConfiguredEngineers,
    NotConfiguredEscalationSlots,
    NotConfiguredTriggers,
)
from ticket_dispatcher.actors.client_pool import ClientPool
from ticket_dispatcher.actors.client_ports import CorePool, JiraPool, LarkPool, OncallPool
from ticket_dispatcher.actors.recent_reads import RecentReads
from ticket_dispatcher.domain import ports as ports_module
from ticket_dispatcher.domain.ports import (
    CardPresses,
    Directory,
    EngineerStore,
    EscalationSlots,
    Jira,
    KeptReads,
    MaintenanceWindows,
    Messenger,
    NoMaintenance,
    NoPresses,
    NoReadsKept,
    NotConfigured,
    NotConfiguredDirectory,
    NotConfiguredJira,
    NotConfiguredMessenger,
    NotConfiguredOnCall,
    NotificationCalls,
    OnCall,
    Ports,
    TriggerIntake,
    UncountedCalls,
)
from ticket_dispatcher.errors import IntegrationError
from ticket_dispatcher.integrations.core import CoreClient
from ticket_dispatcher.integrations.jira import JiraClient
from ticket_dispatcher.integrations.lark import LarkClient
from ticket_dispatcher.integrations.oncall import OncallClient
from ticket_dispatcher.metrics import Metrics
from ticket_dispatcher.store.card_presses import ExecutionPresses
from ticket_dispatcher.store.contexts import ContextRepository
from ticket_dispatcher.store.engineers import EngineerRepository
from ticket_dispatcher.store.maintenance import ExecutionWindows
from ticket_dispatcher.store.triggers import TriggerRepository

Shape = list[tuple[str, inspect._ParameterKind, bool]]


def shape(function) -> Shape:
    """What a caller relies on: each parameter's name, kind and whether it has a default
    (``self`` left out)."""
    parameters = list(inspect.signature(function).parameters.values())[1:]
    return [(p.name, p.kind, p.default is not inspect.Parameter.empty) for p in parameters]


def protocol_methods(protocol: type) -> dict[str, Shape]:
    """The public methods a Protocol declares, its own and those of the Protocols it extends."""
    methods: dict[str, Shape] = {}
    for klass in reversed(protocol.__mro__):
        if not getattr(klass, "_is_protocol", False):
            continue
        for name, value in vars(klass).items():
            if inspect.isfunction(value) and not name.startswith("_"):
                methods[name] = shape(value)
    return methods


def mismatches(implementation: type, protocol: type) -> list[str]:
    """Every way ``implementation`` fails ``protocol``; empty when it implements it."""
    problems = []
    for name, wanted in protocol_methods(protocol).items():
        method = getattr(implementation, name, None)
        if not callable(method):
            problems.append(f"{name}: missing")
        elif shape(method) != wanted:
            problems.append(f"{name}: {shape(method)} != {wanted}")
    return problems


def own_methods(klass: type, base: type) -> set[str]:
    """The public methods ``klass`` adds to ``base``."""
    return {name for name in dir(klass) if not name.startswith("_")
            and callable(getattr(klass, name))} - set(dir(base))


IMPLEMENTATIONS = [
    (JiraClient, Jira), (LarkClient, Messenger), (OncallClient, OnCall),
    (CoreClient, Directory),
    (JiraPool, Jira), (LarkPool, Messenger), (OncallPool, OnCall), (CorePool, Directory),
    (EngineerRepository, EngineerStore), (TriggerRepository, TriggerIntake),
    (ContextRepository, EscalationSlots), (FakeContexts, EscalationSlots),
    (FakeJira, Jira), (FakeDirectory, Directory), (FakeOnCall, OnCall),
    (Metrics, NotificationCalls), (UncountedCalls, NotificationCalls),
    (FakeCalls, NotificationCalls),
    (ExecutionWindows, MaintenanceWindows), (NoMaintenance, MaintenanceWindows),
    (ExecutionPresses, CardPresses), (NoPresses, CardPresses),
    (RecentReads, KeptReads), (NoReadsKept, KeptReads),
]
POOLS = [(JiraPool, Jira), (LarkPool, Messenger), (OncallPool, OnCall), (CorePool, Directory)]
NOT_CONFIGURED = [(NotConfiguredJira, Jira, "jira"), (NotConfiguredMessenger, Messenger, "lark"),
                  (NotConfiguredOnCall, OnCall, "oncall"),
                  (NotConfiguredDirectory, Directory, "core"),
                  (NotConfiguredEngineers, EngineerStore, "engineers"),
                  (NotConfiguredTriggers, TriggerIntake, "triggers"),
                  (NotConfiguredEscalationSlots, EscalationSlots, "contexts")]


def test_the_protocols_declare_the_methods_of_each_role():
    assert {name: sorted(protocol_methods(p)) for name, p in [
        ("jira", Jira), ("lark", Messenger), ("oncall", OnCall), ("core", Directory),
        ("engineers", EngineerStore)]} == {
        "jira": ["add_internal_comment", "apply_triage", "assign", "assign_and_label",
                 "count_issues", "edit_labels",
                 "find_user_by_email", "find_users_by_email", "load_issue", "load_issues",
                 "set_l2_assignee"],
        "lark": ["open_ids_by_email", "read_user_ids", "read_user_ids_each", "send_card",
                 "urgent_app"],
        "oncall": ["page", "responders"],
        "core": ["group_members", "leader", "user"],
        "engineers": ["enabled_by_email", "hindered", "set_jira_account_id", "take_turn",
                      "time_off", "update_dispatch_state"],
    }


@pytest.mark.parametrize("implementation,protocol", IMPLEMENTATIONS,
                         ids=lambda value: value.__name__)
def test_each_implementation_keeps_to_its_protocol(implementation, protocol):
    assert mismatches(implementation, protocol) == []


@pytest.mark.parametrize("pool,protocol", POOLS, ids=lambda value: value.__name__)
def test_each_pool_adds_exactly_its_protocols_methods(pool, protocol):
    assert own_methods(pool, ClientPool) == set(protocol_methods(protocol))


def test_the_check_fails_for_a_missing_method_and_a_renamed_parameter():
    class Drifted:
        def responders(self, team_name: str) -> list: ...

    problems = mismatches(Drifted, OnCall)

    assert [problem.split(":")[0] for problem in problems] == ["responders", "page"]
    assert "'team_name'" in problems[0] and problems[1] == "page: missing"


@pytest.mark.parametrize("not_configured,protocol,service", NOT_CONFIGURED,
                         ids=lambda value: getattr(value, "__name__", value))
def test_not_configured_implements_exactly_its_protocol_and_refuses_every_call(
        not_configured, protocol, service):
    port = not_configured()
    assert mismatches(not_configured, protocol) == []
    assert own_methods(not_configured, NotConfigured) == set(protocol_methods(protocol))
    for name, parameters in protocol_methods(protocol).items():
        positional = inspect.Parameter.POSITIONAL_OR_KEYWORD
        args = [None for _, kind, _ in parameters if kind is positional]
        kwargs = {n: None for n, kind, _ in parameters if kind is inspect.Parameter.KEYWORD_ONLY}

        with pytest.raises(IntegrationError) as refused:
            getattr(port, name)(*args, **kwargs)

        assert refused.value.message == f"{service} is not configured ({name})"
        assert refused.value.service == service


def test_integrations_left_out_are_not_configured_and_ports_cannot_grow():
    store_ports = dict(engineers=NotConfiguredEngineers(), triggers=NotConfiguredTriggers(),
                       contexts=FakeContexts())
    ports = Ports(jira=FakeJira(), **store_ports)

    assert [type(getattr(ports, f.name)) for f in dataclasses.fields(Ports)] == [
        FakeJira, NotConfiguredMessenger, NotConfiguredOnCall, NotConfiguredDirectory,
        NotConfiguredEngineers, NotConfiguredTriggers, FakeContexts, UncountedCalls,
        NoMaintenance, NoPresses, NoReadsKept]
    with pytest.raises(dataclasses.FrozenInstanceError):
        ports.jira = FakeJira()  # type: ignore[misc]
    with pytest.raises(TypeError):
        Ports(notifier=object(), **store_ports)  # type: ignore[call-arg]


@pytest.mark.parametrize("left_out", ["engineers", "triggers", "contexts"])
def test_the_stores_ports_have_no_stand_in_in_the_product(left_out):
    store_ports = dict(engineers=NotConfiguredEngineers(), triggers=NotConfiguredTriggers(),
                       contexts=NotConfiguredEscalationSlots())
    del store_ports[left_out]

    with pytest.raises(TypeError, match=left_out):  # the runtime always passes the store's
        Ports(jira=FakeJira(), **store_ports)


def test_the_ports_module_imports_only_the_domain_and_errors():
    tree = ast.parse(Path(ports_module.__file__).read_text())
    imported = {node.module for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                 for alias in node.names}

    ours = {name for name in imported if name.startswith("ticket_dispatcher")}
    assert ours and all(name.startswith("ticket_dispatcher.domain.")
                        or name == "ticket_dispatcher.errors" for name in ours), ours
