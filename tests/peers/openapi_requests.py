"""Checks a request a client sent against a published OpenAPI 3.0 document (tests/peers/*.json).

A request is allowed when its method and path match an operation (path templates), every query
parameter is one the operation declares, with the declared type, the required ones are there,
and the JSON body validates with ``jsonschema`` against the operation's ``requestBody`` schema,
``$ref`` resolved against the document.

OpenAPI 3.0 schemas are JSON Schema with a few additions, read here as the OpenAPI
specification defines them: ``nullable: true`` also admits ``null``, and a property marked
``readOnly`` "SHOULD NOT be sent as part of the request", so a request body carrying one is
refused.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from jsonschema import Draft4Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT4

from tests.peers.sent import NO_BODY, SentRequest

HTTP_METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")
READ_ONLY = "x-read-only-in-a-request"


@dataclass(frozen=True)
class Operation:
    template: str
    method: str
    spec: Mapping[str, Any]

    @property
    def name(self) -> str:
        return str(self.spec.get("operationId") or f"{self.method.upper()} {self.template}")


class OpenApiDocument:
    """One published document; ``aliases`` maps a sent path prefix onto the document's (Jira
    serves the same operations under ``/rest/api/2/`` and ``/rest/api/3/``)."""

    def __init__(self, path: Path, *, aliases: Mapping[str, str] | None = None):
        self.source = path.name
        self.raw = json.loads(path.read_text(encoding="utf-8"))
        self.uri = f"urn:peer:{path.stem}"
        self.document = _request_side(self.raw, self.uri)
        self.registry = Registry().with_resource(
            self.uri, Resource(contents=self.document, specification=DRAFT4))
        self.aliases = dict(aliases or {})
        self.operations = [
            Operation(template, method, spec)
            for template, item in self.document.get("paths", {}).items()
            for method, spec in item.items() if method in HTTP_METHODS]

    # --- matching ---------------------------------------------------------------------------

    def serves(self, sent: SentRequest) -> bool:
        return any(_match(op.template, self._path(sent)) is not None for op in self.operations)

    def operation(self, sent: SentRequest) -> tuple[Operation | None, dict[str, str], str]:
        """The operation, its path parameters (decoded), or why none matches."""
        path = self._path(sent)
        matched = [(op, found) for op in self.operations
                   if (found := _match(op.template, path)) is not None]
        if not matched:
            return None, {}, f"{sent}: no operation of {self.source} has this path"
        same_method = [(op, found) for op, found in matched if op.method == sent.method.lower()]
        if not same_method:
            allowed = sorted({op.method.upper() for op, _ in matched})
            return None, {}, f"{sent}: {self.source} allows only {allowed} on this path"
        # The most literal template wins, as OpenAPI resolves /a/b before /a/{x}.
        op, found = min(same_method, key=lambda pair: len(pair[1]))
        return op, found, ""

    def _path(self, sent: SentRequest) -> str:
        for sent_prefix, document_prefix in self.aliases.items():
            if sent.path.startswith(sent_prefix):
                return document_prefix + sent.path[len(sent_prefix):]
        return sent.path

    # --- checks -----------------------------------------------------------------------------

    def problems(self, sent: SentRequest) -> list[str]:
        """Everything in ``sent`` that the operation does not allow (empty: allowed)."""
        op, path_values, missing = self.operation(sent)
        if op is None:
            return [missing]
        where = f"{sent} ({op.name})"
        parameters = op.spec.get("parameters", [])
        return [f"{where}: {problem}" for problem in (
            *self._path_problems(parameters, path_values),
            *self._query_problems(parameters, sent.query),
            *self._body_problems(op, sent))]

    def _path_problems(self, parameters: list[dict], values: dict[str, str]) -> list[str]:
        declared = {p["name"]: p for p in parameters if p.get("in") == "path"}
        found = [f"path parameter {name!r} is not declared" for name in values
                 if name not in declared]
        for name, parameter in declared.items():
            found += self._value_problems(f"path parameter {name!r}", parameter.get("schema", {}),
                                          [values.get(name, "")])
        return found

    def _query_problems(self, parameters: list[dict], query: tuple[tuple[str, str], ...]
                        ) -> list[str]:
        declared = {p["name"]: p for p in parameters if p.get("in") == "query"}
        sent: dict[str, list[str]] = {}
        for name, value in query:
            sent.setdefault(name, []).append(value)
        found = [f"query parameter {name!r} is not declared (declared: {sorted(declared)})"
                 for name in sent if name not in declared]
        found += [f"required query parameter {name!r} is missing"
                  for name, parameter in declared.items()
                  if parameter.get("required") and name not in sent]
        for name, values in sent.items():
            if name in declared:
                found += self._value_problems(f"query parameter {name!r}",
                                              declared[name].get("schema", {}), values)
        return found

    def _value_problems(self, label: str, schema: dict, values: list[str]) -> list[str]:
        """A parameter's values, read as the schema's type (an array: one item per occurrence,
        each occurrence may itself be a comma-separated list as Jira documents)."""
        schema = self._resolved(schema)
        kind = schema.get("type")
        if kind == "array":
            item_kind = self._resolved(schema.get("items", {})).get("type")
            value: Any = [_typed(item_kind, one) for one in values]
            untyped = any(isinstance(one, _Untyped) for one in value)
        elif len(values) > 1:
            return [f"{label} is sent {len(values)} times but is not an array"]
        else:
            value = _typed(kind, values[0])
            untyped = isinstance(value, _Untyped)
        if untyped:
            return [f"{label} {values!r} is not of type {kind!r}"]
        return [f"{label}: {error}" for error in self._schema_errors(schema, value)]

    def _body_problems(self, op: Operation, sent: SentRequest) -> list[str]:
        request_body = op.spec.get("requestBody")
        if request_body is None:
            return [] if sent.body is NO_BODY else ["the operation takes no request body"]
        if sent.body is NO_BODY:
            return ["the request body is required"] if request_body.get("required") else []
        media = request_body.get("content", {}).get("application/json")
        if media is None:
            return ["the operation takes no application/json body"]
        found = []
        if sent.content_type != "application/json":
            found.append(f"Content-Type is {sent.content_type!r}, not 'application/json'")
        return found + [f"body: {error}"
                        for error in self._schema_errors(media.get("schema", {}), sent.body)]

    def _schema_errors(self, schema: dict, instance: Any) -> list[str]:
        validator = Draft4Validator(schema, registry=self.registry)
        return [_describe(error) for error in
                sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))]

    def _resolved(self, schema: dict) -> dict:
        ref = schema.get("$ref")
        if not isinstance(ref, str) or not ref.startswith(f"{self.uri}#/"):
            return schema
        node: Any = self.document
        for part in ref.split("#/", 1)[1].split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return self._resolved(node)


class _Untyped(str):
    """A parameter value that does not read as its declared type."""


def _typed(kind: str | None, value: str) -> Any:
    if kind == "integer":
        return int(value) if re.fullmatch(r"-?\d+", value) else _Untyped(value)
    if kind == "number":
        try:
            return float(value)
        except ValueError:
            return _Untyped(value)
    if kind == "boolean":
        return {"true": True, "false": False}.get(value, _Untyped(value))
    return value


def _match(template: str, path: str) -> dict[str, str] | None:
    names: list[str] = []

    def group(match: re.Match) -> str:
        names.append(match.group(1))
        return "([^/]+)"

    pattern = re.sub(r"\\\{(\w+)\\\}", group, re.escape(template))
    found = re.fullmatch(pattern, path)
    return None if found is None else {n: unquote(v) for n, v in zip(names, found.groups(),
                                                                        strict=True)}


def _describe(error: Any) -> str:
    where = "/".join(str(part) for part in error.absolute_path) or "(root)"
    if isinstance(error.schema, dict) and error.schema.get(READ_ONLY):
        return f"{where}: is readOnly, which the document says is not sent in a request"
    return f"{where}: {error.message}"


# --- OpenAPI 3.0 schema → JSON Schema (draft 4), for requests -------------------------------

def _request_side(document: dict, uri: str) -> dict:
    """A copy of ``document`` whose schemas validate requests; its local ``$ref`` are made
    absolute (``uri#/...``) so that any schema in it resolves on its own."""
    converted = copy.deepcopy(document)
    _convert(converted, uri)
    return converted


def _convert(node: Any, uri: str) -> None:
    if isinstance(node, list):
        for item in node:
            _convert(item, uri)
        return
    if not isinstance(node, dict):
        return
    if isinstance(node.get("$ref"), str) and node["$ref"].startswith("#/"):
        node["$ref"] = uri + node["$ref"]
    if node.get("nullable") is True:
        _admit_null(node)
    properties = node.get("properties")
    if isinstance(properties, dict):
        for name, schema in list(properties.items()):
            if isinstance(schema, dict) and schema.get("readOnly") is True:
                properties[name] = {"not": {}, READ_ONLY: True}
    for value in node.values():
        _convert(value, uri)


def _admit_null(schema: dict) -> None:
    kind = schema.get("type")
    if isinstance(kind, str):
        schema["type"] = [kind, "null"]
    if isinstance(schema.get("enum"), list) and None not in schema["enum"]:
        schema["enum"] = [*schema["enum"], None]
