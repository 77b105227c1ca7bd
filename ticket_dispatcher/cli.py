"""``ticket-dispatcher`` command line (README.md, "Command line").

Exit codes, as README.md "Command line" documents them per command: 0 success; 1 the work
could not be done with what was given: an invalid policy (``policy validate``), a file that is
not a readable policy (``policy test``), a database that cannot be reached or migrated
(``migrate``, ``serve``), a Jira that cannot be reached or refuses (``jira webhook``); 2 the
command cannot start: a usage error, an unreadable file, a bad configuration (a
``database_url`` naming a missing SQLite directory or needing the missing ``postgres`` extra,
no API keys, a port in use, no webhook secret); 130 interrupted. A failure is one line on
stderr, never a traceback.

``policy validate`` and ``policy test`` read a policy exactly as ``GET /dispatch/policies/{id}``
answers it: the server-assigned fields are ignored, with a note on stderr. ``policy
shadow-report`` reads the configured database, as ``migrate`` does (docs/policies.md, "Shadow:
try a change on live traffic").

``policy export``, ``plan`` and ``apply`` talk to a running service through its API, with the
key in ``TICKET_DISPATCHER_API_KEY`` (policy_sync.py, docs/policies-as-code.md): 1 for any
refusal or error, and ``plan`` exits 2 when there are changes to apply.

``jira webhook register`` and ``show`` manage the Jira admin webhook that feeds the service's
webhook route, through Jira's admin-webhook REST API (integrations/jira_webhooks_admin.py).

The store, the HTTP server and the HTTP client are imported inside their commands, so
``version``, ``config show`` and the offline ``policy`` commands load neither peewee, waitress
nor requests.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urlsplit

from ticket_dispatcher import __version__
from ticket_dispatcher.config import API_KEY_ENV, Config, load_config, masked
from ticket_dispatcher.domain.actions.registry import product_registry
from ticket_dispatcher.domain.explain import explain_policy
from ticket_dispatcher.domain.issues import issue_from_any
from ticket_dispatcher.domain.model import MAX_ACCOUNT_ID, Engineer, PolicySpec
from ticket_dispatcher.domain.validation import (
    parse_policy_spec,
    validate_policy,
    without_server_fields,
)
from ticket_dispatcher.errors import (
    DispatcherError,
    IntegrationError,
    InvalidInput,
    NotFound,
    Problem,
    fault_of,
)
from ticket_dispatcher.http import API_BASE
from ticket_dispatcher.safejson import MAX_ID, read_json_file
from ticket_dispatcher.timeutil import format_time, parse_business_now, parse_rfc3339, to_utc

if TYPE_CHECKING:  # imported inside the commands that open it
    from ticket_dispatcher.http.changes import Changes
    from ticket_dispatcher.integrations.jira_webhooks_admin import (
        AdminWebhook,
        JiraWebhookAdmin,
        WebhookRegistration,
    )
    from ticket_dispatcher.policy_sync import Reading, ServiceApi
    from ticket_dispatcher.store import Store
    from ticket_dispatcher.store.audit import Author
    from ticket_dispatcher.store.shadows import ShadowReportJson

PROG = "ticket-dispatcher"
EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_FAILURE = 1  # the service could not do its work (database unreachable, ...)
EXIT_CHANGES = 2  # ``policy plan``: there are changes to apply
# Policy and issue files nest deeper than request bodies may (a Jira issue's raw fields); the
# cap only keeps a hostile file from reaching RecursionError.
MAX_FILE_JSON_DEPTH = 256
# The service's route for Jira's admin webhooks, and the name its webhook is registered under.
WEBHOOK_ROUTE = f"{API_BASE}/jira/webhooks"
WEBHOOK_NAME = PROG


class UsageError(Exception):
    """Bad arguments or an unreadable file: one line on stderr, exit 2."""


class DatabaseFailure(Exception):
    """The database could not be reached or migrated: one line on stderr, exit 1."""


class JiraFailure(Exception):
    """Jira could not be reached or refused the request: one line on stderr, exit 1."""


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line and raise instead of exiting the process."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see --help)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
        if not hasattr(args, "run"):
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        return args.run(args)
    except SystemExit as exc:  # --help and --version-like exits of argparse
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    except UsageError as exc:
        return _fail(str(exc), EXIT_USAGE)
    except (DatabaseFailure, JiraFailure, SyncFailure) as exc:
        return _fail(str(exc), EXIT_FAILURE)
    except DispatcherError as exc:
        return _fail(exc.message, EXIT_USAGE)
    except KeyboardInterrupt:
        return 130


def _fail(message: str, code: int) -> int:
    print(f"{PROG}: {message}" if not message.startswith(PROG) else message, file=sys.stderr)
    return code


# --- the parser --------------------------------------------------------------------------------


def _build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config",
        metavar="PATH",
        default=argparse.SUPPRESS,  # so `--config` before or after the command both count
        help="TOML configuration file (default: $TICKET_DISPATCHER_CONFIG, else built-in)",
    )
    parser = _Parser(prog=PROG, parents=[common], description="Routes Jira tickets to engineers.")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", parser_class=_Parser)

    _add(commands, common, "version", "print the version", _run_version)
    _add_serve(commands, common)
    _add(commands, common, "migrate", "create or upgrade the database schema", _run_migrate)

    config = _add(commands, common, "config", "configuration commands", _show_help)
    config_commands = config.add_subparsers(metavar="COMMAND", parser_class=_Parser)
    _add(config_commands, common, "show", "effective configuration, secrets masked", _run_show)

    policy = _add(commands, common, "policy", "policy commands", _show_help)
    policy_commands = policy.add_subparsers(metavar="COMMAND", parser_class=_Parser)
    validate = _add(policy_commands, common, "validate", "validate a policy file", _run_validate)
    validate.add_argument("file", metavar="FILE", help="policy JSON")
    validate.add_argument("--engineers", action="store_true",
                          help="also warn about each email a user or users receiver names "
                               "that is not a dispatch-enabled engineer in the configured "
                               "database")
    _add_policy_test(policy_commands, common)
    _add_shadow_report(policy_commands, common)
    _add_policy_sync(policy_commands, common)
    _add_engineer(commands, common)
    _add_jira(commands, common)
    _add_report(commands, common)
    return parser


def _add_report(commands: Any, common: argparse.ArgumentParser) -> None:
    """``report burden``: who carries the load, as ``GET /reports/burden`` answers it, read
    from the configured database (docs/burden-report.md)."""
    report = _add(commands, common, "report", "reports read from the configured database",
                  _show_help)
    report_commands = report.add_subparsers(metavar="COMMAND", parser_class=_Parser)
    burden = _add(report_commands, common, "burden",
                  "per person: assignments, notifications, interruptions by band and time to "
                  "acknowledge; per rotation: the spread against a fair share",
                  _run_report_burden)
    burden.add_argument("--from", dest="since", type=_report_time, metavar="RFC3339",
                        help="start (default: --to less 28 days)")
    burden.add_argument("--to", dest="until", type=_report_time, metavar="RFC3339",
                        help="end (default: now)")
    scope = burden.add_mutually_exclusive_group()
    scope.add_argument("--policy", help="a policy's name: every version of its family counts")
    scope.add_argument("--project", help="a Jira project key")
    scope.add_argument("--rotation", help="an assign action's receiver, e.g. group:sre")
    burden.add_argument("--json", action="store_true", help="as GET /reports/burden answers")


def _report_time(text: str) -> datetime:
    try:
        return to_utc(parse_rfc3339(text))
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an RFC 3339 time with an offset, like 2026-12-01T02:00:00Z"
        ) from None


def _run_report_burden(args: argparse.Namespace) -> int:
    from ticket_dispatcher.domain.burden import BurdenQuery, table_lines

    query = BurdenQuery.of(args.since, args.until, datetime.now(UTC), policy=args.policy,
                           project=args.project, rotation=args.rotation)
    with _configured_store(_config(args)) as store:
        report = store.burden.report(query)
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        print("\n".join(table_lines(report)))
    return EXIT_OK


def _add_engineer(commands: Any, common: argparse.ArgumentParser) -> None:
    """``engineer show|set|time-off``: availability through the configured database, as the
    API's ``/engineers`` routes change it."""
    engineer = _add(commands, common, "engineer",
                    "an engineer's availability and time off (reads and writes the configured "
                    "database)", _show_help)
    engineer_commands = engineer.add_subparsers(metavar="COMMAND", parser_class=_Parser)
    show = _add(engineer_commands, common, "show",
                "an engineer, available now or not and why, and their time off to come",
                _run_engineer_show)
    show.add_argument("email", metavar="EMAIL")
    show.add_argument("--json", action="store_true", help="as GET /engineers/{email} answers")
    put = _add(engineer_commands, common, "set",
               "set an engineer's time zone, working hours, cap or Jira account (creates the "
               "engineer)",
               _run_engineer_set)
    put.add_argument("email", metavar="EMAIL")
    put.add_argument("--timezone", metavar="ZONE", help="an IANA time zone, e.g. Asia/Shanghai")
    put.add_argument("--working-hours", metavar="JSON",
                     help='e.g. \'{"mon": ["09:00-18:00"]}\'; "null": any time')
    put.add_argument("--max-open-issues", metavar="N", help='a whole number >= 1; "null": no cap')
    put.add_argument("--dispatch-enabled", type=_boolean, metavar="true|false",
                     help="the dispatch switch (default: unchanged; true for a new engineer)")
    put.add_argument("--jira-account-id", metavar="ID", type=_account_id,
                     help="the engineer's Jira account, when Jira does not show their email "
                          "(a private profile) and so cannot find it")
    off = _add(engineer_commands, common, "time-off", "an engineer's time off", _show_help)
    off_commands = off.add_subparsers(metavar="COMMAND", parser_class=_Parser)
    listing = _add(off_commands, common, "list", "time off that has not ended", _run_time_off_list)
    listing.add_argument("email", metavar="EMAIL")
    listing.add_argument("--past", action="store_true", help="also what has ended")
    adding = _add(off_commands, common, "add", "add time off", _run_time_off_add)
    adding.add_argument("email", metavar="EMAIL")
    adding.add_argument("--start", required=True, metavar="RFC3339")
    adding.add_argument("--end", required=True, metavar="RFC3339")
    adding.add_argument("--reason", default="", help="shown wherever the time off is")
    removing = _add(off_commands, common, "delete", "delete time off", _run_time_off_delete)
    removing.add_argument("email", metavar="EMAIL")
    removing.add_argument("id", metavar="ID", type=_time_off_id)


