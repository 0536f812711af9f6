"""Fine-tuning: a task's data files -> features, a head on the base checkpoint, an evaluator, then `train`.

Tasks: text-classification (CSV/TSV/JSONL), question-answering (SQuAD v1.1/v2.0 JSON), token-classification
(CoNLL or JSONL), fill-mask (plain text, continued MLM training; --eval scores whole-word mask probes).
text-classification with ``relevance_head`` trains a cross-encoder for rerank: one output, binary cross-entropy on
its logit (sentence-transformers' CrossEncoder loss), targets in [0, 1] (the score rerank serves is its sigmoid).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, cast

import torch
from tokenizers import Tokenizer
from torch import nn

from contract.tasks import task_spec
from training.checkpoint import CheckpointError, load_config, load_model
from training.data import (
    DataError,
    Feature,
    check_labels,
    collate,
    encode_classification,
    encode_text_lines,
    encode_token_classification,
    label_list,
    read_classification_rows,
    read_tagged_sentences,
    read_text_lines,
)
from training.distill import (
    DistillOptions,
    Ensemble,
    attach_targets,
    check_teacher,
    distillation_collate,
    distillation_loss,
    distilled_outputs,
    ensemble_report,
)
from training.evaluation import AnswerEvaluation, MaskedWordEvaluation, Predict, WordLabelEvaluation
from training.families import full_saver, load_task_model, model_type_of
from training.lora import LoraOptions, apply_lora, save_lora
from training.metrics import classification_metrics, entity_metrics, squad_metrics
from training.pretrain import masked_lm_training_loss
from training.pretrain_data import MlmCollator
from training.relevance import relevance_loss, relevance_targets
from training.run_checks import (
    Baseline,
    check_out_folder,
    majority_baseline,
    warn_if_few_steps,
    warn_if_not_above_baseline,
)
from training.squad import parse_article_range, read_squad, window_examples
from training.tokenizer import load_tokenizer, mask_token_of, pad_token_id_of
from training.train import LossFunction, Runtime, TensorBatch, TrainingArguments, default_loss, set_seed, train

logger = logging.getLogger(__name__)


@dataclass
class FinetuneOptions:
    task: str
    base: Path
    train_file: Path
    out: Path
    eval_file: Path | None = None
    max_length: int = 128
    max_train_samples: int | None = None
    max_eval_samples: int | None = None
    text_column: str | None = None
    text_pair_column: str | None = None
    label_column: str | None = None
    tag_column: int = -1
    label_subwords: bool = False
    labels: list[str] | None = None
    doc_stride: int = 128
    max_query_length: int = 64
    max_answer_length: int = int(task_spec("question-answering").pipeline_defaults["max_answer_len"])
    articles: str | None = None
    eval_articles: str | None = None
    relevance_head: bool = False
    random_init: bool = False
    fresh_top_layers: int = 0
    overwrite: bool = False
    distill: DistillOptions | None = None
    lora: LoraOptions = field(default_factory=LoraOptions)
    training: TrainingArguments = field(default_factory=TrainingArguments)


@dataclass
class TaskData:
    train_features: list[Feature]
    collate_fn: Callable[[Sequence[Feature]], TensorBatch]
    evaluate: Callable[[nn.Module], dict[str, float]] | None
    config_overrides: dict[str, Any]
    loss_fn: LossFunction = default_loss
    baseline: Baseline | None = None  # the eval set's majority class (classification), which the result must beat


@dataclass(frozen=True)
class TaskContext:
    """What every task builder gets besides the options: the base checkpoint's tokenizer and where to evaluate."""

    tokenizer: Tokenizer
    pad_token_id: int  # the tokenizer's pad token: what collate pads input_ids with
    device: torch.device
    mask_token: str = "[MASK]"  # the tokenizer's mask token: what fill-mask masks with


