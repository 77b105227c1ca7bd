"""Who may see and do what in the console: sign-in, sessions, the proxy's headers, CSRF, and the
headers every page carries."""

from __future__ import annotations

import pytest
from falcon import testing

from tests.console.conftest import Console, build_app, failed_trigger, form_token, main_text
from tests.http.conftest import API_KEYS, KEYS
from ticket_dispatcher.config import load_config
from ticket_dispatcher.http.services import Services


def test_a_stranger_is_sent_to_sign_in_and_comes_back_where_they_were_going(console):
    answer = console.get("/console/triggers", params={"status": "failed"})

    assert answer.status_code == 303
    assert answer.headers["Location"] == ("/console/sign-in"
                                          "?next=%2Fconsole%2Ftriggers%3Fstatus%3Dfailed")
    signed_in = console.post("/console/sign-in", {"api_key": KEYS["viewer"],
                                                  "next": "/console/triggers?status=failed"})
    assert signed_in.status_code == 303
    assert signed_in.headers["Location"] == "/console/triggers?status=failed"
    assert console.get("/console/triggers").status_code == 200


def test_the_session_cookie_is_httponly_strict_secure_and_expires(harness):
    config = load_config(None, environ={"TICKET_DISPATCHER_AUTH_API_KEYS": API_KEYS,
                                        "TICKET_DISPATCHER_CONSOLE_SESSION_LIFETIME": "2h"})
    services = Services(store=harness.store, config=config, clock=harness.clock,
                        runtime=harness.runtime)
    browser = Console(testing.TestClient(build_app(services)), services)

    answer = browser.sign_in("operator")

    cookie = answer.cookies["td_console"]
    assert cookie.http_only and cookie.secure and cookie.same_site == "Strict"
    assert cookie.max_age == 7200 and cookie.path == "/console"
    assert KEYS["operator"] not in answer.headers["Set-Cookie"]


def test_a_wrong_key_is_refused_with_the_form_again_and_nothing_set(console):
    answer = console.post("/console/sign-in", {"api_key": "not-a-key-at-all-0123456789"})

    assert answer.status_code == 401
    assert "That API key is not valid." in main_text(answer.text)
    assert "td_console" not in answer.cookies
    assert console.get("/console/").status_code == 303


def test_an_automation_key_is_refused_at_sign_in_with_the_reason(console):
    answer = console.sign_in("automation")

    assert answer.status_code == 403
    assert "sign in with a viewer or operator key" in main_text(answer.text)
    assert "td_console" not in answer.cookies
    assert console.get("/console/").status_code == 303


@pytest.mark.parametrize("cookie", ["x.\u00e9", "\u00e9.\u00e9", "a" * 40 + ".\u00ff"])
def test_a_cookie_with_any_character_is_nobody_not_an_error(console, cookie):
    console.cookies["td_console"] = cookie

    assert console.get("/console/").status_code == 303
    assert console.get("/console/sign-in").status_code == 200


def test_a_session_ends_when_it_expires_or_its_key_is_removed(console, harness):
    console.sign_in("viewer")
    assert console.get("/console/").status_code == 200
    harness.clock.advance(12 * 3600 + 1)
    assert console.get("/console/").status_code == 303

    console.sign_in("viewer")
    without = load_config(None, environ={"TICKET_DISPATCHER_AUTH_API_KEYS":
                                         f"operator-key:operator:{KEYS['operator']}"})
    services = Services(store=harness.store, config=without, clock=harness.clock,
                        runtime=harness.runtime)
    restarted = Console(testing.TestClient(build_app(services)), services)
    restarted.cookies = dict(console.cookies)
    assert restarted.get("/console/").status_code == 303


def test_a_forged_or_tampered_cookie_is_nobody(console):
    console.sign_in("viewer")
    name, value = "td_console", console.cookies["td_console"]
    payload, mac = value.split(".")
    console.cookies[name] = payload[:-2] + "xx." + mac

    assert console.get("/console/").status_code == 303


