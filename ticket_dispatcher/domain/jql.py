"""JQL, Jira's query language, as this service writes it: a value quoted as a string literal,
and a template whose ``{account}`` becomes a Jira account id (``assign``'s ``count_jql``).

Every value put into JQL goes through ``jql_string``: an account id or an issue key read from
elsewhere can never end its literal and add JQL of its own.
"""

from __future__ import annotations

ACCOUNT = "{account}"  # where a template takes a Jira account id


def jql_string(text: str) -> str:
    """``text`` as one JQL string literal: double quotes around it, and a backslash before
    each backslash and double quote inside, so an account id can never end the literal and
    add JQL of its own."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def fill(template: str, account_id: str) -> str:
    """The template with every ``{account}`` replaced by the quoted account id; other braces
    are left as written."""
    return template.replace(ACCOUNT, jql_string(account_id))
