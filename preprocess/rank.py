"""``mdsfair-rank``: rank the paragraphs of raw JSONL clusters before
``mdsfair-preprocess`` (Liu & Lapata 2019, Section 3.1 and Table 1).

Methods:

``ranker``
    a trained ``paragraph_ranker`` checkpoint (task ``paragraph_ranking``)
    scores every paragraph (Eq. 6); paragraphs are sorted by score.
``tfidf``
    the baseline of Liu et al. (2018): tf-idf cosine similarity between each
    paragraph and the cluster title (idf over the cluster's paragraphs).
``original``
    keep the stream order (for comparison).

Output (``--output``): the same clusters with their paragraphs in ranked
order, optionally only the top ``--max-paragraphs``. The data contract reads
paragraphs in stream order, so every output "document" is a run of ranked
paragraphs that were consecutive in one source document (``<s>`` then marks
these runs, and the discourse graph's adjacency stays true to the source).
Each output line also records ``"ranked_paragraphs"`` (source ``[document,
paragraph]`` of every paragraph) and ``"paragraph_scores"``.

``--evaluate`` prints Table 1's metric for every method given: ROUGE-L
recall of the concatenated top L' paragraphs (``--top``, default 5 10 20 40)
against the gold summary, averaged over clusters.

    mdsfair-rank --input raw/test.jsonl --output ranked/test.jsonl \\
        --method ranker --checkpoint ranker/checkpoint_best.pt --max-paragraphs 40
    mdsfair-rank --input raw/test.jsonl --evaluate --method ranker tfidf \\
        --checkpoint ranker/checkpoint_best.pt
"""

import argparse
import contextlib
import json
import logging
import math
import os
import sys
from collections import Counter
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from mdsfair.argument_types import at_least, check_output_paths, os_errors_in_one_line
from mdsfair.data.manifest import atomic_text_file, write_json_atomic
from mdsfair.text import rouge_l_recall, rouge_tokens

logger = logging.getLogger("mdsfair.rank")

METHODS = ("ranker", "tfidf", "original")


def tfidf_title_scores(title: str, paragraphs: Sequence[str]) -> np.ndarray:
    """Cosine between the tf-idf vectors of the title and of each paragraph
    (idf = log(#paragraphs / #paragraphs containing the word))."""
    paragraph_counts = [Counter(rouge_tokens(p)) for p in paragraphs]
    document_frequency = Counter(w for c in paragraph_counts for w in c)
    num_paragraphs = len(paragraphs)

    def vector(counts: Counter) -> Dict[str, float]:
        return {
            w: c * math.log(num_paragraphs / document_frequency[w])
            for w, c in counts.items()
            if w in document_frequency
        }

    query = vector(Counter(rouge_tokens(title)))
    query_norm = math.sqrt(sum(v * v for v in query.values()))
    scores = np.zeros(num_paragraphs)
    for i, counts in enumerate(paragraph_counts):
        vec = vector(counts)
        norm = math.sqrt(sum(v * v for v in vec.values()))
        if norm > 0 and query_norm > 0:
            scores[i] = sum(query[w] * vec.get(w, 0.0) for w in query) / (norm * query_norm)
    return scores


