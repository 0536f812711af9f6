"""Typed FastAPI dependencies: the app's settings, model registry and metrics."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from service.core import ModelRegistry
from service.metrics import ServiceMetrics
from service.settings import Settings


# async: FastAPI runs plain ``def`` dependencies in a thread pool, a thread hop per request.
async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_registry(request: Request) -> ModelRegistry:
    return request.app.state.registry


async def get_metrics(request: Request) -> ServiceMetrics:
    return request.app.state.metrics


SettingsDep = Annotated[Settings, Depends(get_settings)]
RegistryDep = Annotated[ModelRegistry, Depends(get_registry)]
MetricsDep = Annotated[ServiceMetrics, Depends(get_metrics)]
