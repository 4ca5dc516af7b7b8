"""Extractive baselines for multi-document summarization: Lead, LexRank, oracle.

Input is the raw contract (one cluster per JSON line)::

    {"id": str, "documents": [str, ...], "summary": str, "title": str (optional)}

Paragraphs inside a document are separated by blank lines; every paragraph
is split into sentences with :func:`mdsfair.text.split_sentences`
(sentences never cross a paragraph boundary). A multi-reference variant with
``"summaries": [str, ...]`` instead of (or besides) ``"summary"`` is also
read; its references are used by the oracle and by ``--score``.

* :func:`lead`: the first sentences (``num_sentences``) or the first words
  (``num_tokens``, a word budget) of the documents, either document after
  document (``sequential``) or one sentence of each document in turn
  (``round-robin``), optionally after the cluster's title (``include_title``).
* :func:`lexrank`: LexRank with a threshold (Erkan & Radev, 2004): tf-idf
  cosine similarity between the cluster's sentences, an edge where the
  similarity exceeds the threshold (0.1 by default, their choice), PageRank
  (networkx) on that graph; the best-ranked sentences are taken up to
  ``num_sentences`` or a word budget, optionally skipping sentences too
  similar to one already taken.
* :func:`greedy_oracle`: the greedy extractive oracle: repeatedly add the
  sentence that most increases ROUGE-1 F1 + ROUGE-2 F1 against the reference
  summary (mean over references when there are several), stop when no
  sentence increases it.

All three return the chosen sentences in document order (lead: in reading
order), ready to be joined into one summary line.

Word budgets
------------
A word is a whitespace-separated token (``str.split``), the unit of every
count here. A budget of ``W`` words is cut at the word, not at the sentence:
sentences are taken whole while they fit and the sentence that crosses the
budget is cut after its first remaining words, so a Lead summary is exactly
the first ``min(W, words in the cluster)`` words of its reading order and a
LexRank summary holds exactly ``W`` words unless the sentences it may take hold
fewer. (Some authors' scripts stop at sentence boundaries instead, under or
over the budget; :data:`BUDGET_PRESETS` says which.)

Three-sentence Lead, the default without a budget, suits CNN/DailyMail-length
summaries, not multi-document ones (a Multi-News reference has ~264 words).
:data:`BUDGET_PRESETS` gives one word budget per data set, with where each
number comes from; ``reference_word_budget`` is the oracle length (each
cluster's budget is its own reference's word count), as Liu & Lapata (2019)
used for their WikiSum Lead and LexRank. An oracle length uses the reference,
so its scores are not those of a system that could run without it; the command
line labels them as such.

Command line: ``mdsfair-baseline --method lead|lexrank|oracle INPUT.jsonl -o OUT.txt``
(``--budget-preset multinews``, ``--lead-tokens W`` / ``--max-words W``,
``--budget-from-reference``).
"""

import argparse
import logging
import sys
from collections import Counter
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence

from mdsfair.argument_types import at_least, number_between
from mdsfair.data.manifest import atomic_text_file
from mdsfair.evaluation.outputs import check_output_paths
from mdsfair.lexrank import lexrank_scores, tfidf_cosine_matrix
from mdsfair.raw_contract import InputFormatError, cluster_references, decode_cluster_line, iter_raw_lines
from mdsfair.text import split_paragraphs, split_sentences, words

logger = logging.getLogger(__name__)

METHODS = ("lead", "lexrank", "oracle")
DEFAULT_NUM_SENTENCES = 3  # Lead and LexRank without a word budget
LEAD_ORDERS = ("sequential", "round-robin")


#: The raw contract's one error type (its old name here).
ClusterFormatError = InputFormatError


@dataclass(frozen=True)
class BudgetPreset:
    """A data set's word budget for Lead and LexRank, and where the number comes from."""

    dataset: str
    words: int
    source: str


