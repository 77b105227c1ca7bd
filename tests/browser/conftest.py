"""The console in a real browser: Debian's chromium driven by Playwright (sync API) against real
``serve --sandbox`` processes (tests/browser/demo.py).

One browser for the whole session; every test opens its own contexts (``new_context``), so no
cookie, storage or time zone leaks from one test into the next. Two servers, each started once
with the demo world built in it: ``sandbox`` with authentication off, as README "Try it" runs
it, and ``guarded`` with a viewer's and an operator's API keys, for the tests of roles.

Every context watches its pages: a script error or a Content-Security-Policy violation fails the
test that caused it. The servers' logs must stay free of errors and tracebacks.

Without chromium the tests skip, except where ``CI`` is set (CI installs it: .ci/run), where
they fail.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import sync_playwright

from tests.browser.demo import (
    ACTION_MS,
    CHROMIUM,
    VIEWPORTS,
    SandboxServer,
    World,
    build_world,
    launch,
)
from tests.http.conftest import KEYS


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "browser: drives Debian's chromium through Playwright "
                                       "against a real serve process (tests/browser)")


def unavailable(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must provide it (.ci/run installs chromium)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def browser() -> Iterator:
    if not Path(CHROMIUM).is_file():
        unavailable(f"no chromium at {CHROMIUM} (apt-get install chromium)")
    with sync_playwright() as playwright:
        chromium = launch(playwright)
        yield chromium
        chromium.close()


def _serve(directory: Path, keys: dict[str, str] | None) -> Iterator[tuple[SandboxServer, World]]:
    server = SandboxServer(directory, keys)
    try:
        server.wait_serving()
        yield server, build_world(server, assigned_issue="TCID-1", parked_issue="GTOC-2")
        problems = server.log_problems()
        assert not problems, "the server logged errors:\n" + "".join(problems)
    finally:
        server.kill()


@pytest.fixture(scope="session")
def sandbox_world(tmp_path_factory) -> Iterator[tuple[SandboxServer, World]]:
    yield from _serve(tmp_path_factory.mktemp("sandbox"), None)


@pytest.fixture(scope="session")
def guarded_world(tmp_path_factory) -> Iterator[tuple[SandboxServer, World]]:
    keys = {role: KEYS[role] for role in ("operator", "viewer")}
    yield from _serve(tmp_path_factory.mktemp("guarded"), keys)


@pytest.fixture
def sandbox(sandbox_world) -> SandboxServer:
    """``serve --sandbox`` with authentication off: everyone is an operator."""
    return sandbox_world[0]


@pytest.fixture
def world(sandbox_world) -> World:
    return sandbox_world[1]


@pytest.fixture
def guarded(guarded_world) -> SandboxServer:
    """``serve --sandbox`` with API keys: the console asks to sign in."""
    return guarded_world[0]


@pytest.fixture
def guarded_ids(guarded_world) -> World:
    return guarded_world[1]


class Watch:
    """What went wrong in a context's pages: uncaught script errors and CSP violations
    (Chromium reports a refused script, style or frame as a console error)."""

    CSP = re.compile(r"Content Security Policy|Refused to (load|execute|apply|frame|connect)")

    def __init__(self) -> None:
        self.problems: list[str] = []

    def console(self, message) -> None:
        if message.type in ("error", "warning") and self.CSP.search(message.text):
            where = message.page.url if message.page else message.location.get("url")
            self.problems.append(f"CSP violation on {where}: {message.text}")

    def error(self, error) -> None:
        self.problems.append(f"script error: {error.error}")


@pytest.fixture
def new_context(browser) -> Iterator[Callable[..., object]]:
    """``new_context("phone" or "wide", **playwright_options)``: a fresh context; its pages are
    watched (``Watch``) and it is closed at the end of the test."""
    opened: list[tuple[object, Watch]] = []

    def new(viewport: str = "wide", **options):
        context = browser.new_context(viewport=VIEWPORTS[viewport], **options)
        context.set_default_timeout(ACTION_MS)
        watch = Watch()
        context.on("console", watch.console)
        context.on("weberror", watch.error)
        opened.append((context, watch))
        return context

    yield new
    problems = [problem for _, watch in opened for problem in watch.problems]
    for context, _ in opened:
        context.close()
    assert not problems, "\n".join(problems)


@pytest.fixture
def page(new_context):
    """A page of a fresh context of the wide (1440x900) size."""
    return new_context().new_page()



_AXE = Axe()


def serious_violations(page, rules: tuple[str, ...] = ()) -> list[str]:
    """axe-core's violations of impact serious or critical on the page as it is now (every
    rule, or only ``rules``): the rule id, what it asks, and the elements (CSS selectors) that
    break it."""
    options = {"resultTypes": ["violations"]}
    if rules:
        options["runOnly"] = {"type": "rule", "values": list(rules)}
    found = []
    for violation in _AXE.run(page, options=options).response["violations"]:
        if violation["impact"] in ("serious", "critical"):
            targets = "; ".join(" ".join(map(str, node["target"]))
                                for node in violation["nodes"][:8])
            found.append(f"{violation['id']} ({violation['impact']}): {violation['help']}: "
                         f"{targets}")
    return found
