"""Small generated training sets for the four demo models (templates, fixed seed, nothing downloaded).

Each writer produces the file format the training CLI reads: a CSV of ``text,label`` rows (sentiment),
CoNLL IOB2 ``token tag`` lines (NER), SQuAD v1.1 JSON (QA) and plain text lines (fill-mask). The
vocabularies are wide enough that a model has to learn the pattern, not a handful of strings.

The served NER model sees a long text as windows of its ``max_length`` tokens, so its training data looks
like such windows: most blocks are multi-sentence passages of up to ~90 words in which most sentences are
everyday filler with no entity (music, the city, the river, days and months: all O). ``heldout.py``
makes the held-out inputs ``check.py`` scores the built models on, from names, templates and filler
that never appear here.
"""

from __future__ import annotations

import csv
import json
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from demo import qa_paragraphs
from demo.vocabulary import (
    CAPITALS,
    CITIES,
    FIRST_NAMES,
    LAST_NAMES,
    NEGATIVE_TEMPLATES,
    NEGATIVE_WORDS,
    NER_TEMPLATES,
    ORGANISATIONS,
    POSITIVE_TEMPLATES,
    POSITIVE_WORDS,
    PROFESSIONS,
    REVIEW_SUBJECTS,
    SUBJECTS,
    TEXT_TEMPLATES,
    TRAINING_POOLS,
    YEARS,
)

TaggedTokens = list[tuple[str, str]]
PUNCTUATION = frozenset({".", ",", "!", "?", ";", ":"})


def _person(rng: random.Random) -> str:
    return f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"


def detokenize(tokens: Sequence[str]) -> tuple[str, list[tuple[int, int]]]:
    """Tokens joined as text ("lives in London ." -> "lives in London.") and each token's character span."""
    parts: list[str] = []
    spans: list[tuple[int, int]] = []
    length = 0
    for token in tokens:
        if parts and token not in PUNCTUATION:
            parts.append(" ")
            length += 1
        parts.append(token)
        spans.append((length, length + len(token)))
        length += len(token)
    return "".join(parts), spans


# --- everyday filler: sentences with no entity -------------------------------------------------

@dataclass(frozen=True)
class FillerGrammar:
    """Sentences like "The children walked along the river on Monday ." from phrase lists."""

    subjects: tuple[str, ...]
    actions: tuple[str, ...]
    places: tuple[str, ...]
    times: tuple[str, ...]
    standalone: tuple[str, ...]

    def sentence(self, rng: random.Random) -> list[str]:
        form = rng.random()
        subject, action = rng.choice(self.subjects), rng.choice(self.actions)
        if form < 0.15:
            text = rng.choice(self.standalone)
        elif form < 0.45:
            text = f"{subject} {action} {rng.choice(self.places)} {rng.choice(self.times)} ."
        elif form < 0.65:
            time, place = rng.choice(self.times), rng.choice(self.places)
            text = f"{time[0].upper()}{time[1:]} , {subject[0].lower()}{subject[1:]} {action} {place} ."
        elif form < 0.8:
            text = f"{subject} {action} {rng.choice(self.times)} , and then {rng.choice(self.actions)} ."
        else:
            text = f"{subject} {action} ."
        return text.split()


