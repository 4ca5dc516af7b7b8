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

Two methods select *sentences* up to a length budget instead, for LoBART
(Manakul & Gales 2021, Sec. 4; :mod:`mdsfair.preprocess.content_selection`):

``mcs``
    a trained ``lobart_mcs`` checkpoint (task ``content_selection``) scores
    every sentence with ``f_MCS``, the geometric mean of the rank-normalised
    decoded sentence attention and extractive probability
    (``--selection-score attention|extraction`` takes one of the two alone);
``oracle``
    the training-time selection: sentences by ROUGE-2 recall against the
    reference, ties as ``--oracle-padding`` says.

Each keeps the best-ranked sentences whose lengths fit in
``--max-source-tokens`` (in the summarizer's subword tokens with
``--gpt2-encoder-json``/``--gpt2-vocab-bpe`` or ``--sentencepiece-model``,
else in white-space separated words) and writes them in their original
order; a cluster within the budget is kept whole. Each output line records
``"selected_sentences"`` (source ``[document, paragraph, sentence]`` of each
kept sentence), ``"sentence_scores"`` and ``"selection"`` (the budget, the
tokens kept, and the sentences and tokens dropped); the totals go to the
standard error.

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
    mdsfair-rank --input raw/test.jsonl --output selected/test.jsonl --method mcs \\
        --checkpoint selector/checkpoint_best.pt --max-source-tokens 4094 \\
        --gpt2-encoder-json encoder.json --gpt2-vocab-bpe vocab.bpe
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
from mdsfair.preprocess.content_selection import ORACLE_PADDINGS
from mdsfair.text import rouge_l_recall, rouge_tokens

logger = logging.getLogger("mdsfair.rank")

METHODS = ("ranker", "tfidf", "original", "mcs", "oracle")
#: The methods that select sentences within --max-source-tokens (the others rank paragraphs).
SELECTION_METHODS = ("mcs", "oracle")


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


def load_trained(checkpoint: str, data: Optional[str], task_class: str, task_name: str, device: str):
    """The model (in evaluation mode, on ``device``) and task of a checkpoint
    trained with ``--task task_name`` (whose class is named ``task_class``);
    ``data`` overrides the ``--data`` it was trained with (its dictionary's folder)."""
    from fairseq import checkpoint_utils

    import mdsfair

    mdsfair.register()  # the task and model, the checkpoint checks

    overrides = {"data": data} if data else {}
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([checkpoint], arg_overrides=overrides)
    if type(task).__name__ != task_class:
        raise ValueError(f"{checkpoint} was not trained with --task {task_name}")
    return models[0].eval().to(device), task


class RankerScorer:
    """Scores a cluster's paragraphs with a trained ``paragraph_ranker``."""

    def __init__(
        self, checkpoint: str, ranker_data: Optional[str] = None, batch_paragraphs: int = 256, device: str = "cpu"
    ):
        self.model, self.task = load_trained(
            checkpoint, ranker_data, "ParagraphRankingTask", "paragraph_ranking", device
        )
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


class ContentSelectorScorer:
    """Scores a cluster's sentences with a trained ``lobart_mcs`` model
    (Manakul & Gales 2021, Sec. 4): ``f_MCS`` (``score="mcs"``), or the
    rank-normalised decoded sentence attention (``"attention"``) or
    extractive probability (``"extraction"``) alone, as the authors'
    ``--inference_mode mcs|attn|ext``. Only the first ``--max-sentences``
    sentences the model was trained with are scored."""

    SCORES = ("mcs", "attention", "extraction")

    def __init__(
        self,
        checkpoint: str,
        selector_data: Optional[str] = None,
        device: str = "cpu",
        score: str = "mcs",
        beam: int = 4,
        max_steps: int = 144,
        length_penalty: float = 1.25,
    ):
        if score not in self.SCORES:
            raise ValueError(f"selection score {score!r}: expected one of {', '.join(self.SCORES)}")
        self.model, self.task = load_trained(
            checkpoint, selector_data, "ContentSelectionTask", "content_selection", device
        )
        self.device = device
        self.score = score
        self.decoding = {"beam": beam, "max_steps": max_steps, "length_penalty": length_penalty}

    def __call__(self, sentences: Sequence[str]) -> np.ndarray:
        """Scores of the scored sentences (the first ones), in their order."""
        import torch
        from fairseq.data import data_utils

        from mdsfair.preprocess.content_selection import mcs_scores, rank_normalised

        encoded = self.task.encode_sentences(list(sentences))
        tokens = data_utils.collate_tokens(encoded, self.task.dictionary.pad()).unsqueeze(0).to(self.device)
        eos = self.task.dictionary.eos()
        with torch.no_grad():
            encoder_out = self.model.encode(tokens)
            extraction = torch.sigmoid(self.model.extraction_logits(encoder_out).float())[0].cpu().numpy()
            if self.score == "extraction":
                return rank_normalised(extraction)
            attention = self.model.decoded_attention(encoder_out, eos, eos, **self.decoding).cpu().numpy()
        return rank_normalised(attention) if self.score == "attention" else mcs_scores(attention, extraction)


