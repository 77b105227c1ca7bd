"""The burden report as charts a person would rather look at than the table: interruptions
stacked by band for each person, the weekly trend of pages, and each rotation's spread against
its fair share; every number also as a table (docs/burden-report.md). Viewers and operators,
as in the API."""

from __future__ import annotations

from typing import Any

import falcon
from markupsafe import Markup

from ticket_dispatcher.console.charts import Bar, Segment, bar_chart, column_chart
from ticket_dispatcher.console.web import Page, Query
from ticket_dispatcher.domain.burden import Band
from ticket_dispatcher.http.auth import VIEWER
from ticket_dispatcher.http.reports import burden_query

FILTERS = ("from", "to", "policy", "project", "rotation")
BAND_LEGEND = (("business", "band-business"), ("off hours", "band-off"),
               ("sleep", "band-sleep"))


class BurdenPage(Page):
    console_roles = {"GET": VIEWER}

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        query = Query(req)
        report = self.services.store.burden.report(burden_query(query, self.services))
        self.console.render(req, resp, "burden.html", report=report,
                            filters=dict.fromkeys(FILTERS, "") | query.values(*FILTERS),
                            charts=charts(report))


def charts(report: dict[str, Any]) -> dict[str, Any]:
    """The page's charts: one of interruptions, one of pages by week, one per rotation."""
    interrupted = [person for person in report["people"]
                   if sum(person["interruptions"].values())]
    bands = bar_chart(
        "chart-bands", "Interruptions by band",
        "Pages and App-urgent messages per person, stacked by the band of the moment each was "
        "sent, in the person's own hours: business, off hours, sleep.",
        [Bar(person["email"], tuple(Segment(person["interruptions"][band.value],
                                            f"band-{band.value}") for band in Band),
             note=_band_note(person["interruptions"])) for person in interrupted],
        legend=BAND_LEGEND)
    weekly = column_chart(
        "chart-weekly", "Pages by week",
        "Pages sent in each week of the period, oldest first.",
        [(week["week"][:10], week["pages"]) for week in report["weekly_pages"]], "pages-bar")
    rotations: list[Markup] = []
    for n, rotation in enumerate(report["rotations"]):
        rotations.append(bar_chart(
            f"chart-rotation-{n}", f"Spread of {rotation['rotation']}",
            "Assignments per member; the line across each bar is the member's fair share, an "
            "even split over the time each could be given work.",
            [Bar(member["email"], (Segment(member["assigned"], "assigned-bar"),),
                 marker=member["fair_share"],
                 note=f"{member['assigned']} (fair {member['fair_share']:g})")
             for member in rotation["members"]]))
    return {"bands": bands, "weekly": weekly, "rotations": rotations}


def _band_note(bands: dict[str, int]) -> str:
    return " / ".join(str(bands[band.value]) for band in Band)
