from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter

from service.api import cohere
from service.api.deps import RegistryDep
from service.api.error_docs import error_responses
from service.engine import Engine
from service.errors import ModelNotFound
from service.schemas import ModelCard, ModelsResponse
from service.schemas.common import Batching, BrokenModel, ModelDetail, OpenAIModel, QuantizationEval

router = APIRouter(tags=["models"])

# Cohere's endpoint names by the task whose models answer them: the last part of each Cohere route's path
COHERE_ENDPOINTS: dict[str, list[str]] = {}
for _route in cohere.PROTOCOL.routes:
    if _route.body is not None:
        endpoints = COHERE_ENDPOINTS.setdefault(_route.body.task, [])
        if (name := _route.path.rsplit("/", 1)[-1]) not in endpoints:
            endpoints.append(name)


def model_card(engine: Engine) -> ModelCard:
    info = engine.info
    return ModelCard(
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
        endpoints=list(COHERE_ENDPOINTS.get(info.task, ())),
        ready=engine.ready,
    )


@router.get("/v1/models", response_model=ModelsResponse)
async def list_models(registry: RegistryDep, endpoint: str | None = None) -> ModelsResponse:
    """Every loaded model: name, task, labels, max length, quantization (`models`); `data`: OpenAI's list shape;
    `broken`: bundles skipped at start-up (skip_broken) with their reason. `endpoint` (Cohere's `models.list`
    filter): only the models that answer that Cohere endpoint (embed, classify, rerank)."""
    engines = [engine for engine in registry.engines.values()
               if endpoint is None or endpoint in COHERE_ENDPOINTS.get(engine.task, ())]  # fmt: skip
    cards = [model_card(engine) for engine in engines]
    listed = [OpenAIModel(id=engine.name, created=_written_at(engine.bundle.model_path)) for engine in engines]
    broken = [BrokenModel(name=name, reason=reason) for name, reason in sorted(registry.broken.items())]
    return ModelsResponse(models=cards, data=listed, broken=broken)


@router.get("/v1/models/{name}", response_model=ModelDetail, responses=error_responses(ModelNotFound))
async def retrieve_model(name: str, registry: RegistryDep) -> ModelDetail:
    """One loaded model: its card, with OpenAI's model fields (`openai`'s `models.retrieve`, Cohere's `models.get`)."""
    engine = registry.engines.get(name)
    if engine is None:
        raise ModelNotFound(f"no model named {name!r} (loaded: {', '.join(sorted(registry.engines)) or 'none'})")
    card = model_card(engine).model_dump()
    return ModelDetail(**card, id=engine.name, created=_written_at(engine.bundle.model_path))


def _written_at(path: Path) -> int:
    try:
        return int(path.stat().st_mtime)
    except OSError:
        return 0