# Per-data-set word budgets (``--budget-preset``). Each ``source`` says what the
# number is and where it was read; where no source states a budget for the
# extractive baselines, the budget is the data set's mean reference length.
BUDGET_PRESETS: Dict[str, BudgetPreset] = {
    "multinews": BudgetPreset(
        "Multi-News",
        264,
        "mean reference length, 263.66 words (Fabbri et al. 2019, Table 3; quoted by Ma et al. 2022, "
        "Sec. IV-A). No source read states a word budget for the paper's Lead, which is First-k (the first "
        "k sentences of every article); the authors' released lexrank.py and textrank.py "
        "(github.com/Alex-Fabbri/Multi-News, code/extractive_code) stop at the sentence that reaches "
        "500 words, their mmr_summarizer.py at 100",
    ),
    "wcep": BudgetPreset(
        "WCEP",
        40,
        "the authors' extractive baselines: max_len=40, len_type='words' (github.com/complementizer/"
        "wcep-mds-dataset, experiments/baselines.py defaults and the README's settings); they skip a "
        "sentence that would exceed 40 words, mdsfair cuts it at the 40th word",
    ),
    "multixscience": BudgetPreset(
        "Multi-XScience",
        116,
        "mean related-work length, 116.44 words (github.com/yaolu/Multi-XScience README, Lu et al. 2020; "
        "Ma et al. 2022 quote 116). No source read states a budget for its extractive baselines",
    ),
    "wikisum": BudgetPreset(
        "WikiSum",
        139,
        "mean target length, 139.4 tokens (Liu & Lapata 2019, Sec. 4, which does not say whether words or "
        "subword pieces). Their Lead (title + ranked paragraphs) and LexRank take each cluster's own "
        "target length instead, an oracle: --budget-from-reference (with --lead-title for the Lead)",
    ),
    "peersum": BudgetPreset(
        "PeerSum",
        113,
        "no source read states a budget or the mean meta-review length (the PeerSum README and dataset "
        "card give none); 112.8 words is the mean over the 90 meta-reviews of the PeerSum sample in "
        "../shared/data/peersum_sample",
    ),
}


# ---------------------------------------------------------------------------
# Input


def read_clusters(path: str) -> List[Dict]:
    """Read and validate a raw-contract JSONL file (blank lines are skipped; a
    UTF-8 byte-order mark before the first line is ignored) with
    :func:`mdsfair.raw_contract.decode_cluster_line`; references are optional.

    Raises:
        InputFormatError: ``FILE:LINE: reason`` (1-based line), with the raw
        contract's reason code.
    """
    return [decode_cluster_line(raw, path, line, require_references=False) for line, raw in iter_raw_lines(path)]


def reference_summaries(cluster: Mapping) -> List[str]:
    """The cluster's non-empty references: ``summary``, then the entries of
    ``summaries`` that differ from it (:func:`mdsfair.raw_contract.cluster_references`,
    the rule ``mdsfair-preprocess`` follows too)."""
    return cluster_references(cluster)


def word_count(text: str) -> int:
    """Number of whitespace-separated words, the unit of every word budget."""
    return len(text.split())


def reference_word_budget(cluster: Mapping) -> int:
    """The oracle word budget of a cluster: its reference's word count.

    With several references, the mean of their word counts rounded half up.
    Raises ValueError when the cluster has no non-empty reference."""
    references = reference_summaries(cluster)
    if not references:
        raise ValueError(f"cluster {cluster.get('id', '?')!r} has no reference summary to take its length from")
    return int(sum(word_count(text) for text in references) / len(references) + 0.5)


def document_sentences(document: str) -> List[str]:
    """Sentences of one document, paragraph by paragraph."""
    return [s for paragraph in split_paragraphs(document) for s in split_sentences(paragraph)]


def cluster_sentences(cluster: Mapping) -> List[List[str]]:
    """Per document, its sentences (documents without text give empty lists)."""
    return [document_sentences(document) for document in cluster["documents"]]


def _flatten(per_document: Sequence[Sequence[str]]) -> List[str]:
    return [sentence for sentences in per_document for sentence in sentences]


def _truncate_words(sentence: str, words: int) -> str:
    return " ".join(sentence.split()[:words])


def _take_words(sentences: Sequence[str], budget: int) -> List[str]:
    """Sentences in order until ``budget`` words; the last one is cut to fit.

    The result holds exactly ``min(budget, total words)`` words: the first ones."""
    taken, used = [], 0
    for sentence in sentences:
        length = len(sentence.split())
        if used + length >= budget:
            if budget > used:
                taken.append(_truncate_words(sentence, budget - used))
            break
        taken.append(sentence)
        used += length
    return taken


