"""Time off from calendars: the refresher that keeps the configured iCalendar feeds' absences
as engineers' time off (``refresher.py``). It reads the feeds through integrations/ (fetching,
``calendar_fetch.py``; reading, ``calendar_feed.py``) and stores through store/; it is no actor,
only a thread of its own on the scheduler's timers."""
