"""Served accuracy: evaluation sets sent through bertserve's HTTP API, scored with the tasks' usual metrics."""

from __future__ import annotations

import collections
import re
import string
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from benchmarks.datasets import LabelledText, NerSentence, QaExample
from contract.mask_probes import MaskProbe

REQUEST_INPUTS = 16
CLIENT_THREADS = 4

# Published dev-set figures to set ours beside. Our model is all-MiniLM-L6-v2 (sentence-transformers'
# further-trained MiniLM-L6-H384) fine-tuned on CPU with subsets, so these are reference points, not targets.
PUBLISHED: dict[str, list[dict[str, Any]]] = {
    "sst2": [
        {"model": "MiniLM 6x384 (22M)", "value": 91.3, "metric": "accuracy (dev)",
         "source": "microsoft/xtremedistil-l6-h384-uncased model card, GLUE dev table (row 'MiniLM 22M 5.3x')"},
        {"model": "BERT-base", "value": 93.2, "metric": "accuracy (dev)",
         "source": "microsoft/MiniLM-L12-H384-uncased model card (BERT-base row)"},
    ],
    "rte": [
        {"model": "MiniLM 6x384 (22M)", "value": 68.9, "metric": "accuracy (dev)",
         "source": "microsoft/xtremedistil-l6-h384-uncased model card, GLUE dev table (row 'MiniLM 22M 5.3x')"},
        {"model": "BERT-base", "value": 68.6, "metric": "accuracy (dev)",
         "source": "microsoft/MiniLM-L12-H384-uncased model card (BERT-base row)"},
    ],
    "conll": [
        {"model": "BERT-base", "value": 96.4, "metric": "entity F1 (dev)",
         "source": "Devlin et al. 2019 (BERT paper), Table 7; no published MiniLM-L6 CoNLL figure found"},
    ],
    "squad": [
        {"model": "BERT-base", "value": 88.5, "metric": "F1 (SQuAD v1.1 dev, EM 80.8)",
         "source": "Devlin et al. 2019 (BERT paper), Table 2, trained on the full SQuAD train set; "
                   "no published MiniLM-L6 SQuAD v1.1 figure found (MiniLM papers report SQuAD 2.0)"},
    ],
}  # fmt: skip


MAX_429_RETRIES = 30


@dataclass
class Served:
    """One bertserve instance and model; a fresh HTTP client per call unless ``client`` is given.

    ``client`` (an ``httpx.Client``, e.g. an in-process Starlette ``TestClient``) is used for every call
    instead; its own base URL and timeout apply.
    """

    base_url: str
    model: str
    timeout_s: float = 120.0
    client: httpx.Client | None = None

    def post(self, task: str, inputs: list[Any], input_field: str = "inputs", **params: Any) -> list[Any]:
        """The results of one request; a 429 is retried after its Retry-After, as a client of the service should
        (a scorer's burst right after start-up meets admission before the model's rate is measured)."""
        body = {"model": self.model, input_field: inputs, **params}
        for _ in range(MAX_429_RETRIES):
            if self.client is not None:
                response = self.client.post(f"/v1/{task}", json=body)
            else:
                with httpx.Client(base_url=self.base_url, timeout=self.timeout_s) as client:
                    response = client.post(f"/v1/{task}", json=body)
            if response.status_code != 429:
                break
            time.sleep(float(response.headers.get("retry-after", "1")))
        response.raise_for_status()
        results: list[Any] = response.json()["results"]
        return results


def chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def post_all(served: Served, task: str, inputs: list[Any], threads: int = CLIENT_THREADS, **params: Any) -> list[Any]:
    """Every input's result, in order; requests of REQUEST_INPUTS inputs, ``threads`` at a time.

    ``threads=1`` posts one request after another in this thread (what an in-process TestClient needs).
    """
    call: Callable[[list[Any]], list[Any]] = lambda batch: served.post(task, batch, **params)  # noqa: E731
    if threads <= 1:
        return [result for batch in chunks(inputs, REQUEST_INPUTS) for result in call(batch)]
    with ThreadPoolExecutor(threads) as pool:
        return [result for batch in pool.map(call, chunks(inputs, REQUEST_INPUTS)) for result in batch]


