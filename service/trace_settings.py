"""Triton's trace extension over the service's OpenTelemetry traces (``GET`` / ``POST /v2/trace/setting`` and
``/v2/models/{name}/trace/setting``, gRPC ``TraceSetting``; tritonclient's ``get_trace_settings`` /
``update_trace_settings``): which requests a running server traces, globally and per model, without a restart.

The settings are Triton's, in its OpenTelemetry mode (``trace_mode`` ``opentelemetry``): ``trace_level``
``["TIMESTAMPS"]`` traces (each request's server span and its stages' spans, ``service.tracing``) and ``["OFF"]``
traces nothing; ``trace_rate`` N traces every N-th request; ``trace_count`` is how many traces remain to be taken
(``-1``: no end), counted down as traces are taken. The OTEL_* sampler still has its say on what the settings let
through (``OTEL_TRACES_SAMPLER``), and only traces it keeps are counted. ``TENSORS`` is refused (spans carry the
stages' times and sizes, never the texts), as are another ``trace_file`` or ``log_frequency`` (spans go to the OTLP
exporter, not to files). Values are strings, ``trace_level`` a list of them; ``None`` clears a setting: globally
back to its value at start, for a model back to following the global one.

A model's settings overlay the global ones: what a model does not set follows the global setting as it changes. They
apply to requests that name their model before their body is read: Open Inference Protocol infer requests, REST
(``/v2/models/{name}/infer``), gRPC ``ModelInfer`` and each request on a ``ModelStreamInfer`` stream; every other
request follows the global settings. Without tracing configured (no OTEL_* exporter), the level is ``OFF`` and turning
it on is refused with what to set. No FastAPI, no gRPC: both transports call these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from service.errors import BadRequest

LEVELS = ("OFF", "TIMESTAMPS")
FILE_SETTINGS = ("trace_file", "log_frequency")  # Triton's trace files: spans go to the exporter here
NUMBERS = {"trace_rate": 1, "trace_count": -1}  # the smallest value each takes
Value = str | list[str]
GLOBAL = ""  # the scope of the global settings (a model's name is never empty)
START = "set OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_TRACES_EXPORTER=console) and install 'bertserve[tracing]'"


def _number(name: str, value: Any) -> str:
    text = value[0] if isinstance(value, list) and len(value) == 1 else value
    if isinstance(text, bool) or not isinstance(text, str | int):
        raise BadRequest(f'trace setting {name!r} must be a whole number as a string, such as "1"')
    try:
        number = int(text)
    except ValueError:
        raise BadRequest(f"trace setting {name!r} must be a whole number as a string, got {text!r}") from None
    if number < NUMBERS[name]:
        raise BadRequest(f"trace setting {name!r} must be at least {NUMBERS[name]}, got {number}")
    return str(number)


def _level(value: Any) -> list[str]:
    levels = [value] if isinstance(value, str) else value
    if not isinstance(levels, list) or not levels or not all(isinstance(level, str) for level in levels):
        raise BadRequest('trace setting \'trace_level\' must be a list of levels, such as ["TIMESTAMPS"] or ["OFF"]')
    if "TENSORS" in levels:
        raise BadRequest("trace level TENSORS is not served: spans carry the stages' times and sizes, not tensors")
    unknown = [level for level in levels if level not in LEVELS]
    if unknown:
        raise BadRequest(f"unknown trace level {unknown[0]!r}; the levels: {', '.join(LEVELS)}")
    if "OFF" in levels and len(set(levels)) > 1:
        raise BadRequest("trace level OFF cannot go with another level")
    return sorted(set(levels), key=LEVELS.index)


class TraceSettings:
    """The global trace settings, each model's overlay on them, and the counters that pick the traced requests.
    ``enabled``: tracing is configured (``service.tracing.configure`` gave a tracer)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._start: dict[str, Value] = {
            "trace_file": "",
            "trace_level": ["TIMESTAMPS" if enabled else "OFF"],
            "trace_rate": "1",
            "trace_count": "-1",
            "log_frequency": "0",
            "trace_mode": "opentelemetry",
        }
        self._global: dict[str, Value] = dict(self._start)
        self._models: dict[str, dict[str, Value]] = {}
        self._seen: dict[str, int] = {}  # requests counted per scope: a model with its own settings, or GLOBAL

    def view(self, model: str | None = None) -> dict[str, Value]:
        """The settings a model's requests follow (the global ones when ``model`` is None)."""
        found = {name: list(value) if isinstance(value, list) else value for name, value in self._global.items()}
        if model is not None:
            found.update(self._models.get(model, {}))
        return found

    def update(self, changes: Mapping[str, Any], model: str | None = None) -> dict[str, Value]:
        """Apply ``changes`` (name -> value, None clears) globally or to ``model``'s overlay; the settings after.
        BadRequest, with nothing changed, for an unknown setting or a value not served."""
        target = dict(self._global if model is None else self._models.get(model, {}))
        for name, value in changes.items():
            if name not in self._start:
                raise BadRequest(f"unknown trace setting {name!r}; the settings: {', '.join(sorted(self._start))}")
            if value is None or value == []:
                if model is None:
                    target[name] = self._start[name]
                else:
                    target.pop(name, None)
                continue
            target[name] = self._checked(name, value)
        if model is None:
            self._global = target
        elif target:
            self._models[model] = target
        else:
            self._models.pop(model, None)
        if model is None:
            self._seen.clear()  # the rates count afresh from a change, as Triton's new settings do
        else:
            self._seen.pop(model, None)
        return self.view(model)

    def _checked(self, name: str, value: Any) -> Value:
        if name == "trace_level":
            levels = _level(value)
            if levels != ["OFF"] and not self.enabled:
                raise BadRequest(f"tracing is not configured on this server: {START}, then restart it")
            return levels
        if name in NUMBERS:
            return _number(name, value)
        text = value[0] if isinstance(value, list) and len(value) == 1 else value
        if text != self._start[name]:
            why = (
                "traces go out as OpenTelemetry spans (trace_mode 'opentelemetry')"
                if name == "trace_mode"
                else "spans go to the OTLP exporter (OTEL_EXPORTER_OTLP_ENDPOINT), not to trace files"
            )
            raise BadRequest(f"trace setting {name!r} cannot change here: {why}; it stays {self._start[name]!r}")
        return text

    def admit(self, model: str | None) -> str | None:
        """Whether a request of ``model`` (None: unnamed at its start) is to be traced, counting it towards the
        rate: None, or the scope whose ``trace_count`` a trace taken for it counts down (``taken``): the model's
        name, or ``GLOBAL``."""
        scope = model if model is not None and model in self._models else GLOBAL
        overlay = self._models.get(scope, {})
        if overlay.get("trace_level", self._global["trace_level"]) == ["OFF"]:
            return None
        count_scope = scope if "trace_count" in overlay else GLOBAL
        if self._whole(count_scope, "trace_count") == 0:
            return None
        seen = self._seen.get(scope, 0) + 1
        self._seen[scope] = seen
        rate = int(str(overlay.get("trace_rate", self._global["trace_rate"])))
        return count_scope if seen % rate == 0 else None

    def taken(self, scope: str) -> None:
        """A trace was taken for a request ``admit`` gave ``scope``: one fewer remains, unless there is no end."""
        remaining = self._whole(scope, "trace_count")
        if remaining > 0:
            (self._global if scope == GLOBAL else self._models[scope])["trace_count"] = str(remaining - 1)

    def _whole(self, scope: str, name: str) -> int:
        settings = self._global if scope == GLOBAL else self._models[scope]
        return int(str(settings[name]))
