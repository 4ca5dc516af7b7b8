"""``mdsfair-synth``: a deterministic synthetic multi-document summarization data set.

The data set lives in a small closed world that is fully determined by a seed:
a pool of invented topic entities (each with a fixed type such as *bridge* or
*festival*), invented cities and organisations, and small pools of people,
awards and numeric values.

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
paragraphs separated by a blank line.

The reference summary states every topic fact exactly once, in a fixed
canonical order and with canonical templates that differ from the document
templates (``"Varnel is a suspension bridge in Calden. It was opened to
traffic in 1987. ..."``). A summarizer therefore has to select the topic
facts, fuse them across documents, drop duplicates and rewrite them in the
canonical form; extracting leading or central sentences (Lead, LexRank)
scores far below that (see :func:`baseline_gap_report`).

Files follow the raw contract of the pipeline: one cluster per JSON line,
``{"id": str, "title": str, "documents": [str, ...], "summary": str}``.

Determinism: the same seed and options give byte-identical files. Every split
draws from its own random stream, cluster ids carry the split name, and a
cluster's content signature (topic entity and fact values) is hashed into a
split bucket, so a (topic, facts) combination of the test split can never
occur in the training split.

The world itself (entity types, fact slots, templates, invented names) is
:mod:`mdsfair.preprocess.synthetic_world`; this module makes clusters of it,
writes the splits and runs the baseline gap check.
"""

import argparse
import json
import os
import random
import re
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from mdsfair.argument_types import at_least, os_errors_in_one_line, output_folder_problem
from mdsfair.lexrank import lexrank_scores
from mdsfair.preprocess.synthetic_world import (
    AWARD_CANON,
    AWARD_DOCS,
    AWARDS,
    ENTITY_TYPES,
    NOISE,
    YEAR_RANGE,
    World,
    build_world,
    derive_seed,
)
from mdsfair.text import split_sentences

SPLITS = ("train", "valid", "test")

# Canonical order of the fact slots in a summary. ``category`` and ``city``
# are fused into the opening sentence ("X is a <category> <type> in <city>.").
SLOT_ORDER = ("category", "city", "year", "person", "size", "award", "operator")

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


def _resolve_options(options: dict) -> dict:
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


def _article(word: str) -> str:
    """The indefinite article ("a"/"an") for ``word``."""
    return "an" if word[0].lower() in "aeiou" else "a"


def _sample_value(rng: random.Random, world: World, type_key: str, slot: str) -> str:
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


def _fact_sentence(rng: random.Random, entity: dict, slot: str, avoid: Optional[set] = None) -> str:
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


def _noise_sentences(rng: random.Random, entity: dict, count: int) -> List[str]:
    """``count`` distinct filler sentences, those with a slot naming ``entity``."""
    templates = rng.sample(NOISE, min(count, len(NOISE)))
    return [_realise(t, entity["name"], entity["type"]) for t in templates]


def _ensure_type_stated(rng: random.Random, topic: dict, relevant_docs: List[List[str]]) -> None:
    """Make sure some relevant document names the topic with its type noun.

    The summary opens with the entity type ("X is a bridge"), so the documents
    must state it; if no sentence says "<Name> <noun>" yet, a filler sentence
    that does is inserted at a random position of a random relevant document.
    """
    phrase = f"{topic['name']} {ENTITY_TYPES[topic['type']].noun}"
    if any(_mentions(s, phrase) for doc in relevant_docs for s in doc):
        return
    template = rng.choice([t for t in NOISE if "{ref}" in t])
    doc = rng.choice(relevant_docs)
    doc.insert(rng.randint(0, len(doc)), _realise(template, topic["name"], topic["type"]))


def _mentions(text: str, phrase: str) -> bool:
    """Whether ``phrase`` occurs in ``text`` as whole words (case-insensitive)."""
    pattern = r"(?<![\w-])" + re.escape(phrase) + r"(?![\w-])"
    return re.search(pattern, text, flags=re.IGNORECASE) is not None


def _to_document(rng: random.Random, sentences: List[str], max_paragraphs: int) -> str:
    """Join sentences into 1..max_paragraphs paragraphs separated by a blank line."""
    count = rng.randint(1, max(1, min(max_paragraphs, len(sentences))))
    cuts = sorted(rng.sample(range(1, len(sentences)), count - 1)) if count > 1 else []
    bounds = [0] + cuts + [len(sentences)]
    paragraphs = [" ".join(sentences[a:b]) for a, b in zip(bounds, bounds[1:])]
    return "\n\n".join(paragraphs)


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
        docs = [d for d in relevant if any(_mentions(s, topic["name"]) and _mentions(s, value) for s in documents[d])]
        if not docs:
            raise AssertionError(f"fact {slot}={value!r} of {topic['name']!r} appears in no document")
        support[slot] = docs
    for d in distractors:
        if any(_mentions(s, topic["name"]) for s in documents[d]):
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
    facts = {slot: _sample_value(rng, world, type_key, slot) for slot in slots}
    return {"name": name, "type": type_key, "facts": facts}


