"""``POST /lark/card-actions``: Lark's checks as Lark signs its callbacks (an encrypt key, a
token, neither), the URL check, and the refusals; a press itself is judged by the store
(tests/store/test_card_presses.py) and acted on in tests/test_card_buttons_process.py."""

from __future__ import annotations

import json

import pytest
from falcon import testing

from tests.http.conftest import API_KEYS, Api
from tests.peers.lark_callbacks import LarkCallbacks, card_action
from tests.store.test_card_presses import card_execution
from ticket_dispatcher.config import load_config
from ticket_dispatcher.http.app import create_app
from ticket_dispatcher.http.services import Services
from ticket_dispatcher.store.models import CardPressRow

KEY = "an-encrypt-key-from-the-console"
TOKEN = "a-verification-token"
ROUTE = "/lark/card-actions"


def lark_api(store, clock, **settings) -> Api:
    environ = {"TICKET_DISPATCHER_AUTH_API_KEYS": API_KEYS,
               **{f"TICKET_DISPATCHER_LARK_{name.upper()}": value
                  for name, value in settings.items()}}
    services = Services(store=store, config=load_config(None, environ=environ), clock=clock)
    return Api(testing.TestClient(create_app(services)), services).as_role(None)


def send(api: Api, request: tuple[bytes, dict]) -> testing.Result:
    body, headers = request
    return api.post(ROUTE, body=body, headers=headers)


def now_s(clock) -> int:
    return int(clock.now().timestamp())


def presses(store) -> int:
    with store.connection():
        return CardPressRow.select().count()


@pytest.fixture
def encrypted(sqlite_store, clock):
    return lark_api(sqlite_store, clock, encrypt_key=KEY, verification_token=TOKEN)


def test_with_neither_setting_the_route_is_404(sqlite_store, clock):
    api = lark_api(sqlite_store, clock)
    answer = send(api, LarkCallbacks().url_check("c"))
    assert answer.status_code == 404


def test_the_url_check_is_answered_with_its_challenge(encrypted, clock):
    answer = send(encrypted, LarkCallbacks(encrypt_key=KEY, token=TOKEN).url_check(
        "ch-1", timestamp=now_s(clock)))
    assert (answer.status_code, answer.json) == (200, {"challenge": "ch-1"})


def test_a_signed_encrypted_press_is_answered_with_a_toast_and_the_card(encrypted, sqlite_store,
                                                                       clock):
    execution_id = card_execution(sqlite_store)
    lark = LarkCallbacks(encrypt_key=KEY, token=TOKEN)

    answer = send(encrypted, lark.press(execution_id, "ack", "ou_alice", "om_1",
                                        timestamp=now_s(clock)))

    assert answer.status_code == 200, answer.text
    assert answer.json["toast"]["type"] == "success"
    assert answer.json["card"]["type"] == "raw"
    assert sqlite_store.card_presses.pressed(execution_id) is not None


@pytest.mark.parametrize("skew", [-301, 301])
def test_a_stale_timestamp_either_way_is_401_and_changes_nothing(encrypted, sqlite_store,
                                                                 clock, skew):
    execution_id = card_execution(sqlite_store)
    lark = LarkCallbacks(encrypt_key=KEY, token=TOKEN)
    answer = send(encrypted, lark.press(execution_id, "ack", "ou_alice", "om_1",
                                        timestamp=now_s(clock) + skew))
    assert answer.status_code == 401
    assert presses(sqlite_store) == 0


def test_a_timestamp_within_five_minutes_is_taken(encrypted, sqlite_store, clock):
    execution_id = card_execution(sqlite_store)
    lark = LarkCallbacks(encrypt_key=KEY, token=TOKEN)
    answer = send(encrypted, lark.press(execution_id, "ack", "ou_alice", "om_1",
                                        timestamp=now_s(clock) - 299))
    assert answer.status_code == 200


