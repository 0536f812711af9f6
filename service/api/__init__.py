"""HTTP routers, one per resource."""

from fastapi import APIRouter

from service.api import docs, health, metrics, models, openai, playground, rerank, tasks, tei, v2

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
    v2.router,
    health.router,
    metrics.router,
    docs.router,
    playground.router,
)

__all__ = ["ROUTERS"]
