"""Absences read from iCalendar feeds: per-person and organisation feeds, recurrence, time
zones, the window's edges, and the refusal of feeds that are not iCalendar or cost too much."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import recurring_ical_events
from icalendar import Calendar

from ticket_dispatcher.integrations.calendar_feed import (
    Absence,
    FeedError,
    ParsedFeed,
    parse_feed,
)

WINDOW_START = datetime(2026, 3, 1, tzinfo=UTC)
WINDOW_END = datetime(2026, 4, 1, tzinfo=UTC)
ZONES = {
    "alice@example.com": "Asia/Shanghai",
    "bob@example.com": "America/New_York",
    "carol@example.com": "Europe/Berlin",
    "erin@example.com": "Europe/London",
    "pierre@example.com": "Europe/Paris",
}


def zone_of(email: str) -> ZoneInfo:
    return ZoneInfo(ZONES.get(email, "UTC"))


def ics(text: str) -> bytes:
    """A feed as servers send it: CRLF line ends."""
    return textwrap.dedent(text).strip().replace("\n", "\r\n").encode() + b"\r\n"


def read(data: bytes, *, person: str | None = None, max_events: int = 1000,
         max_bytes: int = 1_000_000, **limits: int) -> ParsedFeed:
    return parse_feed(data, window_start=WINDOW_START, window_end=WINDOW_END, person=person,
                      zone_of=zone_of, max_events=max_events, max_bytes=max_bytes, **limits)


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


def spans(feed: ParsedFeed) -> list[tuple[str, datetime, datetime, str]]:
    return [(a.email, a.start, a.end, a.summary) for a in feed.absences]


def events(body: str, header: str = "") -> bytes:
    """A minimal calendar around VEVENT text."""
    return ics("BEGIN:VCALENDAR\nVERSION:2.0\nPRODID:-//Tests//Feed//EN\n" + header
               + textwrap.dedent(body).strip() + "\nEND:VCALENDAR")


GOOGLE_FEED = ics("""
    BEGIN:VCALENDAR
    PRODID:-//Google Inc//Google Calendar 70.9054//EN
    VERSION:2.0
    CALSCALE:GREGORIAN
    METHOD:PUBLISH
    X-WR-CALNAME:alice@example.com
    X-WR-TIMEZONE:Asia/Shanghai
    BEGIN:VTIMEZONE
    TZID:Asia/Shanghai
    X-LIC-LOCATION:Asia/Shanghai
    BEGIN:STANDARD
    TZOFFSETFROM:+0800
    TZOFFSETTO:+0800
    TZNAME:CST
    DTSTART:19700101T000000
    END:STANDARD
    END:VTIMEZONE
    BEGIN:VEVENT
    DTSTART;TZID=Asia/Shanghai:20260303T140000
    DTEND;TZID=Asia/Shanghai:20260303T160000
    DTSTAMP:20260225T083000Z
    UID:4k2j5h6g7f8d9s0a1q2w3e4r5t@google.com
    CREATED:20260220T101500Z
    LAST-MODIFIED:20260220T101500Z
    SEQUENCE:0
    STATUS:CONFIRMED
    SUMMARY:Dentist
    TRANSP:OPAQUE
    BEGIN:VALARM
    ACTION:DISPLAY
    DESCRIPTION:This is an event reminder
    TRIGGER:-P0DT0H30M0S
    END:VALARM
    END:VEVENT
    BEGIN:VEVENT
    DTSTART;VALUE=DATE:20260316
    DTEND;VALUE=DATE:20260321
    DTSTAMP:20260225T083000Z
    UID:vacation-hainan@google.com
    SEQUENCE:0
    STATUS:CONFIRMED
    SUMMARY:Vacation – Hainan
    TRANSP:OPAQUE
    END:VEVENT
    BEGIN:VEVENT
    DTSTART;TZID=Asia/Shanghai:20260306T130000
    DTEND;TZID=Asia/Shanghai:20260306T180000
    RRULE:FREQ=WEEKLY;BYDAY=FR
    EXDATE;TZID=Asia/Shanghai:20260320T130000
    DTSTAMP:20260225T083000Z
    UID:friday-afternoon@google.com
    SEQUENCE:0
    STATUS:CONFIRMED
    SUMMARY:Friday afternoon off
    TRANSP:OPAQUE
    END:VEVENT
    BEGIN:VEVENT
    DTSTART;TZID=Asia/Shanghai:20260313T150000
    DTEND;TZID=Asia/Shanghai:20260313T180000
    RECURRENCE-ID;TZID=Asia/Shanghai:20260313T130000
    DTSTAMP:20260225T083000Z
    UID:friday-afternoon@google.com
    SEQUENCE:1
    STATUS:CONFIRMED
    SUMMARY:Friday afternoon off (from 3pm)
    TRANSP:OPAQUE
    END:VEVENT
    BEGIN:VEVENT
    DTSTART;TZID=Asia/Shanghai:20260310T090000
    DTEND;TZID=Asia/Shanghai:20260310T120000
    DTSTAMP:20260225T083000Z
    UID:offsite-cancelled@google.com
    STATUS:CANCELLED
    SUMMARY:Offsite
    TRANSP:OPAQUE
    END:VEVENT
    BEGIN:VEVENT
    DTSTART;VALUE=DATE:20260311
    DTEND;VALUE=DATE:20260312
    DTSTAMP:20260225T083000Z
    UID:home-office@google.com
    SUMMARY:Working from home
    TRANSP:TRANSPARENT
    END:VEVENT
    BEGIN:VEVENT
    DTSTART;TZID=Asia/Shanghai:20260210T090000
    DTEND;TZID=Asia/Shanghai:20260210T100000
    DTSTAMP:20260225T083000Z
    UID:february@google.com
    SUMMARY:Before the window
    END:VEVENT
    BEGIN:VEVENT
    DTSTART;VALUE=DATE:20260415
    DTEND;VALUE=DATE:20260416
    DTSTAMP:20260225T083000Z
    UID:april@google.com
    SUMMARY:After the window
    END:VEVENT
    BEGIN:VEVENT
    DTSTART:20260227T000000Z
    DTEND:20260302T000000Z
    DTSTAMP:20260225T083000Z
    UID:conference@google.com
    SUMMARY:Conference trip
    END:VEVENT
    END:VCALENDAR
