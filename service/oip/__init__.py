"""The Open Inference Protocol (KServe v2 / Triton REST): tensor codecs and what a task's tensor layout is
(each task's own is its unit's: ``service.tasks.LAYOUTS``). No FastAPI."""

from service.oip.codec import EXTENSIONS, HEADER_LENGTH, OutputTensor, decode_inputs, encode_response, split_body
from service.oip.layouts import TaskLayout, TensorSpec

__all__ = [
    "EXTENSIONS",
    "HEADER_LENGTH",
    "OutputTensor",
    "TaskLayout",
    "TensorSpec",
    "decode_inputs",
    "encode_response",
    "split_body",
]
