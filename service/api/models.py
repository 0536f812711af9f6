from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter

from service.api.deps import RegistryDep
from service.schemas import ModelCard, ModelsResponse
from service.schemas.common import Batching, BrokenModel, OpenAIModel, QuantizationEval

router = APIRouter(tags=["models"])


@router.get("/v1/models", response_model=ModelsResponse)
async def list_models(registry: RegistryDep) -> ModelsResponse:
    """Every loaded model: name, task, labels, max length, quantization (`models`); `data`: OpenAI's list shape;
    `broken`: bundles skipped at start-up (skip_broken) with their reason."""
    cards: list[ModelCard] = []
    listed: list[OpenAIModel] = []
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
                architecture=info.architecture,
                device=info.device,
                mask_token=info.mask_token,
                prompts=dict(engine.context.prompts),
                request_defaults=dict(engine.bundle.spec.request_defaults),
                batching=Batching(**info.batching) if info.batching else None,
                quantization_eval=QuantizationEval(**info.quantization_eval) if info.quantization_eval else None,
                ready=engine.ready,
            )
        )
        listed.append(OpenAIModel(id=info.name, created=_written_at(engine.bundle.model_path)))
    broken = [BrokenModel(name=name, reason=reason) for name, reason in sorted(registry.broken.items())]
    return ModelsResponse(models=cards, data=listed, broken=broken)


def _written_at(path: Path) -> int:
    try:
        return int(path.stat().st_mtime)
    except OSError:
        return 0
