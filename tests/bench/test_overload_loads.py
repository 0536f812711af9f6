"""benchmarks.overload_loads: the long inputs are the sizes the loads promise (20-70 KB contexts holding the question's
own paragraph, 5 KB NER texts, ~512-token documents), on made-up text and, when it is there, on the real data."""

from __future__ import annotations

import random

import pytest

from benchmarks import datasets
from benchmarks.overload_loads import (
    EMBEDDING_DOCUMENTS,
    LOADS,
    QA_CONTEXT_BYTES,
    body_texts,
    concatenated_texts,
    long_contexts,
    request_bodies,
    texts_of_tokens,
    utf8_len,
)
from tests.minilm import minilm_tokenizer


def made_up_articles(articles: int = 6, paragraphs: int = 40) -> list[list[str]]:
    rng = random.Random(1)
    words = ["river", "castle", "énergie", "council", "1848", "museum", "north", "war", "song", "über"]
    return [
        [f"A{a}P{p}: " + " ".join(rng.choice(words) for _ in range(rng.randint(60, 200))) for p in range(paragraphs)]
        for a in range(articles)
    ]


def test_contexts_are_20_to_70_kb_and_hold_the_question_paragraph() -> None:
    articles = made_up_articles()
    questions = [(a, p, f"question about A{a}P{p}?") for a in range(len(articles)) for p in (0, 7, 39)]
    pairs = long_contexts(articles, questions, count=60, seed=3)
    sizes = [utf8_len(pair["context"]) for pair in pairs]
    assert all(QA_CONTEXT_BYTES[0] <= size <= QA_CONTEXT_BYTES[1] for size in sizes)
    assert max(sizes) - min(sizes) > 25_000  # drawn over the range, not all at one end
    every_paragraph = {paragraph for article in articles for paragraph in article}
    for pair in pairs:
        tag = pair["question"].removeprefix("question about ").removesuffix("?")
        article, paragraph = (int(part) for part in tag[1:].split("P"))
        own = articles[article][paragraph]
        assert pair["context"].count(own) == 1
        assert set(pair["context"].split("\n")) <= every_paragraph


def test_contexts_refuse_a_corpus_too_small_for_the_minimum() -> None:
    with pytest.raises(ValueError, match="fewer than"):
        long_contexts([["short paragraph"] * 3], [(0, 0, "q?")], count=1)


def test_ner_texts_are_cut_at_a_space_within_the_target() -> None:
    sentences = [f"Sentence {index} names Mr. Müller of Berlin-Köpenick ." for index in range(300)]
    texts = concatenated_texts(sentences, 5_000, count=20)
    assert len(texts) == 20
    longest_word = max(utf8_len(word) for sentence in sentences for word in sentence.split())
    assert all(5_000 - longest_word - 1 <= utf8_len(text) <= 5_000 for text in texts)
    assert not any(text.endswith(" ") for text in texts)
    assert len(set(texts)) == 20  # starts spread over the sentences


def test_documents_tokenize_to_the_asked_length() -> None:
    tokenizer = minilm_tokenizer()
    text = " ".join(
        f"The unbelievably picturesque town number {index} lies north of the river." for index in range(800)
    )
    documents = texts_of_tokens(tokenizer, text, 512, count=10)
    assert len(documents) == 10
    lengths = [len(tokenizer.encode(document).ids) for document in documents]  # [CLS] and [SEP] included
    assert all(500 <= length <= 512 for length in lengths)
    assert lengths.count(512) >= 8
    assert len(set(documents)) == 10
    assert len(texts_of_tokens(tokenizer, "too short", 512, count=3)) == 0


def real_data_or_skip() -> None:
    try:
        datasets.squad_path()
    except datasets.DataDirNotFound:
        pytest.skip("no shared data (set BERTSERVE_EVAL_DATA)")


def test_real_long_loads_have_their_shapes() -> None:
    real_data_or_skip()
    tokenizer = minilm_tokenizer()
    qa = request_bodies(LOADS["qa-long"], "qa", tokenizer, pool=20)
    assert all(QA_CONTEXT_BYTES[0] <= utf8_len(body["inputs"]["context"]) <= QA_CONTEXT_BYTES[1] for body in qa)
    # under the server's default --max-request-tokens (16384), so a context is not refused as too large
    assert max(sum(len(tokenizer.encode(t, add_special_tokens=False).ids) for t in body_texts(b)) for b in qa) < 16384
    ner = request_bodies(LOADS["ner-long"], "ner", tokenizer, pool=10)
    assert all(4_900 <= utf8_len(body["inputs"]) <= 5_000 for body in ner)
    embeddings = request_bodies(LOADS["embeddings-long"], "embeddings", tokenizer, pool=4)
    assert len(embeddings) == 4
    for body in embeddings:
        assert body["model"] == "embeddings" and len(body["input"]) == EMBEDDING_DOCUMENTS
        assert all(500 <= len(tokenizer.encode(text).ids) <= 512 for text in body["input"])
