"""OpenAPI operationIds come from one table: every documented operation has its short, stable id, no two share
one, and the table names no route that does not exist."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute

from service.api.operation_ids import OPERATION_IDS, UnnamedOperation, operation_id
from service.app import create_app
from service.settings import Settings


def test_every_operation_has_its_id_from_the_table() -> None:
    document = create_app(Settings(models=[])).openapi()  # type: ignore[call-arg]
    ids = [operation["operationId"] for path in document["paths"].values() for operation in path.values()]
    assert len(ids) == len(set(ids))
    assert sorted(ids) == sorted(OPERATION_IDS.values())
    operations = {
        operation["operationId"]: (method, path)
        for path, methods in document["paths"].items()
        for method, operation in methods.items()
    }
    assert operations["textClassification"] == ("post", "/v1/text-classification")
    assert operations["createEmbeddings"] == ("post", "/v1/embeddings")
    assert operations["modelInfer"] == ("post", "/v2/models/{name}/infer")


def test_a_route_missing_from_the_table_stops_the_app_being_built() -> None:
    app = FastAPI(generate_unique_id_function=operation_id)

    async def surprise() -> None:
        return None

    with pytest.raises(UnnamedOperation, match=r"route 'surprise' .* has no operationId"):
        app.add_api_route("/surprise", surprise)
    app.add_api_route("/hidden", surprise, include_in_schema=False)
    assert any(isinstance(route, APIRoute) and route.path == "/hidden" for route in app.routes)


def test_always_sent_fields_are_required_and_closed_sets_are_enums() -> None:
    from contract.tasks import TASK_NAMES
    from service.errors import ServiceError

    schemas = create_app(Settings(models=[])).openapi()["components"]["schemas"]  # type: ignore[call-arg]
    for name in ("ModelsResponse", "ModelCard", "Batching", "HealthResponse", "ErrorResponse", "ErrorDetail"):
        assert set(schemas[name]["required"]) == set(schemas[name]["properties"]), name
    assert schemas["ModelCard"]["properties"]["task"]["enum"] == list(TASK_NAMES)
    assert schemas["ModelCard"]["properties"]["precision"]["enum"] == ["fp32", "fp16"]
    error_types = schemas["ErrorDetail"]["properties"]["type"]["enum"]
    assert {"bad_request", "model_not_found", "overloaded", "unauthorized"} <= set(error_types)
    assert all(cls.error_type in error_types for cls in ServiceError.__subclasses__())


def test_documented_errors_are_the_real_ones() -> None:
    plain = create_app(Settings(models=[])).openapi()  # type: ignore[call-arg]
    keyed = create_app(Settings(models=[], api_keys=["k"])).openapi()  # type: ignore[call-arg]
    for document in (plain, keyed):
        assert "HTTPValidationError" not in str(document)  # FastAPI's 422 for path parameters cannot happen here
    assert not any("401" in op["responses"] for path in plain["paths"].values() for op in path.values())
    for path, operations in keyed["paths"].items():
        for operation in operations.values():
            if path.startswith(("/health", "/v2/health", "/metrics", "/v1/dataset-parts/")):  # parts: signed URLs
                assert operation["security"] == [] and "401" not in operation["responses"], path
                continue
            body = operation["responses"]["401"]["content"]["application/json"]["schema"]["$ref"]
            oip = (path == "/v2" or path.startswith("/v2/")) and path not in ("/v2/rerank", "/v2/embed")  # Cohere's
            assert body.endswith("/V2Error" if oip else "/ErrorResponse"), path
    v2_metadata = keyed["paths"]["/v2/models/{name}"]["get"]["responses"]
    assert set(v2_metadata) == {"200", "401", "404"}