class RankerScorer:
    """Scores a cluster's paragraphs with a trained ``paragraph_ranker``."""

    def __init__(
        self, checkpoint: str, ranker_data: Optional[str] = None, batch_paragraphs: int = 256, device: str = "cpu"
    ):
        from fairseq import checkpoint_utils

        import mdsfair

        mdsfair.register()  # the task and model, the checkpoint checks

        overrides = {"data": ranker_data} if ranker_data else {}
        models, _, task = checkpoint_utils.load_model_ensemble_and_task([checkpoint], arg_overrides=overrides)
        if type(task).__name__ != "ParagraphRankingTask":
            raise ValueError(f"{checkpoint} was not trained with --task paragraph_ranking")
        self.model = models[0].eval().to(device)
        self.task = task
        self.device = device
        self.batch_paragraphs = batch_paragraphs

    def __call__(self, cluster) -> np.ndarray:
        import torch

        with torch.no_grad():
            return self._score(cluster)

    def _score(self, cluster) -> np.ndarray:
        import torch
        from fairseq.data import data_utils

        title, paragraphs, _ = self.task.encode_cluster(cluster)
        pad = self.task.dictionary.pad()
        title_tokens = title.unsqueeze(0).to(self.device)
        scores = []
        for start in range(0, len(paragraphs), self.batch_paragraphs):
            chunk = paragraphs[start : start + self.batch_paragraphs]
            tokens = data_utils.collate_tokens(chunk, pad).to(self.device)
            cluster_index = torch.zeros(len(chunk), dtype=torch.long, device=self.device)
            scores.append(self.model.score(title_tokens, tokens, cluster_index).float().cpu())
        return torch.cat(scores).numpy()


def rank_order(scores: np.ndarray) -> np.ndarray:
    """Paragraph indices by decreasing score; ties keep stream order."""
    return np.argsort(-scores, kind="stable")


def ranked_documents(cluster, order: Sequence[int]) -> List[str]:
    """Group the ranked paragraphs into runs that were consecutive in one
    source document; each run becomes one output document."""
    sources = [(d, p) for d, doc in enumerate(cluster.documents) for p in range(len(doc))]
    texts = cluster.paragraphs()
    documents, current, previous = [], [], None
    for index in order:
        source = sources[index]
        if previous is not None and source != (previous[0], previous[1] + 1):
            documents.append("\n\n".join(current))
            current = []
        current.append(texts[index])
        previous = source
    if current:
        documents.append("\n\n".join(current))
    return documents


def rouge_l_recall_at(cluster, order: Sequence[int], tops: Sequence[int]) -> Dict[int, float]:
    """Table 1: ROUGE-L recall of the top-L' paragraphs against the summary."""
    summary = rouge_tokens(cluster.summary)
    paragraph_words = [rouge_tokens(p) for p in cluster.paragraphs()]
    result = {}
    for top in tops:
        candidate = [w for index in order[:top] for w in paragraph_words[index]]
        result[top] = rouge_l_recall(candidate, summary)
    return result


def build_scorer(method: str, args) -> Callable:
    if method == "ranker":
        if not args.checkpoint:
            raise SystemExit("mdsfair-rank: error: --method ranker needs --checkpoint")
        return RankerScorer(args.checkpoint, args.ranker_data, device=args.device)
    if method == "tfidf":

        def tfidf(cluster):
            if not cluster.title:
                raise ValueError(
                    f"cluster {cluster.id}: the tf-idf baseline ranks by similarity to the title, "
                    "but the cluster has none"
                )
            return tfidf_title_scores(cluster.title, cluster.paragraphs())

        return tfidf
    return lambda cluster: -np.arange(cluster.num_paragraphs, dtype=np.float64)


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mdsfair-rank",
        description="Rank the paragraphs of raw JSONL clusters (learned ranker or tf-idf title similarity) "
        "and/or report Table 1's ROUGE-L recall of the top paragraphs.",
    )
    parser.add_argument("--input", required=True, help="raw clusters, one JSON object per line")
    parser.add_argument("--output", help="write the ranked clusters here (JSONL, ready for mdsfair-preprocess)")
    parser.add_argument(
        "--method",
        nargs="+",
        choices=METHODS,
        default=["ranker"],
        help="ranking method(s); the first one writes --output (default: ranker)",
    )
    parser.add_argument("--checkpoint", help="paragraph_ranker checkpoint for --method ranker")
    parser.add_argument(
        "--ranker-data",
        help="directory with the ranker's dict.ranker.txt (default: the --data the checkpoint was trained with)",
    )
    parser.add_argument(
        "--max-paragraphs",
        type=at_least(1),
        default=None,
        help="keep only the top N paragraphs in --output (hiersumm keeps 40; default: all)",
    )
    parser.add_argument(
        "--evaluate",
        action="store_true",
        help="print ROUGE-L recall of the top L' paragraphs against the summary (Table 1)",
    )
    parser.add_argument("--top", type=at_least(1), nargs="+", default=[5, 10, 20, 40], help="L' values for --evaluate")
    parser.add_argument("--report", help="also write the --evaluate figures as JSON here")
    parser.add_argument("--device", default="cpu", help="torch device for the ranker")
    return parser


