"""Checks a request a client sent to Lark against the official SDK's definition of the endpoint.

``lark-oapi``'s request builders are generated from Lark's API definitions: each knows its
endpoint's HTTP method, URI (``:name`` path parameters), query parameters (the builder's
setters) and body class (whose ``_types`` names its fields, with nested SDK classes for nested
objects). For a sent request this module finds the SDK operation with the same method and URI,
rebuilds the equivalent SDK request from what was sent, and compares the two: method, path with
its parameters filled, query parameter names (and their declared type), and the JSON body, field
by field, recursively.
"""

from __future__ import annotations

import json
import re
import typing
from collections.abc import Iterable
from importlib.metadata import version
from typing import Any
from urllib.parse import quote, unquote

import lark_oapi
from lark_oapi.core.enum import AccessTokenType
from lark_oapi.core.model import BaseRequest

from tests.peers.sent import NO_BODY, SentRequest

SDK_VERSION = version("lark-oapi")
NOT_PARAMETERS = {"build", "request_body"}
SCALARS = (str, int, float, bool)


class SdkOperation:
    """One SDK request class, read from a fresh builder."""

    def __init__(self, request_class: type[BaseRequest]):
        self.request_class = request_class
        self.builder_class = type(request_class.builder())
        template = request_class.builder().build()
        self.method = template.http_method.name
        self.uri = template.uri
        self.token_types = set(template.token_types or ())
        self.path_names = re.findall(r":(\w+)", self.uri)
        setters = [name for name in vars(self.builder_class)
                   if not name.startswith("_") and name not in NOT_PARAMETERS]
        self.query_types = {name: _argument_type(self.builder_class, name)
                            for name in setters if name not in self.path_names}
        self.body_class = (_argument_type(self.builder_class, "request_body")
                           if "request_body" in vars(self.builder_class) else None)
        self._pattern = re.compile(re.sub(r":(\w+)", r"(?P<\1>[^/]+)", re.escape(self.uri)))

    @property
    def name(self) -> str:
        return self.request_class.__name__

    def path_values(self, path: str) -> dict[str, str] | None:
        found = self._pattern.fullmatch(path)
        return None if found is None else {k: unquote(v) for k, v in found.groupdict().items()}

    def rebuild(self, path_values: dict[str, str], sent: SentRequest, *, body: bool
                ) -> BaseRequest:
        """The SDK's own request for what was sent; names the SDK lacks are left out (and
        reported by the comparison), and so is a body that does not fit the SDK's model."""
        builder = self.request_class.builder()
        for name, value in path_values.items():
            getattr(builder, name)(value)
        for name, value in sent.query:
            if name in self.query_types:
                getattr(builder, name)(_typed(self.query_types[name], value))
        if body and self.body_class is not None and isinstance(sent.body, dict):
            builder.request_body(self.body_class(sent.body))
        return builder.build()


class LarkSdk:
    """The SDK operations a client may call; ``problems`` of one sent request."""

    def __init__(self, request_classes: Iterable[type[BaseRequest]]):
        self.operations = [SdkOperation(cls) for cls in request_classes]

    def operation(self, sent: SentRequest) -> tuple[SdkOperation | None, dict[str, str]]:
        for op in self.operations:
            values = op.path_values(sent.path)
            if values is not None and op.method == sent.method:
                return op, values
        return None, {}

    def problems(self, sent: SentRequest) -> list[str]:
        op, path_values = self.operation(sent)
        if op is None:
            return [f"{sent}: no operation of lark-oapi {SDK_VERSION} among "
                    f"{[o.name for o in self.operations]} has this method and path"]
        body_fields = _body_field_problems(op, sent)
        built = op.rebuild(path_values, sent, body=not body_fields)
        where = f"{sent} ({op.name})"
        return [f"{where}: {problem}" for problem in (
            *_request_line_problems(op, built, sent),
            *_query_problems(op, built, sent),
            *(body_fields or _rebuilt_body_problems(op, built, sent)),
            *_token_problems(op, sent))]


def _request_line_problems(op: SdkOperation, built: BaseRequest, sent: SentRequest
                           ) -> list[str]:
    filled = built.uri
    for name, value in built.paths.items():
        filled = filled.replace(f":{name}", quote(str(value), safe=""))  # as the SDK fills it
    found = []
    if built.http_method.name != sent.method:
        found.append(f"the SDK sends {built.http_method.name}")
    if filled != sent.path:
        found.append(f"the SDK's path is {filled}")
    return found


