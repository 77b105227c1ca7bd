"""``assign``'s ``balanced`` strategy: how many open issues each candidate has in Jira, asked
for every candidate at once (docs/policies.md, "assign and assign_l2").

A JQL template (the action's ``count_jql``, else ``DEFAULT_COUNT_JQL``) decides which issues
count; ``{account}`` in it becomes each candidate's Jira account id as a quoted JQL string
(``jql.py``).
The accounts come from the engineers' cache or, for those without one, from Jira's user search
(cached on the engineer in a live run; a dry run writes nothing). Both the user searches and
the counts go to Jira as one batch each (``JiraSearch``), which the client pool runs
concurrently. Any candidate that cannot be counted fails the action: a workload balance that
silently skipped someone would not be one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ticket_dispatcher.domain.actions.base import ActionError, ActionRun
from ticket_dispatcher.domain.execution import FailureCode
from ticket_dispatcher.domain.jql import ACCOUNT, fill
from ticket_dispatcher.domain.model import Engineer
from ticket_dispatcher.errors import DispatcherError

DEFAULT_COUNT_JQL = f"assignee = {ACCOUNT} AND statusCategory != Done"
MAX_CANDIDATES = 50  # counts one plan may ask Jira for
MAX_COUNT_JQL_LENGTH = 2000


@dataclass(frozen=True)
class Workload:
    """Every candidate's count of open issues, by email, in candidate order."""

    counts: dict[str, int]

    def least_loaded(self, candidates: Sequence[Engineer]) -> list[Engineer]:
        """The candidates with the fewest open issues, in candidate order."""
        fewest = min(self.counts.values())
        return [e for e in candidates if self.counts[e.email] == fewest]


def accounts_of(run: ActionRun, candidates: Sequence[Engineer], *,
                cache: bool) -> dict[str, str]:
    """Each candidate's Jira account id, by email: the cached one, else an exact-email user
    search (all searches in one batch). ``cache``: store the ones found on the engineers."""
    accounts = {e.email: e.jira_account_id for e in candidates if e.jira_account_id}
    missing = [e.email for e in candidates if not e.jira_account_id]
    if not missing:
        return accounts
    try:
        answers = run.ports.jira.find_users_by_email(missing)
    except DispatcherError as exc:
        raise _failed(f"the Jira user search failed: {exc.message}") from None
    problems = []
    for email, answer in zip(missing, answers, strict=True):
        if answer.error is not None:
            problems.append(f"the Jira user search for {email} failed: {answer.error.message}")
        elif answer.value is None:
            problems.append(f"no Jira user has the email {email}")
        else:
            accounts[email] = answer.value.account_id
            if cache:
                run.ports.engineers.set_jira_account_id(email, answer.value.account_id,
                                                        now=run.now)
    if problems:
        raise _failed("; ".join(problems))
    return accounts


def count_open_issues(run: ActionRun, candidates: Sequence[Engineer],
                      accounts: dict[str, str], template: str,
                      counts: dict[str, int]) -> Workload:
    """Count every candidate's issues matching ``template`` in one batch. ``counts`` is
    filled as the answers come (the caller records it even when a count failed); any failed
    count fails the action, naming whose."""
    emails = [e.email for e in candidates]
    try:
        answers = run.ports.jira.count_issues([fill(template, accounts[email])
                                               for email in emails])
    except DispatcherError as exc:
        raise _failed(f"counting open issues failed: {exc.message}") from None
    failed = []
    for email, answer in zip(emails, answers, strict=True):
        if answer.error is not None:
            failed.append((email, answer.error.message))
        else:
            counts[email] = int(answer.value or 0)
    if failed:
        first_email, first_message = failed[0]
        others = f" (and for {', '.join(email for email, _ in failed[1:])})" if failed[1:] else ""
        raise _failed(f"counting open issues of {first_email} failed: {first_message}{others}")
    return Workload(dict(counts))


def _failed(message: str) -> ActionError:
    return ActionError(f"balanced: {message}", FailureCode.PLAN_FAILED)