TRAINING_FILLER = FillerGrammar(
    subjects=(
        "The people", "Many people", "My neighbours", "The children", "Our family", "The students", "A few friends",
        "The old man", "The young woman", "Everyone in the village", "The music teacher", "The city council",
        "The farmers", "The tourists", "Most visitors", "The team", "The workers", "A small group of fans",
        "The doctor", "My sister", "His brother", "Her parents", "The band", "The crowd", "The local bank",
        "The company", "The university", "The government", "The school choir", "Some of the players",
    ),
    actions=(
        "listened to music", "walked along the river", "visited the city centre", "cooked dinner together",
        "read the newspaper", "cleaned the kitchen", "planted trees in the garden", "played cards", "watched a film",
        "waited for the bus", "sang old songs", "talked about the weather", "painted the fence", "bought fresh bread",
        "went fishing", "fixed the roof", "learned to swim", "wrote long letters", "danced to loud music",
        "sold vegetables", "opened a new account", "raised money for the hospital", "closed the office early",
        "cut the price of tickets", "asked for more time", "met to discuss the budget", "carried the boxes upstairs",
        "took photos of the bridge", "played football", "studied for the exam",
    ),
    places=(
        "near the river", "in the city", "at the market", "by the lake", "in the park", "at the station",
        "in the old town", "on the hill", "at home", "in the village", "at the school", "in the museum",
        "on the beach", "in the garden", "at the bank", "down by the harbour", "in the kitchen", "outside the church",
    ),
    times=(
        "on Monday", "on Tuesday", "on Wednesday", "on Thursday", "on Friday", "on Saturday", "on Sunday",
        "in January", "in February", "in March", "in April", "in May", "in June", "in July", "in August",
        "in September", "in October", "in November", "in December", "every morning", "last summer",
        "in the evening", "after lunch", "during the winter", "at the weekend", "late at night",
        "early in the spring", "last year", "twice a week", "yesterday",
    ),
    standalone=(
        "It rained all day .", "The music was loud and the room was warm .", "Prices went up again this month .",
        "The river was high after the storm .", "Nobody knew what to do next .", "The city was quiet at night .",
        "People were happy to see the sun again .", "The bus was late , as usual .",
        "Most shops close early on Sunday .", "The weather in May was mild and sunny .",
        "There was music in every street .", "The new bridge over the river is very long .",
        "Tickets for the concert sold out in an hour .", "The meeting lasted until late in the evening .",
        "Everyone agreed that the food was good .", "The children were tired but happy .",
        "The company made a small profit last year .", "Many people moved to the city to find work .",
        "The bank opens at nine on weekdays .", "The river runs through the middle of the town .",
    ),
)


# --- sentiment ----------------------------------------------------------------------------------


def sentiment_rows(rng: random.Random, count: int) -> list[tuple[str, str]]:
    rows = []
    for index in range(count):
        positive = index % 2 == 0
        templates, words = (POSITIVE_TEMPLATES, POSITIVE_WORDS) if positive else (NEGATIVE_TEMPLATES, NEGATIVE_WORDS)
        text = rng.choice(templates).format(s=rng.choice(REVIEW_SUBJECTS), w=rng.choice(words))
        rows.append((text, "POSITIVE" if positive else "NEGATIVE"))
    rng.shuffle(rows)
    return rows


def write_sentiment(path: Path, rng: random.Random, count: int) -> None:
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows(sentiment_rows(rng, count))


# --- named entities -----------------------------------------------------------------------------

# The NER demo's labels (IOB2), in the order training numbers them.
NER_LABELS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-MISC", "I-MISC")


def _entity(rng: random.Random, kind: str, pools: dict[str, tuple[str, ...]], first_only: float) -> str:
    if kind == "PER":
        first, last = rng.choice(pools["FIRST"]), rng.choice(pools["LAST"])
        return first if rng.random() < first_only else f"{first} {last}"
    return rng.choice(pools[kind])


def tagged_sentence(
    rng: random.Random, template: str, pools: dict[str, tuple[str, ...]] = TRAINING_POOLS, first_only: float = 0.25
) -> TaggedTokens:
    """A template's words tagged O and its {KIND} slots filled from ``pools`` and tagged IOB2."""
    tagged: TaggedTokens = []
    for word in template.split():
        kind = word.strip("{}") if word.startswith("{") else None
        if kind is None:
            tagged.append((word, "O"))
            continue
        for position, token in enumerate(_entity(rng, kind, pools, first_only).split()):
            tagged.append((token, f"{'B' if position == 0 else 'I'}-{kind}"))
    return tagged


def _ner_passage(rng: random.Random, entity_share: float) -> TaggedTokens:
    """Sentences up to 40-110 words (about the served 128-token window), most of them filler."""
    budget = rng.randint(40, 110)
    passage: TaggedTokens = []
    while True:
        if rng.random() < entity_share:
            sentence = tagged_sentence(rng, rng.choice(NER_TEMPLATES))
        else:
            sentence = [(word, "O") for word in TRAINING_FILLER.sentence(rng)]
        if passage and len(passage) + len(sentence) > budget:
            break
        passage.extend(sentence)
    if rng.random() < 0.3:  # a window of a long text starts mid-sentence ...
        cut = rng.randint(1, 6)
        if cut < len(passage) - 5 and not passage[cut][1].startswith("I-"):
            passage = passage[cut:]
    if rng.random() < 0.3:  # ... or ends in one
        passage = passage[: len(passage) - rng.randint(1, 6)]
    return passage