def _predict(
    model: nn.Module, task: str, features: Sequence[Feature], batch_size: int, context: TaskContext
) -> list[dict[str, torch.Tensor]]:
    """Per-feature outputs (the task's per-token outputs cut to the feature's length), in the order of `features`.

    Batches are formed from length-sorted features so little padding is computed.
    """
    spec = task_spec(task)
    model.eval()
    order = sorted(range(len(features)), key=lambda i: len(features[i]["input_ids"]))
    results: list[dict[str, torch.Tensor]] = [{} for _ in features]
    with torch.no_grad():
        for start in range(0, len(order), batch_size):
            indices = order[start : start + batch_size]
            batch = collate([features[i] for i in indices], context.pad_token_id)
            inputs = {k: batch[k].to(context.device) for k in ("input_ids", "attention_mask", "token_type_ids")}
            outputs = {key: value.float().cpu() for key, value in model(**inputs).items()}
            for row, index in enumerate(indices):
                length = len(features[index]["input_ids"])
                for key, value in outputs.items():
                    results[index][key] = value[row, :length] if spec.is_token_level(key) else value[row]
    return results


def _predictor(options: FinetuneOptions, context: TaskContext) -> Predict:
    def predict(model: nn.Module, features: Sequence[Feature]) -> list[dict[str, torch.Tensor]]:
        return _predict(model, options.task, features, options.training.eval_batch_size, context)

    return predict


def _relevance(options: FinetuneOptions, context: TaskContext) -> TaskData:
    columns = {
        "text_column": options.text_column,
        "text_pair_column": options.text_pair_column,
        "label_column": options.label_column,
    }

    def features(path: Path, max_rows: int | None) -> list[Feature]:
        rows = read_classification_rows(path, **columns, max_rows=max_rows)
        targets = relevance_targets(path, [row.label for row in rows], options.labels)
        encoded = encode_classification(rows, context.tokenizer, {row.label: 0 for row in rows}, options.max_length)
        # float targets in the one-value "labels" key: collate makes them a float32 vector
        pairs = zip(encoded, targets, strict=True)
        return [cast(Feature, {**feature, "labels": [target]}) for feature, target in pairs]

    train_features = features(options.train_file, options.max_train_samples)
    evaluate, baseline = None, None
    if options.eval_file is not None:
        eval_features = features(options.eval_file, options.max_eval_samples)
        baseline = majority_baseline("relevant" if f["labels"][0] >= 0.5 else "not relevant" for f in eval_features)

        def evaluate(model: nn.Module) -> dict[str, float]:
            outputs = _predict(model, options.task, eval_features, options.training.eval_batch_size, context)
            scores = torch.sigmoid(torch.stack([out["logits"][0] for out in outputs]))
            targets = torch.tensor([f["labels"][0] for f in eval_features])
            correct = ((scores >= 0.5) == (targets >= 0.5)).float().mean()
            return {"accuracy": float(correct), "brier": float(((scores - targets) ** 2).mean())}

    overrides = {"id2label": {0: "LABEL_0"}, "label2id": {"LABEL_0": 0}, "problem_type": "regression"}
    collate_fn = partial(collate, pad_token_id=context.pad_token_id)
    return TaskData(train_features, collate_fn, evaluate, overrides, loss_fn=relevance_loss, baseline=baseline)


def _classification(options: FinetuneOptions, context: TaskContext) -> TaskData:
    if options.relevance_head:
        return _relevance(options, context)
    tokenizer = context.tokenizer
    columns = {
        "text_column": options.text_column,
        "text_pair_column": options.text_pair_column,
        "label_column": options.label_column,
    }
    rows = read_classification_rows(options.train_file, **columns, max_rows=options.max_train_samples)
    labels = label_list((row.label for row in rows), options.labels)
    check_labels(options.train_file, (row.label for row in rows), labels)
    label2id = {label: i for i, label in enumerate(labels)}
    train_features = encode_classification(rows, tokenizer, label2id, options.max_length)
    evaluate, baseline = None, None
    if options.eval_file is not None:
        eval_rows = read_classification_rows(options.eval_file, **columns, max_rows=options.max_eval_samples)
        check_labels(options.eval_file, (row.label for row in eval_rows), labels)
        baseline = majority_baseline(row.label for row in eval_rows)
        eval_features = encode_classification(eval_rows, tokenizer, label2id, options.max_length)

        def evaluate(model: nn.Module) -> dict[str, float]:
            outputs = _predict(model, options.task, eval_features, options.training.eval_batch_size, context)
            predicted = [int(out["logits"].argmax(-1)) for out in outputs]
            return classification_metrics([f["labels"][0] for f in eval_features], predicted)

    overrides = {
        "id2label": dict(enumerate(labels)),
        "label2id": label2id,
        "problem_type": "single_label_classification",
    }
    collate_fn = partial(collate, pad_token_id=context.pad_token_id)
    return TaskData(train_features, collate_fn, evaluate, overrides, baseline=baseline)