def _query_problems(op: SdkOperation, built: BaseRequest, sent: SentRequest) -> list[str]:
    found = [f"query parameter {name!r} is not one the SDK sends "
             f"(it knows {sorted(op.query_types)})"
             for name in dict.fromkeys(name for name, _ in sent.query)
             if name not in op.query_types]
    for name, value in sent.query:
        kind = op.query_types.get(name)
        if kind is not None and not _reads_as(kind, value):
            found.append(f"query parameter {name!r} {value!r} is not of type {kind.__name__}")
    sent_names = sorted(name for name, _ in sent.query if name in op.query_types)
    if sorted(name for name, _ in built.queries) != sent_names:
        found.append(f"the SDK's query names are {sorted(n for n, _ in built.queries)}")
    return found


def _body_field_problems(op: SdkOperation, sent: SentRequest) -> list[str]:
    if op.body_class is None:
        return [] if sent.body is NO_BODY else ["the SDK sends no body here"]
    if sent.body is NO_BODY:
        return ["the SDK sends a body here and none was sent"]
    if not isinstance(sent.body, dict):
        return [f"the body is {type(sent.body).__name__}, the SDK sends an object"]
    found = list(_field_problems(op.body_class, sent.body, "body"))
    if sent.content_type != "application/json":
        found.append(f"Content-Type is {sent.content_type!r}, not 'application/json'")
    return found


def _rebuilt_body_problems(op: SdkOperation, built: BaseRequest, sent: SentRequest
                           ) -> list[str]:
    """The body the SDK itself would serialize from the same fields is the one sent."""
    if op.body_class is None:
        return []
    rebuilt = json.loads(lark_oapi.JSON.marshal(built.body) or "null")
    return [] if rebuilt == sent.body else [f"the SDK would send the body {rebuilt!r}"]


def _field_problems(model: type, value: dict, where: str) -> Iterable[str]:
    """Each key of ``value`` a field of the SDK model ``model``, of its type, recursively."""
    fields = getattr(model, "_types", {})
    for key, item in value.items():
        if key not in fields:
            yield f"{where}.{key} is not a field of {model.__name__} (fields: {sorted(fields)})"
        elif item is not None:
            yield from _value_problems(fields[key], item, f"{where}.{key}")


def _value_problems(kind: Any, value: Any, where: str) -> Iterable[str]:
    origin = typing.get_origin(kind)
    if origin in (list, tuple):
        if not isinstance(value, list):
            yield f"{where} is {type(value).__name__}, the SDK has a list"
            return
        (item_kind,) = typing.get_args(kind) or (Any,)
        for index, item in enumerate(value):
            yield from _value_problems(item_kind, item, f"{where}[{index}]")
    elif origin is dict:
        if not isinstance(value, dict):
            yield f"{where} is {type(value).__name__}, the SDK has a map"
    elif kind in SCALARS:
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            yield f"{where} is {type(value).__name__}, the SDK has {kind.__name__}"
    elif isinstance(kind, type) and hasattr(kind, "_types"):
        if not isinstance(value, dict):
            yield f"{where} is {type(value).__name__}, the SDK has {kind.__name__}"
        else:
            yield from _field_problems(kind, value, where)


def _token_problems(op: SdkOperation, sent: SentRequest) -> list[str]:
    """The SDK authenticates with a tenant token where it lists one, and not at all where the
    list is empty (the token request itself)."""
    bearer = sent.authorization.startswith("Bearer ")
    if not op.token_types and sent.authorization:
        return ["the SDK sends no Authorization here"]
    if op.token_types and AccessTokenType.TENANT not in op.token_types:
        return ["the SDK does not accept a tenant access token here"]
    if op.token_types and not bearer:
        return ["the SDK sends a Bearer access token here"]
    return []


def _argument_type(builder_class: type, setter: str) -> Any:
    hints = typing.get_type_hints(getattr(builder_class, setter))
    return next(kind for name, kind in hints.items() if name != "return")


def _reads_as(kind: Any, value: str) -> bool:
    if kind is int:
        return re.fullmatch(r"-?\d+", value) is not None
    if kind is bool:
        return value in ("true", "false")
    return True


def _typed(kind: Any, value: str) -> Any:
    if kind is int and _reads_as(int, value):
        return int(value)
    if kind is bool and _reads_as(bool, value):
        return value == "true"
    return value
