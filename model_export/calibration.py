"""Static int8: activation scales calibrated once, on the windows of rows like the ones the model will serve.

Dynamic int8 (optimize.quantize_int8) measures each activation's range on every batch it runs, so one text's
answer depends on which texts the server batched it with (SST-2: 89.33 and 90.02 from the same bundle). Static int8
fixes every activation's scale and zero point from calibration windows, in QDQ form: QuantizeLinear /
DequantizeLinear pairs around each quantised MatMul, which onnxruntime runs as integer matrix products. The same
text then gets the same answer whatever it is batched with, and no range is measured while serving.

Only the MatMuls are quantised (weights per channel, int8; activations per tensor, uint8, as onnxruntime advises
for x86): the fused Attention nodes stay fp32, as do the nodes the caller names.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static

from contract.onnx_io import pad_rows

logger = logging.getLogger(__name__)

STATIC_INT8_OPS = ("MatMul",)
# Each activation's range is the min and max it took over the calibration windows. (onnxruntime's histogram
# methods, percentile and entropy, stack every window's tensors into one array, so they need windows of one
# length: padding them would put padded positions into the ranges.)
CALIBRATION_METHOD = CalibrationMethod.MinMax
CALIBRATION_DESCRIPTION = "activation ranges: min and max over the calibration windows"


class WindowReader(CalibrationDataReader):
    """Calibration feeds, one window at a time: no padding, so no padded position's activation widens a range."""

    def __init__(
        self,
        windows: Sequence[tuple[list[int], list[int]]],
        pad_token_id: int,
        use_token_types: bool,
        input_names: Sequence[str],
    ):
        if not windows:
            raise ValueError("static int8 needs at least one calibration window")
        self.windows = list(windows)
        self.input_names = list(input_names)  # the graph's own inputs (some families have no token_type_ids)
        self.pad_token_id = pad_token_id
        self.use_token_types = use_token_types
        self.position = 0

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self.position >= len(self.windows):
            return None
        window = self.windows[self.position]
        self.position += 1
        feeds = pad_rows([window], self.pad_token_id, self.use_token_types).feeds
        return {name: feeds[name] for name in self.input_names}

    def rewind(self) -> None:
        self.position = 0


def with_value_types(source: Path, target: Path) -> None:
    """``source`` with every tensor's type and shape inferred, written to ``target``: the calibrator measures only
    tensors of known float type, and onnx's own inference knows none of the fused contrib ops' outputs
    (onnxruntime's symbolic shape inference does, as its quantisation pre-processing uses it)."""
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    inferred = SymbolicShapeInference.infer_shapes(onnx.load(str(source)), auto_merge=True)
    onnx.save_model(inferred, str(target))


def quantize_int8_static(
    source: Path,
    target: Path,
    reader: WindowReader,
    keep_fp32: Sequence[str] = (),
    options: Mapping[str, Any] | None = None,
    reduce_range: bool = False,
) -> None:
    """QDQ int8 of ``source``'s MatMuls (but ``keep_fp32``), activation scales calibrated on ``reader``.
    ``options``: more of onnxruntime's quantiser extra_options (benchmarks.studies.int8_static compares some);
    ``reduce_range``: 7-bit weights."""
    typed = target.with_name(f".{target.stem}.typed.onnx")
    with_value_types(source, typed)
    try:
        _quantize(typed, target, reader, keep_fp32, {**_extra_options(), **(options or {})}, reduce_range)
    finally:
        typed.unlink(missing_ok=True)


def _quantize(
    source: Path,
    target: Path,
    reader: WindowReader,
    keep_fp32: Sequence[str],
    extra_options: dict[str, Any],
    reduce_range: bool,
) -> None:
    quantize_static(
        str(source),
        str(target),
        reader,
        quant_format=QuantFormat.QDQ,
        op_types_to_quantize=list(STATIC_INT8_OPS),
        per_channel=True,
        reduce_range=reduce_range,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        nodes_to_exclude=list(keep_fp32),
        calibrate_method=CALIBRATION_METHOD,
        use_external_data_format=False,
        extra_options=extra_options,
    )


def _extra_options() -> dict[str, Any]:
    return {
        # The optimizer's fused graph lacks some value types; without this the quantiser cannot type new tensors.
        "DefaultTensorType": onnx.TensorProto.FLOAT,
    }
