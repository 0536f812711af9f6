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

# More names for NER and QA only: sentiment and fill-mask data draw from the lists above and stay as they were.
EXTRA_FIRST_NAMES = (
    "Thomas", "Lisa", "Paul", "Alice", "Mary", "Jennifer", "Emily", "Michelle", "Amanda", "Natalie", "Lauren",
    "Catherine", "Christopher", "Jason", "Ryan", "Eric", "Jonathan", "Justin", "Benjamin", "Alexander", "Nathan",
    "Adam", "Keith", "Carl", "Bruce", "Louis", "Vincent", "Hiroshi", "Olga", "Sven", "Kwame", "Leila", "Tariq",
    "Ines", "Mateo", "Freya", "Arjun", "Noor", "Pablo", "Astrid",
)
EXTRA_LAST_NAMES = (
    "Jones", "Williams", "Moore", "Jackson", "Lewis", "Scott", "Lee", "Ali", "Khan", "Singh", "Yamamoto",
    "Larsen", "Nielsen", "Hansen", "Ferreira", "Santos", "Mendes", "Popescu", "Horvath", "Kovacs", "Jansen",
    "De Vries", "Murray", "Fraser", "Russo", "Bianchi", "Ricci", "Schneider", "Wagner", "Lindqvist",
)
EXTRA_CITIES = (
    "Birmingham", "Leipzig", "Stuttgart", "Turin", "Bologna", "Casablanca", "Beijing", "Singapore", "Dubai",
    "Doha", "Kiev", "Minsk", "Vilnius", "Tallinn", "Chennai", "Bangalore", "Kolkata", "Philadelphia", "Quebec",
    "Ottawa", "Edmonton", "Perth", "Quito", "Accra", "Dakar", "Tunis", "Kampala", "Addis Ababa", "Kuala Lumpur",
)
EXTRA_ORGANISATIONS = (
    "Ericsson", "Unilever", "Vodafone", "Barclays", "HSBC", "Pfizer", "Lufthansa", "Walmart", "Tesco",
    "Carrefour", "Heineken", "BBC", "NASA", "FIFA", "Greenpeace", "Interpol", "Stanford University",
    "Cambridge University", "Sorbonne University",
)
EXTRA_MISC_TERMS = (
    "Russian", "Australian", "Swiss", "European", "African", "Asian", "Easter", "Olympics", "Super Bowl",
    "Eurovision",
)
PERSON_FIRST = FIRST_NAMES + EXTRA_FIRST_NAMES
PERSON_LAST = LAST_NAMES + EXTRA_LAST_NAMES
ENTITY_CITIES = CITIES + EXTRA_CITIES
ENTITY_ORGANISATIONS = ORGANISATIONS + EXTRA_ORGANISATIONS
ENTITY_MISC = MISC_TERMS + EXTRA_MISC_TERMS
TRAINING_POOLS = {
    "FIRST": PERSON_FIRST, "LAST": PERSON_LAST, "LOC": ENTITY_CITIES, "ORG": ENTITY_ORGANISATIONS,
    "MISC": ENTITY_MISC,
}

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
    # entities amid everyday words that stay O
    "{PER} listened to music in {LOC} on Sunday .",
    "On Monday , {PER} walked along the river in {LOC} .",
    "The people of {LOC} welcomed the {MISC} team in December .",
    "{PER} bought fresh bread at the market in {LOC} .",
    "Many people in {LOC} work for {ORG} .",
    "{PER} and {PER} played music together in {LOC} last May .",
    "In March , {ORG} moved its offices from {LOC} to {LOC} .",
    "{PER} , who grew up in {LOC} , now teaches music at a school .",
    "The river through {LOC} was frozen in January , {PER} said .",
    "{PER} joined the city orchestra in {LOC} in October .",
    "Thousands of people watched the {MISC} final in {LOC} .",
    "{ORG} said on Tuesday that it would hire more people in {LOC} .",
    "{PER} has worked for {ORG} since April .",
    "The {MISC} singer {PER} gave a concert in {LOC} on Saturday .",
    "{PER} spent the summer with friends in {LOC} .",
    "A report by {ORG} says that house prices in {LOC} fell in February .",
    "{PER} met the mayor of {LOC} on Wednesday .",
    "{PER} is studying {MISC} history at a university in {LOC} .",
    "Last week {PER} visited the {ORG} factory near {LOC} .",
    "Every August , {PER} travels from {LOC} to {LOC} .",
    "{PER} writes about music and film for {ORG} .",
    "The bank said {PER} would lead its office in {LOC} .",
)
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
