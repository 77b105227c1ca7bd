"""The OpenAPI document says what the validator and the bindings say.

The fuzz run (test_openapi_fuzz.py) proves the server's answers match the document; these tests
prove the document's vocabularies and patterns come from the server's, so a client that follows
the document writes what the server accepts.
"""

from __future__ import annotations

import jsonschema_rs
import pytest

from ticket_dispatcher.domain import catalog
from ticket_dispatcher.domain.actions.registry import product_registry
from ticket_dispatcher.domain.conditions import compile_condition
from ticket_dispatcher.domain.issues import ISSUE_KEY
from ticket_dispatcher.domain.validation import validate_policy
from ticket_dispatcher.errors import InvalidInput
from ticket_dispatcher.http.engineers import checked_email
from ticket_dispatcher.http.openapi import (
    EMAIL_PATTERN,
    ISSUE_KEY_PATTERN,
    POLICY_EXAMPLE,
    document,
)

SCHEMAS = document()["components"]["schemas"]
OPERANDS = {
    "value": "x",
    "values": ["x"],
    "time_window": {"timezone": "UTC", "weekdays": ["mon"], "start": "09:00", "end": "24:00"},
}


def _matches(pattern: str, text: str) -> bool:
    """JSON Schema's own regex semantics (ECMA 262: ``$`` is the end of the text)."""
    return jsonschema_rs.validator_for({"type": "string", "pattern": pattern}).is_valid(text)


def _leaves() -> list[dict]:
    variants = (SCHEMAS[ref["$ref"].rsplit("/", 1)[1]] for ref in SCHEMAS["Condition"]["oneOf"])
    return [variant for variant in variants if "field" in variant["properties"]]


def _leaf_for(field: str, operator: str) -> list[dict]:
    return [leaf for leaf in _leaves()
            if field in leaf["properties"]["field"]["enum"]
            and operator in leaf["properties"]["operator"]["enum"]]


def test_documented_policy_example_is_a_valid_policy():
    assert validate_policy(POLICY_EXAMPLE, product_registry()) == []


@pytest.mark.parametrize(("field", "operator"), [
    (field, operator) for field, kind in catalog.FIELDS.items()
    for operator in catalog.OPERATORS[kind]])
def test_every_allowed_field_and_operator_has_one_documented_leaf_the_validator_accepts(
        field, operator):
    matching = _leaf_for(field, operator)
    assert len(matching) == 1
    leaf = {"field": field, "operator": operator}
    for operand in matching[0]["required"][2:]:
        is_time = matching[0]["properties"][operand].get("format") == "date-time"
        leaf[operand] = "2026-11-30T01:00:00Z" if is_time else OPERANDS[operand]

    assert compile_condition(leaf)[1] == []


def test_no_documented_leaf_allows_an_operator_the_field_kind_does_not():
    for leaf in _leaves():
        kinds = {catalog.FIELDS[field] for field in leaf["properties"]["field"]["enum"]}
        assert len(kinds) == 1
        assert set(leaf["properties"]["operator"]["enum"]) <= set(catalog.OPERATORS[kinds.pop()])


def test_every_action_type_and_receiver_type_is_documented():
    actions = {variant["properties"]["type"]["enum"][0] for variant in SCHEMAS["Action"]["oneOf"]}
    receivers = {variant["properties"]["type"]["enum"][0]
                 for variant in SCHEMAS["Receiver"]["oneOf"]}

    assert actions == {action.value for action in catalog.ActionType}
    assert receivers == {receiver.value for receiver in catalog.ReceiverType}


@pytest.mark.parametrize("key", ["TCID-1", "A-9", "AB_1-1234567890123", "tcid-1", "TCID-0",
                                 "TCID-", "-1", "TCID-1 ", "TCID-1\n", "", "TCID--1", "1CID-1"])
def test_issue_key_pattern_is_the_servers(key):
    assert _matches(ISSUE_KEY_PATTERN, key) == bool(ISSUE_KEY.fullmatch(key))


@pytest.mark.parametrize("email", ["alice@example.com", "A.B+c@x.y.z", "o_n-call@sub.ex.co"])
def test_an_email_the_document_allows_the_server_accepts(email):
    assert _matches(EMAIL_PATTERN, email)
    assert checked_email(email) == email.lower()


@pytest.mark.parametrize("email", ["a@b", "a@@b.c", "@b.c", "a@.c", "a b@c.d", ""])
def test_an_email_the_server_refuses_the_document_refuses(email):
    with pytest.raises(InvalidInput):
        checked_email(email)
    assert not _matches(EMAIL_PATTERN, email)