def sentence_token_counter(args) -> Callable[[str], int]:
    """The length of a sentence in the summarizer's tokens: GPT-2 BPE tokens
    (``--gpt2-encoder-json`` and ``--gpt2-vocab-bpe``), SentencePiece pieces
    (``--sentencepiece-model``), else white-space separated words. A
    sentence is encoded as it reads in running text, after a space."""
    if args.gpt2_encoder_json or args.gpt2_vocab_bpe:
        if not (args.gpt2_encoder_json and args.gpt2_vocab_bpe):
            raise SystemExit("mdsfair-rank: error: --gpt2-encoder-json and --gpt2-vocab-bpe go together")
        if args.sentencepiece_model:
            raise SystemExit("mdsfair-rank: error: give the GPT-2 BPE files or --sentencepiece-model, not both")
        from mdsfair.preprocess.subword import GPT2BPEEncoder

        encoder = GPT2BPEEncoder(args.gpt2_encoder_json, args.gpt2_vocab_bpe)
        return lambda sentence: len(encoder.encode(sentence, continues=True))
    if args.sentencepiece_model:
        from mdsfair.preprocess.subword import SentencePieceEncoder

        encoder = SentencePieceEncoder(args.sentencepiece_model)
        return lambda sentence: len(encoder.encode(sentence))
    return lambda sentence: len(sentence.split())


def with_cluster_fields(record: dict, cluster) -> dict:
    """``record`` with the cluster's title and, when it has several, every reference."""
    if cluster.title:
        record["title"] = cluster.title
    if len(cluster.references) > 1:  # keep every reference for evaluation
        record["summaries"] = cluster.references
    return record


def selected_record(cluster, scores: np.ndarray, selection, method: str, budget: int) -> dict:
    """The output line of a cluster whose sentences ``selection.kept``
    (stream indices, in order) were selected: each document keeps its
    selected sentences and its paragraph breaks; a document left without a
    sentence is dropped (and counted)."""
    kept, sources, documents = set(selection.kept), [], []
    for d, document in enumerate(cluster.documents):
        paragraphs = []
        for p, paragraph in enumerate(document):
            chosen = []
            for s, sentence in enumerate(paragraph):
                if len(sources) in kept:
                    chosen.append(sentence)
                sources.append([d, p, s])
            if chosen:
                paragraphs.append(" ".join(chosen))
        if paragraphs:
            documents.append("\n\n".join(paragraphs))
    record = {
        "id": cluster.id,
        "documents": documents,
        "summary": cluster.summary,
        "selected_sentences": [sources[i] for i in selection.kept],
        # None: a sentence of a cluster kept whole, or beyond the selector's --max-sentences
        "sentence_scores": [round(float(scores[i]), 6) if i < len(scores) else None for i in selection.kept],
        "selection": {
            "method": method,
            "budget": budget,
            "kept_tokens": selection.kept_tokens,
            "dropped_sentences": selection.dropped_sentences,
            "dropped_tokens": selection.dropped_tokens,
            "dropped_documents": len(cluster.documents) - len(documents),
        },
    }
    return with_cluster_fields(record, cluster)


