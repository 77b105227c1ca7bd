"""JQL as the service writes it: quoted values that cannot add JQL, and filled templates."""

from __future__ import annotations

from ticket_dispatcher.domain.jql import fill, jql_string


def test_a_value_is_one_string_literal_that_cannot_end_early():
    assert jql_string('x" OR project = SECRET OR assignee = "y') == \
        '"x\\" OR project = SECRET OR assignee = \\"y"'
    assert jql_string("a\\") == '"a\\\\"'  # a trailing backslash cannot escape the quote


def test_a_template_takes_the_quoted_account_and_leaves_other_braces():
    assert fill("assignee = {account} AND labels = {other}", "acc") == \
        'assignee = "acc" AND labels = {other}'