def _sample_distractor(rng: random.Random, world: World, taken_names: set, topic_values: set) -> dict:
    """Another entity with all slots filled, sharing no value string with the topic."""
    while True:
        name, type_key = rng.choice(world.entities)
        if name not in taken_names:
            break
    facts = {}
    for slot in SLOT_ORDER:
        value = _sample_value(rng, world, type_key, slot)
        while value in topic_values:
            value = _sample_value(rng, world, type_key, slot)
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
        sentences = [_fact_sentence(rng, topic, slot, used_templates[slot]) for slot in doc_slots]
        sentences += _noise_sentences(rng, topic, _noise_count(rng, opts["noise_sentences"]))
        for _ in range(opts["distractor_sentences"]):
            other = rng.choice(others)
            sentences.append(_fact_sentence(rng, other, rng.choice(SLOT_ORDER)))
        rng.shuffle(sentences)
        docs.append(("relevant", sentences))
    _ensure_type_stated(rng, topic, [sentences for _, sentences in docs])
    for other in others[: opts["distractor_docs"]]:
        k = rng.randint(opts["min_facts_per_doc"], opts["max_facts_per_doc"])
        other_slots = rng.sample(SLOT_ORDER, min(k, len(SLOT_ORDER)))
        used = {slot: set() for slot in other_slots}
        sentences = [_fact_sentence(rng, other, slot, used[slot]) for slot in other_slots]
        sentences += _noise_sentences(rng, other, _noise_count(rng, opts["noise_sentences"]))
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
        "documents": [_to_document(rng, sentences, opts["max_paragraphs"]) for sentences in sentence_lists],
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
    opts = _resolve_options(options)
    world_seed = seed if opts["world_seed"] is None else opts["world_seed"]
    world = build_world(world_seed, opts["num_names"])
    rng = random.Random(derive_seed("mdsfair-synth-clusters", seed, split))
    return [_make_cluster(rng, world, split, opts, f"synth-{split}-{index:06d}") for index in range(num_clusters)]


def write_dataset(
    out_dir: str, seed: int = 1, train: int = 2000, valid: int = 200, test: int = 200, **options
) -> Dict[str, str]:
    """Write ``train.jsonl``, ``valid.jsonl`` and ``test.jsonl`` under ``out_dir``.

    ``options`` are those of :func:`generate_clusters`. Returns the path of
    every written split. Same arguments give byte-identical files.
    """
    os.makedirs(out_dir, exist_ok=True)
    paths = {}
    for split, count in (("train", train), ("valid", valid), ("test", test)):
        path = os.path.join(out_dir, f"{split}.jsonl")
        clusters = generate_clusters(count, seed=seed, split=split, **options)
        with open(path, "w", encoding="utf-8", newline="\n") as handle:
            for cluster in clusters:
                handle.write(json.dumps(cluster, ensure_ascii=False) + "\n")
        paths[split] = path
    return paths


# ---------------------------------------------------------------------------
# Baseline gap check: how far extractive baselines stay from the references.
# ---------------------------------------------------------------------------


def lead_summary(documents: Sequence[str], num_sentences: int = 3) -> str:
    """Lead baseline: the first ``num_sentences`` sentences of the first document
    (sentences split by :func:`mdsfair.text.split_sentences`)."""
    return " ".join(split_sentences(documents[0])[:num_sentences])


def lexrank_summary(documents: Sequence[str], num_sentences: int = 3) -> str:
    """Continuous LexRank (:func:`mdsfair.lexrank.lexrank_scores`, every
    positive similarity an edge weighted by it): the ``num_sentences`` most
    central sentences of the cluster, in source order."""
    sentences = [s for doc in documents for s in split_sentences(doc)]
    if len(sentences) <= num_sentences:
        return " ".join(sentences)
    scores = lexrank_scores(sentences, threshold=0.0, weighted=True)
    top = sorted(sorted(range(len(sentences)), key=lambda i: (-scores[i], i))[:num_sentences])
    return " ".join(sentences[i] for i in top)


def _noisy_summary(rng: random.Random, world: World, cluster: dict) -> str:
    """Canonical summary with 1-2 facts dropped or given a wrong value."""
    meta = cluster["meta"]
    facts = dict(meta["facts"])
    for slot in rng.sample(list(facts), min(len(facts), rng.randint(1, 2))):
        if rng.random() < 0.5 and len(facts) > 1:
            del facts[slot]
        else:
            wrong = facts[slot]
            while wrong == facts[slot]:
                wrong = _sample_value(rng, world, meta["type"], slot)
            facts[slot] = wrong
    return canonical_summary(cluster["title"], meta["type"], facts)