""")


def test_personal_feed_yields_its_busy_events_in_utc():
    feed = read(GOOGLE_FEED, person="Alice@Example.com")

    alice = "alice@example.com"
    assert spans(feed) == [
        (alice, utc(2026, 2, 27), utc(2026, 3, 2), "Conference trip"),
        (alice, utc(2026, 3, 3, 6), utc(2026, 3, 3, 8), "Dentist"),
        (alice, utc(2026, 3, 6, 5), utc(2026, 3, 6, 10), "Friday afternoon off"),
        (alice, utc(2026, 3, 13, 7), utc(2026, 3, 13, 10), "Friday afternoon off (from 3pm)"),
        # All day in Shanghai, 16 to 20 March inclusive: midnight there is 16:00 UTC before.
        (alice, utc(2026, 3, 15, 16), utc(2026, 3, 20, 16), "Vacation – Hainan"),
        # 20 March is excluded (EXDATE); the cancelled and the free events are left out.
        (alice, utc(2026, 3, 27, 5), utc(2026, 3, 27, 10), "Friday afternoon off"),
    ]
    assert (feed.unattributed, feed.malformed, feed.notes) == (0, 0, ())


def test_absences_are_frozen_and_carry_the_uid_of_their_event():
    absence = read(GOOGLE_FEED, person="alice@example.com").absences[2]

    assert absence == Absence("alice@example.com", utc(2026, 3, 6, 5), utc(2026, 3, 6, 10),
                              "Friday afternoon off", "friday-afternoon@google.com")
    assert absence.start.tzinfo is UTC
    with pytest.raises(AttributeError):
        absence.email = "mallory@example.com"  # type: ignore[misc]


ORGANISATION_FEED = ics("""
    BEGIN:VCALENDAR
    PRODID:-//Example HR//Absence Calendar 3.1//EN
    VERSION:2.0
    X-WR-CALNAME:Engineering absences
    BEGIN:VEVENT
    UID:absence-1001@hr.example.com
    DTSTAMP:20260220T090000Z
    DTSTART;VALUE=DATE:20260312
    DTEND;VALUE=DATE:20260313
    SUMMARY:Team offsite
    ORGANIZER;CN=Maria Manager:mailto:maria@example.com
    ATTENDEE;CN=Bob Baker;PARTSTAT=ACCEPTED:mailto:Bob@Example.com
    ATTENDEE;CN=Carol Chen;PARTSTAT=TENTATIVE:MAILTO:carol@example.com
    ATTENDEE;CN=Dave Davis;PARTSTAT=DECLINED:mailto:dave@example.com
    ATTENDEE;CUTYPE=ROOM;CN=Everest:mailto:everest@rooms.example.com
    END:VEVENT
    BEGIN:VEVENT
    UID:absence-1002@hr.example.com
    DTSTAMP:20260220T090000Z
    DTSTART;VALUE=DATE:20260302
    DTEND;VALUE=DATE:20260314
    SUMMARY:Parental leave
    ORGANIZER;CN=Erin Evans:mailto:Erin@Example.com
    END:VEVENT
    BEGIN:VEVENT
    UID:absence-1003@hr.example.com
    DTSTAMP:20260220T090000Z
    DTSTART;VALUE=DATE:20260324
    DTEND;VALUE=DATE:20260326
    SUMMARY:Alice Chen (alice@example.com) – vacation
    END:VEVENT
    BEGIN:VEVENT
    UID:absence-1004@hr.example.com
    DTSTAMP:20260220T090000Z
    DTSTART;VALUE=DATE:20260305
    DTEND;VALUE=DATE:20260306
    SUMMARY:Office closed (public holiday)
    END:VEVENT
    BEGIN:VEVENT
    UID:absence-1005@hr.example.com
    DTSTAMP:20260220T090000Z
    DTSTART:20260317T130000Z
    DTEND:20260317T170000Z
    SUMMARY:Doctor
    ATTENDEE;CN=Frank:urn:uuid:6f1d2c3b-0000-4000-8000-000000000005
    ORGANIZER;CN=Frank Fischer:mailto:frank@example.com
    END:VEVENT
    END:VCALENDAR
