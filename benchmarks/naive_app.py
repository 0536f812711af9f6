"""The baseline users start from: a transformers ``pipeline`` called once per request behind FastAPI.

Run: ``NAIVE_MODEL=DIR NAIVE_TASK=text-classification uvicorn benchmarks.naive_app:app``. The routes take
the same bodies as bertserve's, so the same wrk body files drive both. The routes are plain ``def``: FastAPI
runs them in its thread pool, as a first version usually does.
"""

from __future__ import annotations

import os
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel
from transformers import pipeline

TASK = os.environ.get("NAIVE_TASK", "text-classification")
MODEL_DIR = os.environ.get("NAIVE_MODEL", "")
NAME = os.environ.get("NAIVE_NAME", "naive")

app = FastAPI(title="naive transformers pipeline")
predictor = pipeline(TASK, model=MODEL_DIR, tokenizer=MODEL_DIR, device=-1) if MODEL_DIR else None


class Body(BaseModel):
    inputs: Any
    model: str | None = None


@app.get("/health")
def health() -> dict[str, str]:
    return {"status": "ok" if predictor is not None else "no model"}


@app.post("/v1/text-classification")
def classify(body: Body) -> dict[str, Any]:
    texts = body.inputs if isinstance(body.inputs, list) else [body.inputs]
    results = predictor(texts, truncation=True)  # type: ignore[misc]
    return {"model": NAME, "results": [[result] for result in results]}


@app.post("/v1/token-classification")
def token_classify(body: Body) -> dict[str, Any]:
    results = predictor(body.inputs, aggregation_strategy="simple")  # type: ignore[misc]
    entities = [{**entity, "score": float(entity["score"])} for entity in results]
    return {"model": NAME, "results": [entities]}


@app.post("/v1/question-answering")
def answer(body: Body) -> dict[str, Any]:
    result = predictor(question=body.inputs["question"], context=body.inputs["context"])  # type: ignore[misc]
    return {"model": NAME, "results": [result]}
