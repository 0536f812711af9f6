"""The v1 task routes: ``POST /v1/<task>`` for each task unit that declares one; the task's request model in,
``{"model", "results"}`` out (one result per input)."""

from __future__ import annotations

from service.api.entry import InferenceRoute, Protocol
from service.tasks import UNITS

PROTOCOL = Protocol(
    "v1",
    tuple(
        InferenceRoute(
            f"/v1/{unit.name}",
            unit.name.replace("-", "_"),
            unit.v1.description,
            unit.name,
            unit.v1.response,
            unit.v1.answer,
            body=unit.v1.request,
        )
        for unit in UNITS
        if unit.v1 is not None
    ),
)