def test_a_wrong_signature_a_wrong_key_or_a_plain_body_is_401(encrypted, sqlite_store, clock):
    execution_id = card_execution(sqlite_store)
    lark = LarkCallbacks(encrypt_key=KEY, token=TOKEN)
    body, headers = lark.press(execution_id, "ack", "ou_alice", "om_1", timestamp=now_s(clock))
    tampered = send(encrypted, (body, {**headers, "X-Lark-Signature": "0" * 64}))
    unsigned = send(encrypted, (body, {k: v for k, v in headers.items()
                                       if k != "X-Lark-Signature"}))
    other_key = send(encrypted, lark.press(execution_id, "ack", "ou_alice", "om_1",
                                           timestamp=now_s(clock), encrypt_key="not-the-key"))
    plain = send(encrypted, LarkCallbacks(token=TOKEN).press(execution_id, "ack", "ou_alice",
                                                             "om_1", timestamp=now_s(clock)))
    assert [a.status_code for a in (tampered, unsigned, other_key, plain)] == [401] * 4
    assert presses(sqlite_store) == 0


def test_token_only_checks_the_token(sqlite_store, clock):
    api = lark_api(sqlite_store, clock, verification_token=TOKEN)
    execution_id = card_execution(sqlite_store)
    wrong = send(api, LarkCallbacks(token="not-it").press(execution_id, "ack", "ou_alice",
                                                          "om_1", timestamp=now_s(clock)))
    right = send(api, LarkCallbacks(token=TOKEN).press(execution_id, "ack", "ou_alice", "om_1",
                                                       timestamp=now_s(clock)))
    assert (wrong.status_code, right.status_code) == (401, 200)


def test_a_repeated_event_is_answered_the_same(encrypted, sqlite_store, clock):
    execution_id = card_execution(sqlite_store)
    lark = LarkCallbacks(encrypt_key=KEY, token=TOKEN)
    first = send(encrypted, lark.press(execution_id, "ack", "ou_alice", "om_1", event_id="ev-1",
                                       timestamp=now_s(clock)))
    again = send(encrypted, lark.press(execution_id, "ack", "ou_alice", "om_1", event_id="ev-1",
                                       timestamp=now_s(clock)))
    assert again.status_code == 200 and again.json == first.json
    assert presses(sqlite_store) == 1


@pytest.mark.parametrize("payload,what", [
    ([1, 2], "not a JSON object"),
    ({"schema": "2.0", "header": {"event_type": "im.message.receive_v1", "event_id": "x"}},
     "not a card action"),
    (card_action(1, "snooze", "ou_alice", "om_1"), "unknown action"),
    (card_action(424242, "ack", "ou_alice", "om_1"), "names no card"),
])
def test_bad_input_is_400_and_changes_nothing(sqlite_store, clock, payload, what):
    api = lark_api(sqlite_store, clock, encrypt_key=KEY)
    answer = send(api, LarkCallbacks(encrypt_key=KEY).request(payload, timestamp=now_s(clock)))
    assert answer.status_code == 400, answer.text
    assert presses(sqlite_store) == 0


def test_a_body_that_is_no_json_is_401_with_a_key_and_400_without(sqlite_store, clock):
    keyed = lark_api(sqlite_store, clock, encrypt_key=KEY)
    tokened = lark_api(sqlite_store, clock, verification_token=TOKEN)
    headers = {"Content-Type": "application/json"}
    assert send(keyed, (b"not json", headers)).status_code == 401
    assert send(tokened, (b"not json", headers)).status_code == 400


def test_presses_are_counted_by_action_and_outcome(encrypted, sqlite_store, clock):
    execution_id = card_execution(sqlite_store)
    lark = LarkCallbacks(encrypt_key=KEY, token=TOKEN)
    send(encrypted, lark.press(execution_id, "ack", "ou_bob", "om_1", timestamp=now_s(clock)))
    send(encrypted, lark.press(execution_id, "ack", "ou_alice", "om_1", timestamp=0))
    metrics = encrypted.services.metrics
    sample = metrics.registry.get_sample_value
    name = "ticket_manager_dispatch_lark_card_presses_total"
    assert sample(name, {"action": "ack", "outcome": "not_yours"}) == 1
    assert sample(name, {"action": "unknown", "outcome": "unauthorized"}) == 1


def test_no_secret_reaches_the_answer_or_the_log(encrypted, clock, caplog):
    answer = send(encrypted, LarkCallbacks(encrypt_key="wrong", token=TOKEN).press(
        1, "ack", "ou_alice", "om_1", timestamp=now_s(clock)))
    shown = answer.text + caplog.text + json.dumps(dict(answer.headers))
    assert answer.status_code == 401
    assert KEY not in shown and TOKEN not in shown