def _add_jira(commands: Any, common: argparse.ArgumentParser) -> None:
    """``jira webhook register|show``: the Jira admin webhook that sends issue events to the
    service's webhook route, through Jira's REST API with the configured Jira credentials."""
    jira = _add(commands, common, "jira",
                "Jira administration (with the configured Jira credentials, an administrator's)",
                _show_help)
    jira_commands = jira.add_subparsers(metavar="COMMAND", parser_class=_Parser)
    webhook = _add(jira_commands, common, "webhook",
                   "the Jira admin webhook that sends issue events to the service", _show_help)
    webhook_commands = webhook.add_subparsers(metavar="COMMAND", parser_class=_Parser)
    register = _add(webhook_commands, common, "register",
                    "create the webhook, or update the one of the same name or URL: issues "
                    "created and updated in the active policies' projects, signed with the "
                    "first of jira.webhook_secrets (reads the configured database)",
                    _run_webhook_register)
    register.add_argument("--url", required=True, type=_webhook_url, metavar="URL",
                          help=f"where Jira posts, e.g. https://td.example.com{WEBHOOK_ROUTE}")
    register.add_argument("--name", type=_webhook_name, default=WEBHOOK_NAME,
                          help=f"the webhook's name in Jira (default: {WEBHOOK_NAME})")
    show = _add(webhook_commands, common, "show",
                f"the webhooks registered in Jira that post to {WEBHOOK_ROUTE} or have the "
                "name; never a secret", _run_webhook_show)
    show.add_argument("--name", type=_webhook_name, default=WEBHOOK_NAME,
                      help=f"the webhook's name in Jira (default: {WEBHOOK_NAME})")
    show.add_argument("--json", action="store_true", help="machine-readable output")