""")


def test_organisation_feed_names_people_by_attendee_organizer_or_summary():
    feed = read(ORGANISATION_FEED)

    assert spans(feed) == [
        # Each all-day absence spans whole days of its person's own zone.
        ("alice@example.com", utc(2026, 3, 23, 16), utc(2026, 3, 25, 16),
         "Alice Chen (alice@example.com) – vacation"),
        ("bob@example.com", utc(2026, 3, 12, 4), utc(2026, 3, 13, 4), "Team offsite"),
        ("carol@example.com", utc(2026, 3, 11, 23), utc(2026, 3, 12, 23), "Team offsite"),
        ("erin@example.com", utc(2026, 3, 2), utc(2026, 3, 14), "Parental leave"),
        ("frank@example.com", utc(2026, 3, 17, 13), utc(2026, 3, 17, 17), "Doctor"),
    ]
    assert feed.unattributed == 1  # the public holiday names nobody


def test_organisation_feed_event_with_several_addresses_in_its_summary():
    feed = read(events("""
        BEGIN:VEVENT
        UID:trip@hr.example.com
        DTSTART:20260309T000000Z
        DTEND:20260311T000000Z
        SUMMARY:Customer visit: bob@example.com, Carol@Example.com
        END:VEVENT
    """))

    assert [a.email for a in feed.absences] == ["bob@example.com", "carol@example.com"]


def test_personal_feed_leaves_out_events_the_person_declined():
    feed = read(events("""
        BEGIN:VEVENT
        UID:review@example.com
        DTSTART:20260304T020000Z
        DTEND:20260304T030000Z
        SUMMARY:Architecture review
        ORGANIZER:mailto:bob@example.com
        ATTENDEE;PARTSTAT=DECLINED:mailto:alice@example.com
        END:VEVENT
        BEGIN:VEVENT
        UID:planning@example.com
        DTSTART:20260305T020000Z
        DTEND:20260305T030000Z
        SUMMARY:Planning
        ORGANIZER:mailto:bob@example.com
        ATTENDEE;PARTSTAT=NEEDS-ACTION:mailto:alice@example.com
        END:VEVENT
    """), person="alice@example.com")

    assert [a.summary for a in feed.absences] == ["Planning"]


# An errand 09:00-12:00 on 2026-03-05 with no zone of its own: a "floating" time.
FLOATING_ERRAND = """
        BEGIN:VEVENT
        UID:floating@example.com
        DTSTART:20260305T090000
        DTEND:20260305T120000
        SUMMARY:Errand
        END:VEVENT
    """


def test_floating_times_are_read_in_the_persons_zone():
    feed = read(events(FLOATING_ERRAND), person="alice@example.com")

    assert spans(feed) == [("alice@example.com", utc(2026, 3, 5, 1), utc(2026, 3, 5, 4), "Errand")]


def test_floating_times_follow_the_zone_the_feed_names():
    feed = read(events(FLOATING_ERRAND, header="X-WR-TIMEZONE:Europe/Paris\n"),
                person="alice@example.com")

    assert spans(feed) == [("alice@example.com", utc(2026, 3, 5, 8), utc(2026, 3, 5, 11), "Errand")]


@pytest.mark.parametrize("name", ["America", "Mars/Olympus", "x" * 300])
def test_a_feed_zone_that_is_no_zone_leaves_floating_times_in_the_persons_zone(name):
    # "America" is a directory of the zone database, 300 characters too long a file name:
    # neither may reach the file system's error
    feed = read(events(FLOATING_ERRAND, header=f"X-WR-TIMEZONE:{name}\n"),
                person="alice@example.com")

    assert spans(feed) == [("alice@example.com", utc(2026, 3, 5, 1), utc(2026, 3, 5, 4), "Errand")]
    assert feed.notes[0].startswith("the feed's X-WR-TIMEZONE")


def test_window_keeps_what_touches_it_whole_and_nothing_else():
    feed = read(events("""
        BEGIN:VEVENT
        UID:ends-at-start@example.com
        DTSTART:20260228T220000Z
        DTEND:20260301T000000Z
        SUMMARY:Ends as the window starts
        END:VEVENT
        BEGIN:VEVENT
        UID:starts-at-end@example.com
        DTSTART:20260401T000000Z
        DTEND:20260401T010000Z
        SUMMARY:Starts as the window ends
        END:VEVENT
        BEGIN:VEVENT
        UID:last-minute@example.com
        DTSTART:20260331T235900Z
        DTEND:20260401T010000Z
        SUMMARY:Last minute
        END:VEVENT
        BEGIN:VEVENT
        UID:mondays@example.com
        DTSTART:20260105T080000Z
        DTEND:20260105T090000Z
        RRULE:FREQ=WEEKLY;BYDAY=MO
        SUMMARY:Monday morning off
        END:VEVENT
        BEGIN:VEVENT
        UID:no-duration@example.com
        DTSTART:20260310T080000Z
        SUMMARY:A moment takes no time
        END:VEVENT
        BEGIN:VEVENT
        UID:april-fools@example.com
        DTSTART;VALUE=DATE:20260401
        SUMMARY:1 April in Shanghai starts on 31 March in UTC
        END:VEVENT
    """), person="alice@example.com")

    assert [(a.start, a.summary) for a in feed.absences] == [
        (utc(2026, 3, 2, 8), "Monday morning off"),
        (utc(2026, 3, 9, 8), "Monday morning off"),
        (utc(2026, 3, 16, 8), "Monday morning off"),
        (utc(2026, 3, 23, 8), "Monday morning off"),
        (utc(2026, 3, 30, 8), "Monday morning off"),
        (utc(2026, 3, 31, 16), "1 April in Shanghai starts on 31 March in UTC"),
        (utc(2026, 3, 31, 23, 59), "Last minute"),
    ]
    assert feed.absences[-1].end == utc(2026, 4, 1, 1)  # kept whole, not clipped


PARIS_FEED = ics("""
    BEGIN:VCALENDAR
    PRODID:-//Microsoft Corporation//Outlook 16.0 MIMEDIR//EN
    VERSION:2.0
    BEGIN:VTIMEZONE
    TZID:Europe/Paris
    BEGIN:STANDARD
    DTSTART:16011028T030000
    RRULE:FREQ=YEARLY;BYDAY=-1SU;BYMONTH=10
    TZOFFSETFROM:+0200
    TZOFFSETTO:+0100
    END:STANDARD
    BEGIN:DAYLIGHT
    DTSTART:16010325T020000
    RRULE:FREQ=YEARLY;BYDAY=-1SU;BYMONTH=3
    TZOFFSETFROM:+0100
    TZOFFSETTO:+0200
    END:DAYLIGHT
    END:VTIMEZONE
    BEGIN:VEVENT
    UID:mornings@example.fr
    DTSTART;TZID=Europe/Paris:20260327T100000
    DTEND;TZID=Europe/Paris:20260327T120000
    RRULE:FREQ=DAILY;COUNT=4
    SUMMARY:Morning off
    END:VEVENT
    BEGIN:VEVENT
    UID:night@example.fr
    DTSTART;TZID=Europe/Paris:20260329T010000
    DTEND;TZID=Europe/Paris:20260329T040000
    SUMMARY:Night across the change
    END:VEVENT
    BEGIN:VEVENT
    UID:sunday@example.fr
    DTSTART;VALUE=DATE:20260329
    DTEND;VALUE=DATE:20260330
    SUMMARY:Short Sunday
    END:VEVENT
    END:VCALENDAR