def _token_classification(options: FinetuneOptions, context: TaskContext) -> TaskData:
    tokenizer = context.tokenizer
    sentences = read_tagged_sentences(options.train_file, options.tag_column, options.max_train_samples)
    tags = label_list((tag for s in sentences for tag in s.tags), options.labels)
    check_labels(options.train_file, (tag for s in sentences for tag in s.tags), tags, what="tag")
    label2id = {tag: i for i, tag in enumerate(tags)}
    train_features = encode_token_classification(
        sentences, tokenizer, label2id, options.max_length, options.label_subwords
    )
    evaluate = None
    if options.eval_file is not None:
        eval_sentences = read_tagged_sentences(options.eval_file, options.tag_column, options.max_eval_samples)
        check_labels(options.eval_file, (tag for s in eval_sentences for tag in s.tags), tags, what="tag")
        words = WordLabelEvaluation.build(tokenizer, [s.tokens for s in eval_sentences], options.max_length)
        id2label = dict(enumerate(tags))

        def evaluate(model: nn.Module) -> dict[str, float]:
            predicted = words.predict_tags(model, _predictor(options, context), id2label)
            return entity_metrics([s.tags for s in eval_sentences], predicted)

    overrides = {"id2label": dict(enumerate(tags)), "label2id": label2id, "problem_type": None}
    return TaskData(train_features, partial(collate, pad_token_id=context.pad_token_id), evaluate, overrides)


def _question_answering(options: FinetuneOptions, context: TaskContext) -> TaskData:
    tokenizer = context.tokenizer
    window_options = {
        "max_length": options.max_length,
        "doc_stride": options.doc_stride,
        "max_query_length": options.max_query_length,
    }
    articles = parse_article_range(options.articles) if options.articles else None
    examples = read_squad(options.train_file, articles, options.max_train_samples)
    train_features = [w.feature for w in window_examples(examples, tokenizer, **window_options)]
    evaluate = None
    if options.eval_file is not None:
        eval_articles = parse_article_range(options.eval_articles) if options.eval_articles else None
        eval_examples = read_squad(options.eval_file, eval_articles, options.max_eval_samples)
        answers = AnswerEvaluation.build(
            tokenizer, eval_examples, options.max_length, options.doc_stride, options.max_answer_length
        )

        def evaluate(model: nn.Module) -> dict[str, float]:
            predictions = answers.predict_answers(model, _predictor(options, context))
            return squad_metrics(predictions, {e.qas_id: e.answer_texts for e in eval_examples})

    return TaskData(train_features, partial(collate, pad_token_id=context.pad_token_id), evaluate, {})


def _fill_mask(options: FinetuneOptions, context: TaskContext) -> TaskData:
    tokenizer = context.tokenizer
    lines = read_text_lines(options.train_file, options.max_train_samples)
    train_features = encode_text_lines(lines, tokenizer, options.max_length)
    # Each torchrun rank masks its own batches differently.
    rank = int(os.environ.get("RANK", "0"))
    collator = MlmCollator(
        tokenizer, pad_token_id=context.pad_token_id, seed=options.training.seed + rank, mask_token=context.mask_token
    )
    evaluate = None
    if options.eval_file is not None:
        # Deterministic whole-word probes (contract.mask_probes): the masks /v1/fill-mask is scored on too.
        eval_lines = read_text_lines(options.eval_file, options.max_eval_samples)
        masked_words = MaskedWordEvaluation.build(tokenizer, eval_lines, options.max_length, context.mask_token)
        if not masked_words.probes:
            raise DataError(
                f"{options.eval_file}: no line of at most {options.max_length} tokens has a word to mask "
                "(see contract.mask_probes: every 7th word, alphabetic, one vocabulary token)"
            )

        def evaluate(model: nn.Module) -> dict[str, float]:
            return masked_words.scores(model, _predictor(options, context))

    return TaskData(train_features, collator, evaluate, {}, loss_fn=masked_lm_training_loss)