# ---------------------------------------------------------------------------
# Lead


def lead(
    cluster: Mapping,
    num_sentences: Optional[int] = None,
    num_tokens: Optional[int] = None,
    order: str = "sequential",
    include_title: bool = False,
) -> List[str]:
    """Lead baseline: the first sentences or words of the documents.

    Args:
        cluster: a raw-contract cluster (needs ``documents``).
        num_sentences: take this many sentences (default 3 when neither limit is given).
        num_tokens: a word budget instead: exactly the first ``num_tokens``
            whitespace-separated words of the reading order (all of them if
            there are fewer), the sentence that crosses the budget cut at the
            word; exclusive with ``num_sentences``.
        order: ``sequential`` (all of document 1, then document 2, ...) or
            ``round-robin`` (sentence 1 of each document, then sentence 2, ...).
        include_title: put the cluster's ``title`` (when it has one) first, as
            one unit of the reading order; Liu & Lapata (2019)'s WikiSum Lead
            "concatenates the title and ranked paragraphs".

    Returns:
        The chosen sentences in reading order.
    """
    if num_sentences is not None and num_tokens is not None:
        raise ValueError("give num_sentences or num_tokens, not both")
    if order not in LEAD_ORDERS:
        raise ValueError(f"order must be one of {LEAD_ORDERS}, got {order!r}")
    if num_sentences is None and num_tokens is None:
        num_sentences = DEFAULT_NUM_SENTENCES
    limit = num_sentences if num_sentences is not None else num_tokens
    if limit < 1:
        raise ValueError("the lead length must be at least 1")
    per_document = cluster_sentences(cluster)
    if order == "sequential":
        ordered = _flatten(per_document)
    else:
        longest = max((len(sentences) for sentences in per_document), default=0)
        ordered = [
            sentences[position]
            for position in range(longest)
            for sentences in per_document
            if position < len(sentences)
        ]
    title = " ".join(str(cluster.get("title") or "").split())
    if include_title and title:
        ordered = [title] + ordered
    if num_sentences is not None:
        return ordered[:num_sentences]
    return _take_words(ordered, num_tokens)


# ---------------------------------------------------------------------------
# LexRank


def lexrank(
    cluster: Mapping,
    num_sentences: int = DEFAULT_NUM_SENTENCES,
    max_words: Optional[int] = None,
    threshold: float = 0.1,
    damping: float = 0.85,
    weighted: bool = False,
    redundancy_threshold: Optional[float] = None,
) -> List[str]:
    """LexRank baseline.

    Args:
        cluster: a raw-contract cluster (needs ``documents``).
        num_sentences: how many sentences to take when ``max_words`` is None.
        max_words: word budget; sentences are taken by rank until it is
            reached and the last one is cut to fit, so the summary holds
            exactly ``max_words`` words unless the sentences it may take
            (those not skipped as redundant) hold fewer (``num_sentences`` is
            then ignored).
        threshold: similarity threshold for an edge (0.1 as in Erkan & Radev).
        damping: PageRank damping factor.
        weighted: continuous LexRank (similarity-weighted edges).
        redundancy_threshold: if given, skip a sentence whose cosine
            similarity to an already chosen sentence is above this value.

    Returns:
        The chosen sentences in document order.
    """
    sentences = [s for s in _flatten(cluster_sentences(cluster)) if words(s)]
    if not sentences:
        return []
    if max_words is None and num_sentences < 1:
        raise ValueError("num_sentences must be at least 1")
    if max_words is not None and max_words < 1:
        raise ValueError("max_words must be at least 1")
    similarity = tfidf_cosine_matrix(sentences)
    scores = lexrank_scores(sentences, threshold=threshold, damping=damping, weighted=weighted, similarity=similarity)
    ranked = sorted(range(len(sentences)), key=lambda index: (-scores[index], index))
    chosen: Dict[int, str] = {}
    words_used = 0
    for index in ranked:
        if redundancy_threshold is not None and any(similarity[index][c] > redundancy_threshold for c in chosen):
            continue
        sentence = sentences[index]
        if max_words is not None:
            length = len(sentence.split())
            if words_used + length >= max_words:
                chosen[index] = _truncate_words(sentence, max_words - words_used)
                break
            words_used += length
        chosen[index] = sentence
        if max_words is None and len(chosen) == num_sentences:
            break
    return [chosen[index] for index in sorted(chosen)]