def test_sign_out_ends_the_session(console):
    console.sign_in("viewer")
    page = console.get("/console/")

    answer = console.post("/console/sign-out", token=form_token(page.text))

    assert answer.status_code == 303
    assert "td_console" not in console.cookies
    assert console.get("/console/").status_code == 303


def test_a_copy_of_a_signed_out_cookie_is_refused_until_it_would_have_expired(console,
                                                                               harness):
    console.sign_in("operator")
    copied = dict(console.cookies)
    page = console.get("/console/")
    console.post("/console/sign-out", token=form_token(page.text))

    console.cookies = copied  # someone kept the cookie
    assert console.get("/console/").status_code == 303
    console.sign_in("operator")  # a new sign-in is a new session
    assert console.get("/console/").status_code == 200
    harness.clock.advance(12 * 3600 + 1)  # the sign-out is forgotten with the session
    console.sign_in("viewer")
    console.post("/console/sign-out", token=form_token(console.get("/console/").text))
    with harness.store.db.connection_context():
        assert harness.store.db.execute_sql(
            "SELECT COUNT(*) FROM console_sign_outs").fetchone()[0] == 1


def test_a_viewer_sees_no_action_and_a_forged_post_is_refused(console, harness):
    trigger = failed_trigger(harness.store, harness.clock)
    console.sign_in("viewer")
    page = console.get("/console/triggers")

    assert "Replay" not in page.text
    forged = console.post(f"/console/triggers/{trigger.id}/replay", {"confirmed": "yes"},
                          token=form_token(page.text))
    assert forged.status_code == 403
    assert "this needs the operator role" in main_text(forged.text)


@pytest.mark.parametrize("token", ["", "made-up", "\u00e9t\u00e9"])
def test_a_changing_post_without_its_token_is_refused(open_console, token):
    answer = open_console.post("/console/sign-out", token=token)

    assert answer.status_code == 403
    assert "this form has expired or did not come from this console" in main_text(answer.text)


def test_a_post_from_another_origin_is_refused_even_with_a_token(open_console):
    answer = open_console.post("/console/sign-out", headers={"Origin": "https://evil.example"})

    assert answer.status_code == 403


def test_every_page_carries_a_strict_policy_and_nosniff(open_console):
    for path in ("/console/", "/console/sign-in", "/console/nothing-here"):
        answer = open_console.get(path)
        policy = answer.headers["Content-Security-Policy"]
        assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
        assert "unsafe-inline" not in policy
        assert answer.headers["X-Content-Type-Options"] == "nosniff"
    assert open_console.get("/console/nothing-here").status_code == 404
    assert "<h1>404" in open_console.get("/console/nothing-here").text


def test_auth_off_says_so_on_every_page(open_console):
    for path in ("/console/", "/console/triggers", "/console/sign-in"):
        assert "Authentication is off." in open_console.get(path).text


def _proxied(harness, **env) -> Console:
    config = load_config(None, environ={"TICKET_DISPATCHER_AUTH_API_KEYS": API_KEYS,
                                        "TICKET_DISPATCHER_CONSOLE_TRUSTED_PROXIES": "10.0.0.0/8",
                                        "TICKET_DISPATCHER_CONSOLE_PROXY_OPERATOR_GROUPS": "sre",
                                        "TICKET_DISPATCHER_CONSOLE_PROXY_VIEWER_GROUPS": "eng",
                                        **env})
    services = Services(store=harness.store, config=config, clock=harness.clock,
                        runtime=harness.runtime)
    return Console(testing.TestClient(build_app(services)), services)