def _add(commands: Any, common: argparse.ArgumentParser, name: str, help_text: str,
         run: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
    command = commands.add_parser(name, parents=[common], help=help_text, description=help_text)
    command.set_defaults(run=run, parser=command)
    return command


def _show_help(args: argparse.Namespace) -> int:
    """``ticket-dispatcher policy`` without a sub-command: its help, as a usage error."""
    args.parser.print_help(sys.stderr)
    return EXIT_USAGE


def _add_serve(commands: Any, common: argparse.ArgumentParser) -> None:
    serve = _add(commands, common, "serve", "migrate, recover and serve the API", _run_serve)
    serve.add_argument("--host", help="listen address (default: http.host)")
    serve.add_argument("--port", type=_port, help="listen port (default: http.port)")
    serve.add_argument(
        "--sandbox",
        action="store_true",
        help="mount the in-memory Jira/Lark/Oncall/Core fakes and load ops/examples/",
    )
    serve.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="serve without API keys (local use only)",
    )


def _add_policy_test(commands: Any, common: argparse.ArgumentParser) -> None:
    test = _add(commands, common, "test", "explain a policy against an issue", _run_policy_test)
    test.add_argument("file", metavar="FILE", help="policy JSON")
    test.add_argument(
        "--issue",
        required=True,
        metavar="ISSUE.json",
        help="a Jira issue (GET /rest/api/2/issue/{key}) or an issue snapshot",
    )
    test.add_argument("--now", metavar="RFC3339", help="business time (default: now, UTC)")
    test.add_argument("--json", action="store_true", help="machine-readable output")
    test.add_argument("--availability", action="store_true",
                      help="judge the listed engineers of each matched assign action at the "
                           "business time: time off and working hours, read from the "
                           "configured database")


def _add_shadow_report(commands: Any, common: argparse.ArgumentParser) -> None:
    report = _add(commands, common, "shadow-report",
                  "what a policy version decided in shadow, beside the live one (reads the "
                  "configured database)", _run_shadow_report)
    report.add_argument("policy_id", metavar="POLICY_ID", type=_policy_id,
                        help="the version put in shadow")
    report.add_argument("--json", action="store_true",
                        help="the report as GET /dispatch/policies/{id}/shadow answers it")


def _add_policy_sync(commands: Any, common: argparse.ArgumentParser) -> None:
    """``policy export|plan|apply``: a directory of policy files kept in step with a running
    service through its API, with the key in ``TICKET_DISPATCHER_API_KEY``
    (docs/policies-as-code.md)."""
    export = _add(commands, common, "export",
                  "write each active policy of a running service to DIR/NAME.json (a "
                  f"viewer's key in {API_KEY_ENV})", _run_export)
    plan = _add(commands, common, "plan",
                "show what apply would change: exit 0 no change, 2 changes, 1 an error (a "
                f"viewer's key in {API_KEY_ENV})", _run_plan)
    apply = _add(commands, common, "apply",
                 "make a running service's active policies those of DIR's files (an "
                 f"operator's key in {API_KEY_ENV})", _run_apply)
    for command in (export, plan, apply):
        command.add_argument("directory", metavar="DIR", help="the policy files, NAME.json")
        command.add_argument("--server", required=True, type=_server_url, metavar="URL",
                             help="the service's root, e.g. https://td.example.com:8080")
    for command in (plan, apply):
        command.add_argument("--prune", action="store_true",
                             help="also deactivate each active policy that has no file")
    apply.add_argument("--force", action="store_true",
                       help="apply over drift: active versions made in the console or the "
                            "API since the last apply")


def _row_id(what: str) -> Callable[[str], int]:
    """An argument type for the id of a stored ``what``: ASCII digits, from 1 to the largest
    id a database holds."""
    def parse(text: str) -> int:
        if not (text.isascii() and text.isdigit()):
            raise argparse.ArgumentTypeError(f"{text!r} is not a {what} id")
        number = int(text) if len(text.lstrip("0")) <= len(str(MAX_ID)) else MAX_ID + 1
        if not 1 <= number <= MAX_ID:
            raise argparse.ArgumentTypeError(f"{text} is not a {what} id (1 to {MAX_ID})")
        return number
    return parse


