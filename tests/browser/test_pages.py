"""Every console page in a real browser: axe-core finds nothing serious or critical and no page
scrolls sideways, on a phone (390x844) and a desktop (1440x900), where the colours are checked
in dark mode too; the keyboard gets around, a dark system theme is followed, and times show
in the viewer's zone, which the page names once."""

from __future__ import annotations

import re
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import serious_violations
from tests.browser.demo import PAGES, STATUS, VIEWPORTS
from ticket_dispatcher.console.web import NAV

pytestmark = pytest.mark.browser

COLOUR_RULES = ("color-contrast", "link-in-text-block")


@pytest.fixture
def show(request, new_context):
    """``show(name, viewport)``: a fresh context of that size with the page open. The sign-in
    form is the guarded server's (the sandbox has nothing to sign in to), the rest the
    sandbox's."""

    def open_page(name: str, viewport: str):
        server, world = request.getfixturevalue(
            "guarded_world" if name == "sign-in" else "sandbox_world")
        page = new_context(viewport).new_page()
        response = page.goto(server.url + world.path(name))
        assert response.status == STATUS.get(name, 200), (world.path(name), response.status)
        return page

    return open_page


@pytest.mark.parametrize("viewport", VIEWPORTS)
@pytest.mark.parametrize("name", PAGES)
def test_every_page_passes_axe_and_fits_the_window(show, name, viewport):
    page = show(name, viewport)

    assert serious_violations(page) == []
    width, window = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width <= window, f"the page is {width} px wide in a {window} px window: it scrolls"
    if viewport == "wide":  # where no table needs to scroll in its box either
        boxes = page.evaluate("[...document.querySelectorAll('main .scroll')]"
                              ".filter(box => box.scrollWidth > box.clientWidth).length")
        assert boxes == 0, f"{boxes} table(s) scroll sideways in their box at 1440 px"
        page.emulate_media(color_scheme="dark")  # dark mode changes only the colours
        assert serious_violations(page, COLOUR_RULES) == [], "in dark mode"


def test_tab_reaches_the_skip_link_then_the_navigation_and_enter_follows_a_link(sandbox,
                                                                                  page):
    page.goto(sandbox.url + "/console/")

    page.keyboard.press("Tab")
    expect(page.locator("a.skip")).to_be_focused()
    expect(page.locator("a.skip")).to_be_visible()  # shown while it has the focus
    reached = []
    for _ in range(len(NAV) + 1):  # the brand, then each link of the navigation bar
        page.keyboard.press("Tab")
        reached.append(page.evaluate("document.activeElement.textContent.trim()"))
    assert reached == ["Ticket Dispatcher", *(label for _, label in NAV)]

    page.goto(sandbox.url + "/console/")
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")  # the skip link: the focus moves to the page's content
    expect(page.locator("main")).to_be_focused()
    page.goto(sandbox.url + "/console/")
    for _ in range(4):  # the skip link, the brand, Overview, Triggers
        page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Triggers", exact=True)).to_be_focused()
    page.keyboard.press("Enter")
    expect(page).to_have_url(sandbox.url + "/console/triggers")


def luminance(css_colour: str) -> float:
    red, green, blue = (int(part) for part in re.findall(r"\d+", css_colour)[:3])
    return (0.2126 * red + 0.7152 * green + 0.0722 * blue) / 255


def test_a_dark_system_theme_darkens_the_page(sandbox, new_context):
    colours = {}
    for scheme in ("light", "dark"):
        page = new_context(color_scheme=scheme).new_page()
        page.goto(sandbox.url + "/console/")
        colours[scheme] = page.evaluate(
            "[getComputedStyle(document.body).backgroundColor,"
            " getComputedStyle(document.body).color]")

    assert luminance(colours["light"][0]) > 0.9 and luminance(colours["light"][1]) < 0.3
    assert luminance(colours["dark"][0]) < 0.1 and luminance(colours["dark"][1]) > 0.7


def test_every_time_shows_in_the_viewers_zone_which_the_page_names_once(sandbox, new_context):
    page = new_context(timezone_id="Asia/Shanghai").new_page()
    for visit in ("first", "next"):  # written by console.js, then by the server from its cookie
        page.goto(sandbox.url + "/console/triggers")

        stamp = page.locator("main time[data-local]").first
        moment = datetime.fromisoformat(stamp.get_attribute("datetime"))
        local = moment.astimezone(ZoneInfo("Asia/Shanghai"))
        expect(stamp).to_have_text(local.strftime("%Y-%m-%d %H:%M:%S"))
        expect(page.locator("footer")).to_contain_text("Times in Asia/Shanghai")
        text = page.evaluate("document.body.innerText")
        assert text.count("Asia/Shanghai") == 1, visit
        assert re.search(r"\d{4}-\d\d-\d\dT\d\d:", text) is None, visit  # no ISO time
    served = page.request.get(sandbox.url + "/console/triggers").text()
    assert 'data-zone="Asia/Shanghai"' in served  # the cookie reached the server
