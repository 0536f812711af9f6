"""SQuAD v1.1 / v2.0 files -> windowed question-answering training features (evaluation: training.evaluation).

A context longer than the window is split into overlapping windows (`doc_stride` tokens shared by neighbours,
as `stride` in Hugging Face tokenizers). An answer that does not lie wholly inside a window is pointed at [CLS]
(position 0), as are unanswerable v2.0 questions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tokenizers import Tokenizer

from contract.files import read_json
from training.data import DataError, Feature


@dataclass(frozen=True)
class SquadExample:
    qas_id: str
    question: str
    context: str
    answer_texts: list[str]
    answer_starts: list[int]
    is_impossible: bool = False


@dataclass
class SquadWindow:
    """One window's model inputs plus what decoding needs: its example and each token's context offsets."""

    example_index: int
    feature: Feature
    context_offsets: list[tuple[int, int] | None] = field(default_factory=list)


def parse_article_range(text: str) -> slice:
    """'0:16' -> slice(0, 16); '16:' -> slice(16, None); '3' -> slice(3, 4)."""
    try:
        if ":" not in text:
            index = int(text)
            return slice(index, index + 1)
        start, stop = text.split(":", 1)
        return slice(int(start) if start else None, int(stop) if stop else None)
    except ValueError:
        raise DataError(f"--articles {text!r}: expected START:STOP article indices, e.g. 0:16") from None


def read_squad(path: Path, articles: slice | None = None, max_questions: int | None = None) -> list[SquadExample]:
    document = read_json(path, "file", error=DataError)
    if not isinstance(document.get("data"), list):
        raise DataError(f"{path}: not a SQuAD file (expected an object with a 'data' list of articles)")
    selected = document["data"][articles] if articles is not None else document["data"]
    examples: list[SquadExample] = []
    try:
        for article in selected:
            for paragraph in article["paragraphs"]:
                context = paragraph["context"]
                for qa in paragraph["qas"]:
                    answers = qa.get("answers", [])
                    examples.append(
                        SquadExample(
                            qas_id=str(qa["id"]),
                            question=qa["question"].strip(),
                            context=context,
                            answer_texts=[a["text"] for a in answers],
                            answer_starts=[int(a["answer_start"]) for a in answers],
                            is_impossible=bool(qa.get("is_impossible", False)),
                        )
                    )
    except (KeyError, TypeError) as error:
        raise DataError(f"{path}: not a SQuAD file (missing field {error})") from None
    if not examples:
        where = f" in articles {articles.start}:{articles.stop}" if articles else ""
        raise DataError(f"{path}: no questions found{where}")
    return examples[:max_questions] if max_questions else examples


def _answer_token_span(offsets: Sequence[tuple[int, int]], start_char: int, end_char: int) -> tuple[int, int] | None:
    """First and last token (indices into `offsets`) overlapping [start_char, end_char), or None."""
    covering = [i for i, (s, e) in enumerate(offsets) if s < end_char and e > start_char]
    return (covering[0], covering[-1]) if covering else None


def pair_template(tokenizer: Tokenizer) -> tuple[list[int], list[int], list[int], tuple[int, int]]:
    """The special tokens the tokenizer puts before, between and after a pair, and the pair's two type ids."""
    encoding = tokenizer.encode("a", "b")
    sequences = encoding.sequence_ids
    first = [i for i, sequence in enumerate(sequences) if sequence == 0]
    second = [i for i, sequence in enumerate(sequences) if sequence == 1]
    if not first or not second:
        raise DataError("the tokenizer does not encode text pairs (no pair template)")
    ids = encoding.ids
    prefix, middle, suffix = ids[: first[0]], ids[first[-1] + 1 : second[0]], ids[second[-1] + 1 :]
    if not prefix:
        raise DataError("the tokenizer's pair template starts with no special token (the no-answer position)")
    return prefix, middle, suffix, (encoding.type_ids[first[0]], encoding.type_ids[second[0]])


def window_examples(
    examples: Sequence[SquadExample],
    tokenizer: Tokenizer,
    max_length: int = 384,
    doc_stride: int = 128,
    max_query_length: int = 64,
) -> list[SquadWindow]:
    """The tokenizer's pair template around question and context window ([CLS] q [SEP] c [SEP] for BERT, <s> q </s></s>
    c </s> for RoBERTa); start/end positions point at the first special token when the answer is outside."""
    prefix, middle, suffix, (question_type, context_type) = pair_template(tokenizer)
    questions = tokenizer.encode_batch([e.question for e in examples], add_special_tokens=False)
    contexts = tokenizer.encode_batch([e.context for e in examples], add_special_tokens=False)
    windows: list[SquadWindow] = []
    for example_index, (example, question, context) in enumerate(zip(examples, questions, contexts, strict=True)):
        question_ids = question.ids[:max_query_length]
        room = max_length - len(question_ids) - len(prefix) - len(middle) - len(suffix)
        if room <= doc_stride:
            raise DataError(
                f"--max-length {max_length} leaves {room} context tokens per window, not more than "
                f"--doc-stride {doc_stride}; raise --max-length or lower --doc-stride"
            )
        answer_span = None
        if example.answer_texts and not example.is_impossible:
            start_char = example.answer_starts[0]
            answer_span = _answer_token_span(context.offsets, start_char, start_char + len(example.answer_texts[0]))
        window_start = 0
        while True:
            window_ids = context.ids[window_start : window_start + room]
            before = len(prefix) + len(question_ids) + len(middle)
            input_ids = [*prefix, *question_ids, *middle, *window_ids, *suffix]
            token_type_ids = [question_type] * before + [context_type] * (len(window_ids) + len(suffix))
            offsets: list[tuple[int, int] | None] = [None] * before
            offsets += [*context.offsets[window_start : window_start + len(window_ids)], *([None] * len(suffix))]
            start_position = end_position = 0
            window_end = window_start + len(window_ids) - 1
            if answer_span is not None and answer_span[0] >= window_start and answer_span[1] <= window_end:
                start_position = answer_span[0] - window_start + before
                end_position = answer_span[1] - window_start + before
            feature = {
                "input_ids": input_ids,
                "token_type_ids": token_type_ids,
                "start_positions": [start_position],
                "end_positions": [end_position],
            }
            windows.append(SquadWindow(example_index, feature, offsets))
            if window_start + room >= len(context.ids):
                break
            window_start += room - doc_stride
    return windows