_policy_id = _row_id("policy")
_time_off_id = _row_id("time-off entry")


def _account_id(text: str) -> str:
    """A Jira account id as the API takes it: not blank, at most ``MAX_ACCOUNT_ID``
    characters."""
    if not text.strip() or len(text) > MAX_ACCOUNT_ID or text != text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not a Jira account id (1 to "
                                         f"{MAX_ACCOUNT_ID} characters, no blanks around them)")
    return text


def _boolean(text: str) -> bool:
    if text in ("true", "false"):
        return text == "true"
    raise argparse.ArgumentTypeError(f"{text!r} is not true or false")


def _webhook_url(text: str) -> str:
    """An absolute http(s) URL with a host, no credentials (Jira signs each delivery) and no
    fragment."""
    refused = argparse.ArgumentTypeError(f"{text!r} is not an absolute http:// or https:// URL")
    if not text or any(character.isspace() for character in text):
        raise refused
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError for a port that is not one
    except ValueError:
        raise refused from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.fragment:
        raise refused
    if parts.username is not None or parts.password is not None:
        raise argparse.ArgumentTypeError(
            "the URL must not carry credentials: Jira signs each delivery with the secret")
    return text


def _server_url(text: str) -> str:
    """The service's root: an absolute http(s) URL with a host, no credentials (the key
    comes from the environment), no query or fragment."""
    refused = argparse.ArgumentTypeError(f"{text!r} is not an absolute http:// or https:// URL")
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError for a port that is not one
    except ValueError:
        raise refused from None
    if (parts.scheme not in ("http", "https") or not parts.hostname or parts.query
            or parts.fragment or any(character.isspace() for character in text)):
        raise refused
    if parts.username is not None or parts.password is not None:
        raise argparse.ArgumentTypeError(f"the URL must not carry credentials: the key comes "
                                         f"from {API_KEY_ENV}")
    return text


def _webhook_name(text: str) -> str:
    name = text.strip()
    if not name:
        raise argparse.ArgumentTypeError("a webhook's name must not be empty")
    return name


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not between 1 and 65535")
    return port


def _config(args: argparse.Namespace) -> Config:
    return load_config(getattr(args, "config", None))


def _read_policy(path: str) -> Any:
    """The policy file as a body: the fields the server assigns (a file saved from
    ``GET /dispatch/policies/{id}``) are dropped, with a note."""
    raw, ignored = without_server_fields(_read_json(path, "policy file"))
    if ignored:
        print(f"{PROG}: note: {path}: ignored server-assigned fields: {', '.join(ignored)} "
              "(a create or edit body must not carry them)", file=sys.stderr)
    return raw


def _read_json(path: str, what: str) -> Any:
    try:
        # Depth-capped like a request body, so no file reaches RecursionError.
        return read_json_file(path, f"{what} {path}", max_depth=MAX_FILE_JSON_DEPTH)
    except InvalidInput as exc:  # its message names a position, never the content
        raise UsageError(exc.message) from None


# --- commands ----------------------------------------------------------------------------------


def _run_version(args: argparse.Namespace) -> int:
    print(f"{PROG} {__version__}")
    return EXIT_OK


def _run_show(args: argparse.Namespace) -> int:
    print(json.dumps(masked(_config(args)), indent=2))
    return EXIT_OK


def _run_migrate(args: argparse.Namespace) -> int:
    from ticket_dispatcher.store import Store
    from ticket_dispatcher.store.migrations import current_version

    config = _config(args)
    with _database_errors(config):
        store = Store.for_url(config.database_url, database=config.database)
        try:
            applied = store.migrate()
            version = current_version(store.db)
        finally:
            store.close()
    if applied:
        print(f"schema at version {version}, applied {applied}")
    else:
        print(f"schema up to date at version {version}")
    return EXIT_OK


def _run_serve(args: argparse.Namespace) -> int:
    from ticket_dispatcher.service import serve

    config = _config(args)
    with _database_errors(config):
        return serve(
            config,
            host=args.host,
            port=args.port,
            sandbox=args.sandbox,
            insecure_no_auth=args.insecure_no_auth,
        )


@contextmanager
def _database_errors(config: Config) -> Iterator[None]:
    """An unreachable or unusable database is one line, not a driver traceback."""
    from ticket_dispatcher.logging import Redactor
    from ticket_dispatcher.store import DATABASE_ERRORS, driver_detail

    try:
        yield
    except DATABASE_ERRORS as exc:
        detail = Redactor(config.secrets()).text(driver_detail(exc))
        url = masked(config)["database_url"]
        raise DatabaseFailure(f"database {url}: {detail}") from None


def _run_validate(args: argparse.Namespace) -> int:
    # Against the actions this build runs: what activation on the server will decide.
    raw = _read_policy(args.file)
    problems = validate_policy(raw, product_registry())
    warnings = _engineer_warnings(_config(args), raw, problems) if args.engineers else []
    for problem in problems:
        print(_problem_line(problem))
    for warning in warnings:  # as POST /dispatch/policies/validate warns: never invalid
        print(f"warning: {_problem_line(warning)}")
    if not problems:
        print("valid")
        return EXIT_OK
    print(f"{args.file}: {_count(len(problems), 'problem')}", file=sys.stderr)
    return EXIT_INVALID