def _with_teachers(
    options: FinetuneOptions, task_data: TaskData, context: TaskContext
) -> tuple[TaskData, dict[str, Any]]:
    """The task's data with the teachers' ensemble targets attached, its collate and loss distilling them."""
    assert options.distill is not None
    keys = distilled_outputs(options.task, options.relevance_head)
    architecture = task_spec(options.task).architecture
    student_labels = task_data.config_overrides.get("id2label")
    teachers = []
    for path in options.distill.teachers:
        check_teacher(path, load_config(path).id2label or {}, student_labels)
        teachers.append(load_model(path, architecture))
    ensemble = Ensemble(teachers, keys).to(context.device)
    predict = _predictor(options, context)
    features = attach_targets(task_data.train_features, ensemble, keys, predict)
    scores = ensemble_report(task_data.evaluate, ensemble)
    report = {
        "teachers": [str(path) for path in options.distill.teachers],
        "alpha": options.distill.alpha,
        "temperature": options.distill.temperature,
        "ensemble_eval": scores,
    }
    distilled = TaskData(
        features,
        distillation_collate(task_data.collate_fn, keys),
        task_data.evaluate,
        task_data.config_overrides,
        loss_fn=distillation_loss(keys, options.distill),
    )
    del ensemble, teachers
    return distilled, report


TASK_BUILDERS = {
    "text-classification": _classification,
    "question-answering": _question_answering,
    "token-classification": _token_classification,
    "fill-mask": _fill_mask,
}


def finetune(options: FinetuneOptions, runtime: Runtime) -> dict[str, Any]:
    model_type = model_type_of(options.base)  # fails fast, before any data is read, on a family not fine-tuned here
    if model_type == "bert":
        load_config(options.base)
    check_out_folder(options.out, options.overwrite)
    if options.relevance_head and options.task != "text-classification":
        raise DataError(f"--relevance-head is a text-classification head, not one for {options.task}")
    set_seed(options.training.seed)  # the new head's initial weights depend on --seed
    spec = task_spec(options.task)
    try:
        tokenizer = load_tokenizer(options.base)
    except FileNotFoundError as error:
        raise CheckpointError(str(error)) from None
    try:
        pad_token_id = pad_token_id_of(tokenizer, options.base)
    except ValueError as error:
        raise CheckpointError(f"{options.base}: {error}") from None
    context = TaskContext(tokenizer, pad_token_id, runtime.device, mask_token_of(tokenizer, options.base))
    task_data = TASK_BUILDERS[options.task](options, context)
    if not task_data.train_features:
        raise DataError(f"{options.train_file}: no training examples")
    if runtime.is_main:
        warn_if_few_steps(len(task_data.train_features), options.training, runtime.world_size)
    model = load_task_model(
        options.base, model_type, options.task, random_init=options.random_init,
        fresh_top_layers=options.fresh_top_layers, **task_data.config_overrides,
    )  # fmt: skip
    distillation: dict[str, Any] = {}
    if options.distill is not None:  # after the student's head is drawn: loading teachers draws random weights too
        task_data, distillation = _with_teachers(options, task_data, context)
    if model.config.pad_token_id != pad_token_id:
        logger.warning(
            "config.json's pad_token_id %s differs from the tokenizer's pad token id %s (batches are padded with it)",
            model.config.pad_token_id,
            pad_token_id,
        )
    if runtime.is_main:
        logger.info(
            "%s: %d training features, base %s%s, %s parameters",
            options.task,
            len(task_data.train_features),
            options.base,
            " (its configuration, random weights)" if options.random_init else "",
            f"{sum(p.numel() for p in model.parameters()):,}",
        )

    save = full_saver(model_type, options.base, tokenizer)
    trained: nn.Module = model
    if options.lora.rank:
        trained = apply_lora(model, options.lora, model_type)
        save = partial(save_lora, options=options.lora, save_full=save, base=options.base)
    report = train(
        trained,
        task_data.train_features,
        task_data.collate_fn,
        options.training,
        options.out,
        save,
        runtime,
        evaluate=task_data.evaluate,
        primary_metric=spec.primary_metric if task_data.evaluate else None,
        loss_fn=task_data.loss_fn,
        report_extra={"distillation": distillation} if distillation else None,
    )
    warn_if_not_above_baseline(report.get("best"), spec.primary_metric, task_data.baseline)
    return report
