"""The sentences of ``mdsfair-synth``'s clusters (:mod:`mdsfair.preprocess.synthetic`):
fact values drawn from the closed world (:mod:`mdsfair.preprocess.synthetic_world`),
document sentences that state a fact with a paraphrase template or fill a
document, sentences joined into paragraphs, and the reference summary, which
states every fact once in the canonical order (:data:`SLOT_ORDER`) with the
canonical templates (``"Varnel is a suspension bridge in Calden. It was opened
to traffic in 1987. ..."``).
"""

import random
import re
from typing import Dict, List, Optional, Tuple

from mdsfair.preprocess.synthetic_world import (
    AWARD_CANON,
    AWARD_DOCS,
    AWARDS,
    ENTITY_TYPES,
    NOISE,
    YEAR_RANGE,
    World,
)

# Canonical order of the fact slots in a summary. ``category`` and ``city``
# are fused into the opening sentence ("X is a <category> <type> in <city>.").
SLOT_ORDER = ("category", "city", "year", "person", "size", "award", "operator")


def _article(word: str) -> str:
    """The indefinite article ("a"/"an") for ``word``."""
    return "an" if word[0].lower() in "aeiou" else "a"


def sample_value(rng: random.Random, world: World, type_key: str, slot: str) -> str:
    """A random value of ``slot`` for an entity of type ``type_key``, as text."""
    etype = ENTITY_TYPES[type_key]
    if slot == "category":
        return rng.choice(etype.categories)
    if slot == "city":
        return rng.choice(world.cities)
    if slot == "year":
        return str(rng.randint(*YEAR_RANGE))
    if slot == "person":
        return rng.choice(world.persons)
    if slot == "size":
        return str(rng.choice(etype.sizes))
    if slot == "award":
        return rng.choice(AWARDS)
    if slot == "operator":
        return rng.choice(world.organisations)
    raise KeyError(slot)


def canonical_summary(name: str, type_key: str, facts: Dict[str, str]) -> str:
    """The reference summary of an entity: every fact once, in ``SLOT_ORDER``.

    ``facts`` maps slot names to value strings; missing slots are left out.
    """
    etype = ENTITY_TYPES[type_key]
    head = etype.noun
    if "category" in facts:
        head = f"{facts['category']} {head}"
    opener = f"{name} is {_article(head)} {head}"
    if "city" in facts:
        opener += f" in {facts['city']}"
    sentences = [opener + "."]
    canon = {
        "year": etype.year_canon,
        "person": etype.person_canon,
        "size": etype.size_canon,
        "award": AWARD_CANON,
        "operator": etype.operator_canon,
    }
    for slot in SLOT_ORDER[2:]:
        if slot in facts:
            sentences.append(canon[slot].format(v=facts[slot]))
    return " ".join(sentences)


def _doc_templates(type_key: str, slot: str) -> Tuple[str, ...]:
    """Document paraphrase templates of ``slot`` for an entity type."""
    etype = ENTITY_TYPES[type_key]
    if slot == "award":
        return AWARD_DOCS
    return getattr(etype, f"{slot}_docs")


def _realise(template: str, name: str, type_key: str, value: str = "") -> str:
    """Fill a document template and capitalise the sentence start."""
    ref = f"{name} {ENTITY_TYPES[type_key].noun}"
    text = template.format(ref=ref, name=name, v=value)
    return text[0].upper() + text[1:]


def fact_sentence(rng: random.Random, entity: dict, slot: str, avoid: Optional[set] = None) -> str:
    """A document sentence stating ``entity``'s ``slot`` fact.

    ``avoid`` collects templates already used for this fact in the cluster, so
    repeated mentions are paraphrased differently while templates last.
    """
    templates = list(_doc_templates(entity["type"], slot))
    if avoid is not None:
        fresh = [t for t in templates if t not in avoid]
        if fresh:
            templates = fresh
    template = rng.choice(templates)
    if avoid is not None:
        avoid.add(template)
    return _realise(template, entity["name"], entity["type"], entity["facts"][slot])


def noise_sentences(rng: random.Random, entity: dict, count: int) -> List[str]:
    """``count`` distinct filler sentences, those with a slot naming ``entity``."""
    templates = rng.sample(NOISE, min(count, len(NOISE)))
    return [_realise(t, entity["name"], entity["type"]) for t in templates]


def ensure_type_stated(rng: random.Random, topic: dict, relevant_docs: List[List[str]]) -> None:
    """Make sure some relevant document names the topic with its type noun.

    The summary opens with the entity type ("X is a bridge"), so the documents
    must state it; if no sentence says "<Name> <noun>" yet, a filler sentence
    that does is inserted at a random position of a random relevant document.
    """
    phrase = f"{topic['name']} {ENTITY_TYPES[topic['type']].noun}"
    if any(mentions(s, phrase) for doc in relevant_docs for s in doc):
        return
    template = rng.choice([t for t in NOISE if "{ref}" in t])
    doc = rng.choice(relevant_docs)
    doc.insert(rng.randint(0, len(doc)), _realise(template, topic["name"], topic["type"]))


def mentions(text: str, phrase: str) -> bool:
    """Whether ``phrase`` occurs in ``text`` as whole words (case-insensitive)."""
    pattern = r"(?<![\w-])" + re.escape(phrase) + r"(?![\w-])"
    return re.search(pattern, text, flags=re.IGNORECASE) is not None


def to_document(rng: random.Random, sentences: List[str], max_paragraphs: int) -> str:
    """Join sentences into 1..max_paragraphs paragraphs separated by a blank line."""
    count = rng.randint(1, max(1, min(max_paragraphs, len(sentences))))
    cuts = sorted(rng.sample(range(1, len(sentences)), count - 1)) if count > 1 else []
    bounds = [0] + cuts + [len(sentences)]
    paragraphs = [" ".join(sentences[a:b]) for a, b in zip(bounds, bounds[1:])]
    return "\n\n".join(paragraphs)