def _engineer_warnings(config: Config, raw: Any, problems: list[Problem]) -> list[Problem]:
    """``receiver_warnings`` against the configured database's engineers."""
    from ticket_dispatcher.domain.validation import receiver_warnings

    with _configured_store(config) as store:
        return receiver_warnings(raw, store.engineers.dispatch_switches, problems)


def _problem_line(problem: Problem) -> str:
    return f"{problem.path}: {problem.message}" if problem.path else problem.message


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def _run_policy_test(args: argparse.Namespace) -> int:
    now = _parse_now(args.now)
    config = _config(args)
    raw_policy = _read_policy(args.file)
    raw_issue = _read_json(args.issue, "issue file")
    registry = product_registry(config.jira.auto_assign_label,
                                     config.transient_retry_budget)
    try:
        spec = parse_policy_spec(raw_policy, registry)
    except InvalidInput as exc:
        # A policy that cannot even be read as one is an invalid policy (exit 1), like validate.
        for problem in exc.problems or [Problem("", exc.message)]:
            print(_problem_line(problem))
        print(f"{args.file}: not a readable policy", file=sys.stderr)
        return EXIT_INVALID
    warnings = validate_policy(raw_policy, registry)
    try:
        issue = issue_from_any(
            raw_issue,
            l2_field_id=config.jira.l2_field_id,
            severity_field_id=config.jira.severity_field_id,
        )
    except InvalidInput as exc:
        raise UsageError(f"issue file {args.issue}: {exc.message}") from None
    # Validation problems are warnings: the rules are still walked as far as they can be; a
    # condition that cannot be evaluated is reported on its rule (condition_error).
    reports = explain_policy(spec, issue, now)
    judged = _judge_listed(config, reports, now) if args.availability else None
    if args.json:
        document = _report_json(spec, issue.key, now, warnings, reports)
        if judged is not None:
            for rule, verdicts in zip(document["rules"], judged, strict=True):
                rule["candidates"] = verdicts
        print(json.dumps(document, indent=2))
    else:
        print(_report_text(spec, issue.key, now, warnings, reports, judged))
    return EXIT_OK


def _judge_listed(config: Config, reports: list, now: datetime) -> list[list[list[dict]]]:
    """For each rule, for each of its actions: the verdicts of an assign action's listed
    engineers (its ``user`` or ``users`` receiver, then its fallback's) at ``now``, read from
    the configured database as a live run would read them; [] for any other action. A group
    or an Oncall team is resolved only when an action runs, and caps are counted in Jira then:
    neither is judged here."""
    from ticket_dispatcher.domain.actions.assign import AvailabilityRules, judge_listed

    with _configured_store(config) as store:
        return [[[verdict.to_json() for verdict in judge_listed(
                    store.engineers, action.get(action.get("type"), {}),
                    AvailabilityRules.of(action.get(action.get("type")) or {}), now)]
                 if action.get("type") in ("assign", "assign_l2") else []
                 for action in report.actions]
                for report in reports]


def _parse_now(text: str | None) -> datetime:
    if text is None:
        return datetime.now(UTC)  # the CLI is the edge: no Clock to inject offline
    try:
        return parse_business_now(text)
    except ValueError as exc:
        raise UsageError(f"--now: {exc}") from None


def _rule_json(report: Any) -> dict:
    return {
        "name": report.name,
        "priority": report.priority,
        "outcome": str(report.outcome),
        "reason": report.reason,
        "actions": list(report.actions),
    }


def _report_json(
    spec: PolicySpec, issue_key: str, now: datetime, warnings: list[Problem], reports: list
) -> dict:
    return {
        "policy": spec.name,
        "issue_key": issue_key,
        "now": format_time(now),
        "warnings": [problem.to_json() for problem in warnings],
        "rules": [_rule_json(report) for report in reports],
    }


def _report_text(
    spec: PolicySpec, issue_key: str, now: datetime, warnings: list[Problem], reports: list,
    judged: list[list[list[dict]]] | None = None,
) -> str:
    lines = [f"policy {spec.name!r} on {issue_key} at {format_time(now)}"]
    if warnings:
        lines.append(f"warnings ({_count(len(warnings), 'problem')}; it could not be activated):")
        lines += [f"  {_problem_line(problem)}" for problem in warnings]
    for report in reports:
        rule = _rule_json(report)
        lines.append(f"rule {rule['name']!r} (priority {rule['priority']}): {rule['outcome']}")
        if rule["reason"]:
            lines.append(f"  reason: {rule['reason']}")
        for index, action in enumerate(rule["actions"]):
            lines.append(f"  would run: {_action_text(action)}")
            verdicts = judged[reports.index(report)][index] if judged is not None else []
            lines += [f"    {v['email']}: " + ("eligible" if v["eligible"] else
                                               "passed over: " + "; ".join(v["reasons"]))
                      for v in verdicts]
    if not reports:
        lines.append("the policy has no rules")
    return "\n".join(lines)


def _action_text(action: dict) -> str:
    kind = action.get("type", "?")
    config = action.get(kind) if isinstance(kind, str) else None
    if config in (None, {}):
        return str(kind)
    return f"{kind} {json.dumps(config, ensure_ascii=False, sort_keys=True)}"


# --- policy shadow-report ----------------------------------------------------------------------


def _run_shadow_report(args: argparse.Namespace) -> int:
    config = _config(args)
    try:
        report = _read_shadow_report(config, args.policy_id)
    except NotFound as exc:  # the command line was sound; the database has no such policy
        return _fail(exc.message, EXIT_FAILURE)
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        print(_shadow_text(report))
    return EXIT_OK


