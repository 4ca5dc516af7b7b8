"""The clusters of ``mdsfair-synth`` (:mod:`mdsfair.preprocess.synthetic`).

A *cluster* is about one topic entity. The entity gets ``K`` facts (4-6 by
default) drawn afresh for every cluster, so a model has to read the documents
and cannot memorise an entity's facts from the training split. The cluster's
documents are:

* **relevant documents**: each states a random subset (2-3) of the topic
  facts with varied paraphrase templates, so the facts are spread over several
  documents and repeated across them (redundancy); they also contain filler
  sentences and sentences about *other* entities (in-document distractors);
* **distractor documents**: whole documents about other entities, which never
  mention the topic entity.

Document order and sentence order are shuffled and every document has 1-3
paragraphs separated by a blank line. The sentences and the reference summary
are written by :mod:`mdsfair.preprocess.synthetic_sentences`.

Determinism: the same seed and options give the same clusters. Every split
draws from its own random stream, cluster ids carry the split name, and a
cluster's content signature (topic entity and fact values) is hashed into a
split bucket, so a (topic, facts) combination of the test split can never
occur in the training split.
"""

import random
from typing import Dict, List, Tuple

from mdsfair.preprocess.synthetic_sentences import (
    SLOT_ORDER,
    canonical_summary,
    ensure_type_stated,
    fact_sentence,
    mentions,
    noise_sentences,
    sample_value,
    to_document,
)
from mdsfair.preprocess.synthetic_world import World, build_world, derive_seed

SPLITS = ("train", "valid", "test")


# A content signature hashes to one of ten buckets: 0-7 train, 8 valid, 9 test.
_SPLIT_BUCKETS = {"train": range(0, 8), "valid": range(8, 9), "test": range(9, 10)}

DEFAULT_OPTIONS = {
    "num_docs": 4,
    "distractor_docs": 2,
    "min_facts": 4,
    "max_facts": 6,
    "min_facts_per_doc": 2,
    "max_facts_per_doc": 3,
    "min_fact_mentions": 2,
    "noise_sentences": 3,
    "distractor_sentences": 1,
    "max_paragraphs": 3,
    "num_names": 300,
    "world_seed": None,
    "include_meta": False,
}


def resolve_options(options: dict) -> dict:
    """Merge ``options`` into the defaults and validate them."""
    unknown = set(options) - set(DEFAULT_OPTIONS)
    if unknown:
        raise TypeError(f"unknown synthetic data option(s): {sorted(unknown)}")
    opts = dict(DEFAULT_OPTIONS)
    opts.update(options)
    if not 1 <= opts["min_facts"] <= opts["max_facts"] <= len(SLOT_ORDER):
        raise ValueError(f"need 1 <= min_facts <= max_facts <= {len(SLOT_ORDER)}")
    if not 1 <= opts["min_facts_per_doc"] <= opts["max_facts_per_doc"]:
        raise ValueError("need 1 <= min_facts_per_doc <= max_facts_per_doc")
    if opts["num_docs"] < 1:
        raise ValueError("num_docs must be at least 1")
    if opts["num_docs"] * opts["max_facts_per_doc"] < opts["max_facts"]:
        raise ValueError(
            "num_docs * max_facts_per_doc must be >= max_facts so that every "
            "summary fact appears in at least one document"
        )
    for key in ("distractor_docs", "noise_sentences", "distractor_sentences"):
        if opts[key] < 0:
            raise ValueError(f"{key} must be >= 0")
    if opts["min_fact_mentions"] < 1 or opts["max_paragraphs"] < 1:
        raise ValueError("min_fact_mentions and max_paragraphs must be >= 1")
    return opts