""")


def test_paris_times_keep_their_wall_clock_across_the_change_to_summer_time():
    feed = read(PARIS_FEED, person="pierre@example.com")

    assert [(a.start, a.end, a.summary) for a in feed.absences] == [
        (utc(2026, 3, 27, 9), utc(2026, 3, 27, 11), "Morning off"),  # CET, UTC+1
        (utc(2026, 3, 28, 9), utc(2026, 3, 28, 11), "Morning off"),
        # The all-day Sunday of the change has 23 hours.
        (utc(2026, 3, 28, 23), utc(2026, 3, 29, 22), "Short Sunday"),
        # 01:00 to 04:00 on the night the clocks skip from 02:00 to 03:00 is two hours.
        (utc(2026, 3, 29, 0), utc(2026, 3, 29, 2), "Night across the change"),
        (utc(2026, 3, 29, 8), utc(2026, 3, 29, 10), "Morning off"),  # CEST, UTC+2
        (utc(2026, 3, 30, 8), utc(2026, 3, 30, 10), "Morning off"),
    ]


def test_an_event_that_cannot_be_read_is_skipped_and_noted():
    feed = read(events("""
        BEGIN:VEVENT
        UID:garbled@example.com
        DTSTART:next tuesday
        SUMMARY:Garbled
        END:VEVENT
        BEGIN:VEVENT
        UID:zero-interval@example.com
        DTSTART:20260302T080000Z
        DTEND:20260302T090000Z
        RRULE:FREQ=DAILY;INTERVAL=0
        SUMMARY:Would loop for ever
        END:VEVENT
        BEGIN:VEVENT
        UID:sixtieth-monday@example.com
        DTSTART:20260302T080000Z
        DTEND:20260302T090000Z
        RRULE:FREQ=YEARLY;BYDAY=60MO
        SUMMARY:Makes the rule engine fail
        END:VEVENT
        BEGIN:VEVENT
        UID:fine@example.com
        DTSTART:20260303T080000Z
        DTEND:20260303T090000Z
        SUMMARY:Fine
        END:VEVENT
    """), person="alice@example.com")

    assert [a.summary for a in feed.absences] == ["Fine"]
    assert feed.malformed == 3
    assert feed.notes[:2] == ("event 'garbled@example.com' skipped: unreadable DTSTART",
                              "event 'zero-interval@example.com' skipped: a repetition interval"
                              " below 1")
    assert feed.notes[2].startswith("event 'sixtieth-monday@example.com' skipped: it cannot be"
                                    " expanded (")


def test_an_event_that_ends_before_it_starts_is_skipped_not_turned_round():
    feed = read(events("""
        BEGIN:VEVENT
        UID:backwards@example.com
        DTSTART;VALUE=DATE:20260305
        DTEND;VALUE=DATE:20260304
        SUMMARY:Backwards
        END:VEVENT
        BEGIN:VEVENT
        UID:backwards-in-time@example.com
        DTSTART:20260305T100000Z
        DTEND:20260305T090000Z
        SUMMARY:Backwards too
        END:VEVENT
    """), person="alice@example.com")

    assert feed.absences == ()
    assert feed.malformed == 2
    assert feed.notes == ("event 'backwards@example.com' skipped: its DTEND is before its DTSTART",
                          "event 'backwards-in-time@example.com' skipped: its DTEND is before"
                          " its DTSTART")


def test_an_unknown_time_zone_is_read_as_local_time_and_noted():
    feed = read(events("""
        BEGIN:VEVENT
        UID:mars@example.com
        DTSTART;TZID=Mars/Olympus_Mons:20260305T090000
        DTEND;TZID=Mars/Olympus_Mons:20260305T100000
        SUMMARY:Elsewhere
        END:VEVENT
    """), person="alice@example.com")

    assert [(a.start, a.end) for a in feed.absences] == [(utc(2026, 3, 5, 1), utc(2026, 3, 5, 2))]
    assert feed.malformed == 0
    assert feed.notes == ("event 'mars@example.com' names the unknown time zone"
                          " 'Mars/Olympus_Mons'; its times are read as floating",)


def test_feed_larger_than_allowed_is_refused():
    with pytest.raises(FeedError) as refused:
        read(GOOGLE_FEED, person="alice@example.com", max_bytes=1000)

    assert refused.value.message == f"the feed is {len(GOOGLE_FEED)} bytes, more than the 1000" \
        " allowed"


@pytest.mark.parametrize(("data", "message"), [
    (b"", "the feed is empty"),
    (b" \r\n\t ", "the feed is empty"),
    (b"<!DOCTYPE html>\n<html><head><title>Sign in</title></head><body>Sign in to continue"
     b"</body></html>", "the feed is an HTML or XML page, not iCalendar"),
    (b'{"error": {"code": 401, "message": "Invalid credentials"}}',
     "the feed is JSON, not iCalendar"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
     "the feed is not iCalendar: it does not start with BEGIN:VCALENDAR"),
    (b"BEGIN:VCARD\r\nVERSION:4.0\r\nFN:Alice Chen\r\nEND:VCARD\r\n",
     "the feed is not iCalendar: it does not start with BEGIN:VCALENDAR"),
    (GOOGLE_FEED[:len(GOOGLE_FEED) // 2],
     "the feed is not valid iCalendar: it is truncated or malformed"),
    (GOOGLE_FEED + GOOGLE_FEED, "the feed is not valid iCalendar: it is truncated or malformed"),
    (b"BEGIN:VCALENDAR\r\nthis is no content line\r\nEND:VCALENDAR\r\n",
     "the feed is not valid iCalendar: it is truncated or malformed"),
], ids=["empty", "blank", "html", "json", "png", "vcard", "truncated", "two calendars",
        "garbage line"])
def test_what_is_not_one_icalendar_is_refused_with_a_short_message(data: bytes, message: str):
    with pytest.raises(FeedError) as refused:
        read(data, person="alice@example.com")

    assert refused.value.message == message
    # No parser exception rides along to end up in a traceback.
    assert refused.value.__cause__ is None
    assert refused.value.__context__ is None or refused.value.__suppress_context__


# --- hostile feeds: each limit bounds the work, counted here rather than timed (how long the
# work takes is the machine's; how much of it the limits let through is the code's) ---------


@dataclass
class Work:
    """What reading one feed asked of the parser and of the recurrence library."""

    parses: int = 0  # calendars parsed from bytes
    series: int = 0  # series handed to the library to expand
    occurrences: int = 0  # occurrences the library computed for them


@pytest.fixture
def work(monkeypatch) -> Work:
    done = Work()
    parse, expand = Calendar.from_ical, recurring_ical_events.of

    def counted_parse(*args, **kwargs):
        done.parses += 1
        return parse(*args, **kwargs)

    def counted_expand(*args, **kwargs):
        done.series += 1
        query = expand(*args, **kwargs)
        between = query.between

        def counted_between(*window):
            found = between(*window)
            done.occurrences += len(found)
            return found

        query.between = counted_between
        return query

    monkeypatch.setattr(Calendar, "from_ical", counted_parse)
    monkeypatch.setattr(recurring_ical_events, "of", counted_expand)
    return done


def _many_events(count: int, first: datetime) -> bytes:
    lines = ["BEGIN:VCALENDAR", "VERSION:2.0", "PRODID:-//Hostile//Feed//EN"]
    for index in range(count):
        start = first + timedelta(minutes=10 * index)
        lines += ["BEGIN:VEVENT", f"UID:event-{index}@hostile.example.com",
                  f"DTSTART:{start:%Y%m%dT%H%M%SZ}", "DURATION:PT30M",
                  f"SUMMARY:Event {index}", "END:VEVENT"]
    return ("\r\n".join([*lines, "END:VCALENDAR"]) + "\r\n").encode()


def test_feed_of_a_hundred_thousand_events_is_refused_quickly(work):
    data = _many_events(100_000, first=utc(2026, 3, 2))

    with pytest.raises(FeedError) as refused:
        read(data, person="alice@example.com", max_bytes=100_000_000)

    assert work.parses == 0  # counted before parsing, never parsed
    assert refused.value.message == "the feed holds 100001 components (events, alarms, time" \
        " zones), more than the 20000 allowed"


def test_more_occurrences_than_the_cap_are_refused_as_soon_as_the_cap_is_passed(work):
    data = _many_events(3_000, first=utc(2026, 3, 2))

    with pytest.raises(FeedError) as refused:
        read(data, person="alice@example.com", max_events=1000, max_bytes=100_000_000)

    assert work.series == 1001  # one event each: none of the 1,999 after the cap was looked at
    assert refused.value.message == "the feed has at least 1001 event occurrences within a day" \
        " of the window, more than the 1000 allowed"


def test_events_outside_the_window_do_not_count_against_the_cap():
    data = _many_events(3_000, first=utc(2025, 6, 1))  # three weeks of events, all in 2025

    assert read(data, person="alice@example.com", max_events=10).absences == ()


def test_unbounded_minutely_rule_is_refused_quickly(work):
    data = events("""
        BEGIN:VEVENT
        UID:every-minute@hostile.example.com
        DTSTART:20260301T000000Z
        DURATION:PT1M
        RRULE:FREQ=MINUTELY
        SUMMARY:Busy
        END:VEVENT
    """)

    with pytest.raises(FeedError) as refused:
        read(data, person="alice@example.com", max_events=1000)

    # Expanded in slices of about the cap's worth, so it stops within two of them: not the
    # 46,000 occurrences of the window and its margins.
    assert 1000 < work.occurrences <= 2 * 1001
    assert refused.value.message == "the feed has at least 1001 event occurrences within a day" \
        " of the window, more than the 1000 allowed"


def test_rule_that_repeats_every_second_for_years_before_the_window_is_refused_quickly(work):
    data = events("""
        BEGIN:VEVENT
        UID:every-second@hostile.example.com
        DTSTART:20200101T000000Z
        DURATION:PT1S
        RRULE:FREQ=SECONDLY;BYMONTH=12
        SUMMARY:Busy in December
        END:VEVENT
    """)

    with pytest.raises(FeedError) as refused:
        read(data, person="alice@example.com")

    assert work.series == 0  # refused by its cost alone, before the library steps through it
    assert refused.value.message.startswith(
        "event 'every-second@hostile.example.com' is too costly to expand: about ")


def test_daily_rule_whose_filters_may_never_match_is_skipped_at_once(work):
    # The rule engine would search day by day to the year 9999 for a 30 February.
    data = events("""
        BEGIN:VEVENT
        UID:february-30@hostile.example.com
        DTSTART:20260101T090000Z
        DURATION:PT1H
        RRULE:FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30
        SUMMARY:Never
        END:VEVENT
    """)

    feed = read(data, person="alice@example.com")

    assert work.series == 0  # never handed to the library
    assert feed.notes == ("event 'february-30@hostile.example.com' skipped: a daily or finer"
                          " repetition rule whose filters may never match",)


def test_weekly_rules_whose_filters_never_match_exhaust_the_budget(work):
    data = events("\n".join(f"""
        BEGIN:VEVENT
        UID:second-monday-{index}@hostile.example.com
        DTSTART:20260105T090000Z
        DURATION:PT1H
        RRULE:FREQ=WEEKLY;BYDAY=MO;BYSETPOS=2
        SUMMARY:Never
        END:VEVENT""" for index in range(20)))

    with pytest.raises(FeedError) as refused:
        read(data, person="alice@example.com")

    # Each search to the end of the calendar is charged to the feed's budget, which pays for
    # three: the library searched for those and for none of the other 17.
    assert work.series == 3 and work.occurrences == 0
    assert refused.value.message.startswith(
        "event 'second-monday-3@hostile.example.com' is too costly to expand")


def test_rules_that_calendar_programs_write_are_expanded_without_charge():
    feed = read(events("""
        BEGIN:VEVENT
        UID:last-weekday@example.com
        DTSTART:20200131T090000Z
        DURATION:PT8H
        RRULE:FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1
        SUMMARY:Last weekday of the month off
        END:VEVENT
        BEGIN:VEVENT
        UID:second-tuesday@example.com
        DTSTART:20200114T090000Z
        DURATION:PT8H
        RRULE:FREQ=MONTHLY;BYDAY=2TU
        SUMMARY:Second Tuesday off
        END:VEVENT
        BEGIN:VEVENT
        UID:ides@example.com
        DTSTART;VALUE=DATE:20100315
        RRULE:FREQ=YEARLY;BYMONTH=3;BYMONTHDAY=15
        SUMMARY:Ides of March
        END:VEVENT
    """), person="bob@example.com")

    assert [(a.start.date().isoformat(), a.summary) for a in feed.absences] == [
        ("2026-03-10", "Second Tuesday off"),
        ("2026-03-15", "Ides of March"),
        ("2026-03-31", "Last weekday of the month off"),
    ]


def test_old_daily_and_weekly_rules_are_cheap_enough_to_expand():
    feed = read(events("""
        BEGIN:VEVENT
        UID:standup@example.com
        DTSTART:20100104T013000Z
        DTEND:20100104T014500Z
        RRULE:FREQ=DAILY;BYDAY=MO,TU,WE,TH,FR
        SUMMARY:Stand-up
        END:VEVENT
        BEGIN:VEVENT
        UID:part-time@example.com
        DTSTART;VALUE=DATE:19990101
        RRULE:FREQ=WEEKLY;BYDAY=FR
        SUMMARY:Part-time: Fridays off
        END:VEVENT
    """), person="bob@example.com")

    assert len([a for a in feed.absences if a.summary == "Stand-up"]) == 22
    assert len([a for a in feed.absences if a.summary == "Part-time: Fridays off"]) == 4


def test_window_must_be_two_aware_times_in_order():
    with pytest.raises(ValueError):
        parse_feed(GOOGLE_FEED, window_start=WINDOW_END, window_end=WINDOW_START, person=None,
                   zone_of=zone_of, max_events=10, max_bytes=100_000)
    with pytest.raises(ValueError):
        parse_feed(GOOGLE_FEED, window_start=datetime(2026, 3, 1), window_end=WINDOW_END,
                   person=None, zone_of=zone_of, max_events=10, max_bytes=100_000)
