"""Policies kept as code: what ``policy plan`` shows and ``policy apply`` does, decided from
the files of a directory and the versions a service holds (docs/policies-as-code.md).

Files and families are matched by the policy's name. Both sides are compared as the service
keeps a policy (``normalized``: defaults filled in, rules in run order), so a file exported
from the service, or applied to it, plans no change. Pure: the caller reads the files and the
service, and carries the plan out.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ticket_dispatcher.domain.model import PolicySpec, PolicyStatus

APPLY_ORIGIN = "apply"  # ``Policy.origin`` of a version that ``policy apply`` made
# Characters no portable file name holds (Windows refuses them, "/" splits a path).
_UNSAFE_IN_NAME = frozenset('/\\<>:"|?*')
MAX_FILE_NAME_BYTES = 255
_RULE_FIELDS = ("priority", "when", "then", "transition")


class PlanError(Exception):
    """The directory and the service cannot be matched (two families or two files with one
    name): every reason, one per line."""

    def __init__(self, reasons: Sequence[str]):
        super().__init__("\n".join(reasons))
        self.reasons = list(reasons)


def normalized(body: dict) -> dict:
    """A readable policy body (no shape problems) as the service keeps it: every default
    filled in, the rules in run order (by priority; the service breaks ties by the order it
    was given them), the keys of conditions and actions sorted so their text is stable."""
    spec = PolicySpec.from_json(body).to_json()
    rules = sorted(spec["rules"], key=lambda rule: rule["priority"])
    spec["rules"] = [{**rule, "when": _sorted_keys(rule["when"]),
                      "then": _sorted_keys(rule["then"])} for rule in rules]
    return spec


def policy_file_text(body: dict) -> str:
    """A policy file as ``policy export`` writes it: the same text for the same policy."""
    return json.dumps(normalized(body), indent=2, ensure_ascii=False) + "\n"


def file_name(policy_name: str) -> str | None:
    """``NAME.json`` for a policy, or None when its name cannot be a portable file name."""
    name = f"{policy_name}.json"
    if (not policy_name or policy_name.startswith(".") or policy_name != policy_name.strip()
            or any(c in _UNSAFE_IN_NAME or ord(c) < 32 or ord(c) == 127 for c in policy_name)
            or len(name.encode()) > MAX_FILE_NAME_BYTES):
        return None
    return name


def _sorted_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _sorted_keys(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(item) for item in value]
    return value


# --- the two sides ----------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyFile:
    """A valid policy file: where it is, and its body."""

    path: str
    body: dict

    @property
    def name(self) -> str:
        return str(self.body["name"])


@dataclass(frozen=True)
class StoredVersion:
    """A policy version as the service's API shows it."""

    id: int
    family_id: str
    version: int
    status: str
    origin: str | None
    body: dict  # without the server's fields

    @property
    def name(self) -> str:
        return str(self.body["name"])

    @property
    def label(self) -> str:
        return f"version {self.version} (policy {self.id}, family {self.family_id})"


def active_by_name(versions: Iterable[StoredVersion]) -> dict[str, StoredVersion]:
    """The active version of each family, by its name; ``PlanError`` naming every name two
    active families share (files could not tell them apart)."""
    by_name: dict[str, list[StoredVersion]] = defaultdict(list)
    for version in versions:
        if version.status == PolicyStatus.ACTIVE:
            by_name[version.name].append(version)
    clashes = [f"two active families share the name {name!r}: "
              + ", ".join(f"family {v.family_id} ({v.label})" for v in found)
              + "; rename or deactivate all but one"
              for name, found in by_name.items() if len(found) > 1]
    if clashes:
        raise PlanError(clashes)
    return {name: found[0] for name, found in by_name.items()}


# --- the plan ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Drift:
    """A family's active version made elsewhere (the console, the API) after ``apply`` had
    managed it."""

    active: StoredVersion
    same_as_file: bool

    def line(self) -> str:
        same = "; it matches the file" if self.same_as_file else ""
        return (f"drift: policy {self.active.name!r}: the active {self.active.label} was "
                f"made by {self.active.origin or 'an unrecorded way'}, not by apply{same}; "
                "apply refuses it unless --force")


@dataclass(frozen=True)
class Creation:
    file: PolicyFile

    def lines(self) -> list[str]:
        return [f"+ policy {self.file.name!r}: new family from {self.file.path}, activated",
                *(f"    + rule {rule['name']!r}" for rule in self.file.body["rules"])]


@dataclass(frozen=True)
class Replacement:
    file: PolicyFile
    active: StoredVersion
    changes: list[str]  # empty for a drifted family whose active version matches the file

    def lines(self) -> list[str]:
        head = (f"~ policy {self.file.name!r}: new version from {self.file.path}, "
                f"replacing the active {self.active.label}")
        return [head, *(f"    {line}" for line in self.changes or ["(the file as it is)"])]


@dataclass(frozen=True)
class Deactivation:
    active: StoredVersion

    def lines(self) -> list[str]:
        return [f"- policy {self.active.name!r}: deactivate the active {self.active.label} "
                "(no file; --prune)"]


