"""GitHub's own REST API description (the vendored subset of `@octokit/openapi`) as the fake's
router and referee: it finds the operation a request is for, and checks the request and the
answer against the schemas GitHub publishes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import jsonschema_rs

DESCRIPTION = Path(__file__).parents[2] / "fixtures" / "github" / "rest-api-openapi.json"


@dataclass(frozen=True)
class Operation:
    """One operation of the description: its id, method and path template."""

    operation_id: str
    method: str
    template: str
    pattern: re.Pattern[str]
    spec: dict[str, Any]


def to_json_schema(node: Any) -> Any:
    """OpenAPI 3.0's schema dialect as JSON Schema: `nullable: true` becomes a `null` type
    (or an `anyOf` with null when the schema has no `type`), recursively.
    """
    if isinstance(node, list):
        return [to_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {
        key: (
            {name: to_json_schema(value) for name, value in value.items()}
            if key == "properties"
            else to_json_schema(value)
        )
        for key, value in node.items()
        if key != "nullable"
    }
    if node.get("nullable") is not True:
        return converted
    if isinstance(converted.get("type"), str) and "$ref" not in converted:
        converted["type"] = [converted["type"], "null"]
        if "enum" in converted and None not in converted["enum"]:
            converted["enum"] = [*converted["enum"], None]
        return converted
    return {"anyOf": [converted, {"type": "null"}]}


class Description:
    """The operations of the vendored description and validators for their schemas."""

    def __init__(self, document: dict[str, Any]) -> None:
        self._document = document
        self._components = to_json_schema(document["components"])
        self.operations: list[Operation] = []
        for template, methods in document["paths"].items():
            for method, spec in methods.items():
                self.operations.append(
                    Operation(
                        operation_id=spec["operationId"],
                        method=method.upper(),
                        template=template,
                        pattern=self._pattern(template, self._parameters(spec)),
                        spec=spec,
                    )
                )
        # Templates with more literal text first: `/repos/{o}/{r}/pulls` before a wider match.
        self.operations.sort(key=lambda op: -len(re.sub(r"\{[^}]+\}", "", op.template)))

    @staticmethod
    def load(path: Path = DESCRIPTION) -> Description:
        return _load(path)

    def _resolve(self, node: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in node:
            _, _, kind, name = node["$ref"].split("/", 3)
            node = self._document["components"][kind][name]
        return node

    def _parameters(self, spec: dict[str, Any]) -> list[dict[str, Any]]:
        return [self._resolve(parameter) for parameter in spec.get("parameters", [])]

    def _pattern(self, template: str, parameters: list[dict[str, Any]]) -> re.Pattern[str]:
        multi = {p["name"] for p in parameters if p["in"] == "path" and p.get("x-multi-segment")}
        regex = ""
        for literal, name in re.findall(r"([^{]*)(?:\{([^}]+)\})?", template):
            regex += re.escape(literal)
            if name:
                regex += f"(?P<{name}>.+)" if name in multi else f"(?P<{name}>[^/]+)"
        return re.compile(f"^{regex}$")

    def match(self, method: str, path: str) -> tuple[Operation, dict[str, str]] | None:
        """The operation serving `method path` (path without the API prefix) and its path
        parameters, decoded; None when the description has no such operation.
        """
        for operation in self.operations:
            found = operation.pattern.match(path)
            if found and operation.method == method:
                return operation, {
                    name: unquote(value) for name, value in found.groupdict().items()
                }
        return None

    def check_request(
        self,
        operation: Operation,
        *,
        path_params: dict[str, str],
        query: dict[str, str],
        body: Any,
        has_body: bool,
    ) -> list[str]:
        """What is wrong with a request for `operation` (empty when it is what GitHub takes)."""
        problems: list[str] = []
        for parameter in self._parameters(operation.spec):
            source = path_params if parameter["in"] == "path" else query
            if parameter["in"] not in {"path", "query"}:
                continue
            name = parameter["name"]
            if name not in source:
                if parameter.get("required"):
                    problems.append(f"{parameter['in']} parameter {name} is required")
                continue
            value = _coerce(source[name], parameter.get("schema", {}))
            validator = _validator(self, json.dumps(parameter.get("schema", {})))
            problems.extend(
                f"{parameter['in']} parameter {name}: {error.message}"
                for error in validator.iter_errors(value)
            )
        known = {p["name"] for p in self._parameters(operation.spec) if p["in"] == "query"}
        problems.extend(f"query parameter {name} is not described" for name in query.keys() - known)
        request_body = operation.spec.get("requestBody")
        if request_body is None:
            if has_body and body not in (None, {}):
                problems.append("the operation takes no request body")
            return problems
        if not has_body:
            if request_body.get("required"):
                problems.append("a request body is required")
            return problems
        schema = request_body["content"]["application/json"]["schema"]
        problems.extend(
            f"request body{_where(error)}: {error.message}"
            for error in _validator(self, json.dumps(schema)).iter_errors(body)
        )
        return problems

    def check_response(self, operation: Operation, *, status: int, body: Any) -> list[str]:
        """What is wrong with answering `status` and `body` to `operation`."""
        responses = operation.spec["responses"]
        response = responses.get(str(status)) or responses.get("default")
        if response is None and status == 404:
            # GitHub answers 404 with its basic error on any operation whose resource is
            # missing, described or not (REST API docs, "Troubleshooting": 404 Not Found).
            response = {"content": {"application/json": {"schema": {
                "$ref": "#/components/schemas/basic-error"}}}}  # fmt: skip
        if response is None:
            return [f"status {status} is not described"]
        content = self._resolve(response).get("content")
        if content is None:
            return [] if body is None else [f"status {status} has no body in the description"]
        schema = content.get("application/json", {}).get("schema")
        if schema is None:
            return []
        return [
            f"response {status}{_where(error)}: {error.message}"
            for error in _validator(self, json.dumps(schema)).iter_errors(body)
        ]


@cache
def _load(path: Path) -> Description:
    return Description(json.loads(path.read_text()))


@cache
def _validator(description: Description, schema_json: str) -> jsonschema_rs.Validator:
    """A validator for one schema of the description, its `$ref`s resolved within it."""
    schema = to_json_schema(json.loads(schema_json))
    # OpenAPI 3.0 ignores a $ref's siblings, as draft 7 does.
    document = {"allOf": [schema], "components": description._components}
    return jsonschema_rs.Draft7Validator(document, validate_formats=True)


def _coerce(raw: str, schema: dict[str, Any]) -> Any:
    """A query or path value (always text on the wire) as the type its schema names."""
    if schema.get("type") == "integer":
        try:
            return int(raw)
        except ValueError:
            return raw
    if schema.get("type") == "boolean" and raw in {"true", "false"}:
        return raw == "true"
    return raw


def _where(error: jsonschema_rs.ValidationError) -> str:
    path = "/".join(str(part) for part in error.instance_path)
    return f" at /{path}" if path else ""
