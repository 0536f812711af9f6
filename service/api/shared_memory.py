"""Triton's shared memory extensions over REST (``service.oip.shared_memory``): ``tritonclient.http``'s
``register_system_shared_memory``, ``get_system_shared_memory_status`` and ``unregister_system_shared_memory`` call
these routes, and the CUDA ones' answer that no CUDA region can be registered here. Off unless the server starts with
``allow_client_shm`` (a 400 naming it); errors are ``{"error": message}`` as on every ``/v2`` path; API keys guard
them as any inference route."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import ValidationError

from service.api.bodies import invalid_value, parse_json
from service.api.v2 import v2_error_responses
from service.errors import BadRequest, Conflict, InvalidRequest, RegionNotFound
from service.oip.shared_memory import NO_CUDA, SharedMemoryRegions, cuda_status
from service.schemas.v2 import (
    V2CudaSharedMemoryStatus,
    V2SharedMemoryRegisterRequest,
    V2SharedMemoryStatus,
    inline_json_schema,
)

router = APIRouter(prefix="/v2", tags=["v2"])
SYSTEM, CUDA = "/systemsharedmemory", "/cudasharedmemory"
REGISTER_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": inline_json_schema(V2SharedMemoryRegisterRequest)}},
    }
}
UNREGISTERED: dict[int | str, dict[str, Any]] = {
    200: {"description": "Unregistered (a region not registered: nothing to do)."}
}


SYSTEM_UNREGISTERED: dict[int | str, dict[str, Any]] = {**UNREGISTERED, **v2_error_responses(BadRequest)}


def regions_of(request: Request) -> SharedMemoryRegions:
    return request.app.state.core.shared_memory


@router.get(SYSTEM + "/status", response_model=V2SharedMemoryStatus, responses=v2_error_responses(BadRequest))
async def system_status(request: Request) -> V2SharedMemoryStatus:
    """Every registered system shared memory region (``get_system_shared_memory_status()``)."""
    return V2SharedMemoryStatus.model_validate(regions_of(request).status())


@router.get(
    SYSTEM + "/region/{name}/status",
    response_model=V2SharedMemoryStatus,
    responses=v2_error_responses(BadRequest, RegionNotFound),
)
async def system_region_status(name: str, request: Request) -> V2SharedMemoryStatus:
    """The named region's key, offset and size (``get_system_shared_memory_status(name)``)."""
    return V2SharedMemoryStatus.model_validate(regions_of(request).status(name))


@router.post(
    SYSTEM + "/region/{name}/register",
    response_class=Response,
    responses={200: {"description": "Registered."}, **v2_error_responses(BadRequest, Conflict, InvalidRequest)},
    openapi_extra=REGISTER_BODY,
)
async def system_register(name: str, request: Request) -> Response:
    """Register ``byte_size`` bytes from ``offset`` of the shared memory object ``key`` (on this host) as region
    ``name``: infer requests may then read inputs from it and have outputs written to it."""
    try:
        body = V2SharedMemoryRegisterRequest.model_validate(parse_json(await request.body()))
    except ValidationError as exc:
        raise invalid_value(exc, request.headers.get("content-type")) from None
    regions_of(request).register(name, body.key, body.offset, body.byte_size)
    return Response(status_code=200)


@router.post(SYSTEM + "/unregister", response_class=Response, responses=SYSTEM_UNREGISTERED)
async def system_unregister_all(request: Request) -> Response:
    """Unregister every system shared memory region (``unregister_system_shared_memory()``)."""
    regions_of(request).unregister()
    return Response(status_code=200)


@router.post(
    SYSTEM + "/region/{name}/unregister",
    response_class=Response,
    responses=SYSTEM_UNREGISTERED,
)
async def system_unregister(name: str, request: Request) -> Response:
    """Unregister the named region; the object itself stays (its creator unlinks it)."""
    regions_of(request).unregister(name)
    return Response(status_code=200)


@router.get(CUDA + "/status", response_model=V2CudaSharedMemoryStatus)
async def cuda_regions_status() -> V2CudaSharedMemoryStatus:
    """The registered CUDA shared memory regions: none."""
    return V2CudaSharedMemoryStatus.model_validate(cuda_status())


@router.get(
    CUDA + "/region/{name}/status",
    response_model=V2CudaSharedMemoryStatus,
    responses=v2_error_responses(RegionNotFound),
)
async def cuda_region_status(name: str) -> V2CudaSharedMemoryStatus:
    """A 404: no CUDA shared memory region is registered here."""
    return V2CudaSharedMemoryStatus.model_validate(cuda_status(name))


@router.post(CUDA + "/region/{name}/register", response_class=Response, responses=v2_error_responses(BadRequest))
async def cuda_register(name: str) -> Response:
    """A 400: CUDA shared memory is not supported (this server reads inputs from system memory)."""
    raise BadRequest(NO_CUDA)


@router.post(CUDA + "/unregister", response_class=Response, responses=UNREGISTERED)
async def cuda_unregister_all() -> Response:
    """Nothing to do: no CUDA region is registered."""
    return Response(status_code=200)


@router.post(CUDA + "/region/{name}/unregister", response_class=Response, responses=UNREGISTERED)
async def cuda_unregister(name: str) -> Response:
    """Nothing to do: no CUDA region is registered."""
    return Response(status_code=200)