@dataclass
class Plan:
    creations: list[Creation] = field(default_factory=list)
    replacements: list[Replacement] = field(default_factory=list)
    deactivations: list[Deactivation] = field(default_factory=list)
    drifts: list[Drift] = field(default_factory=list)
    unmanaged: list[StoredVersion] = field(default_factory=list)  # no file, not pruned

    @property
    def changed(self) -> bool:
        return bool(self.creations or self.replacements or self.deactivations or self.drifts)

    def lines(self) -> list[str]:
        lines = [drift.line() for drift in self.drifts]
        steps: list[Creation | Replacement | Deactivation] = [
            *self.creations, *self.replacements, *self.deactivations]
        for step in steps:
            lines += step.lines()
        lines += [f"  policy {v.name!r}: active {v.label}, no file (kept; --prune "
                  "deactivates it)" for v in self.unmanaged]
        lines.append(self.summary())
        return lines

    def summary(self) -> str:
        if not self.changed:
            return "no change"
        counts = [f"{len(self.creations)} to create", f"{len(self.replacements)} to replace",
                  f"{len(self.deactivations)} to deactivate"]
        drift = f"; {len(self.drifts)} drifted" if self.drifts else ""
        return "plan: " + ", ".join(counts) + drift


def make_plan(files: Sequence[PolicyFile], versions: Sequence[StoredVersion], *,
              prune: bool = False) -> Plan:
    """What makes the service's active policies those of ``files``: a new family for a name
    no active family has, a new version where a file differs from its family's active
    version (or that version drifted), and with ``prune`` a deactivation for each active
    family with no file. ``PlanError`` when names do not match one to one."""
    _require_unique_names(files)
    active = active_by_name(versions)
    applied = {v.family_id for v in versions if v.origin == APPLY_ORIGIN}
    plan = Plan()
    for file in files:
        current = active.get(file.name)
        if current is None:
            plan.creations.append(Creation(file))
            continue
        changes = policy_changes(normalized(current.body), file.body)
        drifted = current.family_id in applied and current.origin != APPLY_ORIGIN
        if drifted:
            plan.drifts.append(Drift(current, same_as_file=not changes))
        if changes or drifted:
            plan.replacements.append(Replacement(file, current, changes))
    named = {file.name for file in files}
    for name, current in active.items():
        if name in named:
            continue
        if not prune:
            plan.unmanaged.append(current)
            continue
        if current.family_id in applied and current.origin != APPLY_ORIGIN:
            plan.drifts.append(Drift(current, same_as_file=False))
        plan.deactivations.append(Deactivation(current))
    return plan


def _require_unique_names(files: Sequence[PolicyFile]) -> None:
    paths: dict[str, list[str]] = defaultdict(list)
    for file in files:
        paths[file.name].append(file.path)
    clashes = [f"{' and '.join(found)} hold the same policy name {name!r}; a name may be in "
              "one file only" for name, found in paths.items() if len(found) > 1]
    if clashes:
        raise PlanError(clashes)


# --- the diff ---------------------------------------------------------------------------------


def policy_changes(old: dict, new: dict) -> list[str]:
    """What changes from ``old`` to ``new`` (both ``normalized``): the description, each
    trigger key, then each rule by name, added, removed or changed with its changed fields;
    the rules' order when only that changed. [] when they are the same."""
    lines = []
    if old["description"] != new["description"]:
        lines.append(f"description: {_shown(old['description'])} -> "
                     f"{_shown(new['description'])}")
    for key, value in new["trigger"].items():
        if old["trigger"].get(key) != value:
            lines.append(f"trigger.{key}: {_shown(old['trigger'].get(key))} -> {_shown(value)}")
    lines += rule_changes(old["rules"], new["rules"])
    if not lines and old != new:
        lines.append("rule order: " + _order(old["rules"]) + " -> " + _order(new["rules"]))
    return lines


def rule_changes(old: list[dict], new: list[dict]) -> list[str]:
    """Rules matched by name (the n-th of a repeated name with the n-th): ``+ rule`` added,
    ``- rule`` removed, ``~ rule`` changed, each changed field below it."""
    before, after = _by_name(old), _by_name(new)
    lines = []
    for key, rule in after.items():
        if key not in before:
            lines.append(f"+ rule {_rule_label(key)}")
            continue
        fields = [name for name in _RULE_FIELDS if before[key].get(name) != rule.get(name)]
        if fields:
            lines.append(f"~ rule {_rule_label(key)}")
            lines += [f"    {name}: {_shown(before[key].get(name))} -> {_shown(rule.get(name))}"
                      for name in fields]
    lines += [f"- rule {_rule_label(key)}" for key in before if key not in after]
    return lines


def _by_name(rules: list[dict]) -> dict[tuple[str, int], dict]:
    seen: Counter[str] = Counter()
    keyed = {}
    for rule in rules:
        seen[rule["name"]] += 1
        keyed[(rule["name"], seen[rule["name"]])] = rule
    return keyed


def _rule_label(key: tuple[str, int]) -> str:
    name, count = key
    return repr(name) if count == 1 else f"{name!r} (#{count} of that name)"


def _order(rules: list[dict]) -> str:
    return ", ".join(repr(rule["name"]) for rule in rules)


def _shown(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)
