"""Short everyday paragraphs for the QA demo's training data: clubs, firms, places, events and people.

Each kind states five or six facts in shuffled order (so an answer is rarely the first name in the paragraph) and
asks who / what / when / where / how many about them, in several wordings. The held-out check reads paragraphs a
person wrote (heldout.CHECK_QA_PARAGRAPHS), never these.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from demo.vocabulary import CITIES, FIRST_NAMES, LAST_NAMES, ORGANISATIONS, PROFESSIONS, SUBJECTS, YEARS

Facts = tuple[list[str], list[tuple[str, str]]]  # sentences (the first stays first), (question, answer span)

CLUB_KINDS = (
    "Chess Club",
    "Choir",
    "Running Club",
    "Brass Band",
    "Gardening Society",
    "Film Society",
    "Rowing Club",
    "Drama Group",
    "Photography Club",
    "Youth Orchestra",
    "Cycling Club",
    "Jazz Band",
)
CLUB_ROLES = ("conductor", "coach", "chair", "president", "captain", "director", "secretary")
VENUES = (
    "the town hall",
    "the community centre",
    "the old school",
    "the church hall",
    "the public library",
    "the sports centre",
    "the museum",
    "a cafe on the high street",
    "the village hall",
    "the youth club",
)
STREETS = (
    "Station Road",
    "Church Lane",
    "Bridge Street",
    "Market Square",
    "Park Avenue",
    "Queen Street",
    "High Street",
    "Hill Road",
    "Water Lane",
    "King Street",
)
INDUSTRIES = (
    ("furniture", "chairs and tables"),
    ("software", "apps for schools"),
    ("food", "frozen pizzas"),
    ("clothing", "winter coats"),
    ("toy", "wooden trains"),
    ("bicycle", "electric bikes"),
    ("printing", "maps and posters"),
    ("shipping", "parcel deliveries"),
    ("coffee", "coffee beans"),
)
FIRM_WORDS = (
    "Northfield",
    "Greenway",
    "Bluestone",
    "Silverline",
    "Oakridge",
    "Redfern",
    "Hillcrest",
    "Brookside",
    "Westgate",
    "Kingsley",
    "Ashford",
    "Fairview",
)
EVENT_KINDS = (
    "Jazz Festival",
    "Marathon",
    "Book Fair",
    "Flower Show",
    "Food Festival",
    "Film Festival",
    "Music Festival",
    "Beer Festival",
    "Science Fair",
    "Horse Show",
)
MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
RIVERS = ("Thames", "Severn", "Rhine", "Danube", "Tyne", "Ouse", "Loire", "Elbe", "Trent", "Avon")
KNOWN_FOR = (
    "its cheese market",
    "its old castle",
    "its spring fair",
    "its long sandy beach",
    "its cathedral",
    "its pottery",
    "its wooden church",
    "its botanical garden",
    "its apple orchards",
    "its lighthouse",
)
NUMBER_WORDS = ("forty", "fifty", "sixty", "seventy", "eighty", "ninety", "two hundred", "three hundred")


def _name(rng: random.Random) -> str:
    return f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"


def _count(rng: random.Random) -> str:
    return rng.choice(
        (str(rng.randint(12, 950)), f"{rng.randint(2, 40)},{rng.randint(100, 999)}", rng.choice(NUMBER_WORDS))
    )


def _about(rng: random.Random, count: str) -> str:
    return f"{rng.choice(('about', 'around', 'nearly', 'more than'))} {count}" if rng.random() < 0.5 else count


def club(rng: random.Random) -> Facts:
    name = f"{rng.choice(CITIES)} {rng.choice(CLUB_KINDS)}"
    founder, leader, role = _name(rng), _name(rng), rng.choice(CLUB_ROLES)
    year, day, venue, members = rng.choice(YEARS), rng.choice(DAYS), rng.choice(VENUES), _about(rng, _count(rng))
    sentences = [
        f"The {name} was founded by {founder} in {year}.",
        f"It meets every {day} evening at {venue} on {rng.choice(STREETS)}.",
        f"The club has {members} members.",
        f"Its current {role} is {leader}, who joined in {rng.choice(YEARS)}.",
    ]
    questions = [
        (rng.choice((f"Who founded the {name}?", "Who started the club?")), founder),
        (rng.choice((f"When was the {name} founded?", "In which year was the club founded?")), str(year)),
        (rng.choice(("Where does the club meet?", f"Where does the {name} meet?")), venue),
        (rng.choice(("When does the club meet?", "On which day does the club meet?")), f"every {day} evening"),
        (rng.choice(("How many members does the club have?", f"How big is the {name}?")), members),
        (rng.choice((f"Who is the current {role}?", f"Who is the {role} of the club?")), leader),
    ]
    return sentences, questions


def firm(rng: random.Random) -> Facts:
    name = f"{rng.choice(FIRM_WORDS)} {rng.choice(('Foods', 'Works', 'Systems', 'Trading', 'Goods', 'Labs'))}"
    industry, product = rng.choice(INDUSTRIES)
    city, year, staff = rng.choice(CITIES), rng.choice(YEARS), _about(rng, _count(rng))
    founders = _name(rng) if rng.random() < 0.6 else f"{_name(rng)} and {_name(rng)}"
    boss = _name(rng)
    sentences = [
        f"{name} is a {industry} company based in {city}.",
        f"It was started in {year} by {founders}.",
        f"Today the company employs {staff} people and its chief executive is {boss}.",
        f"It is best known for its {product}.",
    ]
    questions = [
        (rng.choice((f"Where is {name} based?", "Where is the company based?")), city),
        (rng.choice((f"Who started {name}?", "Who founded the company?")), founders),
        (rng.choice((f"When was {name} started?", "When was the company founded?")), str(year)),
        (rng.choice(("How many people does the company employ?", f"How many people work at {name}?")), staff),
        (rng.choice(("Who is the chief executive?", f"Who runs {name}?")), boss),
        (rng.choice((f"What is {name} best known for?", "What does the company make?")), product),
    ]
    return sentences, questions


def place(rng: random.Random) -> Facts:
    town = f"{rng.choice(FIRM_WORDS)}{rng.choice(('ton', 'by', 'ham', 'field', 'wick'))}"
    river, city, known = rng.choice(RIVERS), rng.choice(CITIES), rng.choice(KNOWN_FOR)
    distance, people, mayor = f"{rng.randint(3, 90)} miles", _about(rng, _count(rng)), _name(rng)
    sentences = [
        f"{town} is a small town on the river {river}, about {distance} north of {city}.",
        f"It is known for {known}, which was built in {rng.choice(YEARS)}.",
        f"The town has {people} inhabitants, and its mayor is {mayor}.",
    ]
    questions = [
        (rng.choice((f"Which river is {town} on?", f"On which river does {town} lie?")), river),
        (rng.choice((f"What is {town} known for?", f"What is {town} famous for?")), known),
        (rng.choice((f"How many people live in {town}?", f"How many inhabitants does {town} have?")), people),
        (rng.choice((f"Who is the mayor of {town}?", f"Who is {town}'s mayor?")), mayor),
        (f"How far is {town} from {city}?", f"about {distance}"),
    ]
    return sentences, questions


def event(rng: random.Random) -> Facts:
    name = f"{rng.choice(CITIES)} {rng.choice(EVENT_KINDS)}"
    month, venue, year = rng.choice(MONTHS), f"{rng.choice(LAST_NAMES)} Park", rng.choice(YEARS)
    visitors, winner = _about(rng, _count(rng)), _name(rng)
    sentences = [
        f"The {name} takes place every {month} in {venue}.",
        f"It was first held in {year} and now attracts {visitors} visitors.",
        f"This year the main prize went to {winner}.",
    ]
    questions = [
        (rng.choice((f"When does the {name} take place?", "When is the festival held?")), f"every {month}"),
        (rng.choice((f"Where does the {name} take place?", "Where is the event held?")), venue),
        (rng.choice((f"When was the {name} first held?", "When was it first held?")), str(year)),
        (rng.choice(("How many visitors does it attract?", f"How many people come to the {name}?")), visitors),
        (rng.choice(("Who won the main prize?", "Who won this year?")), winner),
    ]
    return sentences, questions


def person(rng: random.Random) -> Facts:
    name, spouse = _name(rng), rng.choice(FIRST_NAMES)
    home, study_city, work_city = rng.sample(CITIES, 3)
    job, subject, year = rng.choice(PROFESSIONS), rng.choice(SUBJECTS), rng.choice(YEARS)
    employer = rng.choice(ORGANISATIONS)
    sentences = [
        f"{name} grew up in {home}.",
        f"After school, {name.split()[0]} studied {subject} in {study_city}.",
        f"In {year}, {name.split()[0]} became a {job} at {employer} in {work_city}.",
        f"{name.split()[0]} lives there with a partner, {spouse}.",
    ]
    questions = [
        (rng.choice((f"Where did {name} grow up?", f"Where is {name} from?")), home),
        (rng.choice((f"What did {name} study?", "What did they study?")), subject),
        (f"Where did {name} study?", study_city),
        (rng.choice((f"What is {name}'s job?", f"What does {name} do?")), job),
        (rng.choice((f"Who does {name} work for?", f"Which organisation does {name} work for?")), employer),
        (f"When did {name} become a {job}?", str(year)),
        (f"What is the name of {name}'s partner?", spouse),
    ]
    return sentences, questions


KINDS: tuple[Callable[[random.Random], Facts], ...] = (club, firm, place, event, person)


def paragraph(rng: random.Random) -> tuple[str, list[tuple[str, str]]]:
    """A paragraph of one kind, its later sentences shuffled, and every question whose answer occurs once."""
    sentences, questions = rng.choice(KINDS)(rng)
    rest = sentences[1:]
    rng.shuffle(rest)
    context = " ".join([sentences[0], *rest])
    return context, [(question, answer) for question, answer in questions if context.count(answer) == 1]