def select_sentences(args, clusters, output) -> Counter:
    """Write the sentences ``--method mcs|oracle`` selects within
    ``--max-source-tokens`` of every cluster to ``output``; returns the
    totals (clusters, those over the budget, sentences and tokens kept and
    dropped, documents left empty, sentences the selector could not score)."""
    from mdsfair.preprocess.content_selection import (
        cluster_sentences,
        oracle_order,
        select_within_budget,
        sentence_recalls,
    )

    method, budget = args.method[0], args.max_source_tokens
    count_tokens = sentence_token_counter(args)
    scorer = None
    if method == "mcs":
        if not args.checkpoint:
            raise SystemExit("mdsfair-rank: error: --method mcs needs --checkpoint (a lobart_mcs model)")
        scorer = ContentSelectorScorer(
            args.checkpoint,
            args.selector_data,
            device=args.device,
            score=args.selection_score,
            beam=args.mcs_beam,
            max_steps=args.mcs_decode_steps,
            length_penalty=args.mcs_length_penalty,
        )
    rng = np.random.default_rng(args.seed)
    totals = Counter()
    for cluster in clusters:
        sentences = cluster_sentences(cluster)
        lengths = [count_tokens(sentence) for sentence in sentences]
        # within the budget: kept whole, nothing to score (the oracle without padding still keeps only
        # the sentences that share a bigram with the reference, as the authors' oracle_select_nopad.py)
        if sum(lengths) <= budget and not (method == "oracle" and args.oracle_padding == "none"):
            scores, order = np.zeros(0), range(len(sentences))
        else:
            totals["over_budget"] += int(sum(lengths) > budget)
            if scorer is not None:
                scores = scorer(sentences)
                totals["unscored_sentences"] += len(sentences) - len(scores)
                order = rank_order(scores)
            else:
                words = [rouge_tokens(sentence) for sentence in sentences]
                scores = sentence_recalls(words, rouge_tokens(cluster.summary))
                order = oracle_order(scores, args.oracle_padding, rng, [len(w) for w in words])
        selection = select_within_budget(order, lengths, budget)
        record = selected_record(cluster, scores, selection, method, budget)
        output.write(json.dumps(record, ensure_ascii=False) + "\n")
        totals["clusters"] += 1
        totals["kept_sentences"] += len(selection.kept)
        totals["kept_tokens"] += selection.kept_tokens
        totals["dropped_sentences"] += selection.dropped_sentences
        totals["dropped_tokens"] += selection.dropped_tokens
        totals["dropped_documents"] += record["selection"]["dropped_documents"]
    return totals


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
        "and/or report Table 1's ROUGE-L recall of the top paragraphs; or select the sentences of each cluster "
        "that fit a summarizer's input (LoBART's content selection MCS, or the ROUGE oracle for training data).",
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
    parser.add_argument(
        "--checkpoint", help="paragraph_ranker checkpoint for --method ranker; lobart_mcs checkpoint for --method mcs"
    )
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
    parser.add_argument("--device", default="cpu", help="torch device for the ranker or the content selector")
    selection = parser.add_argument_group("sentence selection (--method mcs or oracle; LoBART, Sec. 4)")
    selection.add_argument(
        "--max-source-tokens",
        type=at_least(1),
        default=None,
        help="the budget: keep the best-ranked sentences whose lengths fit in N tokens, in their original order "
        "(required with --method mcs or oracle; LoBART(4k) reads 4,096 positions with <s> and </s>)",
    )
    selection.add_argument(
        "--gpt2-encoder-json", help="count sentence lengths in GPT-2 BPE tokens with this encoder.json (BART's)"
    )
    selection.add_argument("--gpt2-vocab-bpe", help="the vocab.bpe that goes with --gpt2-encoder-json")
    selection.add_argument(
        "--sentencepiece-model",
        help="count sentence lengths in the pieces of this SentencePiece model (default without it or the GPT-2 "
        "files: white-space separated words)",
    )
    selection.add_argument(
        "--selector-data",
        help="directory with the selector's dict.selector.txt (default: the --data the checkpoint was trained with)",
    )
    selection.add_argument(
        "--selection-score",
        choices=ContentSelectorScorer.SCORES,
        default="mcs",
        help="--method mcs: rank by f_MCS (default), or by the decoded sentence attention or the extractive "
        "probability alone (the authors' --inference_mode mcs|attn|ext)",
    )
    selection.add_argument(
        "--mcs-beam", type=at_least(1), default=4, help="--method mcs: beam of the decoding that gives the attention"
    )
    selection.add_argument(
        "--mcs-decode-steps",
        type=at_least(1),
        default=144,
        help="--method mcs: decode at most N words (the authors' --time_step: 144 by default, 240 for arXiv)",
    )
    selection.add_argument(
        "--mcs-length-penalty",
        type=float,
        default=1.25,
        help="--method mcs: a finished hypothesis scores its log-probability over its length to this power "
        "(the authors' --alpha)",
    )
    selection.add_argument(
        "--oracle-padding",
        choices=ORACLE_PADDINGS,
        default="random",
        help="--method oracle: the order of sentences of equal ROUGE-2 recall (those sharing no bigram with the "
        "reference pad the input): random (the authors' ORC_padrand), lead (document order, ORC_padlead) or none "
        "(left out, ORC_nopad)",
    )
    selection.add_argument("--seed", type=int, default=0, help="--oracle-padding random: seed of the shuffle")
    return parser


