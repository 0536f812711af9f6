"""HTTP routers, one per resource."""

from fastapi import APIRouter

from service.api import health, metrics, models, openai, rerank, tasks, tei

ROUTERS: tuple[APIRouter, ...] = (
    models.router,
    tasks.text_classification_router,
    tasks.question_answering_router,
    tasks.token_classification_router,
    tasks.fill_mask_router,
    tasks.zero_shot_classification_router,
    rerank.router,
    openai.router,
    tei.router,
    health.router,
    metrics.router,
)

__all__ = ["ROUTERS"]