# ---------------------------------------------------------------------------
# Greedy oracle


def _ngram_counts(tokens: Sequence[str], n: int) -> Counter:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def _f1(candidate: Counter, candidate_total: int, reference: Counter, reference_total: int) -> float:
    if not candidate_total or not reference_total:
        return 0.0
    hits = sum(min(count, reference[gram]) for gram, count in candidate.items() if gram in reference)
    if not hits:
        return 0.0
    precision, recall = hits / candidate_total, hits / reference_total
    return 2 * precision * recall / (precision + recall)


def greedy_oracle(
    cluster: Mapping,
    summary: Optional[Sequence[str]] = None,
    max_sentences: Optional[int] = None,
    stemming: bool = True,
) -> List[str]:
    """Greedy extractive oracle maximising ROUGE-1 F1 + ROUGE-2 F1.

    Tokens are rouge-score's (lower-cased alphanumerics, Porter-stemmed when
    ``stemming``); n-grams are counted within sentences and summed.

    Args:
        cluster: a raw-contract cluster (``documents`` and ``summary`` or ``summaries``).
        summary: reference summary text(s) to use instead of the cluster's.
        max_sentences: stop after this many sentences even if ROUGE still grows.
        stemming: Porter stemming as in ROUGE ``-m``.

    Returns:
        The chosen sentences in document order (empty if nothing helps).
    """
    from rouge_score.tokenizers import DefaultTokenizer

    if summary is None:
        references = reference_summaries(cluster)
    else:
        references = [summary] if isinstance(summary, str) else list(summary)
    if not references:
        raise ValueError(f"cluster {cluster.get('id', '?')!r} has no reference summary for the oracle")
    tokenizer = DefaultTokenizer(use_stemmer=stemming)
    reference_grams = []
    for reference in references:
        tokens = tokenizer.tokenize(reference)
        reference_grams.append([(_ngram_counts(tokens, n), max(len(tokens) - n + 1, 0)) for n in (1, 2)])
    sentences = _flatten(cluster_sentences(cluster))
    sentence_grams = []
    for sentence in sentences:
        tokens = tokenizer.tokenize(sentence)
        sentence_grams.append([(_ngram_counts(tokens, n), max(len(tokens) - n + 1, 0)) for n in (1, 2)])

    def objective(selected_grams) -> float:
        total = 0.0
        for grams in reference_grams:
            for order in (0, 1):
                candidate, candidate_total = selected_grams[order]
                reference, reference_total = grams[order]
                total += _f1(candidate, candidate_total, reference, reference_total)
        return total / len(reference_grams)

    selected: List[int] = []
    current = [(Counter(), 0), (Counter(), 0)]
    best_value = 0.0
    while max_sentences is None or len(selected) < max_sentences:
        best_index, best_grams, best_candidate_value = None, None, best_value
        for index, grams in enumerate(sentence_grams):
            if index in selected:
                continue
            merged = [(current[o][0] + grams[o][0], current[o][1] + grams[o][1]) for o in (0, 1)]
            value = objective(merged)
            if value > best_candidate_value:
                best_index, best_grams, best_candidate_value = index, merged, value
        if best_index is None:
            break
        selected.append(best_index)
        current, best_value = best_grams, best_candidate_value
    return [sentences[index] for index in sorted(selected)]


# ---------------------------------------------------------------------------
# Command line


def cluster_word_budget(cluster: Mapping, args: argparse.Namespace) -> Optional[int]:
    """The word budget of one cluster under the command line's length options (None: a sentence count)."""
    if args.budget_from_reference:
        return reference_word_budget(cluster)
    if args.budget_preset is not None:
        return BUDGET_PRESETS[args.budget_preset].words
    return args.lead_tokens if args.method == "lead" else args.max_words


