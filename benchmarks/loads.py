"""What each benchmark task sends: the inputs from the evaluation data and the request bodies of each system."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, NamedTuple

from tokenizers import Tokenizer

from benchmarks import datasets, models

ROUTES = {
    "sst2": "text-classification", "squad": "question-answering", "conll": "token-classification",
    "embeddings": "feature-extraction", "rerank": "rerank",
}  # fmt: skip
INFINITY_TASKS = ("sst2", "embeddings", "rerank")
EMBEDDING_REQUEST_SIZES = (1, 32)
RERANK_DOCUMENTS = 16
RERANK_MAX_LENGTH = 128  # the rerank bundle's


@dataclass(frozen=True)
class Load:
    """One measured load of a task: the name its rows carry, request bodies, and sequences (model rows) per request."""

    name: str
    bodies: list[dict[str, Any]]
    sequences_per_request: int = 1


class RerankGroup(NamedTuple):
    query: str
    documents: list[str]
    relevant: int  # the index of the query's own hypothesis in documents


def fitting_rte_rows(max_length: int = RERANK_MAX_LENGTH) -> list[datasets.LabelledText]:
    """RTE dev pairs whose premise fits in one row with the longest hypothesis: no system truncates anything."""
    tokenizer = Tokenizer.from_file(str(models.base_checkpoint() / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    rows = datasets.read_rte("dev")
    longest = max(len(tokenizer.encode(row.text_pair or "", add_special_tokens=False).ids) for row in rows)
    return [row for row in rows if len(tokenizer.encode(row.text).ids) + longest + 1 <= max_length]


def rerank_groups(rows: list[datasets.LabelledText], queries: list[int] | None = None) -> list[RerankGroup]:
    """Per query pair (default: all): its premise; its hypothesis among RERANK_DOCUMENTS - 1 others (seeded)."""
    rng = random.Random(0)
    groups = []
    for index in range(len(rows)) if queries is None else queries:
        others = rng.sample([i for i in range(len(rows)) if i != index], RERANK_DOCUMENTS - 1)
        relevant = rng.randrange(RERANK_DOCUMENTS)
        documents = [rows[i].text_pair or "" for i in others]
        documents.insert(relevant, rows[index].text_pair or "")
        groups.append(RerankGroup(rows[index].text, documents, relevant))
    return groups


def sentence_windows(texts: list[str], size: int) -> list[list[str]]:
    """One request per text: ``size`` consecutive texts from there on, wrapping around."""
    return [[texts[(start + offset) % len(texts)] for offset in range(size)] for start in range(len(texts))]


def load_inputs(task: str) -> list[Any]:
    """The load's inputs: SST-2 dev sentences (sst2, embeddings), SQuAD held-out question/context pairs, CoNLL
    valid sentences, rerank groups of RTE dev pairs."""
    if task in ("sst2", "embeddings"):
        return [row.text for row in datasets.read_sst2("dev")]
    if task == "rerank":
        return rerank_groups(fitting_rte_rows())
    if task == "squad":
        start = int(models.SQUAD_EVAL_ARTICLES.split(":")[0])
        return [{"question": ex.question, "context": ex.context} for ex in datasets.read_squad(start)]
    return [sentence.text for sentence in datasets.read_conll("valid")]


def raw_inputs(task: str, inputs: list[Any]) -> list[Any]:
    if task == "rerank":
        return [(group.query, document) for group in inputs for document in group.documents]
    return [(item["question"], item["context"]) for item in inputs] if task == "squad" else inputs


def bertserve_loads(task: str, model: str) -> list[Load]:
    """What bertserve is sent for ``task``: one input per request, 1 and 32 sentences (embeddings), or 1 + 16."""
    inputs = load_inputs(task)
    if task == "embeddings":
        return [
            Load(f"embeddings-{size}", [{"model": model, "input": texts} for texts in sentence_windows(inputs, size)],
                 size)
            for size in EMBEDDING_REQUEST_SIZES
        ]  # fmt: skip
    if task == "rerank":
        bodies = [{"model": model, "query": group.query, "documents": group.documents} for group in inputs]
        return [Load("rerank", bodies, RERANK_DOCUMENTS)]
    extra = {"truncation": True} if task == "sst2" else {}  # what the route did before truncation was opt-in
    return [Load(task, [{"model": model, "inputs": item, **extra} for item in inputs])]


def bertserve_path(task: str) -> str:
    return {"embeddings": "/v1/embeddings", "rerank": "/v1/rerank"}.get(task, f"/v1/{ROUTES[task]}")


def infinity_loads(task: str) -> list[Load]:
    """infinity-emb's bodies (OpenAI-style /embeddings, /rerank, /classify), the same inputs as bertserve's."""
    if task == "rerank":
        return bertserve_loads(task, task)  # the same body shape: model, query, documents
    return [
        Load(load.name, [{"model": task, "input": body.get("input") or [body["inputs"]]} for body in load.bodies],
             load.sequences_per_request)
        for load in bertserve_loads(task, task)
    ]  # fmt: skip
