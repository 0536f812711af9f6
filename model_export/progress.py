"""Numbered progress lines for the export's steps, each with the resident memory it left and the peak so far."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import onnx
from onnxruntime.capi import onnxruntime_pybind11_state as ort_errors

from contract.bundle import BundleError
from model_export.memory import MB, current_rss_bytes, peak_rss_bytes, release_memory
from model_export.validate import ExportError

logger = logging.getLogger(__name__)

# What the exporter, onnx, the optimizer, the quantiser and onnxruntime raise for graphs or files they cannot handle.
TOOL_ERRORS: tuple[type[BaseException], ...] = (
    RuntimeError,
    ValueError,
    OSError,
    onnx.checker.ValidationError,
    ort_errors.Fail,
    ort_errors.InvalidArgument,
    ort_errors.InvalidGraph,
    ort_errors.InvalidProtobuf,
    ort_errors.NotImplemented,
    ort_errors.RuntimeException,
)


class Progress:
    """Numbered progress lines; a tool's exception inside a step becomes a one-line ExportError naming the step.

    Each finished step hands the memory it freed back to the system; at debug level it then logs the resident set
    it left and the process's peak so far, which is how the step that sets the export's peak is found.
    """

    def __init__(self, total: int):
        self.total = total
        self.done = 0

    @contextmanager
    def step(self, description: str) -> Iterator[None]:
        self.done += 1
        logger.info("[%d/%d] %s", self.done, self.total, description)
        try:
            yield
        except (ExportError, BundleError):
            raise
        except TOOL_ERRORS as error:
            detail = (str(error).strip().splitlines() or [""])[0]
            raise ExportError(f"{description} failed: {type(error).__name__}: {detail}") from error
        release_memory()  # what the step freed goes back before the next one allocates
        if logger.isEnabledFor(logging.DEBUG):
            now = current_rss_bytes()
            logger.debug(
                "[%d/%d] done: RSS %s MB, peak so far %.0f MB",
                self.done, self.total, "?" if now is None else f"{now / MB:.0f}", peak_rss_bytes() / MB,
            )  # fmt: skip