def _template_only_summary(rng: random.Random, world: World, cluster: dict) -> str:
    """Canonical summary of the right entity type with every value wrong."""
    meta = cluster["meta"]
    facts = {}
    for slot, value in meta["facts"].items():
        wrong = value
        while wrong == value:
            wrong = _sample_value(rng, world, meta["type"], slot)
        facts[slot] = wrong
    return canonical_summary(cluster["title"], meta["type"], facts)


def baseline_gap_report(
    num_clusters: int = 200, seed: int = 1, split: str = "test", **options
) -> Dict[str, Dict[str, float]]:
    """ROUGE F1 (x100, stemmed) of reference-free systems against the references.

    Systems: ``lead`` (first 3 sentences of the first document), ``lexrank``
    (3 most central sentences), ``fact_oracle`` (canonical summary of the
    topic facts that the documents state, i.e. what a perfect model writes),
    ``noisy_model`` (the oracle with 1-2 facts dropped or wrong) and
    ``template_only`` (the canonical summary with every value wrong).
    Returns ``{system: {"rouge1": f, "rouge2": f, "rougeL": f}}``.
    """
    from rouge_score import rouge_scorer

    options = dict(options, include_meta=True)
    clusters = generate_clusters(num_clusters, seed=seed, split=split, **options)
    opts = _resolve_options(options)
    world = build_world(seed if opts["world_seed"] is None else opts["world_seed"], opts["num_names"])
    rng = random.Random(derive_seed("mdsfair-synth-report", seed, split))
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    systems = ("lead", "lexrank", "fact_oracle", "noisy_model", "template_only")
    totals = {name: {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0} for name in systems}
    for cluster in clusters:
        meta = cluster["meta"]
        stated = {slot: v for slot, v in meta["facts"].items() if meta["fact_support"].get(slot)}
        candidates = {
            "lead": lead_summary(cluster["documents"]),
            "lexrank": lexrank_summary(cluster["documents"]),
            "fact_oracle": canonical_summary(cluster["title"], meta["type"], stated),
            "noisy_model": _noisy_summary(rng, world, cluster),
            "template_only": _template_only_summary(rng, world, cluster),
        }
        for name, candidate in candidates.items():
            scores = scorer.score(cluster["summary"], candidate)
            for metric, value in scores.items():
                totals[name][metric] += value.fmeasure
    count = max(1, len(clusters))
    return {
        name: {metric: round(100.0 * value / count, 2) for metric, value in metrics.items()}
        for name, metrics in totals.items()
    }


def dataset_statistics(clusters: Sequence[dict]) -> Dict[str, float]:
    """Mean source words, summary words and documents per cluster."""
    count = max(1, len(clusters))
    return {
        "source_words": sum(len(" ".join(c["documents"]).split()) for c in clusters) / count,
        "summary_words": sum(len(c["summary"].split()) for c in clusters) / count,
        "documents": sum(len(c["documents"]) for c in clusters) / count,
    }


def build_parser() -> argparse.ArgumentParser:
    """Argument parser of ``mdsfair-synth``."""
    d = DEFAULT_OPTIONS
    parser = argparse.ArgumentParser(
        prog="mdsfair-synth",
        description="Write a deterministic synthetic multi-document summarization data set "
        "(train/valid/test .jsonl in the raw contract).",
    )
    parser.add_argument(
        "--out-dir", required=True, help="directory to write train.jsonl, valid.jsonl and test.jsonl into"
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=1,
        help="random seed of the clusters (and of the world unless --world-seed is set) (default: 1)",
    )
    parser.add_argument(
        "--world-seed",
        type=int,
        default=None,
        help="seed of the closed world of names and value pools (default: same as --seed)",
    )
    parser.add_argument("--train", type=at_least(0), default=2000, help="number of training clusters (default: 2000)")
    parser.add_argument("--valid", type=at_least(0), default=200, help="number of validation clusters (default: 200)")
    parser.add_argument("--test", type=at_least(0), default=200, help="number of test clusters (default: 200)")
    parser.add_argument(
        "--num-docs",
        type=at_least(1),
        default=d["num_docs"],
        help=f"relevant documents per cluster (default: {d['num_docs']})",
    )
    parser.add_argument(
        "--distractor-docs",
        type=at_least(0),
        default=d["distractor_docs"],
        help=f"distractor documents about other entities per cluster (default: {d['distractor_docs']})",
    )
    parser.add_argument(
        "--min-facts",
        type=at_least(1),
        default=d["min_facts"],
        help=f"minimum facts in a summary (default: {d['min_facts']})",
    )
    parser.add_argument(
        "--max-facts",
        type=at_least(1),
        default=d["max_facts"],
        help=f"maximum facts in a summary, at most {len(SLOT_ORDER)} (default: {d['max_facts']})",
    )
    parser.add_argument(
        "--min-facts-per-doc",
        type=at_least(1),
        default=d["min_facts_per_doc"],
        help=f"minimum topic facts stated by a relevant document (default: {d['min_facts_per_doc']})",
    )
    parser.add_argument(
        "--max-facts-per-doc",
        type=at_least(1),
        default=d["max_facts_per_doc"],
        help=f"maximum topic facts stated by a relevant document (default: {d['max_facts_per_doc']})",
    )
    parser.add_argument(
        "--min-fact-mentions",
        type=at_least(1),
        default=d["min_fact_mentions"],
        help=f"target number of documents stating each fact, capacity permitting (default: {d['min_fact_mentions']})",
    )
    parser.add_argument(
        "--noise-sentences",
        type=at_least(0),
        default=d["noise_sentences"],
        help=f"mean filler sentences per document, varied by +-1 (default: {d['noise_sentences']})",
    )
    parser.add_argument(
        "--distractor-sentences",
        type=at_least(0),
        default=d["distractor_sentences"],
        help=f"sentences about other entities inside each relevant document (default: {d['distractor_sentences']})",
    )
    parser.add_argument(
        "--max-paragraphs",
        type=at_least(1),
        default=d["max_paragraphs"],
        help=f"maximum paragraphs per document (default: {d['max_paragraphs']})",
    )
    parser.add_argument(
        "--num-names",
        type=at_least(1),
        default=d["num_names"],
        help=f"size of the entity name pool of the world (default: {d['num_names']})",
    )
    parser.add_argument(
        "--report",
        type=at_least(0),
        default=0,
        metavar="N",
        help="after writing, print ROUGE of Lead, LexRank and oracle proxies on N test clusters (default: 0, off)",
    )
    return parser


