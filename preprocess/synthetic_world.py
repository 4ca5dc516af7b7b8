"""The closed world of the synthetic data (:mod:`mdsfair.preprocess.synthetic`):
the entity types with their fact slots, value pools and sentence templates
(:data:`ENTITY_TYPES`), and the invented names of one world seed
(:func:`build_world`). Pure Python; deterministic for a seed.
"""

import functools
import hashlib
import random
from dataclasses import dataclass
from typing import Dict, Tuple

YEAR_RANGE = (1880, 2015)

_SYLLABLES = (
    "var",
    "nel",
    "osk",
    "ti",
    "ber",
    "cal",
    "den",
    "mor",
    "lin",
    "dra",
    "ven",
    "tor",
    "sel",
    "ka",
    "ri",
    "pol",
    "an",
    "ves",
    "thal",
    "mir",
    "do",
    "gan",
    "lu",
    "shen",
    "bra",
    "kel",
    "fen",
    "ost",
    "ru",
    "na",
    "zel",
    "quin",
    "ar",
    "bel",
    "cor",
    "eth",
    "gil",
    "hap",
    "ivo",
    "jas",
)
_CITY_SUFFIXES = ("", "", "ford", "holm", "wick", "by", "mouth", "stad")
_ORG_SUFFIXES = ("Trust", "Group", "Society", "Foundation", "Council", "Board")

FIRST_NAMES = (
    "Mira",
    "Tomas",
    "Ilse",
    "Jonah",
    "Petra",
    "Anselm",
    "Kara",
    "Leon",
    "Dalia",
    "Oskar",
    "Rena",
    "Viktor",
    "Selma",
    "Hugo",
    "Nadia",
    "Emil",
    "Greta",
    "Felix",
    "Lotte",
    "Bruno",
)
SURNAMES = (
    "Holt",
    "Brenner",
    "Castell",
    "Dorn",
    "Ekwall",
    "Falk",
    "Grau",
    "Hessel",
    "Iverson",
    "Jarl",
    "Kessler",
    "Lund",
    "Marr",
    "Norberg",
    "Ostrand",
    "Pike",
    "Quist",
    "Ravel",
    "Sorensen",
    "Thorne",
)
AWARDS = (
    "Golden Lantern",
    "Silver Compass",
    "Blue Harbour",
    "Civic Star",
    "Iron Oak",
    "Crystal Crown",
    "Open Gate",
    "Northern Light",
    "Red Kite",
    "Amber Leaf",
    "White Falcon",
    "Green Meadow",
)

# Templates shared by every entity type. ``{ref}`` is "<Name> <noun>" (used
# after "the"/"The"), ``{name}`` is the bare name, ``{v}`` the fact value.
AWARD_CANON = "It won the {v} award."
AWARD_DOCS = (
    "The {ref} received the {v} award.",
    "Judges gave the {v} award to {name}.",
    "{name} was honoured with the {v} award.",
    "The {v} award went to the {ref} after a long debate.",
)

# Filler sentences: they name the entity (so extractive baselines find them
# central) but state no fact; none contains a fact value.
NOISE = (
    "The {ref} was mentioned again in a local newspaper this week.",
    "Many people have strong opinions about {name}.",
    "Tourists often ask for directions to the {ref}.",
    "Photographs of the {ref} appear in many guide books.",
    "A new book about {name} is expected next year.",
    "Some residents still remember the early days of the {ref}.",
    "Students sometimes write essays about {name}.",
    "The {ref} came up during a long debate in the council.",
    "A short documentary about {name} was shown on television.",
    "Critics and supporters of the {ref} rarely agree.",
    "Plans to celebrate {name} are still being discussed.",
    "The weather was mild for most of the season.",
    "A spokesperson declined to comment on the matter.",
    "The article was later shared widely online.",
    "Several readers wrote letters about the topic.",
    "Officials said more details would follow soon.",
    "The report did not give any further details.",
    "Nobody expected so much interest in the story.",
    "Local shops reported a busy weekend.",
    "The meeting ended later than planned.",
    "Opinions on the matter remain divided.",
    "Further questions were sent to the city office.",
)