def test_a_trusted_proxy_signs_people_in_by_their_groups(harness):
    browser = _proxied(harness)
    as_operator = {"X-Forwarded-Email": "alice@example.com", "X-Forwarded-Groups": "eng,sre"}
    as_viewer = {"X-Forwarded-Email": "bob@example.com", "X-Forwarded-Groups": "eng"}
    nobody = {"X-Forwarded-Email": "mallory@example.com", "X-Forwarded-Groups": "sales"}

    page = browser.get("/console/", headers=as_operator, remote_addr="10.1.2.3")
    assert page.status_code == 200 and "alice@example.com · operator" in page.text
    page = browser.get("/console/", headers=as_viewer, remote_addr="10.1.2.3")
    assert page.status_code == 200 and "bob@example.com · viewer" in page.text
    assert browser.get("/console/", headers=nobody, remote_addr="10.1.2.3").status_code == 403


def test_proxy_headers_from_anywhere_else_are_ignored(harness):
    browser = _proxied(harness)
    forged = {"X-Forwarded-Email": "alice@example.com", "X-Forwarded-Groups": "sre"}

    assert browser.get("/console/", headers=forged, remote_addr="192.0.2.7").status_code == 303


def test_hostile_text_is_escaped_and_phone_numbers_and_secrets_are_masked(open_console,
                                                                          harness):
    reason = ('<script>alert(1)</script> "><img src=x onerror=alert(1)> '
              "Oncall answered for +86 138 0013 8000 with token=abcdef0123456789")
    failed_trigger(harness.store, harness.clock, reason=reason)

    page = open_console.get("/console/triggers").text

    assert "<script>alert(1)</script>" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "138 0013 8000" not in page and "abcdef0123456789" not in page
    assert "Oncall answered for ***" in main_text(page)


def test_texts_long_and_printed_again_are_masked_each_time(open_console, harness):
    # A page prints short texts many times (they are redacted once, then remembered) and long
    # ones (a peer's answer) once: a phone number is masked in either, on every render.
    short = "paged +86 138 0013 8000"
    long = "Oncall answered " + "x" * 400 + " for +86 139 0013 9000"
    for reason in (short, short, long):
        failed_trigger(harness.store, harness.clock, reason=reason)

    for _ in range(2):
        page = main_text(open_console.get("/console/triggers").text)

        assert "138 0013 8000" not in page and "139 0013 9000" not in page
        assert page.count("paged ***") == 2
        assert "x" * 400 + " for ***" in page


def test_sign_in_warns_when_a_secure_cookie_would_be_dropped_over_plain_http(harness):
    config = load_config(None, environ={"TICKET_DISPATCHER_AUTH_API_KEYS": API_KEYS})
    services = Services(store=harness.store, config=config, clock=harness.clock,
                        runtime=harness.runtime)
    browser = Console(testing.TestClient(build_app(services)), services)

    plain = browser.get("/console/sign-in", host="td.internal")
    proxied = browser.get("/console/sign-in", host="td.internal",
                          headers={"X-Forwarded-Proto": "https"})

    assert "your browser will not keep it" in main_text(plain.text)
    assert "your browser will not keep it" not in main_text(proxied.text)


def test_static_files_are_served_to_anyone_and_nothing_else_is(console):
    script = console.get("/console/static/console.js")

    assert script.status_code == 200
    assert script.headers["Content-Type"] == "text/javascript; charset=utf-8"
    assert script.headers["Cache-Control"] == "public, max-age=86400"
    for name in ("nothing.js", "..%2Fweb.py", ".hidden.css", "web.py"):
        assert console.get(f"/console/static/{name}").status_code == 404, name


def test_a_signed_out_page_shows_only_the_sign_in(console):
    form = console.get("/console/sign-in").text

    assert 'aria-label="Console"' not in form and "/console/triggers" not in form
    assert "Times in" not in form
    assert 'action="/console/sign-in"' in form
    console.sign_in("viewer")
    signed_in = console.get("/console/").text
    assert 'aria-label="Console"' in signed_in and "/console/triggers" in signed_in
    assert "Times in <span data-zone-name>UTC</span>" in signed_in
