"""The HTTP API's shared models (errors, the model list, health, the task request base) and the protocols' own
(``v2``: the Open Inference Protocol's, ``tei``: text-embeddings-inference's tokenize/decode/info). A task's request
and answer models live in its unit (``service.tasks.<task>``).

A request turns into the engine's ``(inputs, params)`` with ``to_task()``. Every response carries
``results`` as a list with one entry per input, also when the request sent a single input.
"""

from service.schemas.common import ErrorDetail, ErrorResponse, HealthResponse, ModelCard, ModelsResponse, TaskRequest

__all__ = ["ErrorDetail", "ErrorResponse", "HealthResponse", "ModelCard", "ModelsResponse", "TaskRequest"]
