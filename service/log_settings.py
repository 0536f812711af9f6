"""Triton's logging extension over the service's logs (``GET`` / ``POST /v2/logging``, gRPC ``LogSettings``;
tritonclient's ``get_log_settings`` / ``update_log_settings``): turn a live server's logs up for debugging and back.

Python's log levels are thresholds, so Triton's switches map onto the root logger's level: ``log_verbose_level`` 1
or more is DEBUG, else ``log_info`` INFO (the access lines are INFO), else ``log_warning`` WARNING, else ``log_error``
ERROR, else nothing. A switch on below one that is off (``log_info`` on, ``log_warning`` off) has no threshold and
is refused, as are another ``log_file`` (the logs go to stderr, where the container's runtime collects them) and
another ``log_format`` (``--log-format`` chooses it at start). No FastAPI, no gRPC: both transports call these.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from service.errors import BadRequest

SWITCHES = ("log_error", "log_warning", "log_info")  # from the highest level down
LEVELS = {"log_error": logging.ERROR, "log_warning": logging.WARNING, "log_info": logging.INFO}
OFF = logging.CRITICAL + 10


def log_settings(log_format: str) -> dict[str, Any]:
    """The settings as the root logger's level has them."""
    level = logging.getLogger().getEffectiveLevel()
    found: dict[str, Any] = {"log_file": "", "log_format": log_format}
    found.update({switch: level <= LEVELS[switch] for switch in SWITCHES})
    found["log_verbose_level"] = 1 if level <= logging.DEBUG else 0
    return found


def update_log_settings(changes: Mapping[str, Any], log_format: str) -> dict[str, Any]:
    """Apply ``changes`` (any of the settings) to the root logger's level; the settings after. BadRequest, with
    nothing changed, for an unknown setting, a value of the wrong type, or switches no threshold gives."""
    wanted = log_settings(log_format)
    for name, value in changes.items():
        if name not in wanted:
            raise BadRequest(f"unknown log setting {name!r}; the settings: {', '.join(sorted(wanted))}")
        expected = type(wanted[name])
        if type(value) is not expected or (expected is int and value < 0):
            raise BadRequest(
                f"log setting {name!r} must be a {'whole number' if expected is int else expected.__name__}"
            )
        if name in ("log_file", "log_format") and value != wanted[name]:
            where = "stderr (log_file '')" if name == "log_file" else f"--log-format ({log_format!r}) at start"
            raise BadRequest(f"log setting {name!r} cannot change here: the logs go as {where}")
        wanted[name] = value
    on = [switch for switch in SWITCHES if wanted[switch]]
    if on and on != list(SWITCHES[: len(on)]):
        raise BadRequest("log levels are thresholds here: a switch on needs every switch above it on "
                         "(log_info needs log_warning and log_error)")  # fmt: skip
    threshold = LEVELS[on[-1]] if on else OFF
    logging.getLogger().setLevel(logging.DEBUG if wanted["log_verbose_level"] > 0 else threshold)
    return log_settings(log_format)