def _plan_mentions(rng: random.Random, slots: List[str], opts: dict) -> List[List[str]]:
    """Decide which topic facts each relevant document states.

    Each document states ``min_facts_per_doc``..``max_facts_per_doc`` facts;
    capacities are raised within that range until every fact can land in
    ``min_fact_mentions`` documents (or all capacities are at the maximum).
    Every fact lands in at least one document, and in ``min_fact_mentions``
    documents where the capacities allow it; the rest of each document's
    capacity is filled with random further facts (redundancy).
    """
    num_docs = opts["num_docs"]
    low = min(opts["min_facts_per_doc"], len(slots))
    high = min(opts["max_facts_per_doc"], len(slots))
    capacity = [rng.randint(low, high) for _ in range(num_docs)]
    wanted = min(len(slots) * opts["min_fact_mentions"], num_docs * high)
    while sum(capacity) < wanted:
        growable = [d for d in range(num_docs) if capacity[d] < high]
        capacity[rng.choice(growable)] += 1
    plan: List[List[str]] = [[] for _ in range(num_docs)]
    for _ in range(opts["min_fact_mentions"]):
        order = list(slots)
        rng.shuffle(order)
        for slot in order:
            open_docs = [d for d in range(num_docs) if len(plan[d]) < capacity[d] and slot not in plan[d]]
            if open_docs:
                most_room = max(capacity[d] - len(plan[d]) for d in open_docs)
                best = [d for d in open_docs if capacity[d] - len(plan[d]) == most_room]
                plan[rng.choice(best)].append(slot)
    for d in range(num_docs):
        missing = [s for s in slots if s not in plan[d]]
        rng.shuffle(missing)
        plan[d].extend(missing[: capacity[d] - len(plan[d])])
    return plan


def _check_cluster(
    topic: dict, documents: List[List[str]], relevant: List[int], distractors: List[int]
) -> Dict[str, List[int]]:
    """Verify the support of every summary fact; return slot -> supporting doc indices.

    A document supports a fact when one of its sentences names the topic
    entity and contains the fact value. Raises ``AssertionError`` when a fact
    is unsupported or a distractor document names the topic entity.
    """
    support = {}
    for slot, value in topic["facts"].items():
        docs = [d for d in relevant if any(mentions(s, topic["name"]) and mentions(s, value) for s in documents[d])]
        if not docs:
            raise AssertionError(f"fact {slot}={value!r} of {topic['name']!r} appears in no document")
        support[slot] = docs
    for d in distractors:
        if any(mentions(s, topic["name"]) for s in documents[d]):
            raise AssertionError(f"distractor document {d} mentions the topic {topic['name']!r}")
    return support


def _signature_bucket(topic: dict) -> int:
    """Split bucket (0-9) of a cluster's content signature (topic and facts)."""
    facts = "|".join(f"{slot}={topic['facts'][slot]}" for slot in SLOT_ORDER if slot in topic["facts"])
    return derive_seed("mdsfair-synth-signature", topic["name"], facts) % 10


def _sample_topic(rng: random.Random, world: World, opts: dict) -> dict:
    """A topic entity of the world with ``min_facts``..``max_facts`` fresh facts."""
    name, type_key = rng.choice(world.entities)
    k = rng.randint(opts["min_facts"], opts["max_facts"])
    slots = sorted(rng.sample(SLOT_ORDER, k), key=SLOT_ORDER.index)
    facts = {slot: sample_value(rng, world, type_key, slot) for slot in slots}
    return {"name": name, "type": type_key, "facts": facts}


def _sample_distractor(rng: random.Random, world: World, taken_names: set, topic_values: set) -> dict:
    """Another entity with all slots filled, sharing no value string with the topic."""
    while True:
        name, type_key = rng.choice(world.entities)
        if name not in taken_names:
            break
    facts = {}
    for slot in SLOT_ORDER:
        value = sample_value(rng, world, type_key, slot)
        while value in topic_values:
            value = sample_value(rng, world, type_key, slot)
        facts[slot] = value
    return {"name": name, "type": type_key, "facts": facts}


def _noise_count(rng: random.Random, mean: int) -> int:
    """Number of filler sentences of a document: ``mean`` +-1 (0 stays 0)."""
    return rng.randint(max(0, mean - 1), mean + 1) if mean > 0 else 0