def length_description(args: argparse.Namespace) -> str:
    """How long the summaries are, as printed with them (an oracle length says so)."""
    if args.method == "oracle":
        limit = args.oracle_max_sentences
        return "until ROUGE stops improving" + (f", at most {limit} sentences" if limit else "")
    if args.budget_from_reference:
        return "ORACLE LENGTH: each cluster's word budget is its reference's word count"
    if args.budget_preset is not None:
        preset = BUDGET_PRESETS[args.budget_preset]
        return f"{preset.words} words (--budget-preset {args.budget_preset})"
    words = args.lead_tokens if args.method == "lead" else args.max_words
    if words is not None:
        return f"{words} words"
    sentences = args.lead_sentences if args.method == "lead" else args.num_sentences
    return f"{sentences or DEFAULT_NUM_SENTENCES} sentences"


def summarize_cluster(cluster: Mapping, args: argparse.Namespace) -> List[str]:
    """Run the baseline chosen on the command line on one cluster."""
    if args.method == "lead":
        budget = cluster_word_budget(cluster, args)
        return lead(
            cluster,
            num_sentences=None if budget is not None else args.lead_sentences,
            num_tokens=budget,
            order=args.lead_order,
            include_title=args.lead_title,
        )
    if args.method == "lexrank":
        return lexrank(
            cluster,
            num_sentences=args.num_sentences or DEFAULT_NUM_SENTENCES,
            max_words=cluster_word_budget(cluster, args),
            threshold=args.threshold,
            damping=args.damping,
            weighted=args.weighted,
            redundancy_threshold=args.redundancy_threshold,
        )
    return greedy_oracle(cluster, max_sentences=args.oracle_max_sentences, stemming=not args.no_stemming)


def build_parser() -> argparse.ArgumentParser:
    """Argument parser of ``mdsfair-baseline``."""
    parser = argparse.ArgumentParser(
        prog="mdsfair-baseline",
        description="Extractive baselines (Lead, LexRank, greedy oracle) on raw-contract JSONL clusters; "
        "writes one summary per line.",
    )
    parser.add_argument("input", help="raw-contract JSONL: one {id, documents, summary[, title]} object per line")
    parser.add_argument("-o", "--output", required=True, help="output file: one summary per line, in input order")
    parser.add_argument("--method", choices=METHODS, required=True, help="which baseline to run")
    parser.add_argument(
        "--separator",
        default=" ",
        help="string placed between the sentences of a summary (default: one space; must not contain a newline)",
    )
    budget_group = parser.add_argument_group(
        "word budget of lead and lexrank",
        "a word is a whitespace-separated token; the sentence that crosses the budget is cut at the word",
    )
    budget_choice = budget_group.add_mutually_exclusive_group()
    budget_choice.add_argument(
        "--budget-preset",
        choices=sorted(BUDGET_PRESETS),
        help="the data set's word budget: "
        + ", ".join(f"{name} {preset.words}" for name, preset in sorted(BUDGET_PRESETS.items()))
        + " (sources in the README and BUDGET_PRESETS); replaces --lead-sentences/--lead-tokens and "
        "--num-sentences/--max-words",
    )
    budget_choice.add_argument(
        "--budget-from-reference",
        action="store_true",
        help="ORACLE length: each cluster's budget is its reference's word count (mean over several "
        "references); uses the reference, labelled as an oracle in the output",
    )
    lead_group = parser.add_argument_group("lead")
    lead_limit = lead_group.add_mutually_exclusive_group()
    lead_limit.add_argument(
        "--lead-sentences",
        type=at_least(1),
        help=f"lead: number of sentences (default {DEFAULT_NUM_SENTENCES} without a word budget)",
    )
    lead_limit.add_argument(
        "--lead-tokens",
        type=at_least(1),
        help="lead: word budget instead: exactly the first N words of the reading order (last sentence cut at the word)",
    )
    lead_group.add_argument(
        "--lead-order",
        choices=LEAD_ORDERS,
        default="sequential",
        help="lead: document after document, or one sentence of each document in turn",
    )
    lead_group.add_argument(
        "--lead-title",
        action="store_true",
        help="lead: put the cluster's title first (Liu & Lapata 2019's WikiSum Lead: title + ranked paragraphs)",
    )
    lexrank_group = parser.add_argument_group("lexrank")
    lexrank_group.add_argument(
        "--num-sentences",
        type=at_least(1),
        help=f"lexrank: sentences to select without a word budget (default {DEFAULT_NUM_SENTENCES})",
    )
    lexrank_group.add_argument(
        "--max-words",
        type=at_least(1),
        help="lexrank: word budget instead of --num-sentences (last sentence cut at the word)",
    )
    lexrank_group.add_argument(
        "--threshold",
        type=number_between(0, 1, high_inclusive=False),
        default=0.1,
        help="lexrank: cosine threshold for a graph edge (default 0.1, Erkan & Radev)",
    )
    lexrank_group.add_argument(
        "--damping",
        type=number_between(0, 1, low_inclusive=False, high_inclusive=False),
        default=0.85,
        help="lexrank: PageRank damping factor",
    )
    lexrank_group.add_argument(
        "--weighted", action="store_true", help="lexrank: weight edges by similarity (continuous LexRank)"
    )
    lexrank_group.add_argument(
        "--redundancy-threshold",
        type=number_between(0, 1, low_inclusive=False),
        help="lexrank: skip sentences whose cosine similarity to a chosen one exceeds this (off by default)",
    )
    oracle_group = parser.add_argument_group("oracle")
    oracle_group.add_argument(
        "--oracle-max-sentences",
        type=at_least(1),
        help="oracle: stop after this many sentences (default: when ROUGE stops improving)",
    )
    oracle_group.add_argument("--no-stemming", action="store_true", help="oracle and --score: no Porter stemming")
    parser.add_argument(
        "--score",
        nargs="?",
        const="official",
        choices=["official", "fast"],
        help="also print ROUGE of the summaries against the JSONL references "
        "(official ROUGE-1.5.5 by default, or 'fast' for rouge-score)",
    )
    return parser