def ner_sentences(rng: random.Random, count: int) -> list[TaggedTokens]:
    """CoNLL blocks: a quarter single sentences (70% with entities), the rest passages of about a window's
    length in which about a third of the sentences have entities (a tenth of the passages have none)."""
    blocks = []
    for _ in range(count):
        draw = rng.random()
        if draw < 0.25:
            if rng.random() < 0.7:
                blocks.append(tagged_sentence(rng, rng.choice(NER_TEMPLATES)))
            else:
                blocks.append([(word, "O") for word in TRAINING_FILLER.sentence(rng)])
        else:
            blocks.append(_ner_passage(rng, entity_share=0.0 if draw > 0.925 else 0.35))
    return blocks


def write_ner(path: Path, rng: random.Random, count: int) -> None:
    lines: list[str] = []
    for sentence in ner_sentences(rng, count):
        lines.extend(f"{token} {tag}" for token, tag in sentence)
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")


# --- question answering -------------------------------------------------------------------------


def _qa_paragraph(rng: random.Random, index: int) -> dict[str, object]:
    """A short everyday paragraph (a club, a firm, a place, an event, a person: qa_paragraphs) or, one time in
    four, a short biography with distractors; three of its questions, whose answers are spans."""
    if rng.random() < 0.75:
        text, asked = qa_paragraphs.paragraph(rng)
        return _squad_paragraph(text, rng.sample(asked, min(3, len(asked))), index)
    name = _person(rng)
    birth_city, later_city = rng.sample(CITIES, 2)
    birth_year = rng.choice(YEARS[:-40])
    move_year = birth_year + rng.randint(18, 35)
    profession, subject, org = rng.choice(PROFESSIONS), rng.choice(SUBJECTS), rng.choice(ORGANISATIONS)
    pronoun = rng.choice(("He", "She"))
    sentences = [
        f"{name} was born in {birth_city} in {birth_year}.",
        f"{pronoun} studied {subject} and became a {profession}.",
        f"In {move_year}, {pronoun.lower()} moved to {later_city} to work for {org}.",
    ]
    if rng.random() < 0.5:
        sentences[0], sentences[1] = f"{name} studied {subject} and became a {profession}.", (
            f"{pronoun} was born in {birth_city} in {birth_year}."
        )
    context = " ".join(sentences)
    questions = (
        (f"Where was {name} born?", birth_city),
        (rng.choice((f"When was {name} born?", f"In which year was {name} born?")), str(birth_year)),
        (rng.choice((f"What did {name} study?", f"Which subject did {name} study?")), subject),
        (f"Where did {name} move to?", later_city),
        (rng.choice((f"Who did {name} work for?", f"Which organisation did {name} work for?")), org),
        (f"What was {name}'s job?", profession),
        (f"When did {name} move to {later_city}?", str(move_year)),
    )
    return _squad_paragraph(context, rng.sample(questions, 3), index)


def _squad_paragraph(context: str, questions: Sequence[tuple[str, str]], index: int) -> dict[str, object]:
    qas = [
        {"id": f"demo-{index}-{number}", "question": question,
         "answers": [{"text": answer, "answer_start": answer_start(context, answer)}]}
        for number, (question, answer) in enumerate(questions)
    ]  # fmt: skip
    return {"context": context, "qas": qas}


def answer_start(context: str, answer: str) -> int:
    """The answer's first whole-word occurrence in ``context`` ("chemist" must not match inside "chemistry")."""
    match = re.search(rf"\b{re.escape(answer)}\b", context)
    if match is None:
        raise ValueError(f"answer {answer!r} is not in {context!r}")
    return match.start()


def squad_document(rng: random.Random, count: int) -> dict[str, object]:
    paragraphs = [_qa_paragraph(rng, index) for index in range(count)]
    return {"version": "1.1", "data": [{"title": "demo biographies", "paragraphs": paragraphs}]}


def write_squad(path: Path, rng: random.Random, count: int) -> None:
    path.write_text(json.dumps(squad_document(rng, count), ensure_ascii=False), encoding="utf-8")


# --- fill-mask ----------------------------------------------------------------------------------


def text_lines(rng: random.Random, count: int) -> list[str]:
    lines = []
    for _ in range(count):
        country, city = rng.choice(CAPITALS)
        lines.append(rng.choice(TEXT_TEMPLATES).format(
            city=city, country=country, name=rng.choice(FIRST_NAMES), profession=rng.choice(PROFESSIONS),
            subject=rng.choice(SUBJECTS),
        ))
    return lines


def write_text(path: Path, rng: random.Random, count: int) -> None:
    path.write_text("\n".join(text_lines(rng, count)) + "\n", encoding="utf-8")


WRITERS: dict[str, Callable[[Path, random.Random, int], None]] = {
    "sentiment": write_sentiment,
    "ner": write_ner,
    "qa": write_squad,
    "fill-mask": write_text,
}
