"""Evaluation that scores through the service's own decode path (contract.decoding).

The windows a model sees and the rules that turn its logits into answers are the ones the served bundle
uses: QA windows keep the question whole and stride the context, answers come from the pipeline's softmax
start/end decoding with max_answer_len; NER labels every word by its first sub-token, in the window where
that token has the most context; fill-mask scores the deterministic whole-word probes of
contract.mask_probes, the ones a client posts to ``/v1/fill-mask``. So the metric a fine-tuning run reports
is the metric served over HTTP (up to onnxruntime vs torch rounding).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tokenizers import Encoding, Tokenizer
from torch import nn

from contract import decoding
from contract.mask_probes import MaskProbe, mask_probes, plain_tokenizer
from contract.word_decoding import WordWindows, encode_word_lists, label_words, window_stride
from training.data import IGNORE_INDEX, DataError, Feature
from training.metrics import MlmAccumulator
from training.squad import SquadExample, pair_template

# (model, features) -> per-feature outputs with per-token outputs cut to the feature's length
Predict = Callable[[nn.Module, Sequence[Feature]], list[dict[str, torch.Tensor]]]


def window_features(windows: Sequence[Encoding]) -> list[Feature]:
    return [{"input_ids": list(window.ids), "token_type_ids": list(window.type_ids)} for window in windows]


def _per_item(counts: Sequence[int], outputs: list[dict[str, torch.Tensor]]) -> list[list[dict[str, np.ndarray]]]:
    """Flat per-window outputs -> one list per item (sentence, question), numpy."""
    grouped, offset = [], 0
    for count in counts:
        grouped.append([{k: v.numpy() for k, v in out.items()} for out in outputs[offset : offset + count]])
        offset += count
    return grouped


@dataclass
class WordLabelEvaluation:
    """Word lists -> one predicted tag per word, as ``/v1/token-classification`` with ``words`` answers."""

    encoded: list[WordWindows]
    features: list[Feature]

    @classmethod
    def build(cls, tokenizer: Tokenizer, word_lists: Sequence[Sequence[str]], max_length: int) -> WordLabelEvaluation:
        windower = decoding.windowing_tokenizer(tokenizer, max_length, window_stride(tokenizer, max_length))
        try:
            encoded = encode_word_lists(windower, word_lists)
        except decoding.DecodeInputError as error:
            raise DataError(f"evaluation sentences: {error}") from error
        return cls(encoded, window_features([window for item in encoded for window in item.windows]))

    def predict_tags(self, model: nn.Module, predict: Predict, id2label: dict[int, str]) -> list[list[str]]:
        outputs = _per_item([len(item.windows) for item in self.encoded], predict(model, self.features))
        return [
            [word["entity"] for word in label_words(item, [out["logits"] for out in rows], id2label)]
            for item, rows in zip(self.encoded, outputs, strict=True)
        ]


@dataclass
class AnswerEvaluation:
    """SQuAD questions -> answer texts, as ``/v1/question-answering`` answers them."""

    examples: list[SquadExample]
    encoded: list[decoding.QAWindows]
    features: list[Feature]
    max_answer_len: int
    handle_impossible_answer: bool

    @classmethod
    def build(
        cls,
        tokenizer: Tokenizer,
        examples: list[SquadExample],
        max_length: int,
        doc_stride: int,
        max_answer_len: int,
    ) -> AnswerEvaluation:
        pairs = [(example.question, example.context) for example in examples]
        max_seq_len, stride = decoding.resolve_window(max_length, max_length, doc_stride)
        cls_id = tokenizer.token_to_id("[CLS]")
        if cls_id is None:
            cls_id = pair_template(tokenizer)[0][0]
        try:
            decoding.check_room_for_context(tokenizer, pairs, max_seq_len, stride)
            windower = decoding.windowing_tokenizer(tokenizer, max_seq_len, stride, "only_second")
            encoded = decoding.encode_question_contexts(windower, pairs, cls_id)
        except decoding.DecodeInputError as error:
            raise DataError(f"evaluation questions: {error}") from error
        features = window_features([window for item in encoded for window in item.windows])
        impossible = any(example.is_impossible for example in examples)
        return cls(examples, encoded, features, max_answer_len, impossible)

    def predict_answers(self, model: nn.Module, predict: Predict) -> dict[str, str]:
        outputs = _per_item([len(item.windows) for item in self.encoded], predict(model, self.features))
        predictions = {}
        for example, item, rows in zip(self.examples, self.encoded, outputs, strict=True):
            answers = decoding.decode_qa_answers(
                item, [out["start_logits"] for out in rows], [out["end_logits"] for out in rows],
                top_k=1, max_answer_len=self.max_answer_len, handle_impossible_answer=self.handle_impossible_answer,
            )  # fmt: skip
            predictions[example.qas_id] = answers[0]["answer"] if answers else ""
        return predictions


@dataclass
class MaskedWordEvaluation:
    """Text lines -> whole-word mask probes (contract.mask_probes), scored at the masks as ``/v1/fill-mask``.

    Top-1 / top-5 count a mask as right when the answer's id is the best / among the five best logits at the
    mask position, the candidates the service ranks by softmax probability (the same order); ``mlm_loss`` and
    ``perplexity`` are the cross-entropy of the answers there.
    """

    probes: list[MaskProbe]
    features: list[Feature]
    labels: list[list[int]]  # per feature: IGNORE_INDEX except the answers at the mask positions

    @classmethod
    def build(
        cls, tokenizer: Tokenizer, lines: Sequence[str], max_length: int, mask_token: str = "[MASK]"
    ) -> MaskedWordEvaluation:
        try:
            probes = mask_probes(lines, tokenizer, mask_token=mask_token, max_length=max_length)
        except ValueError as error:
            raise DataError(f"evaluation lines: {error}") from error
        mask_id = tokenizer.token_to_id(mask_token)
        encodings = plain_tokenizer(tokenizer).encode_batch([probe.text for probe in probes])
        features: list[Feature] = []
        labels: list[list[int]] = []
        for probe, encoding in zip(probes, encodings, strict=True):
            answers = iter(probe.answers)  # mask_probes checked: one mask id per answer, in text order
            labels.append([next(answers) if token_id == mask_id else IGNORE_INDEX for token_id in encoding.ids])
            features.append({"input_ids": list(encoding.ids), "token_type_ids": list(encoding.type_ids)})
        return cls(probes, features, labels)

    def scores(self, model: nn.Module, predict: Predict, chunk: int = 32) -> dict[str, float]:
        """mlm_top1_accuracy, mlm_top5_accuracy (fractions), mlm_loss, perplexity over every mask.

        Features go to ``predict`` ``chunk`` at a time, shortest first, so only a chunk's vocabulary-wide logits
        are held at once.
        """
        accumulator = MlmAccumulator()
        order = sorted(range(len(self.features)), key=lambda i: len(self.features[i]["input_ids"]))
        for start in range(0, len(order), chunk):
            indices = order[start : start + chunk]
            outputs = predict(model, [self.features[i] for i in indices])
            for index, output in zip(indices, outputs, strict=True):
                accumulator.add(output["logits"][None], torch.tensor([self.labels[index]]))
        return accumulator.scores()
