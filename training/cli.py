"""`python -m training` / `bertserve-train`: pre-train a BERT from scratch or fine-tune one for a task."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from contract.tasks import FINETUNE_TASKS, task_spec
from training.checkpoint import CheckpointError
from training.data import DataError
from training.run_checks import OutFolderError
from training.train import TrainingArguments, setup_runtime, teardown_runtime

QA_DEFAULTS = task_spec("question-answering").pipeline_defaults
DESCRIPTION = """\
Train BERT models and write Hugging Face-format checkpoint folders (config.json, model.safetensors,
tokenizer files) that model_export turns into serving bundles. Runs on CPU or GPU (chosen automatically);
start it with `torchrun --nproc_per_node N -m training ...` for data-parallel training.
"""

EXAMPLES = """\
examples:
  # fine-tune a sentiment classifier (GLUE SST-2 TSV: columns sentence, label)
  python -m training finetune --task text-classification --base BASE_DIR \\
      --train sst2/train.tsv --eval sst2/dev.tsv --out runs/sst2 --epochs 2 --max-length 64

  # named-entity recognition on CoNLL-2003 (last column = NER tag)
  python -m training finetune --task token-classification --base BASE_DIR \\
      --train conll2003/train.txt --eval conll2003/valid.txt --out runs/ner

  # extractive QA: train on SQuAD articles 0-15, evaluate on the others of the same file
  python -m training finetune --task question-answering --base BASE_DIR \\
      --train squad/dev-subset.json --articles 0:16 --eval squad/dev-subset.json --eval-articles 16: --out runs/qa

  # pre-train a small BERT from scratch on plain text (one paragraph per line)
  python -m training pretrain --corpus wikitext2/valid.txt --out runs/pretrain --steps 2000

