from __future__ import annotations

from fastapi import APIRouter

from service.api.deps import RegistryDep
from service.api.error_docs import error_responses
from service.errors import NotReady
from service.schemas import HealthResponse

router = APIRouter(tags=["health"])


@router.get("/health/live", response_model=HealthResponse)
async def live() -> HealthResponse:
    """The process is up and its event loop answers."""
    return HealthResponse(status="ok")


@router.get("/health/ready", response_model=HealthResponse, responses=error_responses(NotReady))
async def ready(registry: RegistryDep) -> HealthResponse:
    """200 once every model is loaded and warmed up; 503 before that, while shutting down, or if a worker died."""
    models = {name: engine.ready for name, engine in registry.engines.items()}
    if registry.shutting_down:
        raise NotReady("the service is shutting down")
    if not registry.ready:
        waiting = ", ".join(name for name, ok in models.items() if not ok) or "start-up"
        raise NotReady(f"not ready: waiting for {waiting}")
    return HealthResponse(status="ok", models=models)
