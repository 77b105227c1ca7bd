"""Seeding an empty database from ``ops/examples/`` for ``serve --sandbox``.

The example engineers (``engineers.json``; ``time_off_days``: one of them away from the day
before the seeding for that many days), the ordinary assign policy and the three
assignment-notification families go into the store, active, and only into an empty one, so a
restart never overwrites what the operator changed. The sandbox
loads its own fake world from the same folder (``sandbox/examples.py``); this is the service's
half, because it writes to the service's store.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from ticket_dispatcher.domain.availability import TimeOff
from ticket_dispatcher.domain.model import PolicySpec
from ticket_dispatcher.domain.validation import parse_policy_spec, validate_policy
from ticket_dispatcher.errors import InvalidInput, PolicyInvalid
from ticket_dispatcher.safejson import bind_object, read_json_file
from ticket_dispatcher.store import Store

ENGINEERS_FILE = "engineers.json"
# The ordinary assign policy, and the notification families (the sandbox turns them on).
SEED_POLICIES = ("assign-tcid.json", "priority-assignee.json", "priority-l2.json",
                 "severity-assignee.json")


@dataclass(frozen=True)
class SeedSummary:
    seeded: bool  # False: the database already had engineers or policies
    engineers: int = 0
    policy_ids: tuple[int, ...] = ()


def seed_store(store: Store, examples_dir: str | Path, now: datetime) -> SeedSummary:
    """On an empty database (no policies, no engineers): upsert the example engineers, then
    create and activate the example policies. Everything is read and validated before
    the first write, so a bad file leaves the database empty."""
    if _has_rows(store):
        return SeedSummary(seeded=False)
    examples = Path(examples_dir)
    engineers = _read_engineers(examples / ENGINEERS_FILE)
    specs = [_read_policy(store, examples / "policies" / name) for name in SEED_POLICIES]
    for engineer in engineers:
        store.engineers.put(
            engineer["email"],
            dispatch_enabled=engineer["dispatch_enabled"],
            display_name=engineer.get("display_name"),
            jira_account_id=engineer.get("jira_account_id"),
            availability=({"timezone": engineer["timezone"]} if "timezone" in engineer
                          else None),
            now=now,
        )
        if (away := engineer.get("time_off_days")) is not None:
            # away from the day before the seeding for that many days: the sandbox's example
            # of someone an assignment passes over
            store.time_off.add(TimeOff(None, engineer["email"].lower(), now - timedelta(days=1),
                                       now + timedelta(days=away), "vacation", "api"), now)
    policy_ids = []
    for spec in specs:
        draft = store.policies.create(spec, now)
        policy_ids.append(store.policies.activate(draft.id, now=now).id)
    return SeedSummary(seeded=True, engineers=len(engineers), policy_ids=tuple(policy_ids))


def _has_rows(store: Store) -> bool:
    _, policies = store.policies.page(limit=1)
    _, engineers = store.engineers.page(limit=1)
    return bool(policies or engineers)


def _read_engineers(path: Path) -> list[dict]:
    raw = read_json_file(path)
    try:
        body = bind_object(raw, required={"engineers": list}, optional={})
        return [
            bind_object(item, required={"email": str, "dispatch_enabled": bool},
                        optional={"display_name": str, "jira_account_id": str,
                                  "timezone": str, "time_off_days": int},
                        path=f"engineers[{index}]")
            for index, item in enumerate(body["engineers"])
        ]
    except InvalidInput as exc:
        raise InvalidInput(f"{path}: {exc.message}", exc.problems) from None


def _read_policy(store: Store, path: Path) -> PolicySpec:
    """A policy file valid against the actions the store activates by (checked before any
    write; ``activate`` checks again in its transaction)."""
    raw = read_json_file(path)
    problems = validate_policy(raw, store.registry)
    if problems:
        raise PolicyInvalid(f"{path} is not a valid policy", problems)
    return parse_policy_spec(raw, store.registry)