def check_selection_arguments(args) -> None:
    """Refuse a mix of ranking and selection and the flags of the other kind."""
    chosen = [method for method in args.method if method in SELECTION_METHODS]
    if not chosen:
        if args.max_source_tokens is not None:
            raise SystemExit("mdsfair-rank: error: --max-source-tokens applies to --method mcs or oracle")
        return
    method = chosen[0]
    if len(args.method) > 1:
        raise SystemExit(f"mdsfair-rank: error: --method {method} selects sentences and runs alone")
    if args.evaluate or not args.output:
        raise SystemExit(
            f"mdsfair-rank: error: --method {method} selects sentences into --output; --evaluate reports Table 1 "
            "for paragraph rankings"
        )
    if args.max_source_tokens is None:
        raise SystemExit(f"mdsfair-rank: error: --method {method} needs --max-source-tokens (the budget)")
    if args.max_paragraphs is not None:
        raise SystemExit("mdsfair-rank: error: --max-paragraphs applies to the paragraph rankings")


def selection_summary(args, totals: Counter) -> str:
    """What ``--method mcs|oracle`` wrote and every cut it made."""
    unscored = totals["unscored_sentences"]
    beyond = f", {unscored} of them beyond the selector's --max-sentences" if unscored else ""
    return (
        f"wrote {totals['clusters']} clusters to {args.output} ({args.method[0]}, {args.max_source_tokens} tokens "
        f"each): {totals['over_budget']} over the budget; kept {totals['kept_sentences']} sentences "
        f"({totals['kept_tokens']} tokens), dropped {totals['dropped_sentences']} sentences "
        f"({totals['dropped_tokens']} tokens{beyond}) and {totals['dropped_documents']} documents left without "
        "a sentence"
    )


def run(argv: Optional[List[str]] = None) -> Dict[str, Dict[int, float]]:
    """Parse ``argv``, rank and/or evaluate; returns the Table 1 results."""
    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s", level=logging.INFO)
    args = get_parser().parse_args(argv)
    if not args.output and not args.evaluate:
        raise SystemExit("mdsfair-rank: error: give --output, --evaluate or both")
    check_selection_arguments(args)
    selecting = args.method[0] in SELECTION_METHODS
    problem = check_output_paths(
        [("--output", args.output), ("--report", args.report)], inputs=[args.input], creating_folders=["--output"]
    )
    if problem is not None:
        raise SystemExit(f"mdsfair-rank: error: {problem}")
    from mdsfair.preprocess.structure import InputFormatError, SentenceSplitter, read_clusters

    try:
        clusters = list(
            read_clusters(
                args.input, SentenceSplitter("rule"), require_summary=args.evaluate or args.method == ["oracle"]
            )
        )
    except InputFormatError as e:
        raise SystemExit(f"mdsfair-rank: error: {e}")
    scorers = {} if selecting else {method: build_scorer(method, args) for method in args.method}
    totals = {method: Counter() for method in args.method}
    if args.output and os.path.dirname(args.output):
        os.makedirs(os.path.dirname(args.output), exist_ok=True)  # the recipe's ranked/{split}.jsonl
    # Atomic: an error or Ctrl-C half-way leaves no partial ranked file.
    with atomic_text_file(args.output) if args.output else contextlib.nullcontext() as output:
        if selecting:
            totals[args.method[0]] = select_sentences(args, clusters, output)
        for cluster in clusters if not selecting else ():
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
                    output.write(json.dumps(with_cluster_fields(record, cluster), ensure_ascii=False) + "\n")
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
    if selecting:
        print(selection_summary(args, totals[args.method[0]]), file=sys.stderr)
    elif args.output:
        print(f"wrote {len(clusters)} ranked clusters to {args.output}", file=sys.stderr)
    return results


@os_errors_in_one_line("mdsfair-rank")
def cli_main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``mdsfair-rank``; returns the exit status."""
    run(argv)
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
