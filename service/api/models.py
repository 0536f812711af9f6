from __future__ import annotations

from fastapi import APIRouter

from service.api.deps import RegistryDep
from service.schemas import ModelCard, ModelsResponse

router = APIRouter(tags=["models"])


@router.get("/v1/models", response_model=ModelsResponse)
async def list_models(registry: RegistryDep) -> ModelsResponse:
    """Every loaded model: name, task, labels, max length, quantization."""
    cards = []
    for engine in registry.engines.values():
        info = engine.info
        cards.append(
            ModelCard(
                name=info.name,
                task=info.task,
                labels=info.labels,
                max_length=info.max_length,
                quantization=info.quantization,
                precision=info.precision,
                ready=engine.ready,
            )
        )
    return ModelsResponse(models=cards)
