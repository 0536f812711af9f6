"""Small generated training sets for the four demo models (templates, fixed seed, nothing downloaded).

Each writer produces the file format the training CLI reads: a CSV of ``text,label`` rows (sentiment),
CoNLL IOB2 ``token tag`` lines (NER), SQuAD v1.1 JSON (QA) and plain text lines (fill-mask). The
vocabularies are wide enough that a model has to learn the pattern, not a handful of strings.
"""

from __future__ import annotations

import csv
import json
import random
import re
from collections.abc import Callable
from pathlib import Path

FIRST_NAMES = (
    "Sarah", "John", "Maria", "Ahmed", "Yuki", "Carlos", "Anna", "David", "Fatima", "Lukas", "Emma", "Raj",
    "Olivia", "Pierre", "Sofia", "Kenji", "Laura", "Mohammed", "Elena", "James", "Chloe", "Wei", "Hannah",
    "Diego", "Ingrid", "Tom", "Amara", "Nikolai", "Grace", "Omar", "Lucia", "Ben", "Priya", "Marco", "Aisha",
    "Jonas", "Clara", "Samuel", "Mei", "Victor", "Julia", "Hugo", "Nadia", "Felix", "Rosa", "Daniel", "Zoe",
)
LAST_NAMES = (
    "Smith", "Garcia", "Müller", "Tanaka", "Rossi", "Johnson", "Novak", "Dubois", "Kim", "Silva", "Schmidt",
    "Brown", "Kowalski", "Nguyen", "Jensen", "Lopez", "Okafor", "Ivanova", "Chen", "Wilson", "Martin",
    "Fischer", "Costa", "Patel", "Andersson", "Moreau", "Weber", "Hughes", "Sato", "Becker", "Romano",
)
CITIES = (
    "London", "Paris", "Berlin", "Madrid", "Rome", "Tokyo", "Toronto", "Sydney", "Chicago", "Boston",
    "Vienna", "Prague", "Lisbon", "Dublin", "Oslo", "Stockholm", "Warsaw", "Cairo", "Nairobi", "Mumbai",
    "Seoul", "Osaka", "Munich", "Hamburg", "Milan", "Barcelona", "Amsterdam", "Brussels", "Zurich", "Geneva",
    "Athens", "Istanbul", "Lagos", "Lima", "Bogota", "Denver", "Seattle", "Melbourne", "Copenhagen",
    "New York", "San Francisco", "Los Angeles", "Hong Kong", "Buenos Aires", "Cape Town", "Rio de Janeiro",
)
ORGANISATIONS = (
    "Google", "Microsoft", "Siemens", "Toyota", "Reuters", "Nestle", "Amazon", "Oxfam", "UNICEF", "Volvo",
    "Philips", "Samsung", "Airbus", "Nokia", "IKEA", "Intel", "Ford", "Shell", "Adidas", "Spotify",
    "General Electric", "Deutsche Bank", "Red Cross", "World Bank", "European Commission", "Oxford University",
    "Harvard University", "Bank of England", "Real Madrid", "Manchester United", "United Nations",
)
MISC_TERMS = (
    "German", "French", "Italian", "Japanese", "Spanish", "British", "American", "Brazilian", "Canadian",
    "Swedish", "Indian", "Chinese", "Dutch", "Polish", "Olympic", "Christmas", "Nobel Prize", "World Cup",
    "Tour de France", "Champions League", "Grammy", "Oscar", "English", "Arabic",
)
YEARS = tuple(range(1850, 2021))
PROFESSIONS = (
    "doctor", "teacher", "engineer", "painter", "journalist", "chemist", "architect", "pilot", "lawyer",
    "physicist", "novelist", "composer", "nurse", "photographer", "chef", "economist", "biologist",
)
SUBJECTS = (
    "the history of art", "physics", "medicine", "music", "law", "chemistry", "economics", "mathematics",
    "biology", "architecture", "literature", "philosophy",
)

def _person(rng: random.Random) -> str:
    return f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"


# --- sentiment ----------------------------------------------------------------------------------

REVIEW_SUBJECTS = (
    "movie", "film", "book", "restaurant", "hotel", "album", "show", "game", "phone", "laptop", "meal",
    "concert", "play", "series", "novel", "app", "camera", "service", "product", "coffee", "trip",
)
POSITIVE_WORDS = (
    "wonderful", "great", "excellent", "amazing", "brilliant", "fantastic", "delightful", "superb", "lovely",
    "outstanding", "enjoyable", "charming", "beautiful", "perfect", "impressive", "moving", "fun", "good",
)
NEGATIVE_WORDS = (
    "terrible", "awful", "boring", "disappointing", "dreadful", "poor", "bad", "horrible", "dull", "annoying",
    "mediocre", "painful", "weak", "messy", "unpleasant", "frustrating", "forgettable", "pointless",
)
POSITIVE_TEMPLATES = (
    "The {s} was {w}.", "What a {w} {s}!", "I loved this {s}, it was {w}.", "I really enjoyed the {s}.",
    "This {s} is {w} and I would recommend it to anyone.", "Absolutely {w}, one of the best {s}s I have seen.",
    "The {s} was {w} and the staff were friendly.", "I would happily buy this {s} again.",
    "A {w} {s} with a great ending.", "Highly recommended: a {w} {s}.", "Such a {w} {s}, I loved every minute.",
    "The {s} exceeded my expectations, truly {w}.", "Five stars, the {s} was {w}.", "I absolutely loved the {s}!",
)
NEGATIVE_TEMPLATES = (
    "The {s} was {w}.", "What a {w} {s}!", "I hated this {s}, it was {w}.", "I did not enjoy the {s} at all.",
    "This {s} is {w} and I would not recommend it to anyone.", "Truly {w}, one of the worst {s}s I have seen.",
    "The {s} was {w} and the staff were rude.", "I would never buy this {s} again.",
    "A {w} {s} with a silly ending.", "Avoid this {s}, it is {w}.", "Such a {w} {s}, a complete waste of time.",
    "The {s} fell far below my expectations, really {w}.", "One star, the {s} was {w}.", "I regret paying for the {s}.",
)


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