def cli_main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``mdsfair-baseline``; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if "\n" in args.separator:
        parser.error("--separator must not contain a newline (one summary per line)")
    for name in ("lead_sentences", "lead_tokens", "num_sentences", "max_words", "oracle_max_sentences"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    budget_flag = (
        "--budget-preset" if args.budget_preset else "--budget-from-reference" if args.budget_from_reference else None
    )
    if budget_flag is not None:
        if args.method == "oracle":
            parser.error(f"{budget_flag} applies to lead and lexrank; the oracle stops when ROUGE stops improving")
        own = {"lead": ("lead_sentences", "lead_tokens"), "lexrank": ("num_sentences", "max_words")}[args.method]
        given = [f"--{name.replace('_', '-')}" for name in own if getattr(args, name) is not None]
        if given:
            parser.error(f"{budget_flag} sets the length; it cannot be combined with {' / '.join(given)}")
    problem = check_output_paths([("-o/--output", args.output)], inputs=[args.input])
    if problem is not None:
        parser.error(problem)
    try:
        clusters = read_clusters(args.input)
    except (ClusterFormatError, OSError) as error:
        parser.error(str(error))
    if not clusters:
        parser.error(f"{args.input} holds no clusters")
    summaries = []
    for cluster in clusters:
        try:
            sentences = summarize_cluster(cluster, args)
        except ValueError as error:
            parser.error(f"{args.input}, cluster {cluster['id']!r}: {error}")
        sentences = [" ".join(sentence.split()) for sentence in sentences]
        if not sentences:
            logger.warning("cluster %r: the %s baseline produced an empty summary", cluster["id"], args.method)
        summaries.append(sentences)
    try:
        with atomic_text_file(args.output) as handle:  # no partial file on an error or Ctrl-C
            for sentences in summaries:
                handle.write(args.separator.join(sentences) + "\n")
    except OSError as error:
        parser.error(f"-o/--output {args.output}: {error.strerror or error}")
    length = length_description(args)
    print(f"wrote {len(summaries)} {args.method} summaries ({length}) to {args.output}", file=sys.stderr)
    if args.score:
        from mdsfair.evaluation.inputs import RougeInputError
        from mdsfair.evaluation.rouge155 import RougeDependencyError
        from mdsfair.evaluation.score_table import format_table
        from mdsfair.evaluation.scoring import score_sentences

        references = [[split_sentences(text) for text in reference_summaries(c)] for c in clusters]
        try:
            result = score_sentences(summaries, references, fast=args.score == "fast", stemming=not args.no_stemming)
        except (RougeInputError, RougeDependencyError) as error:
            parser.error(f"--score: {error}")
        print(f"{args.method} ({length})")
        print(format_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
