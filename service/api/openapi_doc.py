"""The OpenAPI document's last touches, made once when it is first built: only the statuses a route really answers.

- FastAPI documents a 422 ``HTTPValidationError {detail}`` for every route with path parameters. Path parameters
  here are plain strings that cannot fail validation, and request bodies fail in this service's own shapes (each
  route lists those), so that 422 and its schemas go.
- With API keys, every route but the open ones (health; metrics unless protected) needs a bearer token: the document
  says so (generated clients then send it) and lists the 401 each of those routes answers, in its path's error
  shape (OIP v2's ``{"error": "..."}`` on /v2 paths).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from service.errors import Unauthorized, speaks_v2

FASTAPI_VALIDATION_SCHEMAS = ("HTTPValidationError", "ValidationError")


def finish_document(app: FastAPI, open_paths: tuple[str, ...] | None) -> None:
    """Wrap ``app.openapi``; ``open_paths``: the path prefixes that need no key (None: no keys configured)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            _drop_fastapi_validation_errors(schema)
            if open_paths is not None:
                _declare_bearer_auth(schema, open_paths)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _drop_fastapi_validation_errors(schema: dict[str, Any]) -> None:
    refs = {f"#/components/schemas/{name}" for name in FASTAPI_VALIDATION_SCHEMAS}
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
