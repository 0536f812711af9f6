"""What the overload check sends: today's short load and three long-input loads, built from the shared data.

| load | route | one request |
| --- | --- | --- |
| short | /v1/text-classification | one SST-2 dev sentence |
| qa-long | /v1/question-answering | a SQuAD dev question on a 20-70 KB context: its own paragraph among others |
| embeddings-long | /v1/embeddings | 32 documents of ~512 tokens (510 + [CLS] and [SEP]) cut from WikiText-2 valid |
| ner-long | /v1/token-classification | a 5 KB text: consecutive CoNLL-2003 valid sentences |
| classify-512 | /v1/text-classification | one WikiText-2 valid document of 512 tokens (for BERT-base at full length) |

Each load's model is the bundle given as ``ROLE=PATH``, else the first that exists of: the full-data bundle of
``make accuracy`` (``runs/accuracy/bundles``), the recipe bundle of ``make bench`` (``benchmarks/scratch/bundles``),
the demo bundle of ``make demo`` (``models/``); else MiniLM with a new random head is exported into
``benchmarks/scratch/bundles/overload-*`` (the load's shape matters here, not accuracy). The embeddings model is
all-MiniLM-L6-v2 exported for 512 tokens, so that its documents are not cut to the 256 of the usual export.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import mean
from typing import Any

from tokenizers import Tokenizer

from benchmarks import datasets, random_bert
from benchmarks.datasets import REPO_ROOT, SCRATCH_DIR
from benchmarks.models import BUNDLES_DIR, RUNS_DIR, base_checkpoint

log = logging.getLogger(__name__)
QA_CONTEXT_BYTES = (20_000, 70_000)
NER_TEXT_BYTES = 5_000
EMBEDDING_DOCUMENTS = 32
EMBEDDING_TOKENS = 512  # per document, [CLS] and [SEP] included
FALLBACK_TEXTS = [
    "A wonderful, moving film with a brilliant cast.",
    "Dull, far too long, and the plot makes no sense.",
    "The music was great but the acting was wooden.",
    "An honest, funny and surprisingly tender story.",
]
WIKITEXT_MARKERS = {" @-@ ": "-", " @,@ ": ",", " @.@ ": "."}


@dataclass(frozen=True)
class LoadSpec:
    name: str
    role: str  # the model it needs (the NAME of --model NAME=PATH)
    path: str
    what: str
    measure_s: float  # default seconds of the capacity window at c=32
    warmup_s: float  # and of the warm-up before it (a long request's latency at c=32 is seconds)
    pool: int  # distinct request bodies, sent in rotation


LOADS: dict[str, LoadSpec] = {
    "short": LoadSpec("short", "sst2", "/v1/text-classification", "one SST-2 dev sentence", 10, 2, 2000),
    "qa-long": LoadSpec("qa-long", "qa", "/v1/question-answering",
                        "one SQuAD dev question on a 20-70 KB context (its paragraph among others)", 60, 20, 120),
    "embeddings-long": LoadSpec("embeddings-long", "embeddings", "/v1/embeddings",
                                "32 WikiText-2 documents of ~512 tokens", 40, 15, 64),
    "ner-long": LoadSpec("ner-long", "ner", "/v1/token-classification",
                         "a 5 KB text of consecutive CoNLL-2003 valid sentences", 30, 10, 400),
    "classify-512": LoadSpec("classify-512", "sst2", "/v1/text-classification",
                             "one WikiText-2 valid document of 512 tokens", 30, 10, 64),
}  # fmt: skip
LONG_LOADS = ("qa-long", "embeddings-long", "ner-long")

# role -> (export task, the recipe / demo names to look for, the head a fallback MiniLM gets, export options)
ROLES: dict[str, tuple[str, tuple[str, ...], str, tuple[str, ...]]] = {
    "sst2": ("text-classification", ("sst2", "sentiment"), "BertForSequenceClassification", ("--max-length", "128")),
    "qa": ("question-answering", ("squad", "qa"), "BertForQuestionAnswering", ("--max-length", "256")),
    "ner": ("token-classification", ("conll", "ner"), "BertForTokenClassification", ("--max-length", "128")),
    "embeddings": ("feature-extraction", (), "BertModel", ("--task", "feature-extraction", "--max-length", "512")),
}


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def long_contexts(
    articles: Sequence[Sequence[str]],
    questions: Sequence[tuple[int, int, str]],
    count: int,
    min_bytes: int = QA_CONTEXT_BYTES[0],
    max_bytes: int = QA_CONTEXT_BYTES[1],
    seed: int = 0,
) -> list[dict[str, str]]:
    """``count`` {question, context} pairs: each context holds the question's own paragraph at a random place among
    paragraphs of its article and the following ones (wrapping), ``min_bytes``..``max_bytes`` of UTF-8 in all, its
    size drawn uniformly. ``questions`` are (article index, paragraph index, question)."""
    rng = random.Random(seed)
    order = [(a, p) for a in range(len(articles)) for p in range(len(articles[a]))]
    pairs = []
    for _ in range(count):
        article, paragraph, question = rng.choice(questions)
        own = articles[article][paragraph]
        target = rng.uniform(min_bytes, max_bytes)
        start = order.index((article, 0))
        pieces, size = [], utf8_len(own)
        for a, p in order[start:] + order[:start]:
            if size >= target:
                break
            piece = articles[a][p]
            if (a, p) != (article, paragraph) and size + 1 + utf8_len(piece) <= max_bytes:
                pieces.append(piece)
                size += 1 + utf8_len(piece)
        if size < min_bytes:
            raise ValueError(f"the paragraphs hold {size} bytes, fewer than {min_bytes}")
        pieces.insert(rng.randrange(len(pieces) + 1), own)
        pairs.append({"question": question, "context": "\n".join(pieces)})
    return pairs


def concatenated_texts(sentences: Sequence[str], target_bytes: int, count: int) -> list[str]:
    """``count`` texts of consecutive sentences (starts spread over the list, wrapping) joined by spaces, each cut at
    the last space within ``target_bytes`` of UTF-8: between ``target_bytes`` minus one word and ``target_bytes``."""
    texts = []
    step = max(1, len(sentences) // max(1, count))
    for index in range(count):
        parts, size, position = [], 0, index * step
        while size <= target_bytes:
            sentence = sentences[position % len(sentences)]
            parts.append(sentence)
            size += utf8_len(sentence) + 1
            position += 1
        cut = " ".join(parts).encode("utf-8")[:target_bytes].decode("utf-8", errors="ignore")
        texts.append(cut[: cut.rfind(" ")] if " " in cut else cut)
    return texts


def texts_of_tokens(tokenizer: Tokenizer, text: str, tokens: int, count: int) -> list[str]:
    """Up to ``count`` consecutive pieces of ``text`` that each tokenize to ``tokens`` tokens with the special
    ones ([CLS], [SEP]): cut at token offsets, starting at a word, re-counted (and shortened where a cut word
    re-tokenizes longer). Fewer when ``text`` runs out."""
    body = tokens - tokenizer.num_special_tokens_to_add(False)
    encoding = tokenizer.encode(text, add_special_tokens=False)
    offsets, names = encoding.offsets, encoding.tokens
    pieces: list[str] = []
    index = 0
    while len(pieces) < count and index + body <= len(offsets):
        while index < len(names) and names[index].startswith("##"):
            index += 1
        last = min(index + body, len(offsets)) - 1
        while last > index:
            piece = text[offsets[index][0] : offsets[last][1]]
            if len(tokenizer.encode(piece, add_special_tokens=False).ids) <= body:
                pieces.append(piece)
                break
            last -= 1
        index += body
    return pieces


def bundle_tokenizer(bundle: Path) -> Tokenizer:
    tokenizer = Tokenizer.from_file(str(bundle / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def wikitext_text() -> str:
    """WikiText-2 valid paragraphs (headings left out), its @-@ / @,@ / @.@ separators undone, one per line."""
    lines = (datasets.shared_data_dir() / "wikitext2" / "valid.txt").read_text(encoding="utf-8").splitlines()
    paragraphs = [line.strip() for line in lines if line.strip() and not line.strip().startswith("=")]
    text = "\n".join(paragraphs)
    for marker, plain in WIKITEXT_MARKERS.items():
        text = text.replace(marker, plain)
    return text


def squad_articles() -> tuple[list[list[str]], list[tuple[int, int, str]]]:
    data = json.loads(datasets.squad_path().read_text(encoding="utf-8"))["data"]
    articles = [[paragraph["context"] for paragraph in article["paragraphs"]] for article in data]
    questions = [
        (a, p, qa["question"])
        for a, article in enumerate(data)
        for p, paragraph in enumerate(article["paragraphs"])
        for qa in paragraph["qas"]
    ]
    return articles, questions


def short_texts(limit: int) -> list[str]:
    """SST-2 dev sentences when the shared data is there, else a few fixed ones."""
    try:
        return [row.text for row in datasets.read_sst2("dev")[:limit]]
    except OSError:
        return FALLBACK_TEXTS


def request_bodies(load: LoadSpec, model: str, tokenizer: Tokenizer, pool: int | None = None) -> list[dict[str, Any]]:
    """The load's request bodies (``pool`` distinct ones, default the load's), in a seeded shuffled order."""
    count = pool or load.pool
    if load.name == "short":
        bodies = [{"model": model, "inputs": text, "truncation": True} for text in short_texts(count)]
    elif load.name == "qa-long":
        articles, questions = squad_articles()
        bodies = [{"model": model, "inputs": pair} for pair in long_contexts(articles, questions, count)]
    elif load.name == "ner-long":
        sentences = [sentence.text for sentence in datasets.read_conll("valid")]
        bodies = [{"model": model, "inputs": text} for text in concatenated_texts(sentences, NER_TEXT_BYTES, count)]
    elif load.name == "embeddings-long":
        documents = texts_of_tokens(tokenizer, wikitext_text(), EMBEDDING_TOKENS, count + EMBEDDING_DOCUMENTS)
        bodies = [
            {"model": model, "input": [documents[(start + k) % len(documents)] for k in range(EMBEDDING_DOCUMENTS)]}
            for start in range(min(count, len(documents)))
        ]
    elif load.name == "classify-512":
        documents = texts_of_tokens(tokenizer, wikitext_text(), EMBEDDING_TOKENS, count)
        bodies = [{"model": model, "inputs": document, "truncation": True} for document in documents]
    else:
        raise ValueError(f"unknown load {load.name!r}; known: {sorted(LOADS)}")
    random.Random(0).shuffle(bodies)
    return bodies


def body_texts(body: dict[str, Any]) -> list[str]:
    inputs = body["input"] if "input" in body else body["inputs"]
    if isinstance(inputs, dict):
        return [inputs["question"], inputs["context"]]
    return [str(text) for text in inputs] if isinstance(inputs, list) else [str(inputs)]


def describe_bodies(bodies: list[dict[str, Any]], tokenizer: Tokenizer, sample: int = 50) -> dict[str, Any]:
    """Sizes of the bodies (bytes of JSON) and tokens of text per request (no special tokens, on a sample)."""
    sizes = [len(json.dumps(body).encode()) for body in bodies]
    tokens = [
        sum(len(tokenizer.encode(text, add_special_tokens=False).ids) for text in body_texts(body))
        for body in bodies[:sample]
    ]
    return {
        "distinct_bodies": len(bodies),
        "body_bytes": {"min": min(sizes), "mean": round(mean(sizes)), "max": max(sizes)},
        "text_tokens_per_request": {"min": min(tokens), "mean": round(mean(tokens)), "max": max(tokens),
                                    "sampled": len(tokens)},
    }  # fmt: skip


def bundle_max_length(bundle: Path) -> int | None:
    spec = json.loads((bundle / "bundle.json").read_text())
    return int(spec["max_length"]) if spec.get("max_length") else None


def default_bundle(role: str) -> Path:
    """The role's bundle: an existing trained one (accuracy, bench recipe, demo), else a MiniLM one built here."""
    task, names, architecture, options = ROLES[role]
    candidates = [RUNS_DIR / "accuracy" / "bundles" / f"{name}-fp32" for name in names]
    candidates += [BUNDLES_DIR / f"{name}-fp32" for name in names]
    candidates += [REPO_ROOT / "models" / name for name in names]
    found = next((folder for folder in candidates if (folder / "bundle.json").is_file()), None)
    if found is not None:
        return found
    out = BUNDLES_DIR / f"overload-{role}-fp32"
    if (out / "bundle.json").is_file():
        return out
    if architecture == "BertModel":
        checkpoint = base_checkpoint()
    else:
        checkpoint = SCRATCH_DIR / "checkpoints" / f"minilm-{role}"
        random_bert.ensure_checkpoint(checkpoint, None, architecture)
    random_bert.export(checkpoint, out, [*options, "--quiet"], BUNDLES_DIR / f"export-{out.name}.log")
    log.info("built %s (%s) for the %s role", out, task, role)
    return out