@dataclass(frozen=True)
class EntityType:
    """Wording and value pools of one entity type.

    ``*_canon`` is the summary template of a slot, ``*_docs`` the document
    paraphrase templates of the same slot.
    """

    noun: str
    categories: Tuple[str, ...]
    sizes: Tuple[int, ...]
    category_docs: Tuple[str, ...]
    city_docs: Tuple[str, ...]
    year_canon: str
    year_docs: Tuple[str, ...]
    person_canon: str
    person_docs: Tuple[str, ...]
    size_canon: str
    size_docs: Tuple[str, ...]
    operator_canon: str
    operator_docs: Tuple[str, ...]


ENTITY_TYPES: Dict[str, EntityType] = {
    "bridge": EntityType(
        noun="bridge",
        categories=("suspension", "arch", "cable-stayed", "truss", "cantilever"),
        sizes=tuple(range(120, 1000, 10)),
        category_docs=(
            "Engineers describe {name} as a {v} design.",
            "The {ref} is built in the {v} style.",
            "{name} is one of the best known {v} structures in the region.",
        ),
        city_docs=(
            "The {ref} crosses the river in {v}.",
            "{name} links two districts of {v}.",
            "Commuters in {v} use the {ref} every day.",
        ),
        year_canon="It was opened to traffic in {v}.",
        year_docs=(
            "Work on the {ref} was finished in {v}.",
            "The first cars crossed {name} in {v}.",
            "{name} has carried traffic since {v}.",
        ),
        person_canon="It was designed by the engineer {v}.",
        person_docs=(
            "{v} drew up the plans for the {ref}.",
            "The design of {name} is the work of {v}.",
            "Plans for the {ref} came from {v}.",
        ),
        size_canon="It is {v} metres long.",
        size_docs=(
            "The {ref} spans {v} metres.",
            "{name} stretches for {v} metres.",
            "From end to end, {name} measures {v} metres.",
        ),
        operator_canon="It is maintained by the {v}.",
        operator_docs=(
            "The {v} looks after the {ref}.",
            "Repairs to {name} are handled by the {v}.",
            "{name} is in the care of the {v}.",
        ),
    ),
    "company": EntityType(
        noun="company",
        categories=("software", "furniture", "shipping", "textile", "bicycle"),
        sizes=tuple(range(100, 1800, 50)),
        category_docs=(
            "{name} works in the {v} business.",
            "The {ref} is active in the {v} sector.",
            "Buyers in the {v} trade know {name} well.",
        ),
        city_docs=(
            "The {ref} has its headquarters in {v}.",
            "{name} is based in {v}.",
            "Most staff of {name} work at its offices in {v}.",
        ),
        year_canon="It was founded in {v}.",
        year_docs=(
            "{name} opened for business in {v}.",
            "The {ref} started trading in {v}.",
            "The history of {name} goes back to {v}.",
        ),
        person_canon="It was started by the entrepreneur {v}.",
        person_docs=(
            "{v} set up the {ref}.",
            "{name} was created by {v}.",
            "The idea for {name} came from {v}.",
        ),
        size_canon="It employs {v} people.",
        size_docs=(
            "The {ref} has a staff of {v}.",
            "{name} gives work to {v} people.",
            "A total of {v} employees work for {name}.",
        ),
        operator_canon="It is owned by the {v}.",
        operator_docs=(
            "The {v} holds all shares of {name}.",
            "{name} belongs to the {v}.",
            "The {v} bought the {ref} some years ago.",
        ),
    ),
    "festival": EntityType(
        noun="festival",
        categories=("jazz", "folk", "film", "poetry", "dance"),
        sizes=tuple(range(2500, 60000, 500)),
        category_docs=(
            "The programme of {name} focuses on {v}.",
            "Fans of {v} travel far to attend the {ref}.",
            "{name} celebrates {v} in all its forms.",
        ),
        city_docs=(
            "The {ref} takes place in {v} every summer.",
            "Each year {name} is held in {v}.",
            "Crowds gather in {v} for {name}.",
        ),
        year_canon="It was first held in {v}.",
        year_docs=(
            "The first edition of {name} took place in {v}.",
            "The {ref} started in {v}.",
            "{name} has been running since {v}.",
        ),
        person_canon="It was founded by {v}.",
        person_docs=(
            "{v} came up with the idea for the {ref}.",
            "The {ref} was set up by {v}.",
            "{name} owes its existence to {v}.",
        ),
        size_canon="It attracts {v} visitors a year.",
        size_docs=(
            "About {v} people attend the {ref} each year.",
            "{name} draws {v} guests annually.",
            "Organisers count {v} tickets sold at {name} every year.",
        ),
        operator_canon="It is organised by the {v}.",
        operator_docs=(
            "The {v} runs the {ref}.",
            "{name} is put on by the {v}.",
            "Every edition of {name} is planned by the {v}.",
        ),
    ),
    "museum": EntityType(
        noun="museum",
        categories=("art", "science", "history", "maritime", "railway"),
        sizes=tuple(range(300, 1800, 20)),
        category_docs=(
            "{name} specialises in {v}.",
            "The displays at the {ref} cover {v}.",
            "Anyone interested in {v} should visit {name}.",
        ),
        city_docs=(
            "The {ref} stands in the old centre of {v}.",
            "{name} is one of the sights of {v}.",
            "Schools in {v} often take pupils to the {ref}.",
        ),
        year_canon="It opened in {v}.",
        year_docs=(
            "The {ref} welcomed its first visitors in {v}.",
            "{name} first opened its doors in {v}.",
            "The {ref} has been open to the public since {v}.",
        ),
        person_canon="It was founded by the collector {v}.",
        person_docs=(
            "{v} established {name}.",
            "{name} grew out of the private collection of {v}.",
            "The {ref} was set up by {v}.",
        ),
        size_canon="It holds {v} objects.",
        size_docs=(
            "The collection of {name} contains {v} items.",
            "Visitors to the {ref} can see {v} pieces.",
            "The {ref} keeps {v} exhibits in its stores.",
        ),
        operator_canon="It is run by the {v}.",
        operator_docs=(
            "The {v} manages the {ref}.",
            "{name} is administered by the {v}.",
            "The {v} has long been in charge of {name}.",
        ),
    ),
    "stadium": EntityType(
        noun="stadium",
        categories=("football", "rugby", "athletics", "cricket", "baseball"),
        sizes=tuple(range(5000, 60000, 500)),
        category_docs=(
            "The {ref} mainly hosts {v} events.",
            "{name} was built with {v} in mind.",
            "Most events at {name} are {v} events.",
        ),
        city_docs=(
            "The {ref} rises above the streets of {v}.",
            "Fans travel to {v} to visit {name}.",
            "{name} sits on the edge of {v}.",
        ),
        year_canon="It opened in {v}.",
        year_docs=(
            "The first match at {name} was played in {v}.",
            "Construction of the {ref} ended in {v}.",
            "{name} hosted its first game in {v}.",
        ),
        person_canon="It was designed by the architect {v}.",
        person_docs=(
            "{v} drew the plans of the {ref}.",
            "{name} is based on a plan by {v}.",
            "The shape of the {ref} was the idea of {v}.",
        ),
        size_canon="It has {v} seats.",
        size_docs=(
            "The {ref} can hold {v} spectators.",
            "Up to {v} fans fit into {name}.",
            "{name} offers room for {v} people.",
        ),
        operator_canon="It is managed by the {v}.",
        operator_docs=(
            "The {v} runs the {ref}.",
            "Daily work at {name} is done by the {v}.",
            "{name} is operated by the {v}.",
        ),
    ),
    "tower": EntityType(
        noun="tower",
        categories=("radio", "clock", "observation", "water", "bell"),
        sizes=tuple(range(40, 400, 5)),
        category_docs=(
            "The {ref} was built to serve as a {v} tower.",
            "Locals know {name} as a {v} tower.",
            "{name} has always been used as a {v} tower.",
        ),
        city_docs=(
            "The {ref} looks over the roofs of {v}.",
            "{name} can be seen from all over {v}.",
            "The skyline of {v} is dominated by the {ref}.",
        ),
        year_canon="It was completed in {v}.",
        year_docs=(
            "Builders finished the {ref} in {v}.",
            "{name} has stood since {v}.",
            "The last stone of {name} was laid in {v}.",
        ),
        person_canon="It was designed by the architect {v}.",
        person_docs=(
            "{v} drew the plans of the {ref}.",
            "{name} follows a plan by {v}.",
            "The shape of the {ref} was the idea of {v}.",
        ),
        size_canon="It is {v} metres tall.",
        size_docs=(
            "The {ref} rises {v} metres.",
            "{name} reaches a height of {v} metres.",
            "From the ground to the top, {name} measures {v} metres.",
        ),
        operator_canon="It is owned by the {v}.",
        operator_docs=(
            "The {v} bought {name} years ago.",
            "{name} belongs to the {v}.",
            "The {v} holds the deeds to the {ref}.",
        ),
    ),
}