def _make_cluster(rng: random.Random, world: World, split: str, opts: dict, cluster_id: str) -> dict:
    """Build one cluster record whose content signature falls in ``split``'s bucket."""
    buckets = _SPLIT_BUCKETS[split]
    while True:
        topic = _sample_topic(rng, world, opts)
        if _signature_bucket(topic) in buckets:
            break
    topic_values = set(topic["facts"].values())
    num_distractor_entities = max(opts["distractor_docs"], 1 if opts["distractor_sentences"] > 0 else 0)
    taken = {topic["name"]}
    others = []
    for _ in range(num_distractor_entities):
        other = _sample_distractor(rng, world, taken, topic_values)
        taken.add(other["name"])
        others.append(other)

    slots = list(topic["facts"])
    plan = _plan_mentions(rng, slots, opts)
    used_templates = {slot: set() for slot in slots}
    docs: List[Tuple[str, List[str]]] = []
    for doc_slots in plan:
        sentences = [fact_sentence(rng, topic, slot, used_templates[slot]) for slot in doc_slots]
        sentences += noise_sentences(rng, topic, _noise_count(rng, opts["noise_sentences"]))
        for _ in range(opts["distractor_sentences"]):
            other = rng.choice(others)
            sentences.append(fact_sentence(rng, other, rng.choice(SLOT_ORDER)))
        rng.shuffle(sentences)
        docs.append(("relevant", sentences))
    ensure_type_stated(rng, topic, [sentences for _, sentences in docs])
    for other in others[: opts["distractor_docs"]]:
        k = rng.randint(opts["min_facts_per_doc"], opts["max_facts_per_doc"])
        other_slots = rng.sample(SLOT_ORDER, min(k, len(SLOT_ORDER)))
        used = {slot: set() for slot in other_slots}
        sentences = [fact_sentence(rng, other, slot, used[slot]) for slot in other_slots]
        sentences += noise_sentences(rng, other, _noise_count(rng, opts["noise_sentences"]))
        rng.shuffle(sentences)
        docs.append(("distractor", sentences))
    rng.shuffle(docs)

    sentence_lists = [sentences for _, sentences in docs]
    relevant = [i for i, (kind, _) in enumerate(docs) if kind == "relevant"]
    distractors = [i for i, (kind, _) in enumerate(docs) if kind == "distractor"]
    support = _check_cluster(topic, sentence_lists, relevant, distractors)
    record = {
        "id": cluster_id,
        "title": topic["name"],
        "documents": [to_document(rng, sentences, opts["max_paragraphs"]) for sentences in sentence_lists],
        "summary": canonical_summary(topic["name"], topic["type"], topic["facts"]),
    }
    if opts["include_meta"]:
        record["meta"] = {
            "type": topic["type"],
            "facts": dict(topic["facts"]),
            "relevant_docs": relevant,
            "distractor_docs": distractors,
            "fact_support": support,
            "distractor_entities": [o["name"] for o in others],
        }
    return record


def generate_clusters(num_clusters: int, seed: int = 1, split: str = "train", **options) -> List[dict]:
    """Generate ``num_clusters`` clusters of ``split`` deterministically from ``seed``.

    ``options`` override :data:`DEFAULT_OPTIONS`: ``num_docs`` (relevant
    documents), ``distractor_docs``, ``min_facts``/``max_facts`` (facts per
    summary), ``min_facts_per_doc``/``max_facts_per_doc``,
    ``min_fact_mentions`` (target number of documents stating each fact),
    ``noise_sentences`` (mean filler sentences per document, +-1),
    ``distractor_sentences`` (sentences about other entities per relevant
    document), ``max_paragraphs``, ``num_names`` (topic entity pool),
    ``world_seed`` (defaults to ``seed``) and ``include_meta`` (add a
    ``"meta"`` entry with the facts and document roles; off for the raw
    contract).

    Returns one dict per cluster with ``id``, ``title``, ``documents`` and
    ``summary``.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if num_clusters < 0:
        raise ValueError("num_clusters must be >= 0")
    opts = resolve_options(options)
    world_seed = seed if opts["world_seed"] is None else opts["world_seed"]
    world = build_world(world_seed, opts["num_names"])
    rng = random.Random(derive_seed("mdsfair-synth-clusters", seed, split))
    return [_make_cluster(rng, world, split, opts, f"synth-{split}-{index:06d}") for index in range(num_clusters)]
