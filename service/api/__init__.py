"""The HTTP transport: the inference entry and its protocol adapters, FastAPI's other routes
(``service.api.protocols.ROUTERS``), the request body rules."""
