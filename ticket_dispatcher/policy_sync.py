"""``policy export``, ``plan`` and ``apply``: a directory of policy files kept in step with a
running service, through its public API only (docs/policies-as-code.md).

What to change is decided in ``domain/policy_plan.py``; this module reads the directory,
talks to the service (``ServiceApi``, with the key from ``TICKET_DISPATCHER_API_KEY``) and
carries a plan out. A failure is a ``SyncError``: its message says what went wrong and, for a
directory, every problem of every file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from ticket_dispatcher.domain.policy_plan import (
    Plan,
    PlanError,
    PolicyFile,
    StoredVersion,
    active_by_name,
    file_name,
    make_plan,
    normalized,
    policy_file_text,
)
from ticket_dispatcher.domain.validation import without_server_fields
from ticket_dispatcher.errors import IntegrationError, InvalidInput
from ticket_dispatcher.http import API_BASE
from ticket_dispatcher.http.changes import CLIENT_HEADER
from ticket_dispatcher.integrations.http import HttpClient
from ticket_dispatcher.safejson import read_json_file

POLICIES = f"{API_BASE}/dispatch/policies"
PAGE = 200  # the largest page the API gives
# Policy files nest deeper than request bodies may; the cap keeps a hostile file from
# reaching RecursionError, and the service refuses what it would not take.
MAX_FILE_JSON_DEPTH = 256
# The service's error statuses this client reads itself: their body says what was wrong.
_REFUSALS = (400, 401, 403, 404, 409, 422)


class SyncError(Exception):
    """A refusal or an error: nothing more is done. ``str`` is what to show, one or more
    lines."""


class ServiceApi:
    """The policy endpoints of a running service, as one client: ``cli`` for reads, or
    ``apply`` (``policy apply``), whose versions the service marks as applied."""

    def __init__(self, server: str, api_key: str, *, client: str = "cli",
                 connect_timeout: float = 5, read_timeout: float = 30):
        self.server = server.rstrip("/")
        headers = {"X-API-KEY": api_key, CLIENT_HEADER: client}
        self._http = HttpClient("ticket-dispatcher", self.server, auth=lambda: headers,
                                connect_timeout=connect_timeout, read_timeout=read_timeout,
                                secrets=(api_key,))

    def close(self) -> None:
        self._http.close()

    def versions(self) -> list[StoredVersion]:
        """Every policy version the service holds, of every status."""
        found: list[StoredVersion] = []
        while True:
            answer = self._call("GET", POLICIES, params={"limit": PAGE, "offset": len(found)})
            items = answer.get("items") or []
            try:
                found += [_stored(item) for item in items]
            except (KeyError, TypeError, ValueError, AttributeError):
                raise SyncError(f"GET {POLICIES}: the answer is not a list of policies; is "
                                f"{self.server} the service?") from None
            if not items or len(found) >= int(answer.get("total") or 0):
                return found

    def validate(self, body: Any) -> tuple[list[str], list[str]]:
        """The service's ``(errors, warnings)`` for a body, each ``path: message``."""
        answer = self._call("POST", f"{POLICIES}/validate", json=body, expected=(200, 400))
        # 400: a body the service cannot even read (too deep, a control character).
        errors = _problems(answer.get("errors")) or (
            [str(answer.get("description"))] if answer.get("valid") is not True else [])
        return errors, _problems(answer.get("warnings"))

    def create(self, body: dict) -> dict:
        return self._call("POST", POLICIES, json=body, expected=(201,))

    def replace(self, policy_id: int, body: dict) -> dict:
        return self._call("POST", f"{POLICIES}/{policy_id}/replacements", json=body,
                          expected=(201,))

    def activate(self, policy_id: int) -> dict:
        return self._call("POST", f"{POLICIES}/{policy_id}/activate")

    def deactivate(self, policy_id: int) -> dict:
        return self._call("POST", f"{POLICIES}/{policy_id}/deactivate")

    def _call(self, method: str, path: str, *, expected: tuple[int, ...] = (200,),
              **kwargs: Any) -> dict:
        try:
            response = self._http.request(method, path, expected=(*expected, *_REFUSALS),
                                          **kwargs)
        except IntegrationError as exc:
            if exc.status is None:
                raise SyncError(f"cannot reach the service at {self.server}: "
                                f"{exc.message}") from None
            raise SyncError(exc.message) from None
        if response.status_code in _REFUSALS and response.status_code not in expected:
            raise SyncError(_refusal(method, path, response))
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise SyncError(f"{method} {path}: the service's answer is not a JSON object "
                            f"(HTTP {response.status_code}); is {self.server} the service?")
        return answer


