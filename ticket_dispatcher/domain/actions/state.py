"""Typed, versioned action state: what an action keeps under its key of the action execution's
``context`` (``{"page": {...}}``), and how it is read back after a park, a restart or a deploy.

Each action's state is one dataclass deriving from ``ActionState``. Its fields are the stored
keys, under the same names, so the JSON an operator reads in an execution stays as it always
was, plus ``"version"``. ``load`` reads a stored dict, ``dump`` writes one; both work from the
field types:

- a field that is ``None`` is not stored (a key appears once the action has something to say);
  a field marked ``omit_empty()`` (warnings) is not stored while empty;
- an enum is stored as its value, a ``datetime`` as RFC 3339, a value type by its own
  ``to_json``/``from_json``, a list item by item;
- a field made by ``stored(...)`` is stored under another key or in other words;
- a ``CallRecord`` (an external call made at most once) is stored flat, as ``<name>_phase``
  and ``<name>_status``;
- keys this release does not know are kept and written back as they were, so a field added by
  a newer release survives an older one that resumes the action.

Versions. A context stored before versions existed has no ``"version"``: it is read as version
0, which has the shape of version 1. A change that only adds a field keeps the version. A
change that renames a field or changes what a stored word means raises ``VERSION`` and
overrides ``upgrade`` to read the older shapes; the action's tests keep a context in each
older shape. A version newer than the release knows cannot be read: ``load`` refuses it
rather than act on a state it might misread.

Executors read their state at the start of ``plan`` and ``execute`` and write it back at the
end (``editing``); before an external side effect that must not be repeated they call
``save``, which writes the state into the context and persists the execution
(``ActionRun.checkpoint``).
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from datetime import datetime
from enum import Enum, StrEnum
from functools import cache
from typing import Any, ClassVar, Self, Union, get_args, get_origin, get_type_hints

from ticket_dispatcher.domain.actions.base import ActionError, ActionRun
from ticket_dispatcher.domain.execution import JSON_SCALARS, FailureCode
from ticket_dispatcher.timeutil import format_time, parse_rfc3339

_STORED = "stored"
_OMIT_EMPTY = "omit_empty"
_CALL = "call"
_BOOKKEEPING = ("version", "unknown_keys")


class StateError(ValueError):
    """A stored context this release cannot read."""


@dataclass(frozen=True)
class Stored:
    """How one field is stored when it is not simply its value under its own name: ``key``
    (another name), ``write`` (the stored word of each value) and ``read`` (the value of each
    stored word, the words of older releases included)."""

    key: str | None = None
    write: dict[Any, Any] | None = None
    read: dict[Any, Any] | None = None


def stored(default: Any = None, **how: Any) -> Any:
    """A field stored under another key or other words (``Stored``)."""
    return field(default=default, metadata={_STORED: Stored(**how)})


def omit_empty() -> Any:
    """A list field stored only once it holds something (warnings appear with the first)."""
    return field(default_factory=list, metadata={_OMIT_EMPTY: True})


class CallPhase(StrEnum):
    PREPARED = "prepared"  # planned, nothing called yet (the card)
    STARTED = "started"  # saved right before the call: found on entry, the result was lost
    FINISHED = "finished"  # the status is settled and saved


class CallStatus(StrEnum):
    SENT = "sent"
    WRITTEN = "written"
    ACCEPTED = "accepted"
    FAILED = "failed"
    UNKNOWN = "unknown"  # the call may or may not have happened
    SKIPPED = "skipped"  # nothing to call (no card to mark urgent)


@dataclass
class CallRecord:
    """One external call an action makes at most once (docs/design.md, "Checkpoints and
    at-most-once"), stored flat as ``<name>_phase`` and ``<name>_status``."""

    name: str
    phase: CallPhase | None = None
    status: CallStatus | None = None

    def dump(self) -> dict:
        raw = {}
        if self.phase is not None:
            raw[f"{self.name}_phase"] = self.phase.value
        if self.status is not None:
            raw[f"{self.name}_status"] = self.status.value
        return raw

    @classmethod
    def load(cls, name: str, raw: dict) -> CallRecord:
        """The record of call ``name``, its keys taken out of ``raw``."""
        phase, status = raw.pop(f"{name}_phase", None), raw.pop(f"{name}_status", None)
        return cls(name, CallPhase(phase) if phase is not None else None,
                   CallStatus(status) if status is not None else None)


def call_record(name: str) -> Any:
    """A field holding the ``CallRecord`` of call ``name``."""
    return field(default_factory=lambda: CallRecord(name), metadata={_CALL: name})


@dataclass
class ActionState:
    """The base of every action's state; see the module docstring."""

    KEY: ClassVar[str]  # the action's key in its context
    VERSION: ClassVar[int] = 1

    # The version of the shape this state was read from: 0 for a context stored before
    # versions (or a state made in memory). ``dump`` always writes ``VERSION``.
    version: int = 0
    unknown_keys: dict = field(default_factory=dict, repr=False)

    # -- reading and writing a stored dict ----------------------------------------------------

    @classmethod
    def load(cls, raw: dict | None) -> Self:
        """The state stored as ``raw`` (``None`` or ``{}``: a state with nothing in it yet)."""
        raw = dict(raw or {})
        version = raw.pop("version", 0)
        if not isinstance(version, int):
            raise StateError(f"{cls.KEY}: {version!r} is not a version")
        if version > cls.VERSION:
            raise StateError(f"{cls.KEY}: stored version {version} is newer than this "
                             f"release reads ({cls.VERSION})")
        raw = cls.upgrade(raw, version)
        values: dict[str, Any] = {"version": version}
        # As a plain type: a dataclass's class object is hashable (type.__hash__), but mypy
        # judges type[Self] by the instances' __hash__, which eq=True sets to None.
        owner: type = cls
        for item in _plan(owner):
            if item.call is not None:
                values[item.name] = CallRecord.load(item.call, raw)
            elif item.key in raw:
                values[item.name] = item.read(raw.pop(item.key))
        values["unknown_keys"] = raw
        return cls(**values)

    @classmethod
    def upgrade(cls, raw: dict, version: int) -> dict:
        """``raw`` stored in an older ``version``, in this release's shape. Version 0 (before
        versions were stored) has the shape of version 1."""
        return raw

    def dump(self) -> dict:
        """The state as it is stored: its fields, the keys it did not know, its version."""
        raw = dict(self.unknown_keys)
        kind: type = type(self)  # a plain type, as in ``load``
        for item in _plan(kind):
            value = getattr(self, item.name)
            if item.call is not None:
                raw.update(value.dump())
            elif value is not None and not (item.omit_empty and not value):
                raw[item.key] = item.write(value)
        raw["version"] = self.VERSION
        return raw

    # -- the action's context -------------------------------------------------------------------

    @classmethod
    def read(cls, context: dict) -> Self:
        """This action's state from its whole context (``{KEY: {...}}``); a context that
        cannot be read fails the action rather than guess."""
        try:
            return cls.load(context.get(cls.KEY))
        except (ValueError, TypeError, KeyError) as exc:  # StateError is a ValueError
            raise ActionError(f"the saved {cls.KEY} context cannot be read ({exc})",
                              FailureCode.EXECUTE_FAILED) from exc

    def write(self, context: dict) -> None:
        context[self.KEY] = self.dump()

    def save(self, run: ActionRun) -> None:
        """Persist the execution with this state as it is now (a checkpoint)."""
        self.write(run.context)
        run.checkpoint()

    @classmethod
    @contextmanager
    def editing(cls, run: ActionRun) -> Iterator[Self]:
        """The state of the running action, written back into its context however the block
        ends: what the behavior saves after ``plan``/``execute`` (or a failure) is what the
        action last had, as when it mutated the context in place."""
        state = cls.read(run.context)
        try:
            yield state
        finally:
            state.write(run.context)


# -- field machinery ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _FieldPlan:
    """How one field of a state is read and written, worked out once per state class: every
    checkpoint of an action dumps its state, so the field types are not looked at again."""

    name: str
    key: str  # the stored key
    call: str | None  # a ``CallRecord``'s call name, stored flat
    omit_empty: bool
    read: Callable[[Any], Any]  # a stored value as the field's type
    write: Callable[[Any], Any]  # a value (not None) as stored


@cache
def _plan(cls: type) -> tuple[_FieldPlan, ...]:
    hints = get_type_hints(cls)
    plans = []
    for item in fields(cls):
        if item.name in _BOOKKEEPING:
            continue
        how: Stored | None = item.metadata.get(_STORED)
        plans.append(_FieldPlan(
            name=item.name,
            key=how.key if how is not None and how.key else item.name,
            call=item.metadata.get(_CALL),
            omit_empty=bool(item.metadata.get(_OMIT_EMPTY)),
            read=_stored_words(item.name, how.read) if how is not None and how.read is not None
            else _or_none(_decoder(hints[item.name])),
            write=how.write.__getitem__ if how is not None and how.write is not None
            else encode))
    return tuple(plans)


def _stored_words(name: str, words: dict[Any, Any]) -> Callable[[Any], Any]:
    def read(raw: Any) -> Any:
        if raw not in words:
            raise StateError(f"{name}: unknown stored value {raw!r}")
        return words[raw]
    return read


def _or_none(read: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda raw: None if raw is None else read(raw)


def _same(raw: Any) -> Any:
    return raw


@cache
def _decoder(hint: Any) -> Callable[[Any], Any]:
    """What reads a stored value (not None) as the type ``hint`` says, made once per type."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        options = [arg for arg in get_args(hint) if arg is not type(None)]
        return _decoder(options[0]) if len(options) == 1 else _same
    if origin is list:
        (item,) = get_args(hint) or (Any,)
        read_item = _or_none(_decoder(item))
        return lambda raw: [read_item(value) for value in raw]
    if hint is datetime:
        return parse_rfc3339
    if isinstance(hint, type) and issubclass(hint, Enum):
        return hint
    from_json: Callable[[Any], Any] | None = getattr(hint, "from_json", None)
    return from_json if from_json is not None else _same


def encode(value: Any) -> Any:
    """A value as stored JSON."""
    kind = type(value)
    if kind in JSON_SCALARS:  # most of a state: stored as they are
        return value
    if isinstance(value, dict):
        return {key: encode(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [encode(item) for item in value]
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, datetime):
        return format_time(value)
    to_json = getattr(value, "to_json", None)
    return to_json() if to_json is not None else value
