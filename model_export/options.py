"""Export options: every parameter of ``export_bundle`` stated once, with its default, help text and choices.

``export_bundle``'s keyword defaults are ``DEFAULTS``' values and ``python -m model_export``'s flags are generated
from the fields (``model_export.__main__.build_parser``): a field's type gives the flag's kind (``bool``:
``--x/--no-x``, ``int`` / ``float``: parsed numbers, ``dict``: a repeatable ``NAME=VALUE`` flag) and its metadata the
help (argparse-formatted: ``%(default)s`` shows the default, ``%%`` is a percent sign), choices, metavar and, where
the flag is not the field's name with dashes, the flag. A frozen dataclass, not a pydantic model: the ``export``
extra does not depend on pydantic.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract.bundle import POOLINGS, PRECISIONS, QUANTIZATIONS
from contract.tasks import TASK_NAMES
from model_export.validate import FP32_ATOL, FP32_RTOL


def request_default(text: str) -> tuple[str, Any]:
    """NAME=VALUE -> (NAME, VALUE): VALUE read as JSON (5, true, null, "x"), else taken as a string (first)."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    try:
        return name, json.loads(value)
    except json.JSONDecodeError:
        return name, value


def cli(
    help: str,
    *,
    choices: Sequence[str] | None = None,
    metavar: str | None = None,
    flag: str | None = None,
    item: Callable[[str], Any] | None = None,
) -> dict[str, Any]:
    """A field's CLI facts, its metadata (``item``: how the value of one repeated flag is parsed)."""
    facts = {"help": help, "choices": choices, "metavar": metavar, "flag": flag, "item": item}
    return {key: value for key, value in facts.items() if value is not None}


@dataclass(frozen=True)
class ExportOptions:
    """What ``export_bundle`` and ``python -m model_export`` take besides the checkpoint and bundle folders."""

    task: str = field(default="auto", metadata=cli("default: from config.json", choices=("auto", *TASK_NAMES)))
    optimize: bool = field(default=True, metadata=cli("fuse operators (default: on)"))
    quantize: str = field(
        default="none",
        metadata=cli(
            "int8: dynamic int8 (static with --int8-calibration), a CPU path (default: %(default)s)",
            choices=QUANTIZATIONS,
        ),
    )
    precision: str = field(default="fp32", metadata=cli("fp16 needs CUDA (onnxruntime-gpu)", choices=PRECISIONS))
    max_length: int | None = field(
        default=None,
        metadata=cli(
            "default: tokenizer's model_max_length (feature-extraction: sentence_bert_config.json's "
            "max_seq_length when present)"
        ),
    )
    opset: int = field(default=17, metadata=cli("ONNX opset of the exported graph (default: %(default)s)"))
    atol: float | None = field(default=None, metadata=cli(f"fp32 parity: absolute tolerance (default {FP32_ATOL:g})"))
    rtol: float | None = field(
        default=None,
        metadata=cli(
            "fp32 parity: relative tolerance, |onnx - torch| <= atol + rtol x the largest |torch| of the output row "
            f"(default {FP32_RTOL:g})"
        ),
    )
    pooling: str = field(
        default="auto",
        metadata=cli(
            "feature-extraction: how token states become the sentence embedding (auto: the checkpoint's "
            "sentence-transformers modules.json, else mean)",
            choices=("auto", *POOLINGS),
        ),
    )
    normalize: bool | None = field(
        default=None,
        metadata=cli(
            "feature-extraction: L2-normalise the sentence embedding in the graph (default: as modules.json "
            "lists a Normalize module, else on)"
        ),
    )
    eval_data: str | Path | None = field(
        default=None,
        metadata=cli(
            "with --quantize int8: labelled JSONL rows to score fp32 and int8 on with the task's metric; the "
            "figures go into bundle.json (quantization_eval). One object per line: text-classification "
            '{"text", "text_pair" (optional), "label"}; token-classification {"words": [...], "tags": [...]}; '
            'question-answering {"question", "context", "answers": [...]}; fill-mask {"text" with one mask token, '
            '"target" (a vocabulary token)}. Other tasks have no metric',
            metavar="FILE",
        ),
    )
    max_loss: float | None = field(
        default=None,
        metadata=cli(
            "with --eval-data: the most the metric may drop from fp32 to int8, in percentage points (0.5: half a "
            "point of accuracy); over it the int8 graph is not written and the bundle keeps fp32 (default: no limit)",
            metavar="POINTS",
        ),
    )
    int8_fp32_ffn_layers: int = field(
        default=0,
        metadata=cli(
            "with --quantize int8: keep the feed-forward output projections of the first N encoder layers in fp32 "
            "(where int8 loses the most; MiniLM SQuAD: N=2 takes the loss from 1.6 to 0.4 F1, ~10 %% slower) and "
            "say so in bundle.json (default: %(default)s)",
            metavar="N",
        ),
    )
    int8_fp32_attention: bool = field(
        default=False,
        metadata=cli(
            "with --quantize int8: keep the fused attention in fp32 (MiniLM SST-2: int8 then scores as fp32 does); "
            "`python -m benchmarks.studies.int8_nodes` measures which nodes a task's accuracy needs (default: off)"
        ),
    )
    int8_reduce_range: bool = field(
        default=False,
        metadata=cli(
            "with --quantize int8: 7-bit weights (onnxruntime's reduce_range) for bundles served on x86 CPUs without "
            "VNNI (AVX2, AVX-512F alone), where the int16 sums of u8 x s8 products saturate; costs a little "
            "accuracy where VNNI is present (default: off)"
        ),
    )
    int8_calibration: str | Path | None = field(
        default=None,
        metadata=cli(
            "with --quantize int8: JSONL rows in --eval-data's format (labels unused, e.g. a few hundred training "
            "rows) that calibrate static int8: fixed activation scales (QDQ MatMuls), so an answer no longer depends "
            "on what it is batched with (default: dynamic int8)",
            metavar="FILE",
        ),
    )
    token_embeddings: bool = field(
        default=False,
        metadata=cli(
            "feature-extraction: the graph also gives each token's state, which TEI's /embed_all answers "
            "(default: the sentence embedding only)"
        ),
    )
    embedding_calibration: str | Path | None = field(
        default=None,
        metadata=cli(
            "feature-extraction: a file of texts, one a line (a few hundred like those to be embedded), whose sentence "
            "embeddings' per-dimension min and max go into bundle.json (embedding_ranges): the int8 / uint8 "
            "quantization ranges Cohere's embed answers with, as sentence-transformers' quantize_embeddings "
            "(default: none; int8 and uint8 embeddings are then refused)",
            metavar="FILE",
        ),
    )
    lora_rank: int = field(
        default=0,
        metadata=cli(
            "a LoRA base bundle: a low-rank slot of this rank on each --lora-targets layer and an overridable head, "
            "zero until an adapter fills them (python -m model_export.lora writes one per peft LoRA fine-tune); "
            "fp32, no fusion (default: %(default)s, no slots)",
            metavar="R",
        ),
    )
    lora_targets: str = field(
        default="query,value",
        metadata=cli("with --lora-rank: the encoder's linear layers that get a slot (default: %(default)s)"),
    )
    request_defaults: dict[str, Any] | None = field(
        default=None,
        metadata=cli(
            "a parameter the served model answers with when a request leaves it out, VALUE as JSON or a bare word "
            "(repeatable; e.g. aggregation_strategy=first for whole-word NER); /v1/models lists them",
            metavar="NAME=VALUE",
            flag="--request-default",
            item=request_default,
        ),
    )


DEFAULTS = ExportOptions()