NER_TEMPLATES = (
    "My name is {PER} and I live in {LOC} .",
    "{PER} lives in {LOC} .",
    "{PER} works for {ORG} in {LOC} .",
    "{PER} flew from {LOC} to {LOC} last week .",
    "{ORG} opened a new office in {LOC} on Monday .",
    "The {MISC} engineer {PER} joined {ORG} last year .",
    "{PER} was born in {LOC} and studied in {LOC} .",
    "Yesterday {PER} met {PER} at the {ORG} headquarters in {LOC} .",
    "{PER} won the {MISC} in {LOC} .",
    "According to {ORG} , prices in {LOC} rose again .",
    "{PER} , a spokesman for {ORG} , declined to comment .",
    "I visited {LOC} with {PER} in the summer .",
    "The {MISC} team arrived in {LOC} on Friday .",
    "{PER} told reporters in {LOC} that {ORG} would grow .",
    "She moved to {LOC} to work for {ORG} .",
    "{PER} speaks {MISC} and lives near {LOC} .",
    "Hello , I am {PER} from {LOC} .",
    "{ORG} hired {PER} as its new director .",
)
_NER_POOLS = {"LOC": CITIES, "ORG": ORGANISATIONS, "MISC": MISC_TERMS}


def ner_sentences(rng: random.Random, count: int) -> list[list[tuple[str, str]]]:
    sentences = []
    for _ in range(count):
        tagged: list[tuple[str, str]] = []
        for word in rng.choice(NER_TEMPLATES).split():
            kind = word.strip("{}") if word.startswith("{") else None
            if kind is None:
                tagged.append((word, "O"))
                continue
            entity = _person(rng) if kind == "PER" else rng.choice(_NER_POOLS[kind])
            if kind == "PER" and rng.random() < 0.25:
                entity = entity.split()[0]
            for position, token in enumerate(entity.split()):
                tagged.append((token, f"{'B' if position == 0 else 'I'}-{kind}"))
        sentences.append(tagged)
    return sentences


def write_ner(path: Path, rng: random.Random, count: int) -> None:
    lines = []
    for sentence in ner_sentences(rng, count):
        lines.extend(f"{token} {tag}" for token, tag in sentence)
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")


# --- question answering -------------------------------------------------------------------------


def _qa_paragraph(rng: random.Random, index: int) -> dict[str, object]:
    """A short biography with distractors (two cities, two years) and questions whose answers are spans."""
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
    qas = []
    for number, (question, answer) in enumerate(rng.sample(questions, 3)):
        start = _answer_start(context, answer)
        qas.append({"id": f"demo-{index}-{number}", "question": question,
                    "answers": [{"text": answer, "answer_start": start}]})
    return {"context": context, "qas": qas}


def _answer_start(context: str, answer: str) -> int:
    """The answer's first whole-word occurrence ("chemist" must not match inside "chemistry")."""
    match = re.search(rf"\b{re.escape(answer)}\b", context)
    if match is None:
        raise ValueError(f"answer {answer!r} is not in the context {context!r}")
    return match.start()


def squad_document(rng: random.Random, count: int) -> dict[str, object]:
    paragraphs = [_qa_paragraph(rng, index) for index in range(count)]
    return {"version": "1.1", "data": [{"title": "demo biographies", "paragraphs": paragraphs}]}


def write_squad(path: Path, rng: random.Random, count: int) -> None:
    path.write_text(json.dumps(squad_document(rng, count), ensure_ascii=False), encoding="utf-8")


# --- fill-mask ----------------------------------------------------------------------------------

CAPITALS = (
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Japan", "Tokyo"),
    ("Austria", "Vienna"), ("Portugal", "Lisbon"), ("Ireland", "Dublin"), ("Norway", "Oslo"),
    ("Sweden", "Stockholm"), ("Poland", "Warsaw"), ("Egypt", "Cairo"), ("Kenya", "Nairobi"), ("Greece", "Athens"),
    ("Peru", "Lima"), ("Denmark", "Copenhagen"), ("Russia", "Moscow"), ("China", "Beijing"), ("Canada", "Ottawa"),
)
TEXT_TEMPLATES = (
    "{city} is the capital of {country}.", "The capital of {country} is {city}.",
    "{name} travelled to {city}, the capital of {country}.", "Every year many tourists visit {city} in {country}.",
    "{name} drinks a cup of coffee every morning.", "{name} reads a book before going to sleep.",
    "The children played football in the park after school.", "{name} is a {profession} who lives in {city}.",
    "It was raining, so {name} took an umbrella.", "The cat is sleeping on the sofa.",
    "{name} went to the doctor because she felt sick.", "We had dinner at a small restaurant near the river.",
    "The sun rises in the east and sets in the west.", "{name} studied {subject} at the university.",
    "The train to {city} leaves at nine in the morning.", "Water boils at one hundred degrees.",
    "She opened the window to let some fresh air in.", "The weather in {city} was cold and windy today.",
)


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
