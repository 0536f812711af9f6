"""Held-out inputs for ``demo/check.py``: names, filler, templates and seeds the demo training data never uses.

Held-out names are whole words of the encoder's (uncased WordPiece) vocabulary, so the NER check measures
telling entities from filler, not how the "simple" aggregation groups sub-words of an unseen name.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from demo.data import PUNCTUATION, FillerGrammar, TaggedTokens, answer_start, detokenize, tagged_sentence
from demo.vocabulary import PROFESSIONS, SUBJECTS, YEARS

# Held out: the held-out check's inputs only. Each is one word of the encoder's vocabulary (tests check both).
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
HELDOUT_POOLS = {
    "FIRST": HELDOUT_FIRST_NAMES, "LAST": HELDOUT_LAST_NAMES, "LOC": HELDOUT_CITIES,
    "ORG": HELDOUT_ORGANISATIONS, "MISC": HELDOUT_MISC_TERMS,
}


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
CHECK_PLACE_YEAR_TEMPLATES = (
    "A new museum opened in {city} in {year}.", "The harbour in {city} was rebuilt in {year}.",
    "{city} held its first film festival in {year}.", "The concert hall in {city} burned down in {year}.",
)
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


def _join(sentences: Sequence[str]) -> tuple[str, list[int]]:
    """Sentences joined by spaces, and where each starts."""
    starts, length = [], 0
    for sentence in sentences:
        starts.append(length)
        length += len(sentence) + 1
    return " ".join(sentences), starts


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
            start = sentence_start + answer_start(sentences[block_at[placement] + number], answer)
            probes.append(QAProbe(placement, question.format(name=person.name), answer, start))
    return PlantedContext(context, probes)


# Everyday paragraphs written by hand for the check (places, firms, clubs, events, a person), none generated, with
# questions whose answers are not all the first name in the paragraph. Each question lists the answers a SQuAD
# annotator would accept; an answer is right when it equals one of them after SQuAD's normalisation.
CHECK_QA_PARAGRAPHS: tuple[tuple[str, tuple[tuple[str, tuple[str, ...]], ...]], ...] = (
    ("The Larkfield Community Orchestra was founded by Margaret Ellison in 1987. It rehearses every Thursday evening "
     "in the old library on Mill Street. The orchestra has about sixty members, most of them amateurs. Its current "
     "conductor is Tobias Wren, who joined in 2015.",
     (("Who founded the Larkfield Community Orchestra?", ("Margaret Ellison",)),
      ("When was the orchestra founded?", ("1987",)),
      ("Who is the current conductor?", ("Tobias Wren",)),
      ("Where does the orchestra rehearse?", ("the old library on Mill Street", "the old library")),
      ("How many members does the orchestra have?", ("about sixty", "sixty")))),
    ("Brightwater Foods is a small bakery company based in Harlow. It was started in 2004 by two sisters, Ruth and "
     "Esther Calloway. Today the company employs 120 people and sells its bread in over 300 shops. Its best-known "
     "product is a rye loaf called the Harlow Crust.",
     (("Where is Brightwater Foods based?", ("Harlow",)),
      ("When was Brightwater Foods started?", ("2004",)),
      ("How many people does the company employ?", ("120",)),
      ("What is the company's best-known product?", ("a rye loaf called the Harlow Crust", "the Harlow Crust",
                                                     "a rye loaf")))),
    ("The village of Pennick lies on the river Aln, about twelve miles north of Carlisle. It is known for its stone "
     "bridge, which was built in 1732. Around 800 people live in the village, and the mayor is Alan Pryce.",
     (("Which river is Pennick on?", ("Aln", "the river Aln")),
      ("When was the stone bridge built?", ("1732",)),
      ("How many people live in Pennick?", ("Around 800", "800")),
      ("Who is the mayor of Pennick?", ("Alan Pryce",)))),
    ("The Westbury Kite Festival takes place every August on Corran Hill. It was first held in 1995 and now attracts "
     "around 15,000 visitors. This year the prize for the largest kite went to Jun Okonkwo.",
     (("When does the Westbury Kite Festival take place?", ("every August", "August")),
      ("Where does the festival take place?", ("Corran Hill", "on Corran Hill")),
      ("When was the festival first held?", ("1995",)),
      ("Who won the prize for the largest kite?", ("Jun Okonkwo",)))),
    ("Hattie Morrow grew up on a farm near Dunmore. After school she trained as a vet in Glasgow, and in 2011 she "
     "opened her own clinic in Elmsford. She lives there with her husband, Callum, and their two dogs.",
     (("Where did Hattie Morrow grow up?", ("on a farm near Dunmore", "a farm near Dunmore", "Dunmore")),
      ("Where did she train as a vet?", ("Glasgow",)),
      ("When did she open her clinic?", ("2011",)),
      ("What is her husband's name?", ("Callum",)))),
    ("The Redbank Rovers are an amateur football club from Eastleigh. The club plays its home games at Fenwick Park "
     "and is coached by Dora Whitlock. Last season the Rovers won the county cup for the first time.",
     (("Where are the Redbank Rovers from?", ("Eastleigh",)),
      ("Where does the club play its home games?", ("Fenwick Park", "at Fenwick Park")),
      ("Who coaches the club?", ("Dora Whitlock",)),
      ("What did the Rovers win last season?", ("the county cup", "county cup")))),
    ("Quillon Software makes apps for small hotels. The company was founded in Tallow in 2016 by Idris Bekele, a "
     "former hotel manager. Its main app, Roomkeep, is used by about 2,000 hotels in nine countries.",
     (("What does Quillon Software make?", ("apps for small hotels", "apps")),
      ("Who founded Quillon Software?", ("Idris Bekele",)),
      ("What is the name of its main app?", ("Roomkeep",)),
      ("How many hotels use Roomkeep?", ("about 2,000", "2,000")))),
    ("The Marlow Book Club meets on the first Monday of every month at the Cobble Cafe. It was set up in 2009 by a "
     "retired teacher, Agnes Fairley. This month the club is reading a novel about a lighthouse keeper.",
     (("Where does the Marlow Book Club meet?", ("the Cobble Cafe", "at the Cobble Cafe")),
      ("Who set up the book club?", ("Agnes Fairley", "a retired teacher, Agnes Fairley")),
      ("When does the club meet?", ("on the first Monday of every month", "the first Monday of every month")),
      ("What is the club reading this month?", ("a novel about a lighthouse keeper", "a novel")))),
)  # fmt: skip