def _read_shadow_report(config: Config, policy_id: int) -> ShadowReportJson:
    with _configured_store(config) as store:
        return store.shadows.report(policy_id).to_json()


@contextmanager
def _configured_store(config: Config) -> Iterator[Store]:
    """The configured database's store, at this release's schema (``DatabaseFailure``
    otherwise); closed afterwards."""
    from ticket_dispatcher.store import Store
    from ticket_dispatcher.store.migrations import current_version, latest_version

    with _database_errors(config):
        store = Store.for_url(config.database_url, database=config.database)
        try:
            # Connecting would create a missing SQLite file: a command never writes one.
            if store.engine.is_missing():
                raise DatabaseFailure(f"database {masked(config)['database_url']}: no such "
                                      "file (check database_url)")
            version, latest = current_version(store.db), latest_version()
            if version < latest:
                raise DatabaseFailure(
                    f"database {masked(config)['database_url']}: schema at version {version}, "
                    f"this release needs {latest} (run `{PROG} migrate`)")
            yield store
        finally:
            store.close()


def _shadow_text(report: ShadowReportJson) -> str:
    state = (f"in shadow since {report['started_at']}" if report["shadowing"]
             else "not in shadow")
    lines = [
        f"policy {report['policy_id']} (family {report['family_id']}): {state}",
        f"seen {report['seen']}: agreed {report['agreed']}, differed {report['differed']}, "
        f"pending {report['pending']}; dropped {report['dropped']} (not evaluated: busy)",
        "differences: " + ", ".join(f"{kind} {count}"
                                    for kind, count in report["differences"].items()),
    ]
    cases = report["latest_differences"]
    if cases:
        lines.append(f"latest {_count(len(cases), 'differing case')}, newest first:")
    for case in cases:
        lines.append(f"  {case['issue_key']} {case['kind']} (trigger {case['trigger_id']}, "
                     f"live execution {case['live_execution_id']}, {case['decided_at']})")
        lines.append(f"    live:   {_decision_text(case['live'])}")
        lines.append(f"    shadow: {_decision_text(case['shadow'])}")
    return "\n".join(lines)


def _decision_text(decision: dict) -> str:
    if not decision["matched_rules"]:
        text = "no rule matched"
    else:
        text = "rules " + ", ".join(repr(name) for name in decision["matched_rules"])
        text += " -> " + (", ".join(decision["actions"]) or "no actions")
    if decision["assignee"]:
        text += f"; assignee {decision['assignee']}"
    if decision["notification_steps"]:
        text += f"; steps {', '.join(decision['notification_steps'])}"
    if decision["error"]:
        text += f"; error: {decision['error']}"
    return text


# --- policy export, plan, apply ----------------------------------------------------------------


class SyncFailure(Exception):
    """A refusal or an error of ``policy export|plan|apply``: its lines on stderr, exit 1."""


def _run_export(args: argparse.Namespace) -> int:
    from ticket_dispatcher.policy_sync import export

    with _service(args) as api:
        written = export(api, Path(args.directory))
    for path in written:
        print(f"wrote {path}")
    print(f"exported {_count(len(written), 'active policy file')} to {args.directory}")
    return EXIT_OK


def _run_plan(args: argparse.Namespace) -> int:
    from ticket_dispatcher.policy_sync import plan

    with _service(args) as api:
        steps = plan(api, _read_directory(api, args), prune=args.prune)
    print("\n".join(steps.lines()))
    return EXIT_CHANGES if steps.changed else EXIT_OK


def _run_apply(args: argparse.Namespace) -> int:
    from ticket_dispatcher.http.changes import APPLY
    from ticket_dispatcher.policy_sync import apply, plan

    with _service(args, client=APPLY) as api:
        steps = plan(api, _read_directory(api, args), prune=args.prune)
        if not steps.changed:
            print("no change")
            return EXIT_OK
        print("\n".join(steps.lines()))
        done = apply(api, steps, force=args.force, say=print)
    print(f"applied {_count(done, 'change')}")
    return EXIT_OK


def _read_directory(api: ServiceApi, args: argparse.Namespace) -> Reading:
    from ticket_dispatcher.policy_sync import read_directory

    reading = read_directory(api, Path(args.directory))
    for note in reading.notes:
        print(f"{PROG}: {note}", file=sys.stderr)
    return reading


@contextmanager
def _service(args: argparse.Namespace, client: str = "cli") -> Iterator[ServiceApi]:
    """The service at ``--server`` with the environment's key; a ``SyncError`` becomes a
    ``SyncFailure`` (exit 1)."""
    from ticket_dispatcher.policy_sync import ServiceApi, SyncError

    key = os.environ.get(API_KEY_ENV, "").strip()
    if not key:
        raise SyncFailure(f"{API_KEY_ENV} is not set: export and plan need a viewer's API "
                          "key, apply an operator's")
    api = ServiceApi(args.server, key, client=client)
    try:
        yield api
    except SyncError as exc:
        raise SyncFailure(str(exc)) from None
    finally:
        api.close()


# --- engineer ----------------------------------------------------------------------------------


def _email(text: str) -> str:
    from ticket_dispatcher.domain.engineers import engineer_email

    email = engineer_email(text)
    if email is None:
        raise UsageError(f"{text!r} is not an engineer's email address")
    return email