def _refusal(method: str, path: str, response: requests.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        body = {}
    body = body if isinstance(body, dict) else {}
    text = f"the service refused {method} {path}: HTTP {response.status_code}"
    if body.get("code"):
        text += f" {body['code']}"
    if body.get("description"):
        text += f": {body['description']}"
    if response.status_code == 401:
        text += " (check TICKET_DISPATCHER_API_KEY)"
    elif response.status_code == 403:
        text += (" (this needs an operator's key in TICKET_DISPATCHER_API_KEY; export and "
                 "plan need only a viewer's)")
    problems = _problems(body.get("errors"))
    return "\n".join([text, *(f"  {problem}" for problem in problems)])


def _problems(raw: Any) -> list[str]:
    if not isinstance(raw, list):
        return []
    return [f"{p.get('path')}: {p.get('message')}" if p.get("path") else str(p.get("message"))
            for p in raw if isinstance(p, dict)]


def _stored(raw: dict) -> StoredVersion:
    body, _ = without_server_fields(raw)
    return StoredVersion(id=int(raw["id"]), family_id=str(raw["family_id"]),
                         version=int(raw["version"]), status=str(raw["status"]),
                         origin=raw.get("origin"), body=body)


# --- export -----------------------------------------------------------------------------------


def export(api: ServiceApi, directory: Path) -> list[Path]:
    """Writes ``NAME.json`` for each family with an active version (``directory`` made if
    missing); nothing when a name is shared by two families or cannot be a file name."""
    active = _active(api.versions())
    unnamable = [f"policy {v.name!r} ({v.label}): its name cannot be a file name (no '/', "
                 "'\\', control characters, <>:\"|?*, leading dot or blanks around it, at "
                 "most 250 bytes); rename it" for v in active.values() if not file_name(v.name)]
    taken: dict[str, str] = {}
    for name in active:
        other = taken.setdefault((file_name(name) or "").casefold(), name)
        if other != name and file_name(name):
            unnamable.append(f"policies {other!r} and {name!r} would have one file name on a "
                             "file system that ignores case; rename one")
    if unnamable:
        raise SyncError("\n".join(unnamable))
    try:
        directory.mkdir(parents=True, exist_ok=True)
        written = []
        for name, version in sorted(active.items()):
            path = directory / str(file_name(name))
            path.write_text(policy_file_text(version.body), encoding="utf-8")
            written.append(path)
    except OSError as exc:
        raise SyncError(f"cannot write to {directory}: {exc.strerror}") from None
    return written


def _active(versions: Iterable[StoredVersion]) -> dict[str, StoredVersion]:
    try:
        return active_by_name(versions)
    except PlanError as exc:
        raise SyncError(str(exc)) from None


# --- plan and apply ---------------------------------------------------------------------------


@dataclass
class Reading:
    """A directory's policy files, checked by the service."""

    files: list[PolicyFile]
    notes: list[str]  # warnings and ignored fields (``note: ...``): shown, never blocking


def read_directory(api: ServiceApi, directory: Path) -> Reading:
    """Every ``*.json`` file of ``directory``, each read and validated by the service;
    ``SyncError`` naming every problem of every file when any is not a valid policy."""
    if not directory.is_dir():
        raise SyncError(f"{directory} is not a directory")
    files, notes, problems = [], [], []
    for path in sorted(directory.glob("*.json")):
        try:
            raw, ignored = without_server_fields(
                read_json_file(path, f"policy file {path}", max_depth=MAX_FILE_JSON_DEPTH))
        except InvalidInput as exc:
            problems.append(exc.message)
            continue
        if ignored:
            notes.append(f"note: {path}: ignored server-assigned fields: {', '.join(ignored)}")
        errors, warnings = api.validate(raw)
        problems += [f"{path}: {error}" for error in errors]
        notes += [f"warning: {path}: {warning}" for warning in warnings]
        if not errors:
            files.append(PolicyFile(str(path), normalized(raw)))
    if problems:
        count = len(problems)
        raise SyncError("\n".join([*problems, f"{count} problem{'s' * (count != 1)} in "
                                              f"{directory}: nothing was applied"]))
    return Reading(files, notes)


def plan(api: ServiceApi, reading: Reading, *, prune: bool) -> Plan:
    """The plan of ``domain/policy_plan.py`` for the directory against the service."""
    try:
        return make_plan(reading.files, api.versions(), prune=prune)
    except PlanError as exc:
        raise SyncError(str(exc)) from None


def apply(api: ServiceApi, steps: Plan, *, force: bool, say: Callable[[str], None]) -> int:
    """Carries a plan out: each new family or version is created then activated, each pruned
    family deactivated. Refuses, before any change, a plan with drift unless ``force``.
    Returns how many policies changed."""
    if steps.drifts and not force:
        raise SyncError("\n".join([*(drift.line() for drift in steps.drifts),
                                   "apply refused: nothing was changed (--force applies the "
                                   "files over the drift)"]))
    done = 0
    try:
        for creation in steps.creations:
            made = api.create(creation.file.body)
            say(_done("created and activated", api.activate(int(made["id"]))))
            done += 1
        for replacement in steps.replacements:
            made = api.replace(replacement.active.id, replacement.file.body)
            say(_done("replaced and activated", api.activate(int(made["id"]))))
            done += 1
        for deactivation in steps.deactivations:
            say(_done("deactivated", api.deactivate(deactivation.active.id)))
            done += 1
    except SyncError as exc:
        raise SyncError(f"{exc}\napply stopped after {done} of {_count(steps)} changes; "
                        "run plan to see what is left") from None
    return done


def _done(what: str, policy: dict) -> str:
    return (f"{what} policy {policy.get('name')!r}: version {policy.get('version')} "
            f"(policy {policy.get('id')}, family {policy.get('family_id')})")


def _count(steps: Plan) -> int:
    return len(steps.creations) + len(steps.replacements) + len(steps.deactivations)
