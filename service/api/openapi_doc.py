"""The OpenAPI document's last touches, made once when it is first built.

- FastAPI documents a 422 ``HTTPValidationError {detail}`` for every route with path parameters. Path parameters
  here are plain strings that cannot fail validation, and request bodies fail in this service's own shapes (each
  route lists those), so that 422 and its schemas go.
- With API keys, every route but the open ones (health; metrics unless protected) needs a bearer token: the document
  says so (generated clients then send it) and lists the 401 each of those routes answers, in its path's error
  shape (OIP v2's ``{"error": "..."}`` on /v2 paths).
- Example bodies keep their nulls (FastAPI's writer drops them).
- Each route's own request body moves from ``components/schemas`` to ``components/requestBodies``, untitled. Its
  defaults stay in the document, and generators read them as what the server assumes for a field left out:
  openapi-typescript (whose default settings make a ``components/schemas`` property with a default required, in
  requests too) then types them optional like @hey-api/openapi-ts, and openapi-python-client names the body class
  after its operation (``TextClassificationBody``) as it does for every inline body.
"""

from __future__ import annotations

import copy
from typing import Any

from fastapi import FastAPI

from service.errors import Unauthorized, speaks_v2
from service.schemas.common import DOCUMENTED_EXAMPLES

FASTAPI_VALIDATION_SCHEMAS = ("HTTPValidationError", "ValidationError")
SCHEMA_REF = "#/components/schemas/"


def finish_document(app: FastAPI, open_paths: tuple[str, ...] | None) -> None:
    """Wrap ``app.openapi``; ``open_paths``: the path prefixes that need no key (None: no keys configured)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            _drop_fastapi_validation_errors(schema)
            _restore_examples(schema)
            _move_request_bodies(schema)
            if open_paths is not None:
                _declare_bearer_auth(schema, open_paths)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _drop_fastapi_validation_errors(schema: dict[str, Any]) -> None:
    refs = {f"{SCHEMA_REF}{name}" for name in FASTAPI_VALIDATION_SCHEMAS}
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.get("responses", {})
            for status, response in list(responses.items()):
                content = response.get("content", {}).get("application/json", {})
                if content.get("schema", {}).get("$ref") in refs:
                    del responses[status]
    components = schema.get("components", {}).get("schemas", {})
    for name in FASTAPI_VALIDATION_SCHEMAS:
        components.pop(name, None)


def _restore_examples(schema: dict[str, Any]) -> None:
    for component in schema.get("components", {}).get("schemas", {}).values():
        bodies = DOCUMENTED_EXAMPLES.get(component.get("title", ""))
        if bodies is not None and "examples" in component:
            component["examples"] = copy.deepcopy(bodies)


def _move_request_bodies(schema: dict[str, Any]) -> None:
    """A schema only ever sent as a whole request body (no other schema or response refers to it) moves."""
    components = schema.get("components", {})
    schemas = components.get("schemas", {})
    bodies: dict[str, list[dict[str, Any]]] = {}
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            reference = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            name = _component_name(reference)
            if name is not None and name in schemas:
                bodies.setdefault(name, []).append(operation)
    referenced_elsewhere = _references(schemas, schema.get("paths", {}), skip=bodies)
    moved = components.setdefault("requestBodies", {})
    for name, operations in bodies.items():
        if name in referenced_elsewhere:
            continue
        body = copy.deepcopy(schemas.pop(name))
        body.pop("title", None)
        first = operations[0]["requestBody"]
        moved[name] = {**first, "content": {"application/json": {"schema": body}}}
        for operation in operations:
            operation["requestBody"] = {"$ref": f"#/components/requestBodies/{name}"}
    if not moved:
        del components["requestBodies"]


def _component_name(reference: Any) -> str | None:
    if isinstance(reference, dict) and str(reference.get("$ref", "")).startswith(SCHEMA_REF):
        return str(reference["$ref"])[len(SCHEMA_REF) :]
    return None


def _references(schemas: dict[str, Any], paths: dict[str, Any], skip: dict[str, Any]) -> set[str]:
    """Component names referred to by other schemas, or by anything in a path but its request body's own $ref."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            name = _component_name(node)
            if name is not None:
                found.add(name)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schemas)
    for operations in paths.values():
        for operation in operations.values():
            walk({key: value for key, value in operation.items() if key != "requestBody"})
            body = operation.get("requestBody", {})
            if _component_name(body.get("content", {}).get("application/json", {}).get("schema")) not in skip:
                walk(body)
    return found


def _declare_bearer_auth(schema: dict[str, Any], open_paths: tuple[str, ...]) -> None:
    schema.setdefault("components", {})["securitySchemes"] = {"bearerAuth": {"type": "http", "scheme": "bearer"}}
    schema["security"] = [{"bearerAuth": []}]
    for path, operations in schema.get("paths", {}).items():
        for operation in operations.values():
            if path.startswith(open_paths):
                operation["security"] = []
                continue
            body = "V2Error" if speaks_v2(path) else "ErrorResponse"
            operation.setdefault("responses", {})["401"] = {
                "description": Unauthorized.description,
                "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{body}"}}},
            }
