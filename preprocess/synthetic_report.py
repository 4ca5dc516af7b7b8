"""The baseline gap check of ``mdsfair-synth --report``: how far extractive
baselines (Lead, LexRank) stay from the references of the synthetic clusters,
against proxies of a perfect, a noisy and a template-only model
(:func:`baseline_gap_report`), and the clusters' mean sizes
(:func:`dataset_statistics`)."""

import random
from typing import Dict, Sequence

from mdsfair.lexrank import lexrank_scores
from mdsfair.preprocess.synthetic_clusters import generate_clusters, resolve_options
from mdsfair.preprocess.synthetic_sentences import canonical_summary, sample_value
from mdsfair.preprocess.synthetic_world import World, build_world, derive_seed
from mdsfair.text import split_sentences


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
                wrong = sample_value(rng, world, meta["type"], slot)
            facts[slot] = wrong
    return canonical_summary(cluster["title"], meta["type"], facts)


def _template_only_summary(rng: random.Random, world: World, cluster: dict) -> str:
    """Canonical summary of the right entity type with every value wrong."""
    meta = cluster["meta"]
    facts = {}
    for slot, value in meta["facts"].items():
        wrong = value
        while wrong == value:
            wrong = sample_value(rng, world, meta["type"], slot)
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
    opts = resolve_options(options)
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