Each run writes the best checkpoint (by the task's main metric on --eval) and metrics.json into --out.
"""


class DefaultsShown(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written; every option with a default says it, from the value the parser really uses."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        shown = action.default not in (None, False, argparse.SUPPRESS) and action.option_strings
        if shown and "default" not in text:
            text = f"{text} (default: %(default)s)".strip()
        return text


def _add_training_arguments(parser: argparse.ArgumentParser, defaults: TrainingArguments) -> None:
    group = parser.add_argument_group("optimisation")
    group.add_argument("--batch-size", type=int, default=defaults.batch_size, help="per-process batch size")
    group.add_argument(
        "--eval-batch-size", type=int, default=defaults.eval_batch_size, help="batch size when evaluating"
    )
    group.add_argument("--lr", type=float, default=defaults.learning_rate, help="peak AdamW learning rate")
    group.add_argument(
        "--weight-decay", type=float, default=defaults.weight_decay, help="not applied to biases/LayerNorm"
    )
    group.add_argument("--warmup-ratio", type=float, default=defaults.warmup_ratio, help="share of steps to warm up")
    group.add_argument("--grad-accum", type=int, default=defaults.grad_accum, help="micro-batches per optimiser step")
    group.add_argument("--max-grad-norm", type=float, default=defaults.max_grad_norm, help="gradient clipping")
    group.add_argument(
        "--layer-decay", type=float, default=defaults.layer_decay,
        help="layer-wise lr decay: each layer below the heads trains at this factor of the one above (1: off)",
    )  # fmt: skip
    group.add_argument("--seed", type=int, default=defaults.seed, help="data order, initialisation and masking")
    group.add_argument(
        "--group-by-length", action="store_true",
        help="batch examples of similar length together (less padding, faster on CPU)",
    )  # fmt: skip
    group.add_argument(
        "--precision", choices=["auto", "fp32", "bf16", "fp16"], default="auto",
        help="auto: bf16 (else fp16) autocast on CUDA, fp32 on CPU",
    )  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m training",
        description=DESCRIPTION,
        epilog=EXAMPLES,
        formatter_class=DefaultsShown,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    commands = parser.add_subparsers(dest="command", required=True, metavar="{pretrain,finetune}")

    pretrain = commands.add_parser(
        "pretrain",
        help="train a BERT from scratch with masked-LM + next-sentence prediction",
        description="Pre-train BERT (MLM 15%% masking 80/10/10 + NSP 50/50 pairs, summed loss) on a plain-text corpus: "
        "one paragraph per line; lines are split into sentences at . ! ?. Without --tokenizer a WordPiece vocabulary "
        "is trained on the corpus first. Saves a BertForPreTraining checkpoint.",
    )
    pretrain.add_argument("--corpus", type=Path, required=True, help="plain-text file, one paragraph per line")
    pretrain.add_argument("--out", type=Path, required=True, help="output checkpoint folder")
    pretrain.add_argument("--tokenizer", type=Path, help="folder with tokenizer.json or vocab.txt (default: train one)")
    pretrain.add_argument("--vocab-size", type=int, default=8000, help="WordPiece vocabulary size when training one")
    pretrain.add_argument("--layers", type=int, default=4, help="encoder layers")
    pretrain.add_argument("--hidden", type=int, default=256, help="hidden size")
    pretrain.add_argument("--heads", type=int, default=4, help="attention heads")
    pretrain.add_argument("--intermediate", type=int, default=1024, help="feed-forward size")
    pretrain.add_argument("--max-length", type=int, default=128, help="tokens per sentence pair")
    pretrain.add_argument("--steps", type=int, default=1000, help="optimiser steps")
    pretrain.add_argument("--eval-every", type=int, help="evaluate on held-out pairs every N steps (default steps/10)")
    pretrain.add_argument("--eval-fraction", type=float, default=0.05, help="share of pairs held out (max 2000)")
    pretrain.add_argument("--max-passes", type=float, default=100.0, help="refuse runs needing more corpus passes")
    pretrain.add_argument(
        "--dupe-factor", type=int, default=1,
        help="draw the sentence pairs N times, each with fresh random next sentences (BERT's dupe_factor)",
    )  # fmt: skip
    _add_training_arguments(pretrain, TrainingArguments(learning_rate=1e-4, batch_size=32))

    scores = commands.add_parser(
        "pretrain-eval",
        help="score a pre-trained checkpoint's MLM and NSP on held-out text",
        description="MLM top-1/top-5 accuracy at masked positions and NSP accuracy on the sentence pairs of a "
        "held-out corpus, built and masked as pre-training builds them (the same positions for every model). "
        "Prints one JSON object.",
        formatter_class=DefaultsShown,
    )
    scores.add_argument("--checkpoint", type=Path, required=True, help="BertForPreTraining checkpoint folder")
    scores.add_argument("--corpus", type=Path, required=True, help="plain-text file, one paragraph per line")
    scores.add_argument("--max-length", type=int, default=128, help="tokens per sentence pair")
    scores.add_argument(
        "--random-init", action="store_true", help="score the checkpoint's configuration with random weights"
    )
    scores.add_argument("--eval-batch-size", type=int, default=64, help="batch size when evaluating")
    scores.add_argument("--seed", type=int, default=0, help="pairs, masks and random weights")
    scores.add_argument("-v", "--verbose", action="store_true", help="debug logging")

    finetune = commands.add_parser(
        "finetune",
        help="fine-tune a BERT-family checkpoint for one of the four serving tasks (in full or with LoRA)",
        description="Fine-tune a checkpoint folder (Hugging Face layout) of BERT, DistilBERT, RoBERTa, XLM-RoBERTa, "
        "CamemBERT, ELECTRA, ALBERT, DeBERTa-v2/v3, MPNet or ModernBERT for a task and keep the best epoch.\n"
        "The --train / --eval file formats of each task are listed under 'data formats' at the end of this help.",
        formatter_class=DefaultsShown,
        epilog="data formats:\n"
        "  text-classification   CSV, TSV (GLUE style, no quoting) or JSONL with a text column, optional text-pair\n"
        "                        column and a label column (auto-detected: sentence/text/sentence1, sentence2, label)\n"
        "  question-answering    SQuAD v1.1 or v2.0 JSON; --articles START:STOP selects articles\n"
        "  token-classification  CoNLL (token per line, blank line between sentences, -DOCSTART- skipped) or\n"
        '                        JSONL {"tokens": [...], "tags": [...]}; the first sub-token of a word is labelled\n'
        "  fill-mask             plain text, one passage per line (continued MLM training)",
    )
    finetune.add_argument("--task", required=True, choices=FINETUNE_TASKS, help="the head to train")
    finetune.add_argument("--base", type=Path, required=True, help="checkpoint folder to start from (any family above)")
    finetune.add_argument(
        "--train", type=Path, required=True, help="training data file (its format: 'data formats' at the end)"
    )
    finetune.add_argument("--eval", type=Path, help="evaluation data file (evaluated after every epoch), same format")
    finetune.add_argument("--out", type=Path, required=True, help="output checkpoint folder")
    finetune.add_argument(
        "--overwrite", action="store_true", help="write into an --out that already holds files (else refused)"
    )
    finetune.add_argument("--epochs", type=float, default=3.0, help="passes over --train")
    finetune.add_argument(
        "--random-init",
        action="store_true",
        help="keep --base's configuration and tokenizer but start from random weights (the from-scratch baseline)",
    )
    finetune.add_argument(
        "--fresh-top-layers",
        type=int,
        default=0,
        help="start the top N encoder layers and the pooler from random weights (no change with --random-init)",
    )
    finetune.add_argument("--max-steps", type=int, help="stop after this many optimiser steps (overrides --epochs)")
    finetune.add_argument("--max-length", type=int, default=128, help="tokens per example / window")
    finetune.add_argument("--max-train-samples", type=int, help="use only the first N training examples")
    finetune.add_argument("--max-eval-samples", type=int, help="use only the first N evaluation examples")
    columns = finetune.add_argument_group("text-classification / token-classification")
    columns.add_argument("--text-column", help="column with the text (default: sentence, text, sentence1, ...)")
    columns.add_argument("--text-pair-column", help="column with the second text (default: sentence2 if present)")
    columns.add_argument("--label-column", help="column with the label (default: label)")
    columns.add_argument("--labels", help="comma-separated label order (default: sorted labels of --train)")
    columns.add_argument(
        "--relevance-head", action="store_true",
        help="text-classification: a cross-encoder for --task rerank export: one output trained with binary "
        "cross-entropy on its logit; labels are numbers in [0, 1], or two --labels NOT_RELEVANT,RELEVANT",
    )  # fmt: skip
    columns.add_argument("--tag-column", type=int, default=-1, help="CoNLL column index of the tag (default: last)")
    columns.add_argument(
        "--label-subwords",
        action="store_true",
        help="token-classification: train a word's later sub-tokens too (B-X -> I-X), for aggregation 'simple'",
    )
    qa = finetune.add_argument_group("question-answering")
    qa.add_argument(
        "--doc-stride", type=int,
        help="tokens shared by neighbouring context windows (default: a third of --max-length, 128 at 384)",
    )  # fmt: skip
    qa.add_argument("--max-query-length", type=int, default=64, help="question tokens kept")
    qa.add_argument(
        "--max-answer-length", type=int, default=QA_DEFAULTS["max_answer_len"],
        help="longest answer span in tokens, when evaluating (the question-answering pipeline's default)",
    )  # fmt: skip
    qa.add_argument("--articles", help="SQuAD article range of --train, e.g. 0:16")
    qa.add_argument("--eval-articles", help="SQuAD article range of --eval, e.g. 16:")
    distill = finetune.add_argument_group("distillation (text-classification, question-answering)")
    distill.add_argument(
        "--teacher", type=Path, action="append",
        help="fine-tuned checkpoint of this task (repeatable): the student learns their ensemble's distribution too",
    )  # fmt: skip
    distill.add_argument("--distill-alpha", type=float, default=0.5, help="weight of the gold-label loss")
    distill.add_argument("--distill-temperature", type=float, default=2.0, help="softmax temperature of both sides")
    lora = finetune.add_argument_group("LoRA (peft: low-rank adapters on the encoder, the head trained in full)")
    lora.add_argument("--lora-rank", type=int, default=0, help="adapter rank; 0: full fine-tuning")
    lora.add_argument("--lora-alpha", type=int, help="LoRA scaling numerator (default: twice the rank)")
    lora.add_argument(
        "--lora-targets",
        help="comma-separated names of the linear layers to adapt (default: the family's query and value "
        "projections: query,value; DistilBERT q_lin,v_lin; DeBERTa query_proj,value_proj; MPNet q,v; ModernBERT Wqkv)",
    )
    lora.add_argument("--lora-dropout", type=float, default=0.0, help="dropout on the adapters' input")
    lora.add_argument(
        "--lora-merge", action="store_true",
        help="save the adapters merged into a full checkpoint in --out (the adapter folder in --out/adapter)",
    )  # fmt: skip
    _add_training_arguments(finetune, TrainingArguments(learning_rate=5e-5, batch_size=32))
    return parser


def _training_arguments(args: argparse.Namespace, **extra: object) -> TrainingArguments:
    return TrainingArguments(
        batch_size=args.batch_size,
        eval_batch_size=args.eval_batch_size,
        learning_rate=args.lr,
        weight_decay=args.weight_decay,
        warmup_ratio=args.warmup_ratio,
        grad_accum=args.grad_accum,
        max_grad_norm=args.max_grad_norm,
        seed=args.seed,
        precision=args.precision,
        group_by_length=args.group_by_length,
        layer_decay=args.layer_decay,
        **extra,  # type: ignore[arg-type]
    )


def _run(args: argparse.Namespace) -> dict:
    from training.distill import DistillOptions
    from training.finetune import FinetuneOptions, finetune
    from training.lora import LoraOptions
    from training.pretrain import PretrainOptions, pretrain

    if args.command == "pretrain-eval":
        from training.pretrain import pretraining_scores

        arguments = TrainingArguments(eval_batch_size=args.eval_batch_size, seed=args.seed)
        return pretraining_scores(
            args.checkpoint, args.corpus, args.max_length, arguments, random_init=args.random_init
        )
    runtime = setup_runtime()
    try:
        if args.command == "pretrain":
            options = PretrainOptions(
                corpus=args.corpus, out=args.out, tokenizer=args.tokenizer, vocab_size=args.vocab_size,
                layers=args.layers, hidden=args.hidden, heads=args.heads, intermediate=args.intermediate,
                max_length=args.max_length, eval_fraction=args.eval_fraction, max_passes=args.max_passes,
                dupe_factor=args.dupe_factor,
                training=_training_arguments(
                    args, max_steps=args.steps, eval_every_steps=args.eval_every or max(1, args.steps // 10)
                ),
            )  # fmt: skip
            return pretrain(options, runtime)
        finetune_options = FinetuneOptions(
            task=args.task, base=args.base, train_file=args.train, eval_file=args.eval, out=args.out,
            max_length=args.max_length, max_train_samples=args.max_train_samples,
            max_eval_samples=args.max_eval_samples, text_column=args.text_column,
            text_pair_column=args.text_pair_column, label_column=args.label_column, tag_column=args.tag_column,
            label_subwords=args.label_subwords,
            labels=[label.strip() for label in args.labels.split(",")] if args.labels else None,
            doc_stride=args.doc_stride or args.max_length // 3, max_query_length=args.max_query_length,
            max_answer_length=args.max_answer_length, articles=args.articles, eval_articles=args.eval_articles,
            relevance_head=args.relevance_head, random_init=args.random_init,
            fresh_top_layers=args.fresh_top_layers, overwrite=args.overwrite,
            distill=(
                DistillOptions(tuple(args.teacher), args.distill_alpha, args.distill_temperature)
                if args.teacher else None
            ),
            lora=LoraOptions(
                rank=args.lora_rank, alpha=args.lora_alpha, dropout=args.lora_dropout, merge=args.lora_merge,
                targets=tuple(t.strip() for t in args.lora_targets.split(",")) if args.lora_targets else None,
            ),
            training=_training_arguments(args, epochs=args.epochs, max_steps=args.max_steps),
        )  # fmt: skip
        return finetune(finetune_options, runtime)
    finally:
        teardown_runtime(runtime)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO if rank == 0 else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        report = _run(args)
    except (DataError, CheckpointError, OutFolderError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.command == "pretrain-eval":
        print(json.dumps(report))
    elif rank == 0:
        print(
            json.dumps({"out": str(args.out), "best": report.get("best"), "wall_seconds": report.get("wall_seconds")})
        )
    return 0