def _run_engineer_show(args: argparse.Namespace) -> int:
    from ticket_dispatcher.domain.availability import LOOKAHEAD
    from ticket_dispatcher.domain.engineers import shown_engineer

    email, now = _email(args.email), datetime.now(UTC)
    with _configured_store(_config(args)) as store:
        try:
            engineer = store.engineers.get(email)
        except NotFound as exc:
            return _fail(exc.message, EXIT_FAILURE)
        away = store.engineers.time_off([email], now, now + LOOKAHEAD).get(email, [])
        upcoming, _ = store.time_off.page(email, now=now, limit=200)
    record = shown_engineer(engineer, away, now)
    if args.json:
        print(json.dumps(record, indent=2, ensure_ascii=False))
        return EXIT_OK
    availability = record["availability"]
    state = "available now" if availability["available"] else "not available now"
    print(f"{email}: {state}" + (f", until {availability['until']}"
                                 if availability["until"] else ""))
    for why in availability["reasons"]:
        print(f"  {why}")
    cap = record["max_open_issues"]
    print(f"timezone {record['timezone']}; "
          f"max_open_issues {'no cap' if cap is None else cap}; "
          f"dispatch {'enabled' if record['dispatch_enabled'] else 'disabled'}")
    print("working_hours " + (json.dumps(record["working_hours"])
                              if record["working_hours"] is not None else "any time"))
    for entry in upcoming:
        print(_time_off_line(entry.to_json()))
    return EXIT_OK


def _run_engineer_set(args: argparse.Namespace) -> int:
    from ticket_dispatcher.domain.engineers import availability_changes

    email = _email(args.email)
    given: dict[str, Any] = {}
    if args.timezone is not None:
        given["timezone"] = args.timezone
    if args.working_hours is not None:
        given["working_hours"] = _json_option("--working-hours", args.working_hours)
    if args.max_open_issues is not None:
        given["max_open_issues"] = _json_option("--max-open-issues", args.max_open_issues)
    if not given and args.dispatch_enabled is None and args.jira_account_id is None:
        raise UsageError(f"{PROG} engineer set: nothing to set (see --help)")
    with _configured_store(_config(args)) as store:
        try:
            stored: Engineer | None = store.engineers.get(email)
        except NotFound:
            stored = None
        try:
            changes = availability_changes(stored, given)
        except InvalidInput as exc:
            for problem in exc.problems or [Problem("", exc.message)]:
                print(_problem_line(problem), file=sys.stderr)
            return EXIT_INVALID
        enabled = stored.dispatch_enabled if stored is not None else True
        if args.dispatch_enabled is not None:
            enabled = args.dispatch_enabled
        engineer, created = _changes(store).put_engineer(
            _cli_author(), email, dispatch_enabled=enabled,
            jira_account_id=args.jira_account_id, availability=changes)
    print(f"{'created' if created else 'updated'} {engineer.email}")
    return EXIT_OK


def _changes(store: Store) -> Changes:
    """Changes made from the command line, audited as ``cli`` (docs/operations.md, "Audit
    trail")."""
    from ticket_dispatcher.clock import SystemClock
    from ticket_dispatcher.http.changes import Changes

    return Changes(store, SystemClock())


def _cli_author() -> Author:
    """The command line's author: the local user who ran it."""
    from ticket_dispatcher.store.audit import Author, Via

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a bare container)
        user = f"uid {os.getuid()}"
    return Author(user, Via.CLI)