def run(argv: Optional[List[str]] = None) -> Dict[str, Dict[int, float]]:
    """Parse ``argv``, rank and/or evaluate; returns the Table 1 results."""
    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s", level=logging.INFO)
    args = get_parser().parse_args(argv)
    if not args.output and not args.evaluate:
        raise SystemExit("mdsfair-rank: error: give --output, --evaluate or both")
    problem = check_output_paths(
        [("--output", args.output), ("--report", args.report)], inputs=[args.input], creating_folders=["--output"]
    )
    if problem is not None:
        raise SystemExit(f"mdsfair-rank: error: {problem}")
    from mdsfair.preprocess.structure import InputFormatError, SentenceSplitter, read_clusters

    try:
        clusters = list(read_clusters(args.input, SentenceSplitter("rule"), require_summary=args.evaluate))
    except InputFormatError as e:
        raise SystemExit(f"mdsfair-rank: error: {e}")
    scorers = {method: build_scorer(method, args) for method in args.method}
    totals = {method: Counter() for method in args.method}
    if args.output and os.path.dirname(args.output):
        os.makedirs(os.path.dirname(args.output), exist_ok=True)  # the recipe's ranked/{split}.jsonl
    # Atomic: an error or Ctrl-C half-way leaves no partial ranked file.
    with atomic_text_file(args.output) if args.output else contextlib.nullcontext() as output:
        for cluster in clusters:
            for position, (method, scorer) in enumerate(scorers.items()):
                try:
                    scores = np.asarray(scorer(cluster), dtype=np.float64)
                except ValueError as e:
                    raise SystemExit(f"mdsfair-rank: error: {e}")
                order = rank_order(scores)
                if args.evaluate:
                    totals[method].update(rouge_l_recall_at(cluster, order, args.top))
                if output is not None and position == 0:
                    kept = order[: args.max_paragraphs]
                    sources = [(d, p) for d, doc in enumerate(cluster.documents) for p in range(len(doc))]
                    record = {
                        "id": cluster.id,
                        "documents": ranked_documents(cluster, kept),
                        "summary": cluster.summary,
                        "ranked_paragraphs": [list(sources[i]) for i in kept],
                        "paragraph_scores": [round(float(scores[i]), 6) for i in kept],
                    }
                    if cluster.title:
                        record["title"] = cluster.title
                    if len(cluster.references) > 1:  # keep every reference for evaluation
                        record["summaries"] = cluster.references
                    output.write(json.dumps(record, ensure_ascii=False) + "\n")
    results = {}
    if args.evaluate:
        header = "method      " + "".join(f"L'={top:<8d}" for top in args.top)
        lines = [f"ROUGE-L recall of the top L' paragraphs ({len(clusters)} clusters of {args.input})", header]
        for method in args.method:
            results[method] = {top: 100.0 * totals[method][top] / len(clusters) for top in args.top}
            lines.append(f"{method:<12}" + "".join(f"{results[method][top]:<11.2f}" for top in args.top))
        print("\n".join(lines))
        if args.report:
            write_json_atomic(args.report, {m: {str(k): v for k, v in r.items()} for m, r in results.items()}, indent=2)
    if args.output:
        print(f"wrote {len(clusters)} ranked clusters to {args.output}", file=sys.stderr)
    return results


@os_errors_in_one_line("mdsfair-rank")
def cli_main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``mdsfair-rank``; returns the exit status."""
    run(argv)
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
