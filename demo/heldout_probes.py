"""Held-out sentiment reviews and fill-mask probes for ``demo/check.py``: subjects, adjectives, templates and
countries the demo training data never uses (``demo/heldout.py`` holds the NER and QA inputs)."""

from __future__ import annotations

import random

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


# Everyday and common-knowledge sentences written for a trial of the demo, each with the words a reader would call
# sensible; reported by the check (a sensible word in the top 5), not a threshold: the demo's encoder lost its MLM
# head, and minutes of training do not bring everyday English back (demo/README.md).
CHECK_EVERYDAY_FILL_MASK: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("The cat sat on the [MASK].", ("mat", "floor", "chair", "bed", "couch", "table", "sofa", "ground", "rug")),
    ("Berlin is the capital of [MASK].", ("germany",)),
    ("Madrid is the capital of [MASK].", ("spain",)),
    ("I drink a cup of [MASK] every morning.", ("coffee", "tea", "water", "milk")),
    ("She opened the [MASK] and walked into the room.", ("door", "doors", "window", "gate")),
    ("The sun rises in the [MASK].", ("east", "morning", "sky")),
    ("He plays the [MASK] in a rock band.", ("guitar", "drums", "piano", "bass", "keyboard", "keyboards")),
    ("We went to the [MASK] to buy bread and milk.", ("store", "shop", "market", "supermarket", "bakery")),
    ("It snows a lot in [MASK].", ("winter", "canada", "december", "january", "alaska", "russia", "norway")),
    ("My brother is a [MASK] at the local hospital.", ("doctor", "nurse", "surgeon", "physician", "volunteer")),
    ("The children are playing in the [MASK].", ("park", "garden", "yard", "playground", "street", "snow")),
    ("Please turn off the [MASK] before you leave.", ("lights", "light", "tv", "television", "computer", "stove")),
    ("The train leaves the [MASK] at noon.", ("station",)),
    ("She wrote a [MASK] to her grandmother.", ("letter", "note", "poem", "song", "card")),
    ("There are seven days in a [MASK].", ("week",)),
    ("The [MASK] barked at the mailman.", ("dog", "dogs", "puppy")),
    ("He brushes his [MASK] twice a day.", ("teeth", "hair")),
    ("Rome is a city in [MASK].", ("italy",)),
    ("We need an umbrella because it is [MASK].", ("raining", "rainy", "wet")),
    ("The book is on the [MASK].", ("table", "shelf", "desk", "floor", "bed")),
    ("I am reading a very good [MASK].", ("book", "novel", "story")),
    ("The football match ended in a [MASK].", ("draw", "tie")),
    ("Tokyo is the capital of [MASK].", ("japan",)),
    ("She put the milk back in the [MASK].", ("fridge", "refrigerator")),
    ("They flew to London on a [MASK].", ("plane", "flight", "jet")),
)  # fmt: skip


def heldout_fill_mask() -> list[tuple[str, str]]:
    """(text with one [MASK], expected top word): the capital frame on countries training never paired, and
    everyday sentences reworded from the training lines."""
    probes = []
    for number, (country, city) in enumerate(CHECK_CAPITALS):
        text = f"{city} is the [MASK] of {country}." if number % 2 == 0 else f"The [MASK] of {country} is {city}."
        probes.append((text, "capital"))
    return probes + list(CHECK_EVERYDAY_PROBES)
