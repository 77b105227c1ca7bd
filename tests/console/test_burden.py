"""The console's burden page: charts drawn on the server as SVG, every number in a table too,
for viewers and operators; a bad period is an error page naming it."""

from __future__ import annotations

from datetime import timedelta

from tests.console.conftest import main_text
from tests.store.test_burden import assign, notify


def _recorded(harness):
    now = harness.clock.now()
    assign(harness.store, at=now - timedelta(hours=3))
    notify(harness.store, at=now - timedelta(hours=2), page_at=now - timedelta(hours=2))


def test_a_viewer_sees_each_chart_with_its_numbers(console, harness):
    _recorded(harness)
    console.sign_in("viewer")

    page = console.get("/console/reports/burden")

    assert page.status_code == 200
    assert page.text.count('<svg class="chart"') == 3  # bands, weeks, one rotation
    assert 'role="img"' in page.text and "<title id=\"chart-bands-t\">" in page.text
    assert 'class="band-sleep"' in page.text or 'class="band-off"' in page.text
    text = " ".join(main_text(page.text).split())
    assert "a@x.io 1 – 1 0 1" in text  # person, assigned, open, cards, urgent, pages
    assert "group:sre" in text
    assert '<a href="/console/reports/burden" aria-current="page">Burden</a>' in page.text


def test_a_scope_naming_nothing_is_a_400_page_naming_it(console, harness):
    console.sign_in("viewer")

    page = console.get("/console/reports/burden?project=NOPE&from=")

    assert page.status_code == 400
    assert "project" in main_text(page.text)