def classification_accuracy(
    served: Served, rows: list[LabelledText], threads: int = CLIENT_THREADS
) -> dict[str, float]:
    inputs: list[Any] = [
        row.text if row.text_pair is None else {"text": row.text, "text_pair": row.text_pair} for row in rows
    ]
    results = post_all(served, "text-classification", inputs, threads, truncation=True)  # as training scores
    correct = sum(result[0]["label"] == row.label for result, row in zip(results, rows, strict=True))
    return {"accuracy": 100.0 * correct / len(rows), "examples": len(rows)}


def gold_spans(tags: tuple[str, ...]) -> set[tuple[str, int, int]]:
    """(type, first word, last word) of every BIO entity."""
    spans: set[tuple[str, int, int]] = set()
    start, kind = -1, ""
    for index, tag in enumerate((*tags, "O")):
        inside = tag.startswith("I-") and tag[2:] == kind and start >= 0
        if not inside and start >= 0:
            spans.add((kind, start, index - 1))
            start, kind = -1, ""
        if tag.startswith("B-") or (tag.startswith("I-") and start < 0):
            start, kind = index, tag[2:]
    return spans


def entity_f1(served: Served, sentences: list[NerSentence], threads: int = CLIENT_THREADS) -> dict[str, float]:
    """Exact span + type F1 over CoNLL sentences sent as pre-split words (one label per word comes back).

    Word mode labels each word by its first sub-token, as the model was trained; the text mode's grouping
    would split CoNLL words such as "P." or "Chester-le-Street" at punctuation into words it never labelled.
    """
    word_lists = [list(s.words) for s in sentences]
    results = post_all(served, "token-classification", word_lists, threads, input_field="words")
    true_positive = predicted_total = gold_total = 0
    for sentence, labelled in zip(sentences, results, strict=True):
        gold = gold_spans(sentence.tags)
        predicted = gold_spans(tuple(word["entity"] for word in labelled))
        true_positive += len(gold & predicted)
        predicted_total += len(predicted)
        gold_total += len(gold)
    precision = true_positive / predicted_total if predicted_total else 0.0
    recall = true_positive / gold_total if gold_total else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "f1": 100 * f1, "precision": 100 * precision, "recall": 100 * recall,
        "predicted": predicted_total, "gold": gold_total, "examples": len(sentences),
    }  # fmt: skip


def normalize_answer(text: str) -> str:
    """The official SQuAD v1.1 evaluation's normalisation."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def token_f1(prediction: str, truth: str) -> float:
    predicted, gold = normalize_answer(prediction).split(), normalize_answer(truth).split()
    common = collections.Counter(predicted) & collections.Counter(gold)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def squad_scores(served: Served, examples: list[QaExample], threads: int = CLIENT_THREADS) -> dict[str, float]:
    inputs = [{"question": ex.question, "context": ex.context} for ex in examples]
    results = post_all(served, "question-answering", inputs, threads)
    exact = f1 = 0.0
    for example, answers in zip(examples, results, strict=True):
        prediction = answers[0]["answer"] if answers else ""
        exact += max(float(normalize_answer(prediction) == normalize_answer(gold)) for gold in example.answers)
        f1 += max(token_f1(prediction, gold) for gold in example.answers)
    return {"exact_match": 100 * exact / len(examples), "f1": 100 * f1 / len(examples), "examples": len(examples)}


def fill_mask_scores(served: Served, probes: list[MaskProbe], threads: int = CLIENT_THREADS) -> dict[str, float]:
    """Whole-word mask probes (contract.mask_probes) through ``/v1/fill-mask`` with ``top_k=5``.

    The service answers, per input, one list of candidates (best first) per mask token, in text order; a mask
    counts for top-1 when the first candidate's ``token`` is the answer's id, for top-5 when any of the five is.
    """
    results = post_all(served, "fill-mask", [probe.text for probe in probes], threads, top_k=5)
    top1 = top5 = masks = 0
    for probe, per_mask in zip(probes, results, strict=True):
        if len(per_mask) != len(probe.answers):
            raise ValueError(f"{len(per_mask)} masks answered for {len(probe.answers)} in {probe.text[:80]!r}")
        for answer, candidates in zip(probe.answers, per_mask, strict=True):
            tokens = [candidate["token"] for candidate in candidates]
            top1 += tokens[:1] == [answer]
            top5 += answer in tokens[:5]
            masks += 1
    return {
        "mlm_top1_accuracy": 100 * top1 / masks if masks else 0.0,
        "mlm_top5_accuracy": 100 * top5 / masks if masks else 0.0,
        "masks": masks,
        "examples": len(probes),
    }
