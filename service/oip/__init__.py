"""The Open Inference Protocol (KServe v2 / Triton REST): tensor codecs and each task's tensor layout. No FastAPI."""

from service.oip.codec import EXTENSIONS, HEADER_LENGTH, OutputTensor, decode_inputs, encode_response, split_body
from service.oip.layouts import LAYOUTS, TaskLayout, TensorSpec

__all__ = [
    "EXTENSIONS",
    "HEADER_LENGTH",
    "LAYOUTS",
    "OutputTensor",
    "TaskLayout",
    "TensorSpec",
    "decode_inputs",
    "encode_response",
    "split_body",
]
