"""Small generated training sets for the four demo models (templates, fixed seed, nothing downloaded),
and the held-out inputs ``docker/demo_check.py`` scores the built models on.

Each writer produces the file format the training CLI reads: a CSV of ``text,label`` rows (sentiment),
CoNLL IOB2 ``token tag`` lines (NER), SQuAD v1.1 JSON (QA) and plain text lines (fill-mask). The
vocabularies are wide enough that a model has to learn the pattern, not a handful of strings.

The served NER and QA models see long texts as windows of their ``max_length`` tokens, so their training
data looks like such windows: NER blocks are mostly multi-sentence passages of up to ~90 words in which most
sentences are everyday filler with no entity (music, the city, the river, people, days and months: all O);
QA contexts run from one to several windows, the answering sentence sits at the start, the middle or the
end, and the other sentences are filler or facts about other people (other cities, years, employers), so
a window without the answer (which training points at [CLS]) looks like one with it.

The ``HELDOUT_*`` lists and ``CHECK_*`` templates are never used for training: ``demo_check`` builds its long
NER text, its 5,000-word QA context and its sentiment / fill-mask probes from them, with their own seed.
Held-out names are whole words of the encoder's (uncased WordPiece) vocabulary, so the check measures
telling entities from filler, not how the "simple" aggregation groups sub-words of an unseen name.
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

# Held out: demo_check's inputs only. Each is one word of the encoder's vocabulary (tests check both).
HELDOUT_FIRST_NAMES = (
    "Michael", "George", "Peter", "Henry", "Robert", "Helen", "Frank", "Karen", "Steven", "Richard", "Susan",
    "Nancy", "Kevin", "Brian", "Edward", "Linda", "Patricia", "Barbara", "Margaret", "Dorothy", "Sandra",
    "Rebecca", "Sharon", "Angela", "Nicole", "Katherine", "Rachel", "Heather", "Diane", "Julie", "Martha",
    "Megan", "Andrea", "Teresa", "Charles", "Joseph", "Matthew", "Anthony", "Donald", "Andrew", "Kenneth",
    "Gregory", "Patrick", "Dennis", "Douglas", "Walter", "Roger", "Gerald", "Harold", "Arthur", "Lawrence",
    "Albert", "Philip", "Eugene", "Igor", "Boris", "Ivan", "Francesca", "Giovanni", "Paolo",
)
HELDOUT_LAST_NAMES = (
    "Taylor", "Clark", "Allen", "Wright", "Adams", "Nelson", "Mitchell", "Roberts", "Phillips", "Campbell",
    "Parker", "Evans", "Edwards", "Collins", "Stewart", "Morris", "Murphy", "Rogers", "Morgan", "Peterson",
    "Bailey", "Howard", "Richardson", "Watson", "Bennett", "Sanders", "Myers", "Ross", "Foster", "Powell",
    "Jenkins", "Sullivan", "Coleman", "Henderson", "Barnes", "Harris", "Robinson", "Thompson", "Anderson",
    "Davis", "Miller", "Fleming", "Hayes",
)
HELDOUT_CITIES = (
    "Liverpool", "Glasgow", "Edinburgh", "Dallas", "Houston", "Atlanta", "Detroit", "Montreal", "Vancouver",
    "Shanghai", "Delhi", "Bangkok", "Manila", "Jakarta", "Budapest", "Helsinki", "Brisbane", "Auckland",
    "Naples", "Venice", "Lyon", "Marseille", "Frankfurt", "Cologne", "Dresden", "Krakow", "Leeds", "Bristol",
    "Cardiff", "Belfast", "Bordeaux", "Seville", "Valencia", "Porto", "Antwerp", "Rotterdam", "Riga",
    "Bucharest", "Belgrade", "Zagreb", "Havana", "Caracas", "Montevideo", "Karachi", "Lahore", "Dhaka",
    "Kathmandu", "Hanoi", "Kyoto", "Nagoya", "Taipei", "Adelaide", "Calgary", "Winnipeg", "Miami", "Orlando",
    "Nashville", "Pittsburgh", "Cleveland", "Baltimore",
)
HELDOUT_ORGANISATIONS = (
    "Sony", "Boeing", "Nike", "Honda", "Nissan", "Disney", "Pepsi", "Yahoo", "Fiat", "Lego", "Nintendo",
    "Netflix", "Facebook", "Motorola", "Bosch", "Audi", "BMW", "Porsche", "Ferrari", "Renault", "Peugeot",
    "Starbucks", "Bayer", "IBM", "Cisco", "Mitsubishi", "Hyundai", "Mazda", "Suzuki", "Yamaha",
)
HELDOUT_MISC_TERMS = (
    "Korean", "Turkish", "Greek", "Irish", "Norwegian", "Portuguese", "Finnish", "Danish", "Hungarian",
    "Egyptian", "Thai", "Vietnamese", "Belgian", "Austrian", "Mexican",
)
TRAINING_POOLS = {
    "FIRST": PERSON_FIRST, "LAST": PERSON_LAST, "LOC": ENTITY_CITIES, "ORG": ENTITY_ORGANISATIONS,
    "MISC": ENTITY_MISC,
}
HELDOUT_POOLS = {
    "FIRST": HELDOUT_FIRST_NAMES, "LAST": HELDOUT_LAST_NAMES, "LOC": HELDOUT_CITIES,
    "ORG": HELDOUT_ORGANISATIONS, "MISC": HELDOUT_MISC_TERMS,
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
CHECK_FILLER = FillerGrammar(
    subjects=(
        "The neighbours", "Several people", "The kids", "The whole family", "The committee", "A local musician",
        "The shopkeeper", "Two old friends", "The city workers", "The passengers", "The audience", "The nurses",
        "A group of hikers", "The new manager", "The fishermen", "The older pupils", "Some residents", "The staff",
        "The club members", "Her cousin",
    ),
    actions=(
        "argued about the music", "crossed the river by boat", "moved to a bigger flat", "repaired the bicycle",
        "baked a cake", "picked apples", "washed the car", "climbed the hill", "ordered soup",
        "missed the last train", "played the piano", "built a small boat", "fed the ducks", "painted the walls",
        "counted the votes", "swept the floor", "hung paintings on the wall", "checked the tickets",
        "sorted the mail", "rehearsed a new song", "collected old books", "cleared the snow", "planned a trip",
        "mended the nets",
    ),
    places=(
        "along the river", "in the city square", "at the harbour", "near the bridge", "in the countryside",
        "at the library", "behind the church", "in the garden centre", "at the town hall", "on the main street",
        "in the basement", "near the station",
    ),
    times=(
        "on Thursday morning", "in late September", "on Sunday afternoon", "in the spring", "before breakfast",
        "at midnight", "on Saturday night", "in early December", "in mid April", "in early June",
        "on Monday evening", "in the autumn", "all through January", "all week", "by late October", "that March",
        "one July evening", "on a cold Friday", "every Wednesday", "in the first week of May",
    ),
    standalone=(
        "The music stopped at midnight .", "Snow fell on the city for three days .", "The river froze in January .",
        "Most people stayed at home .", "The library was full of students .", "The market was busy on Saturday .",
        "It was the warmest October in years .", "The streets were empty after the rain .",
        "The band played until the lights went out .", "Nobody complained about the noise .",
        "Fresh fruit was cheap in July .", "The old mill by the river is now a cafe .",
        "People in the city love their parks .", "The price of bread rose in March .",
        "A cold wind blew across the river all night .", "The school closed early on Friday .",
    ),
)


def filler_sentences(rng: random.Random, count: int, grammar: FillerGrammar = TRAINING_FILLER) -> list[list[str]]:
    return [grammar.sentence(rng) for _ in range(count)]

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
# demo_check's NER text only: other sentence shapes, other names.
CHECK_NER_TEMPLATES = (
    "Last April , {PER} opened a small bakery in {LOC} .",
    "{PER} played the violin at a concert hall in {LOC} .",
    "The {MISC} writer {PER} spent two weeks in {LOC} .",
    "{ORG} built a new factory outside {LOC} .",
    "{PER} left {ORG} after ten years .",
    "A spokeswoman for {ORG} said the plan would change .",
    "{PER} grew up in {LOC} and later moved to {LOC} .",
    "Crowds in {LOC} cheered for {PER} on Saturday .",
    "{PER} drives a {MISC} car to work every day .",
    "{PER} runs a {MISC} restaurant in {LOC} .",
    "Engineers from {ORG} tested the new design in {LOC} .",
    "{PER} and {PER} opened a music shop in {LOC} .",
    "Reporters asked {PER} about the river project in {LOC} .",
    "{ORG} paid for the new bridge in {LOC} .",
    "In September , {PER} gave a speech at {ORG} .",
    "{PER} cooked {MISC} food for the whole street .",
)
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
    lines = []
    for sentence in ner_sentences(rng, count):
        lines.extend(f"{token} {tag}" for token, tag in sentence)
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")


@dataclass(frozen=True)
class PlantedText:
    """A held-out text and its entities as (start, end, type) character spans."""

    text: str
    entities: list[tuple[int, int, str]]

    @property
    def words(self) -> int:
        return len(self.text.split())


def heldout_ner_text(seed: int = 1011, words: int = 2800, entities: int = 60) -> PlantedText:
    """~``words`` words of held-out filler with ~``entities`` held-out entities planted in held-out sentences."""
    rng = random.Random(seed)
    entity_sentences: list[TaggedTokens] = []
    planted = 0
    while planted < entities:
        sentence = tagged_sentence(rng, rng.choice(CHECK_NER_TEMPLATES), HELDOUT_POOLS, first_only=0.25)
        entity_sentences.append(sentence)
        planted += sum(tag.startswith("B-") for _, tag in sentence)
    def count(sentence: TaggedTokens) -> int:
        return sum(token not in PUNCTUATION for token, _ in sentence)

    sentences = [[(word, "O") for word in CHECK_FILLER.sentence(rng)]]
    total = count(sentences[0]) + sum(count(sentence) for sentence in entity_sentences)
    while total < words:
        sentences.append([(word, "O") for word in CHECK_FILLER.sentence(rng)])
        total += count(sentences[-1])
    for sentence in entity_sentences:
        sentences.insert(rng.randint(1, len(sentences)), sentence)
    tokens = [pair for sentence in sentences for pair in sentence]
    text, spans = detokenize([token for token, _ in tokens])
    found: list[tuple[int, int, str]] = []
    for (_, tag), (start, end) in zip(tokens, spans, strict=True):
        if tag.startswith("B-"):
            found.append((start, end, tag[2:]))
        elif tag.startswith("I-"):
            found[-1] = (found[-1][0], end, found[-1][2])
    return PlantedText(text, found)

# --- question answering -------------------------------------------------------------------------

BIRTH_TEMPLATES = (
    "{name} was born in {city} in {year}.", "{name} was born in {year} in {city}.",
    "{name} was born in the city of {city} in {year}.",
)
STUDY_TEMPLATES = (
    "{name} studied {subject} and became {a_profession}.", "{name} studied {subject} before working as {a_profession}.",
)
MOVE_TEMPLATES = (
    "In {year2}, {name} moved to {later_city} to work for {org}.",
    "{name} moved to {later_city} in {year2} to work for {org}.",
    "In {year2}, {name} joined {org} and moved to {later_city}.",
)
FACT_TEMPLATES = {"birth": BIRTH_TEMPLATES, "study": STUDY_TEMPLATES, "move": MOVE_TEMPLATES}
FACT_QUESTIONS = {"birth": ("birth_city", "birth_year"), "study": ("subject", "profession"),
                  "move": ("later_city", "org", "move_year")}
QUESTION_FORMS = {
    "birth_city": ("Where was {name} born?", "In which city was {name} born?"),
    "birth_year": ("When was {name} born?", "In which year was {name} born?"),
    "subject": ("What did {name} study?", "Which subject did {name} study?"),
    "profession": ("What was {name}'s job?",),
    "later_city": ("Where did {name} move to?", "Which city did {name} move to?"),
    "org": ("Who did {name} work for?", "Which organisation did {name} work for?"),
    "move_year": ("When did {name} move to {later_city}?",),
}
PLACE_YEAR_TEMPLATES = (
    "The old bridge in {city} was built in {year}.", "{city} hosted a big music festival in {year}.",
    "A new railway line reached {city} in {year}.", "The football club in {city} was founded in {year}.",
)
CHECK_PLACE_YEAR_TEMPLATES = (
    "A new museum opened in {city} in {year}.", "The harbour in {city} was rebuilt in {year}.",
    "{city} held its first film festival in {year}.", "The concert hall in {city} burned down in {year}.",
)
QA_TRAINING_POOLS = {"FIRST": PERSON_FIRST, "LAST": PERSON_LAST, "LOC": ENTITY_CITIES, "ORG": ENTITY_ORGANISATIONS}
PLACEMENTS = ("start", "middle", "end")


@dataclass(frozen=True)
class Biography:
    name: str
    pronoun: str
    birth_city: str
    birth_year: int
    subject: str
    profession: str
    later_city: str
    move_year: int
    org: str

    def answer(self, key: str) -> str:
        return str(getattr(self, key))

    def values(self) -> set[str]:
        keys = ("birth_city", "birth_year", "subject", "profession", "later_city", "move_year", "org")
        return {self.answer(key) for key in keys}

    def name_words(self) -> set[str]:
        return set(self.name.split())

    def sentence(self, rng: random.Random, fact: str, by_name: bool = True) -> str:
        text = rng.choice(FACT_TEMPLATES[fact]).format(
            name=self.name if by_name else self.pronoun, city=self.birth_city, year=self.birth_year,
            subject=self.subject, a_profession=f"{'an' if self.profession[0] in 'aeiou' else 'a'} {self.profession}",
            later_city=self.later_city, year2=self.move_year, org=self.org,
        )
        return text[0].upper() + text[1:]

    def question(self, rng: random.Random, key: str) -> str:
        return rng.choice(QUESTION_FORMS[key]).format(name=self.name, later_city=self.later_city)


def _pick(rng: random.Random, pool: Sequence[str], avoid: set[str], strict: bool = True) -> str:
    """A value of ``pool`` not in ``avoid`` (any value when none is left and not ``strict``)."""
    choices = [value for value in pool if value not in avoid]
    return rng.choice(choices if choices or strict else pool)


def biography(rng: random.Random, pools: dict[str, tuple[str, ...]], avoid: set[str]) -> Biography:
    """A person whose name words and fact values are none of ``avoid`` (other people's names and values)."""
    first, last = _pick(rng, pools["FIRST"], avoid), _pick(rng, pools["LAST"], avoid)
    birth_city = _pick(rng, pools["LOC"], avoid)
    later_city = _pick(rng, pools["LOC"], avoid | {birth_city})
    birth_year = int(_pick(rng, [str(year) for year in YEARS[:-40]], avoid))
    move_year = int(_pick(rng, [str(birth_year + gap) for gap in range(18, 36)], avoid))
    return Biography(
        name=f"{first} {last}", pronoun=rng.choice(("he", "she")), birth_city=birth_city, birth_year=birth_year,
        subject=_pick(rng, SUBJECTS, avoid, strict=False), profession=_pick(rng, PROFESSIONS, avoid, strict=False),
        later_city=later_city,
        move_year=move_year, org=_pick(rng, pools["ORG"], avoid),
    )


def _word_offset(sentence: str, answer: str) -> int:
    """The answer's first whole-word occurrence ("chemist" must not match inside "chemistry")."""
    match = re.search(rf"\b{re.escape(answer)}\b", sentence)
    if match is None:
        raise ValueError(f"answer {answer!r} is not in {sentence!r}")
    return match.start()


def _join(sentences: Sequence[str]) -> tuple[str, list[int]]:
    """Sentences joined by spaces, and where each starts."""
    starts, length = [], 0
    for sentence in sentences:
        starts.append(length)
        length += len(sentence) + 1
    return " ".join(sentences), starts


def _placement_index(rng: random.Random, placement: str, others: int) -> int:
    if placement == "start" or others == 0:
        return 0
    if placement == "end" or others == 1:
        return others
    return rng.randint(1, others - 1)


def _other_sentence(
    rng: random.Random, people: Sequence[Biography], avoid: set[str], pools: dict[str, tuple[str, ...]],
    place_templates: Sequence[str], filler: FillerGrammar, person_share: float, place_share: float,
) -> str:
    draw = rng.random()
    if draw < person_share:
        person = rng.choice(people)
        return person.sentence(rng, rng.choice(("birth", "study", "move")))
    if draw < person_share + place_share:
        return rng.choice(place_templates).format(
            city=_pick(rng, pools["LOC"], avoid), year=_pick(rng, [str(year) for year in YEARS], avoid)
        )
    return detokenize(filler.sentence(rng))[0]


# A paragraph is short (one served window) or long (several); its answerable questions are about the target, and
# an unanswerable one (SQuAD v2 is_impossible: every window points at [CLS]) asks the same kind of question about
# someone the context never mentions, while it does state that fact for other people.
QA_OTHERS_SHORT, QA_OTHERS_LONG, QA_LONG_SHARE = (0, 4), (5, 12), 0.35
QA_ANSWERABLE, QA_UNANSWERABLE_SHARE = 2, 0.6


def _qa_paragraph(rng: random.Random, index: int) -> dict[str, object]:
    """A biography's sentences at the start, middle or end of other sentences: other people's facts (the same
    templates, other names, cities, years, employers), places with years, and everyday filler."""
    target = biography(rng, QA_TRAINING_POOLS, set())
    avoid = target.values() | target.name_words()
    people = []
    for _ in range(4):
        people.append(biography(rng, QA_TRAINING_POOLS, avoid))
        avoid |= people[-1].name_words()
    absent, people = people[0], people[1:]
    facts = ["birth", "study", "move"] if rng.random() < 0.5 else ["study", "birth", "move"]
    if rng.random() < 0.4:
        kept = set(rng.sample(facts, rng.randint(1, 2)))
        facts = [fact for fact in facts if fact in kept]
    block = [target.sentence(rng, fact, by_name=number == 0 or rng.random() < 0.5) for number, fact in enumerate(facts)]
    low, high = QA_OTHERS_LONG if rng.random() < QA_LONG_SHARE else QA_OTHERS_SHORT
    others = [
        _other_sentence(rng, people, avoid, QA_TRAINING_POOLS, PLACE_YEAR_TEMPLATES, TRAINING_FILLER, 0.35, 0.15)
        for _ in range(rng.randint(low, high))
    ]
    at = _placement_index(rng, rng.choice(PLACEMENTS), len(others))
    context, starts = _join([*others[:at], *block, *others[at:]])
    keys = [(number, key) for number, fact in enumerate(facts) for key in FACT_QUESTIONS[fact]]
    qas: list[dict[str, object]] = []
    for number, key in rng.sample(keys, min(QA_ANSWERABLE, len(keys))):
        answer = target.answer(key)
        start = starts[at + number] + _word_offset(block[number], answer)
        qas.append({"id": f"demo-{index}-{len(qas)}", "question": target.question(rng, key),
                    "answers": [{"text": answer, "answer_start": start}]})
    if rng.random() < QA_UNANSWERABLE_SHARE:
        _, key = rng.choice(keys)
        qas.append({"id": f"demo-{index}-{len(qas)}", "question": absent.question(rng, key), "answers": [],
                    "is_impossible": True})
    return {"context": context, "qas": qas}


def squad_document(rng: random.Random, count: int) -> dict[str, object]:
    paragraphs = [_qa_paragraph(rng, index) for index in range(count)]
    return {"version": "v2.0", "data": [{"title": "demo biographies", "paragraphs": paragraphs}]}


def write_squad(path: Path, rng: random.Random, count: int) -> None:
    path.write_text(json.dumps(squad_document(rng, count), ensure_ascii=False), encoding="utf-8")


@dataclass(frozen=True)
class QAProbe:
    placement: str
    question: str
    answer: str
    start: int


@dataclass(frozen=True)
class PlantedContext:
    context: str
    probes: list[QAProbe]

    @property
    def words(self) -> int:
        return len(self.context.split())


CHECK_QUESTIONS = (("birth_city", "Where was {name} born?"), ("birth_year", "When was {name} born?"),
                   ("org", "Who did {name} work for?"))


def heldout_qa_context(seed: int = 2022, words: int = 5000) -> PlantedContext:
    """~``words`` words of held-out filler, places with years and facts about a dozen held-out people, with three
    more people's "X was born in C in Y. In Y2, X moved to C2 to work for O." at the start, the middle and the end:
    for each, where / when was X born and who did X work for (every answer occurs once in the context)."""
    rng = random.Random(seed)
    avoid: set[str] = set()
    people = []
    for _ in range(15):
        people.append(biography(rng, HELDOUT_POOLS, avoid))
        avoid |= people[-1].values() | people[-1].name_words()
    targets, distractors = people[:3], people[3:]
    body: list[str] = []
    body_words = 0
    while body_words < words - 60:
        draw = rng.random()
        if draw < 0.08:
            person = rng.choice(distractors)
            sentence = person.sentence(rng, rng.choice(("birth", "move")))
        elif draw < 0.16:
            sentence = rng.choice(CHECK_PLACE_YEAR_TEMPLATES).format(
                city=_pick(rng, HELDOUT_CITIES, avoid), year=_pick(rng, [str(year) for year in YEARS], avoid)
            )
        else:
            sentence = detokenize(CHECK_FILLER.sentence(rng))[0]
        body.append(sentence)
        body_words += len(sentence.split())
    blocks = [
        [f"{person.name} was born in {person.birth_city} in {person.birth_year}.",
         f"In {person.move_year}, {person.name} moved to {person.later_city} to work for {person.org}."]
        for person in targets
    ]
    middle = len(body) // 2
    sentences = [*blocks[0], *body[:middle], *blocks[1], *body[middle:], *blocks[2]]
    context, starts = _join(sentences)
    block_at = {"start": 0, "middle": 2 + middle, "end": len(sentences) - 2}
    probes = []
    for placement, person in zip(PLACEMENTS, targets, strict=True):
        for key, question in CHECK_QUESTIONS:
            number = 0 if key.startswith("birth") else 1
            sentence_start = starts[block_at[placement] + number]
            answer = person.answer(key)
            start = sentence_start + _word_offset(sentences[block_at[placement] + number], answer)
            probes.append(QAProbe(placement, question.format(name=person.name), answer, start))
    return PlantedContext(context, probes)

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


# --- held-out sentiment and fill-mask probes (demo_check) ----------------------------------------

CHECK_REVIEW_SUBJECTS = (
    "documentary", "musical", "podcast", "museum", "burger", "tablet", "festival", "course", "sofa", "bakery",
)
CHECK_POSITIVE_WORDS = (
    "terrific", "splendid", "marvelous", "magnificent", "pleasant", "stunning", "remarkable", "gorgeous",
    "joyful", "refreshing",
)
CHECK_NEGATIVE_WORDS = (
    "tedious", "clumsy", "lousy", "miserable", "shoddy", "bland", "irritating", "disastrous", "sloppy", "tiresome",
)
CHECK_POSITIVE_TEMPLATES = (
    "Honestly, the {s} was {w}.", "My friends found the {s} {w} too.", "A truly {w} {s}, worth every penny.",
    "We had a {w} time at the {s}.", "I can't wait to go back to the {s}, it was {w}.",
)
CHECK_NEGATIVE_TEMPLATES = (
    "Honestly, the {s} was {w}.", "My friends found the {s} {w} too.", "A truly {w} {s}, not worth the money.",
    "We had a {w} time at the {s}.", "I am never going back to the {s}, it was {w}.",
)


def heldout_sentiment(seed: int = 3033, count: int = 40) -> list[tuple[str, str]]:
    """``count`` reviews, half of each label, from templates, subjects and adjectives training never saw."""
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        positive = index % 2 == 0
        templates = CHECK_POSITIVE_TEMPLATES if positive else CHECK_NEGATIVE_TEMPLATES
        words = CHECK_POSITIVE_WORDS if positive else CHECK_NEGATIVE_WORDS
        text = rng.choice(templates).format(s=rng.choice(CHECK_REVIEW_SUBJECTS), w=rng.choice(words))
        rows.append((text, "POSITIVE" if positive else "NEGATIVE"))
    return rows


CHECK_CAPITALS = (
    ("Hungary", "Budapest"), ("Finland", "Helsinki"), ("Belgium", "Brussels"), ("Thailand", "Bangkok"),
    ("Netherlands", "Amsterdam"), ("Cuba", "Havana"), ("Romania", "Bucharest"), ("Serbia", "Belgrade"),
    ("Croatia", "Zagreb"), ("Chile", "Santiago"),
)
CHECK_EVERYDAY_PROBES = (
    ("At sea level, water boils at one hundred [MASK].", "degrees"),
    ("Every evening the sun sets in the [MASK].", "west"),
    ("It started to rain, so he opened his [MASK].", "umbrella"),
    ("After lunch the children played [MASK] in the park.", "football"),
)


def heldout_fill_mask() -> list[tuple[str, str]]:
    """(text with one [MASK], expected top word): the capital frame on countries training never paired, and
    everyday sentences reworded from the training lines."""
    probes = []
    for number, (country, city) in enumerate(CHECK_CAPITALS):
        text = f"{city} is the [MASK] of {country}." if number % 2 == 0 else f"The [MASK] of {country} is {city}."
        probes.append((text, "capital"))
    return probes + list(CHECK_EVERYDAY_PROBES)

WRITERS: dict[str, Callable[[Path, random.Random, int], None]] = {
    "sentiment": write_sentiment,
    "ner": write_ner,
    "qa": write_squad,
    "fill-mask": write_text,
}
