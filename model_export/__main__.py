"""bertserve-export: checkpoint folder -> validated ONNX bundle. Errors are one line on stderr, exit status 1."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from contract.bundle import POOLINGS, PRECISIONS, QUANTIZATIONS
from contract.tasks import TASK_NAMES


def request_default(text: str) -> tuple[str, Any]:
    """NAME=VALUE -> (NAME, VALUE): VALUE read as JSON (5, true, null, "x"), else taken as a string (first)."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    try:
        return name, json.loads(value)
    except json.JSONDecodeError:
        return name, value


def build_parser() -> argparse.ArgumentParser:
    from model_export.validate import FP32_ATOL, FP32_RTOL

    parser = argparse.ArgumentParser(
        prog="bertserve-export", description="Export a BERT checkpoint folder to a validated ONNX bundle folder."
    )
    parser.add_argument("checkpoint_dir", help="Hugging Face checkpoint folder (config.json, weights, tokenizer)")
    parser.add_argument("out_dir", help="bundle folder to write (replaced only when the new bundle is complete)")
    parser.add_argument("--task", default="auto", choices=["auto", *TASK_NAMES], help="default: from config.json")
    parser.add_argument(
        "--optimize", action=argparse.BooleanOptionalAction, default=True, help="fuse operators (default: on)"
    )
    parser.add_argument("--quantize", default="none", choices=QUANTIZATIONS)
    parser.add_argument("--precision", default="fp32", choices=PRECISIONS, help="fp16 needs CUDA (onnxruntime-gpu)")
    parser.add_argument(
        "--max-length", type=int, default=None,
        help="default: tokenizer's model_max_length (feature-extraction: sentence_bert_config.json's "
        "max_seq_length when present)",
    )  # fmt: skip
    parser.add_argument("--opset", type=int, default=17)
    parser.add_argument(
        "--atol", type=float, default=None, help=f"fp32 parity: absolute tolerance (default {FP32_ATOL:g})"
    )
    parser.add_argument(
        "--rtol", type=float, default=None,
        help="fp32 parity: relative tolerance, |onnx - torch| <= atol + rtol x the largest |torch| of the output row "
        f"(default {FP32_RTOL:g})",
    )  # fmt: skip
    parser.add_argument(
        "--pooling", default="auto", choices=["auto", *POOLINGS],
        help="feature-extraction: how token states become the sentence embedding (auto: the checkpoint's "
        "sentence-transformers modules.json, else mean)",
    )  # fmt: skip
    parser.add_argument(
        "--normalize", action=argparse.BooleanOptionalAction, default=None,
        help="feature-extraction: L2-normalise the sentence embedding in the graph (default: as modules.json "
        "lists a Normalize module, else on)",
    )  # fmt: skip
    parser.add_argument(
        "--eval-data", metavar="FILE", default=None,
        help="with --quantize int8: labelled JSONL rows to score fp32 and int8 on with the task's metric; the "
        "figures go into bundle.json (quantization_eval). One object per line: text-classification "
        '{"text", "text_pair" (optional), "label"}; token-classification {"words": [...], "tags": [...]}; '
        'question-answering {"question", "context", "answers": [...]}; fill-mask {"text" with one mask token, '
        '"target" (a vocabulary token)}. Other tasks have no metric',
    )  # fmt: skip
    parser.add_argument(
        "--max-loss", metavar="POINTS", type=float, default=None,
        help="with --eval-data: the most the metric may drop from fp32 to int8, in percentage points (0.5: half a "
        "point of accuracy); over it the int8 graph is not written and the bundle keeps fp32 (default: no limit)",
    )  # fmt: skip
    parser.add_argument(
        "--int8-fp32-ffn-layers", metavar="N", type=int, default=0,
        help="with --quantize int8: keep the feed-forward output projections of the first N encoder layers in fp32 "
        "(where int8 loses the most; MiniLM SQuAD: N=2 takes the loss from 1.6 to 0.4 F1, ~10 %% slower) and say so "
        "in bundle.json (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--int8-fp32-attention", action="store_true",
        help="with --quantize int8: keep the fused attention in fp32 (MiniLM SST-2: int8 then scores as fp32 does); "
        "`python -m benchmarks.int8_nodes` measures which nodes a task's accuracy needs",
    )  # fmt: skip
    parser.add_argument(
        "--int8-calibration", metavar="FILE", default=None,
        help="with --quantize int8: JSONL rows in --eval-data's format (labels unused, e.g. a few hundred training "
        "rows) that calibrate static int8: fixed activation scales (QDQ MatMuls), so an answer no longer depends on "
        "what it is batched with (default: dynamic int8)",
    )  # fmt: skip
    parser.add_argument(
        "--token-embeddings", action="store_true",
        help="feature-extraction: the graph also gives each token's state, which TEI's /embed_all answers "
        "(default: the sentence embedding only)",
    )  # fmt: skip
    parser.add_argument(
        "--request-default", metavar="NAME=VALUE", action="append", default=[], type=request_default,
        help="a parameter the served model answers with when a request leaves it out, VALUE as JSON or a bare word "
        "(repeatable; e.g. aggregation_strategy=first for whole-word NER); /v1/models lists them",
    )  # fmt: skip
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("model_export").setLevel(logging.WARNING if args.quiet else logging.INFO)
    # onnxruntime's optimizer and quantiser warn about things that do not apply to BERT graphs (tiny vocabularies,
    # shape-inference pre-processing); keep the progress readable.
    logging.getLogger("fusion_embedlayer").setLevel(logging.ERROR)
    for handler in logging.getLogger().handlers:
        handler.addFilter(lambda record: not record.getMessage().startswith("Please consider to run pre-processing"))

    from model_export.export import ExportError, export_bundle

    try:
        bundle = export_bundle(
            args.checkpoint_dir,
            args.out_dir,
            task=args.task,
            optimize=args.optimize,
            quantize=args.quantize,
            max_length=args.max_length,
            opset=args.opset,
            atol=args.atol,
            rtol=args.rtol,
            precision=args.precision,
            pooling=args.pooling,
            normalize=args.normalize,
            eval_data=args.eval_data,
            max_loss=args.max_loss,
            int8_fp32_ffn_layers=args.int8_fp32_ffn_layers,
            int8_fp32_attention=args.int8_fp32_attention,
            token_embeddings=args.token_embeddings,
            request_defaults=dict(args.request_default),
            int8_calibration=args.int8_calibration,
        )
    except ExportError as error:
        print(f"bertserve-export: error: {error}", file=sys.stderr)
        return 1
    print(bundle.path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