def check_arguments(parser: argparse.ArgumentParser, args) -> None:
    """Refuse, with an argparse error naming the flags, settings
    :func:`_resolve_options` and the world would refuse: every ``--min-X``
    above its ``--max-X``, more facts than slots, facts the documents cannot
    hold, a name pool smaller than the world needs; and an ``--out-dir``
    that cannot be written."""
    pairs = [
        ("--min-facts", args.min_facts, "--max-facts", args.max_facts),
        ("--min-facts-per-doc", args.min_facts_per_doc, "--max-facts-per-doc", args.max_facts_per_doc),
    ]
    for low_flag, low, high_flag, high in pairs:
        if low > high:
            parser.error(f"{low_flag} {low} is above {high_flag} {high}: the minimum must not exceed the maximum")
    if args.max_facts > len(SLOT_ORDER):
        parser.error(
            f"--max-facts {args.max_facts}: a summary has at most {len(SLOT_ORDER)} facts ({', '.join(SLOT_ORDER)})"
        )
    if args.num_docs * args.max_facts_per_doc < args.max_facts:
        parser.error(
            f"--num-docs {args.num_docs} x --max-facts-per-doc {args.max_facts_per_doc} is below "
            f"--max-facts {args.max_facts}: every summary fact must be stated by some document"
        )
    if args.num_names < 8:
        parser.error(f"--num-names {args.num_names}: the world needs at least 8 names")
    problem = output_folder_problem("--out-dir", args.out_dir)
    if problem is not None:
        parser.error(problem)


@os_errors_in_one_line("mdsfair-synth")
def cli_main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``mdsfair-synth``; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.train + args.valid + args.test == 0:  # would write three empty files and exit 0
        parser.error("--train, --valid and --test are all 0: there would be no cluster to write")
    check_arguments(parser, args)
    options = {
        "num_docs": args.num_docs,
        "distractor_docs": args.distractor_docs,
        "min_facts": args.min_facts,
        "max_facts": args.max_facts,
        "min_facts_per_doc": args.min_facts_per_doc,
        "max_facts_per_doc": args.max_facts_per_doc,
        "min_fact_mentions": args.min_fact_mentions,
        "noise_sentences": args.noise_sentences,
        "distractor_sentences": args.distractor_sentences,
        "max_paragraphs": args.max_paragraphs,
        "num_names": args.num_names,
        "world_seed": args.world_seed,
    }
    paths = write_dataset(args.out_dir, seed=args.seed, train=args.train, valid=args.valid, test=args.test, **options)
    counts = {"train": args.train, "valid": args.valid, "test": args.test}
    for split, path in paths.items():
        print(f"wrote {path} ({counts.get(split, '?')} clusters)")
    if args.report > 0:
        report = baseline_gap_report(args.report, seed=args.seed, split="test", **options)
        print(f"ROUGE F1 on {args.report} test clusters (x100): system rouge1 rouge2 rougeL")
        for name, scores in report.items():
            print(f"{name:14s} {scores['rouge1']:6.2f} {scores['rouge2']:6.2f} {scores['rougeL']:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
