"""Ticket Dispatcher: routes Jira tickets to engineers by versioned policies."""

__version__ = "0.1.0"