def _json_option(name: str, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise UsageError(f"{name}: {text!r} is not JSON (null, a number or an object)") from None


def _run_time_off_list(args: argparse.Namespace) -> int:
    email = _email(args.email)
    with _configured_store(_config(args)) as store:
        try:
            store.engineers.get(email)
        except NotFound as exc:
            return _fail(exc.message, EXIT_FAILURE)
        entries, _ = store.time_off.page(email, now=datetime.now(UTC), past=args.past,
                                         limit=200)
    for entry in entries:
        print(_time_off_line(entry.to_json()))
    return EXIT_OK


def _run_time_off_add(args: argparse.Namespace) -> int:
    from ticket_dispatcher.domain.availability_parsing import parse_time_off

    email = _email(args.email)
    entry, problems = parse_time_off({"start": args.start, "end": args.end,
                                      "reason": args.reason}, email)
    if entry is None:
        for problem in problems:
            print(f"--{_problem_line(problem)}", file=sys.stderr)
        return EXIT_INVALID
    with _configured_store(_config(args)) as store:
        try:
            stored = _changes(store).add_time_off(_cli_author(), entry)
        except NotFound as exc:
            return _fail(exc.message, EXIT_FAILURE)
    print(_time_off_line(stored.to_json()))
    return EXIT_OK


def _run_time_off_delete(args: argparse.Namespace) -> int:
    email = _email(args.email)
    with _configured_store(_config(args)) as store:
        try:
            _changes(store).delete_time_off(_cli_author(), email, args.id)
        except NotFound as exc:
            return _fail(exc.message, EXIT_FAILURE)
    print(f"deleted time off {args.id} of {email}")
    return EXIT_OK


def _time_off_line(entry: dict) -> str:
    reason = f"  {entry['reason']}" if entry["reason"] else ""
    return f"{entry['id']}  {entry['start']} .. {entry['end']}  ({entry['source']}){reason}"


# --- jira webhook ------------------------------------------------------------------------------


def _run_webhook_register(args: argparse.Namespace) -> int:
    from ticket_dispatcher.integrations.jira_webhooks_admin import (
        WebhookRegistration,
        projects_jql,
        taking_triggers,
    )

    config = _config(args)
    if not config.jira.webhook_secrets:
        raise UsageError("no webhook secret: set jira.webhook_secrets "
                         "(TICKET_DISPATCHER_JIRA_WEBHOOK_SECRETS); the first one is registered "
                         "and Jira signs every delivery with it")
    _require_jira(config)
    with _configured_store(config) as store:
        policies = taking_triggers(store.policies.list_active())
    if not policies:
        return _fail("no active policy takes triggers, so no project to send events of: "
                     "activate a policy first (nothing registered)", EXIT_FAILURE)
    registration = WebhookRegistration(args.name, args.url, projects_jql(policies),
                                       config.jira.webhook_secrets[0])
    if not _posts_to_route(args.url):
        print(f"{PROG}: note: --url does not end in {WEBHOOK_ROUTE}, the service's webhook "
              "route", file=sys.stderr)
    with _jira_admin(config) as admin:
        webhook, verb = _create_or_update(admin, registration)
    print(f"{verb} Jira webhook {registration.name!r}" +
          (f" (id {webhook.id})" if webhook.id else "") + f": {registration.url}")
    print(f"  events  {', '.join(registration.events)}")
    if registration.jql:
        print(f"  filter  {registration.jql}")
    else:
        every = ", ".join(f"{policy.id} {policy.name!r}" for policy in policies
                          if not policy.trigger.project_key_in)
        print("  filter  none: every project's issues, since an active policy takes issues of "
              f"any project (policy {every})")
    print("  secret  the first of jira.webhook_secrets")
    return EXIT_OK


def _create_or_update(admin: JiraWebhookAdmin,
                      registration: WebhookRegistration) -> tuple[AdminWebhook, str]:
    """Updates the webhook with the registration's name or URL, else creates one: running
    ``register`` again never adds a second. Several such webhooks are left for a person to
    sort out (``JiraFailure``)."""
    same = [webhook for webhook in admin.registered()
            if webhook.name == registration.name or webhook.url == registration.url]
    if len(same) > 1:
        listed = "; ".join(f"id {webhook.id} {webhook.name!r} {webhook.url}" for webhook in same)
        raise JiraFailure(f"several Jira webhooks have the name {registration.name!r} or this "
                          f"URL ({listed}): delete all but one in Jira, then register again")
    if not same:
        return admin.create(registration), "created"
    if not same[0].id:
        raise JiraFailure(f"Jira did not give the id of webhook {same[0].name!r}, so it cannot "
                          "be updated")
    return admin.update(same[0].id, registration), "updated"


def _run_webhook_show(args: argparse.Namespace) -> int:
    config = _config(args)
    _require_jira(config)
    with _jira_admin(config) as admin:
        webhooks = [webhook for webhook in admin.registered()
                    if webhook.name == args.name or _posts_to_route(webhook.url)]
    if args.json:
        print(json.dumps([webhook.to_json() for webhook in webhooks], indent=2,
                         ensure_ascii=False))
        return EXIT_OK
    if not webhooks:
        print(f"no Jira webhook named {args.name!r} or posting to {WEBHOOK_ROUTE}")
    for webhook in webhooks:
        print(_webhook_text(webhook))
    return EXIT_OK


def _webhook_text(webhook: AdminWebhook) -> str:
    unknown = "not reported by Jira"
    enabled = {True: "enabled", False: "disabled", None: f"enabled: {unknown}"}[webhook.enabled]
    secret = {True: "set", False: "none", None: unknown}[webhook.secret_set]
    return "\n".join([
        f"{webhook.name!r}" + (f" (id {webhook.id})" if webhook.id else "") + f": {enabled}",
        f"  url     {webhook.url}",
        f"  events  {', '.join(webhook.events) or 'none'}",
        f"  filter  {webhook.jql or 'none: every project'}",
        f"  secret  {secret}",
    ])


def _posts_to_route(url: str) -> bool:
    return urlsplit(url).path.rstrip("/").endswith(WEBHOOK_ROUTE)


def _require_jira(config: Config) -> None:
    if not config.jira.base_url:
        raise UsageError("jira.base_url is not set (TICKET_DISPATCHER_JIRA_BASE_URL)")
    if not config.jira.email or not config.jira.api_token:
        raise UsageError("jira.email and jira.api_token are not set: a Jira administrator's "
                         "credentials are needed to manage webhooks")


@contextmanager
def _jira_admin(config: Config) -> Iterator[JiraWebhookAdmin]:
    """Jira's admin-webhook endpoint; a failure is one line (``JiraFailure``), with what to
    do about a refusal."""
    from ticket_dispatcher.integrations.jira_webhooks_admin import JiraWebhookAdmin

    admin = JiraWebhookAdmin(
        config.jira, connect_timeout=config.integrations.connect_timeout.total_seconds(),
        read_timeout=config.integrations.read_timeout.total_seconds())
    site = masked(config)["jira"]["base_url"]
    try:
        yield admin
    except IntegrationError as exc:
        if exc.status in (401, 403):
            raise JiraFailure(
                f"Jira at {site} refused the request (HTTP {exc.status}): managing webhooks "
                "needs Jira administrator rights; jira.email and jira.api_token must be an "
                "administrator's") from None
        hint = "; check jira.base_url" if exc.status == 404 else ""
        if fault_of(exc).answer_lost:  # running register again finds what it made
            hint = "; run the command again"
        raise JiraFailure(f"{exc.message} (Jira at {site}{hint})") from None
    finally:
        admin.close()