@dataclass(frozen=True)
class World:
    """The closed world of one world seed: names and value pools."""

    entities: Tuple[Tuple[str, str], ...]  # (name, entity type key)
    cities: Tuple[str, ...]
    persons: Tuple[str, ...]
    organisations: Tuple[str, ...]


def derive_seed(*parts) -> int:
    """A stable 64-bit seed from arbitrary parts (``hash()`` is salted per run)."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode("utf-8")).hexdigest()
    return int(digest[:16], 16)


def _invent_word(rng: random.Random, min_syllables: int, max_syllables: int) -> str:
    """A capitalised pseudo-word made of syllables."""
    count = rng.randint(min_syllables, max_syllables)
    return "".join(rng.choice(_SYLLABLES) for _ in range(count)).capitalize()


@functools.lru_cache(maxsize=8)
def build_world(world_seed: int, num_names: int = 300) -> World:
    """Build the closed world of ``world_seed``.

    Every word of every invented name (entities, cities, organisations) is
    unique across the world, so a name never occurs inside another one.
    """
    if num_names < 8:
        raise ValueError("num_names must be at least 8")
    rng = random.Random(derive_seed("mdsfair-synth-world", world_seed, num_names))
    reserved = {w.lower() for w in FIRST_NAMES + SURNAMES}
    reserved |= {w.lower() for award in AWARDS for w in award.split()}
    reserved |= {w.lower() for w in _ORG_SUFFIXES}
    used = set(reserved)

    def fresh(min_syllables: int, max_syllables: int, suffixes=("",)) -> str:
        while True:
            word = _invent_word(rng, min_syllables, max_syllables) + rng.choice(suffixes)
            if word.lower() not in used and len(word) >= 4:
                used.add(word.lower())
                return word

    type_keys = sorted(ENTITY_TYPES)
    entities = []
    for index in range(num_names):
        if rng.random() < 0.3:
            name = fresh(1, 2) + " " + fresh(2, 2)
        else:
            name = fresh(2, 3)
        entities.append((name, type_keys[index % len(type_keys)]))
    rng.shuffle(entities)
    cities = tuple(fresh(2, 2, _CITY_SUFFIXES) for _ in range(30))
    organisations = tuple(fresh(2, 2) + " " + rng.choice(_ORG_SUFFIXES) for _ in range(24))
    persons = tuple(f"{first} {last}" for first in FIRST_NAMES for last in SURNAMES)
    return World(tuple(entities), cities, persons, organisations)
