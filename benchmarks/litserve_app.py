"""The LitServe + ONNX Runtime text classifier a user would write: bertserve's simplest strong peer.

Run with the LitServe venv's python (``benchmarks/.venvs/litserve``, made by ``litserve_setup.py``); it imports only
the standard library, numpy, onnxruntime, tokenizers and litserve:

    benchmarks/.venvs/litserve/bin/python benchmarks/litserve_app.py BUNDLE --port 8000 --workers 2 --threads 1

``POST /predict`` takes ``{"inputs": "text"}`` (other keys, such as bertserve's ``model``, are ignored) and answers
``[{"label": ..., "score": ...}, ...]``, every label, highest score first. Each inference worker (a process) holds
one onnxruntime session with ``--threads`` intra-op threads, spinning off (as bertserve's default); LitServe batches
up to ``--max-batch-size`` requests, waiting at most ``--batch-timeout`` seconds; a batch is tokenized at once,
padded to its longest row (truncated at the bundle's ``max_length``) and run in one ``session.run``. In litserve
0.2.19 the batch limits belong to ``LitAPI`` (``LitServer``'s are deprecated), and ``decode_request`` and
``encode_response`` run in the inference worker, not in the HTTP process.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

import litserve as ls
import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

log = logging.getLogger("litserve_app")
INPUT_DTYPE = np.int64


class TextClassifierAPI(ls.LitAPI):
    """One onnxruntime session per worker; batched predict; softmax scores per label."""

    def __init__(self, bundle: Path, threads: int, max_batch_size: int, batch_timeout: float) -> None:
        super().__init__(max_batch_size=max_batch_size, batch_timeout=batch_timeout)
        self.bundle = bundle
        self.threads = threads

    def setup(self, device: str) -> None:
        spec = json.loads((self.bundle / "bundle.json").read_text())
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(
            str(self.bundle / "model.onnx"), options, providers=["CPUExecutionProvider"]
        )
        self.input_names = [node.name for node in self.session.get_inputs()]
        self.tokenizer = Tokenizer.from_file(str(self.bundle / "tokenizer.json"))
        pad_token = (spec.get("special_tokens") or {}).get("pad_token", "[PAD]")
        pad_id = self.tokenizer.token_to_id(pad_token)
        self.tokenizer.enable_truncation(int(spec.get("max_length", 512)))
        self.tokenizer.enable_padding(pad_id=0 if pad_id is None else pad_id, pad_token=pad_token)  # to the longest
        id2label = spec.get("id2label") or {}
        labels = self.session.get_outputs()[0].shape[-1]
        count = labels if isinstance(labels, int) else len(id2label)
        self.labels = [str(id2label.get(str(index), f"LABEL_{index}")) for index in range(count)]
        log.info("worker on %s: %s, %d intra-op threads, labels %s", device, self.bundle, self.threads, self.labels)

    def decode_request(self, request, **kwargs: Any) -> str:
        # unannotated on purpose: LitServe hands FastAPI this parameter's annotation, and under
        # ``from __future__ import annotations`` any annotation (a string) would make it a query parameter
        return str(request["inputs"])

    def batch(self, inputs: list[str]) -> list[str]:
        return inputs

    def predict(self, x: list[str], **kwargs: Any) -> np.ndarray:
        encodings = self.tokenizer.encode_batch(x)
        arrays = {
            "input_ids": np.array([e.ids for e in encodings], dtype=INPUT_DTYPE),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=INPUT_DTYPE),
            "token_type_ids": np.array([e.type_ids for e in encodings], dtype=INPUT_DTYPE),
        }
        logits = self.session.run(None, {name: arrays[name] for name in self.input_names})[0]
        shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
        return shifted / shifted.sum(axis=-1, keepdims=True)

    def unbatch(self, output: np.ndarray) -> list[np.ndarray]:
        return list(output)

    def encode_response(self, output: np.ndarray, **kwargs: Any) -> list[dict[str, Any]]:
        order = np.argsort(-output)
        return [{"label": self.labels[index], "score": float(output[index])} for index in order]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bundle", type=Path, help="a text-classification bundle (model.onnx, tokenizer.json, ...)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=1, help="inference worker processes (workers_per_device)")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads per worker")
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--batch-timeout", type=float, default=0.005, help="seconds to wait for a batch to fill")
    parser.add_argument("--api-servers", type=int, help="HTTP server processes (default: LitServe's, one per worker)")
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    api = TextClassifierAPI(args.bundle.resolve(), args.threads, args.max_batch_size, args.batch_timeout)
    server = ls.LitServer(api, accelerator="cpu", workers_per_device=args.workers)
    server.run(
        host=args.host, port=args.port, num_api_servers=args.api_servers, log_level=args.log_level,
        generate_client_file=False,  # it would write client.py into the working directory
    )  # fmt: skip


if __name__ == "__main__":
    main()
