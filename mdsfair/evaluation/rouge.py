"""ROUGE for mdsfair: files2rouge-compatible official scores, or a fast scorer.

Command line (``mdsfair-rouge`` or ``python -m mdsfair.evaluation.rouge``)::

    mdsfair-rouge HYP REF                      # official ROUGE-1.5.5
    mdsfair-rouge HYP --ref a.txt --ref b.txt  # several references
    mdsfair-rouge generate.log                 # fairseq-generate output, references from its data-bin
    mdsfair-rouge HYP --data-bin DIR --split test   # plain hypotheses, references from a data-bin
    mdsfair-rouge HYP REF --fast               # rouge-score + our ROUGE-SU4

Inputs
------
* HYP: one hypothesis per line, or a fairseq-generate log (detected by its
  ``H-<id>``/``D-<id>`` lines; see :mod:`mdsfair.evaluation.fairseq_output`).
* REF: one reference per line, line ``i`` belonging to hypothesis ``i``.
  **Several references** are given as several parallel files (positional REF
  arguments and/or repeated ``--ref``), all with as many lines as HYP. An
  empty line in a reference file means "this file has no reference for this
  cluster" (so clusters may have different numbers of references); every
  cluster needs at least one non-empty reference.
* Without REF files the references are the full, uncut summaries that
  ``mdsfair-preprocess`` stored in the data-bin (``{split}.summary.txt``):
  the data-bin and split given with ``--data-bin`` / ``--split``, or, for a
  fairseq-generate log, the ones the task names in the log (its line
  ``split S of data-bin D: N clusters, ...``). The log's ``T-`` lines are the
  targets as the task served them, cut at the model's target limit; they are
  used only with ``--target-lines``.
* Every cluster must have a hypothesis: the expected number is the split's
  cluster count in the data-bin manifest, ``--expected N``, or the REF files'
  line count. A fairseq-generate log with missing ids (cut short, or clusters
  skipped with ``--skip-invalid-size-inputs-valid-test``) is refused with the
  missing ids named.
* Sentences: each line is split with the rule-based splitter of
  :mod:`mdsfair.text`, or on an explicit marker given with
  ``--sentence-separator`` (the marker is removed).

Numbers
-------
``rouge-1``, ``rouge-2``, ``rouge-l``, ``rouge-lsum``, ``rouge-su4``, each with
recall ``r``, precision ``p`` and F1 ``f`` as fractions in [0, 1] (the table
prints them x100 with 2 decimals), averaged over clusters.

* Official (default): ROUGE-1.5.5 with files2rouge's options
  ``-c 95 -r 1000 -n 2 -a -m`` plus ``-2 4 -u``. ``rouge-lsum`` is the
  script's ROUGE-L on sentence-split files (summary-level union LCS: what
  files2rouge reports as ROUGE-L for multi-sentence lines); ``rouge-l`` is the
  script's ROUGE-L with each summary on a single line (plain LCS). Several
  references: ``--multi-ref-mode average`` (``-f A``, the default of the
  script and of files2rouge) or ``best`` (``-f B``). Details:
  :mod:`mdsfair.evaluation.rouge155`.
* ``--fast``: rouge-score's ``rouge1``, ``rouge2``, ``rougeL``, ``rougeLsum``
  (sentences joined by newlines) with Porter stemming, and our ROUGE-SU4
  (:mod:`mdsfair.evaluation.fast_rouge`). Several references: per metric the
  reference with the best F1 (rouge-score's ``score_multi`` convention).

An empty hypothesis is valid (it scores 0); empty hypotheses are counted and
a warning is logged.

Hypotheses and references are scored in Unicode NFC, the form
``mdsfair-preprocess`` stores its text in: the same word in NFD (a letter and
a combining accent) and in NFC would otherwise not match (both scorers drop
or split at the combining mark). Texts that change are counted in ``info``
(``nfc_normalized``), logged and noted below the table.
"""

import argparse
import logging
import sys
import unicodedata
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple, Union

from mdsfair.argument_types import at_least
from mdsfair.data.manifest import ManifestError, write_json_atomic
from mdsfair.evaluation.hypotheses import load_hypotheses_and_references
from mdsfair.evaluation.inputs import RougeInputError, read_lines
from mdsfair.evaluation.outputs import check_output_paths

__all__ = [
    "RougeInputError",
    "read_lines",
    "load_hypotheses_and_references",
    "score",
    "score_sentences",
    "score_files",
    "format_table",
    "cli_main",
    "METRICS",
    "COLUMN_TITLES",
]
from mdsfair.evaluation.rouge155 import RougeDependencyError
from mdsfair.text import has_word, split_sentences

logger = logging.getLogger(__name__)

#: Metric keys in report order, and their column titles.
METRICS = ("rouge-1", "rouge-2", "rouge-l", "rouge-lsum", "rouge-su4")
COLUMN_TITLES = ("R-1", "R-2", "R-L", "R-Lsum", "R-SU4")
MEASURE_NAMES = {"f": "F1", "r": "recall", "p": "precision"}


def _normalise_references(
    hypotheses: Sequence[str], references: Sequence[Union[str, Sequence[str]]]
) -> List[List[str]]:
    if isinstance(references, str):
        raise TypeError("references must be a list (one entry per hypothesis), not a string")
    if len(hypotheses) != len(references):
        raise RougeInputError(
            f"{len(hypotheses)} hypotheses but {len(references)} references: "
            "need one reference (or one list of references) per hypothesis"
        )
    normalised = []
    for index, entry in enumerate(references):
        candidates = [entry] if isinstance(entry, str) else list(entry)
        non_empty = [text for text in candidates if text.strip()]
        if not non_empty:
            raise RougeInputError(f"hypothesis {index} has no non-empty reference")
        normalised.append(non_empty)
    return normalised


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def nfc_normalized(
    hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[Sequence[str]]]
) -> Tuple[List[List[str]], List[List[List[str]]], Dict[str, int]]:
    """Hypotheses (per cluster, its texts) and references (per cluster, per
    reference, its texts) in Unicode NFC, and how many hypotheses and
    references changed: ``{"hypotheses": n, "references": m}``."""
    hypotheses_nfc = [[_nfc(text) for text in cluster] for cluster in hypotheses]
    references_nfc = [[[_nfc(text) for text in reference] for reference in cluster] for cluster in references]
    changed = {
        "hypotheses": sum(new != list(old) for new, old in zip(hypotheses_nfc, hypotheses)),
        "references": sum(
            new != list(old)
            for cluster_new, cluster_old in zip(references_nfc, references)
            for new, old in zip(cluster_new, cluster_old)
        ),
    }
    return hypotheses_nfc, references_nfc, changed


def warn_nfc_normalized(changed: Dict[str, int], source: str) -> None:
    """Log how many texts of ``source`` :func:`nfc_normalized` changed."""
    if changed["hypotheses"] or changed["references"]:
        logger.warning(
            "%s: %d hypotheses and %d references are not in Unicode NFC; both are scored in NFC (composed "
            "accents), the form mdsfair-preprocess stores text in",
            source,
            changed["hypotheses"],
            changed["references"],
        )


def score_sentences(
    hypotheses: Sequence[Sequence[str]],
    references: Sequence[Sequence[Sequence[str]]],
    fast: bool = False,
    stemming: bool = True,
    multi_ref_mode: str = "average",
    resamples: int = 1000,
    keep_files: Optional[str] = None,
    per_cluster: bool = False,
) -> Dict[str, Dict]:
    """Score hypotheses that are already split into sentences.

    Args:
        hypotheses: per cluster, the hypothesis sentences (may be empty).
        references: per cluster, one or more references, each a sentence list.
        fast: use rouge-score and the Python ROUGE-SU4 instead of the Perl script.
        stemming: Porter stemming (files2rouge default: on).
        multi_ref_mode: official scorer only: ``average`` (-f A) or ``best`` (-f B).
        resamples: official scorer only: bootstrap resamples (-r).
        keep_files: official scorer only: keep the SPL/XML files in this (new) directory.
        per_cluster: also return every cluster's scores under ``"per_cluster"``
            (``result["per_cluster"][metric][measure]`` is a list in input order).

    Returns:
        ``{metric: {"r", "p", "f"[, "r_ci", "p_ci", "f_ci"]}, ..., "info": {...}}``
        with fractions in [0, 1]; the ``*_ci`` confidence intervals come only
        from the official scorer.
    """
    if len(hypotheses) != len(references):
        raise RougeInputError(f"{len(hypotheses)} hypotheses but {len(references)} reference sets")
    if not hypotheses:
        raise RougeInputError("nothing to score: there are no hypotheses")
    hypotheses, references, nfc_changed = nfc_normalized(hypotheses, references)
    warn_nfc_normalized(nfc_changed, "the summaries")
    # Empty references are dropped; every cluster must keep at least one.
    references = [[reference for reference in cluster if any(s.strip() for s in reference)] for cluster in references]
    for index, cluster_references in enumerate(references):
        if not cluster_references:
            raise RougeInputError(f"hypothesis {index} has no non-empty reference")
    empty = [i for i, sentences in enumerate(hypotheses) if not any(s.strip() for s in sentences)]
    if empty:
        logger.warning(
            "%d of %d hypotheses are empty (they score 0); first empty at index %d",
            len(empty),
            len(hypotheses),
            empty[0],
        )
    info: Dict[str, object] = {
        "num_hypotheses": len(hypotheses),
        "num_empty_hypotheses": len(empty),
        "max_references_per_hypothesis": max(len(r) for r in references),
        "stemming": stemming,
        "nfc_normalized": nfc_changed,
    }
    if fast:
        from mdsfair.evaluation.fast_rouge import FastRougeScorer

        scores, clusters = FastRougeScorer(stemming=stemming).score_corpus(hypotheses, references)
        info.update(scorer="rouge-score", multi_ref_mode="best-f1")
    else:
        from mdsfair.evaluation.rouge155 import run_rouge155

        scores, clusters, commands = run_rouge155(
            hypotheses,
            references,
            stemming=stemming,
            multi_ref_mode=multi_ref_mode,
            resamples=resamples,
            keep_files=keep_files,
        )
        info.update(
            scorer="ROUGE-1.5.5",
            multi_ref_mode=multi_ref_mode,
            rouge_args_sentence_split=commands[0][2:-1],
            rouge_args_single_line=commands[1][2:-1],
        )
    result: Dict[str, Dict] = {metric: scores[metric] for metric in METRICS}
    result["info"] = info
    if per_cluster:
        result["per_cluster"] = clusters
    return result


def score(
    hyps: Sequence[str],
    refs: Sequence[Union[str, Sequence[str]]],
    fast: bool = False,
    sentence_separator: Optional[str] = None,
    stemming: bool = True,
    multi_ref_mode: str = "average",
    resamples: int = 1000,
    keep_files: Optional[str] = None,
    per_cluster: bool = False,
) -> Dict[str, Dict]:
    """ROUGE of summaries given as strings.

    Args:
        hyps: one hypothesis summary per cluster.
        refs: per cluster, one reference string or a list of reference strings.
        fast: rouge-score (+ Python ROUGE-SU4) instead of ROUGE-1.5.5.
        sentence_separator: split summaries on this marker instead of the rules.
        stemming, multi_ref_mode, resamples, keep_files, per_cluster: see
            :func:`score_sentences`.

    Returns:
        See :func:`score_sentences`.
    """
    references = _normalise_references(hyps, refs)
    return score_sentences(
        [split_sentences(h, sentence_separator) for h in hyps],
        [[split_sentences(r, sentence_separator) for r in rs] for rs in references],
        fast=fast,
        stemming=stemming,
        multi_ref_mode=multi_ref_mode,
        resamples=resamples,
        keep_files=keep_files,
        per_cluster=per_cluster,
    )


def warn_wordless_references(references: Sequence[Sequence[str]], source) -> int:
    """Warn, per cluster, about a cluster whose every reference has no word
    (only punctuation or symbols): every ROUGE of it is 0 whatever the
    hypothesis. Returns how many clusters that is. ``source`` names where
    the references came from (a path, or several: each line then names the
    first, whose line numbers are the clusters')."""
    if isinstance(source, (list, tuple)):
        source = source[0] if len(source) == 1 else f"{source[0]} (and {len(source) - 1} more reference files)"
    wordless = 0
    for index, cluster in enumerate(references):
        if cluster and not any(has_word(reference) for reference in cluster):
            wordless += 1
            logger.warning(
                "%s:%d: cluster %d: its reference has no word (%r): it scores 0 in every ROUGE",
                source,
                index + 1,
                index,
                cluster[0][:60],
            )
    return wordless


#: The longest summary (in whitespace-separated words) scored unless
#: --max-summary-words raises it: ROUGE-1.5.5's memory grows with the square of
#: a summary's length (a 30,000-word line grew the Perl scorer to 22 GB) and
#: rouge-score's LCS with the product of the two lengths. The longest
#: references of the supported data sets are far below it (Multi-News about
#: 260 words, GovReport about 550, arXiv/PubMed abstracts about 200-300).
MAX_SUMMARY_WORDS = 5000


def check_summary_lengths(
    hypotheses: Sequence[str], references: Sequence[Sequence[str]], hyp_path: str, ref_source, limit: int
) -> None:
    """Refuse, before any scoring, a hypothesis or reference of more than
    ``limit`` words, naming its file and cluster."""
    for index, hypothesis in enumerate(hypotheses):
        words = len(hypothesis.split())
        if words > limit:
            raise RougeInputError(
                f"{hyp_path}: cluster {index} (line {index + 1} of a one-per-line file): the hypothesis has {words:,} "
                f"words, above --max-summary-words {limit:,}; ROUGE's memory and time grow with the square of a "
                "summary's length, so it is refused up front (raise the limit to score it anyway)"
            )
    if isinstance(ref_source, (list, tuple)):
        ref_source = ref_source[0] if len(ref_source) == 1 else f"{ref_source[0]} (and the other reference files)"
    for index, cluster in enumerate(references):
        for reference in [cluster] if isinstance(cluster, str) else cluster:
            words = len(reference.split())
            if words > limit:
                raise RougeInputError(
                    f"{ref_source}: cluster {index}: a reference has {words:,} words, above --max-summary-words "
                    f"{limit:,}; ROUGE's memory and time grow with the square of a summary's length, so it is "
                    "refused up front (raise the limit to score it anyway)"
                )


@dataclass
class ScoringInputs:
    """What :func:`load_scoring_inputs` read: the hypotheses, per hypothesis
    its references (both in NFC), and where they came from (``sources``:
    ``references``, ``data_bin``, ``split``, ``log_data_bin``,
    ``nfc_normalized``, ``wordless_references``)."""

    hyp_path: str
    ref_paths: List[str]
    hypotheses: List[str]
    references: List[List[str]]
    sources: Dict


def load_scoring_inputs(
    hyp_path: str,
    ref_paths: Optional[Union[str, Sequence[str]]] = None,
    gpt2_encoder_json: Optional[str] = None,
    gpt2_vocab_bpe: Optional[str] = None,
    data_bin: Optional[str] = None,
    split: Optional[str] = None,
    expected: Optional[int] = None,
    target_lines: bool = False,
    max_summary_words: int = MAX_SUMMARY_WORDS,
    ignore_log_data_bin: bool = False,
) -> ScoringInputs:
    """Read and check everything :func:`score_inputs` scores, without scoring
    (arguments: see :func:`score_files`): the hypotheses and references
    (:func:`load_hypotheses_and_references`), their lengths
    (:func:`check_summary_lengths`), both in NFC, wordless references warned about."""
    ref_paths = [ref_paths] if isinstance(ref_paths, str) else list(ref_paths or [])
    sources: Dict = {}
    hypotheses, references = load_hypotheses_and_references(
        hyp_path,
        ref_paths,
        gpt2_encoder_json,
        gpt2_vocab_bpe,
        data_bin=data_bin,
        split=split,
        expected=expected,
        target_lines=target_lines,
        info=sources,
        ignore_log_data_bin=ignore_log_data_bin,
    )
    check_summary_lengths(hypotheses, references, hyp_path, sources.get("references") or ref_paths, max_summary_words)
    nested_hypotheses, nested_references, sources["nfc_normalized"] = nfc_normalized(
        [[text] for text in hypotheses], [[[reference] for reference in cluster] for cluster in references]
    )
    hypotheses = [cluster[0] for cluster in nested_hypotheses]
    references = [[reference[0] for reference in cluster] for cluster in nested_references]
    warn_nfc_normalized(sources["nfc_normalized"], hyp_path)
    sources["wordless_references"] = warn_wordless_references(references, sources.get("references") or ref_paths)
    return ScoringInputs(hyp_path, ref_paths, hypotheses, references, sources)


def score_inputs(
    inputs: ScoringInputs,
    fast: bool = False,
    sentence_separator: Optional[str] = None,
    stemming: bool = True,
    multi_ref_mode: str = "average",
    resamples: int = 1000,
    keep_files: Optional[str] = None,
    per_cluster: bool = False,
    convention: Optional[str] = None,
) -> Dict[str, Dict]:
    """Score what :func:`load_scoring_inputs` read (arguments: see :func:`score_files`)."""
    hypotheses, references, sources = inputs.hypotheses, inputs.references, inputs.sources
    if convention == "mdsfair-fast":
        fast = True
    if convention in (None, "mdsfair", "mdsfair-fast"):
        result = score(
            hypotheses,
            references,
            fast=fast,
            sentence_separator=sentence_separator,
            stemming=stemming,
            multi_ref_mode=multi_ref_mode,
            resamples=resamples,
            keep_files=keep_files,
            per_cluster=per_cluster,
        )
        result["info"]["convention"] = "mdsfair-fast" if fast else "mdsfair"
    else:
        from mdsfair.evaluation.conventions import get_convention, score_with_convention

        result = score_with_convention(
            hypotheses,
            _normalise_references(hypotheses, references),
            get_convention(convention),
            sentence_separator=sentence_separator,
            resamples=resamples,
        )
        if not per_cluster:
            result.pop("per_cluster")
    result["info"]["hypothesis_file"] = inputs.hyp_path
    result["info"]["reference_files"] = list(inputs.ref_paths)
    for key in ("references", "data_bin", "split", "log_data_bin"):
        result["info"][key] = sources.get(key)
    result["info"]["nfc_normalized"] = sources["nfc_normalized"]
    result["info"]["wordless_references"] = sources["wordless_references"]
    return result


def score_files(
    hyp_path: str,
    ref_paths: Optional[Union[str, Sequence[str]]] = None,
    fast: bool = False,
    sentence_separator: Optional[str] = None,
    stemming: bool = True,
    multi_ref_mode: str = "average",
    resamples: int = 1000,
    gpt2_encoder_json: Optional[str] = None,
    gpt2_vocab_bpe: Optional[str] = None,
    keep_files: Optional[str] = None,
    per_cluster: bool = False,
    data_bin: Optional[str] = None,
    split: Optional[str] = None,
    expected: Optional[int] = None,
    target_lines: bool = False,
    convention: Optional[str] = None,
    max_summary_words: int = MAX_SUMMARY_WORDS,
    ignore_log_data_bin: bool = False,
) -> Dict[str, Dict]:
    """ROUGE of a hypothesis file against its references:
    :func:`load_scoring_inputs`, then :func:`score_inputs`.

    Args:
        hyp_path: one hypothesis per line, or a fairseq-generate log.
        ref_paths: parallel reference file(s); without them the references
            are the data-bin's stored summaries (see
            :func:`load_hypotheses_and_references`).
        fast, sentence_separator, stemming, multi_ref_mode, resamples,
            keep_files, per_cluster: see :func:`score`.
        gpt2_encoder_json, gpt2_vocab_bpe: decode GPT-2 BPE id strings in a
            fairseq-generate log.
        data_bin, split: the data-bin split the hypotheses summarize (its
            ``{split}.summary.txt`` and cluster count).
        expected: the number of clusters the hypotheses must cover.
        target_lines: score a fairseq-generate log against its ``T-`` lines.
        convention: a preset of :mod:`mdsfair.evaluation.conventions` (a
            paper's scorer and settings); ``None``, ``mdsfair`` or
            ``mdsfair-fast``: mdsfair's own (``fast`` picks between these two).
        max_summary_words: summaries longer than this are refused before
            scoring (:data:`MAX_SUMMARY_WORDS`).
        ignore_log_data_bin: score against ``data_bin`` / ``split`` even when
            the fairseq-generate log names another data-bin or split.

    Returns:
        See :func:`score_sentences`; ``info`` also names the files, the
        data-bin and split, and the convention.
    """
    inputs = load_scoring_inputs(
        hyp_path,
        ref_paths,
        gpt2_encoder_json,
        gpt2_vocab_bpe,
        data_bin=data_bin,
        split=split,
        expected=expected,
        target_lines=target_lines,
        max_summary_words=max_summary_words,
        ignore_log_data_bin=ignore_log_data_bin,
    )
    return score_inputs(
        inputs,
        fast=fast,
        sentence_separator=sentence_separator,
        stemming=stemming,
        multi_ref_mode=multi_ref_mode,
        resamples=resamples,
        keep_files=keep_files,
        per_cluster=per_cluster,
        convention=convention,
    )


def format_table(result: Dict[str, Dict], measures: Sequence[str] = ("f",)) -> str:
    """The scores as a text table: one row per measure, values x100, 2 decimals."""
    from mdsfair.evaluation.conventions import ALL_METRICS, TITLES

    metrics = [metric for metric in ALL_METRICS if metric in result]
    header = "{:<10}".format("") + "".join(f"{TITLES[metric]:>9}" for metric in metrics)
    rows = [header]
    for measure in measures:
        cells = "".join(f"{100 * result[metric][measure]:>9.2f}" for metric in metrics)
        rows.append(f"{MEASURE_NAMES[measure]:<10}{cells}")
    info = result.get("info", {})
    count = info.get("num_hypotheses", 0)
    note = f"{info.get('scorer', '?')}, {count} {'hypothesis' if count == 1 else 'hypotheses'}"
    if info.get("convention") not in (None, "mdsfair", "mdsfair-fast"):
        note = f"convention {info['convention']}: {note}"
    if info.get("num_empty_hypotheses"):
        note += f" ({info['num_empty_hypotheses']} empty)"
    nfc = info.get("nfc_normalized") or {}
    if nfc.get("hypotheses") or nfc.get("references"):
        note += (
            f"; scored in Unicode NFC: {nfc.get('hypotheses', 0)} hypotheses and {nfc.get('references', 0)} "
            "references were not"
        )
    if isinstance(info.get("references"), str):
        note += f"; references: {info['references']}"
    return "\n".join(rows) + f"\n[{note}; R-L = LCS over the whole summary, R-Lsum = summary-level LCS over sentences]"


def add_reference_source_arguments(parser: argparse.ArgumentParser) -> None:
    """``--data-bin``, ``--split``, ``--expected``, ``--target-lines`` (shared
    with ``mdsfair-compare``)."""
    parser.add_argument(
        "--data-bin",
        metavar="DIR",
        help="the data-bin the hypotheses were generated from: without REF files its stored references "
        "({split}.summary.txt, full length) are scored against, and its manifest says how many clusters "
        "the hypotheses must cover (for a fairseq-generate log whose captured logging names it, found "
        "automatically)",
    )
    parser.add_argument(
        "--split", metavar="NAME", help="split of --data-bin (default: the one the log names, else test)"
    )
    parser.add_argument(
        "--expected",
        type=at_least(1),
        metavar="N",
        help="number of clusters the hypotheses must cover (ids 0..N-1 of a fairseq-generate log); "
        "default: the data-bin split's cluster count, else the REF files' line count",
    )
    parser.add_argument(
        "--ignore-log-data-bin",
        action="store_true",
        help="score against --data-bin / --split even when the fairseq-generate log names another data-bin or "
        "split (by default that is refused: the references would be another data set's)",
    )
    parser.add_argument(
        "--target-lines",
        action="store_true",
        help="score a fairseq-generate log against its T- lines (the targets as the task served them, cut "
        "at the model's target limit) instead of the data-bin's full references",
    )


def add_convention_argument(parser: argparse.ArgumentParser) -> None:
    """``--convention NAME`` (shared with ``mdsfair-compare``)."""
    parser.add_argument(
        "--convention",
        metavar="NAME",
        help="score as a paper did: hiersumm, hierencdec, led-hierencdec, pagesum, sparse, ma2022, primera "
        "(scorer, options, stemming, sentence splitting, case, aggregate; each cites the authors' code), or "
        "mdsfair's own mdsfair / mdsfair-fast (default: mdsfair, or mdsfair-fast with --fast); "
        "--list-conventions prints every setting",
    )
    parser.add_argument(
        "--list-conventions", action="store_true", help="print every convention's settings and sources, then exit"
    )


def list_conventions() -> str:
    """Every preset's :meth:`Convention.describe`, one paragraph each."""
    from mdsfair.evaluation.conventions import CONVENTIONS

    return "\n\n".join(convention.describe() for convention in CONVENTIONS.values())


def build_parser() -> argparse.ArgumentParser:
    """Argument parser of ``mdsfair-rouge``."""
    parser = argparse.ArgumentParser(
        prog="mdsfair-rouge",
        description=(
            "files2rouge-compatible ROUGE (official ROUGE-1.5.5, or --fast rouge-score) "
            "reporting R-1, R-2, R-L, R-Lsum and R-SU4."
        ),
    )
    parser.add_argument(
        "hyp",
        help="hypotheses, one per line, or a fairseq-generate log (D-/H- lines, sorted by id)",
    )
    parser.add_argument(
        "refs",
        nargs="*",
        metavar="REF",
        help="reference file(s), one reference per line, parallel to HYP; several files = "
        "several references per hypothesis (default: the references stored in --data-bin)",
    )
    parser.add_argument(
        "--ref",
        action="append",
        default=[],
        dest="extra_refs",
        metavar="REF",
        help="another reference file (repeatable; same as a positional REF)",
    )
    add_reference_source_arguments(parser)
    parser.add_argument(
        "--fast",
        action="store_true",
        help="score with rouge-score (+ a Python ROUGE-SU4) instead of the ROUGE-1.5.5 Perl script",
    )
    parser.add_argument(
        "--measure",
        choices=["f", "r", "p", "all"],
        default="f",
        help="what the table shows: F1 (default), recall, precision, or all three",
    )
    parser.add_argument("--json", metavar="PATH", help="also write all scores (fractions in [0, 1]) as JSON here")
    parser.add_argument(
        "--max-summary-words",
        type=at_least(1),
        default=MAX_SUMMARY_WORDS,
        metavar="N",
        help=f"refuse, before scoring, a hypothesis or reference of more than N words: ROUGE's memory and time "
        f"grow with the square of a summary's length (default: {MAX_SUMMARY_WORDS:,})",
    )
    parser.add_argument(
        "--per-cluster",
        metavar="FILE",
        help="write every cluster's R/P/F per metric here, by cluster id: JSONL (FILE.jsonl) or CSV (FILE.csv) "
        "(also added to --json); see docs/evaluation.md for how their mean relates to the reported average",
    )
    add_convention_argument(parser)
    parser.add_argument(
        "--sentence-separator",
        metavar="STR",
        help="split summaries into sentences on this marker (e.g. '<q>') instead of the rule-based splitter",
    )
    parser.add_argument(
        "--no-stemming",
        action="store_true",
        help="turn off Porter stemming (files2rouge -nm); stemming is on by default as in files2rouge",
    )
    parser.add_argument(
        "--multi-ref-mode",
        choices=["average", "best"],
        default="average",
        help="official scorer, several references: pool counts over references (-f A, default) "
        "or take the best reference (-f B); --fast always takes the best F1 per metric",
    )
    parser.add_argument(
        "--resamples",
        type=at_least(1),
        default=1000,
        help="official scorer: bootstrap resamples (-r, files2rouge: 1000); the script's confidence "
        "intervals and its reported averages are computed over these resamples",
    )
    parser.add_argument(
        "--gpt2-encoder-json",
        metavar="PATH",
        help="GPT-2 encoder.json, to decode GPT-2 BPE ids in a fairseq-generate log",
    )
    parser.add_argument(
        "--gpt2-vocab-bpe", metavar="PATH", help="GPT-2 vocab.bpe, to decode GPT-2 BPE ids in a fairseq-generate log"
    )
    parser.add_argument(
        "--keep-rouge-files",
        metavar="DIR",
        help="official scorer: write the SPL files and ROUGE configurations into DIR and keep them",
    )
    return parser


def cli_main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``mdsfair-rouge``; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list_conventions:
        print(list_conventions())
        return 0
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s", stream=sys.stderr)
    if args.resamples < 1:
        parser.error("--resamples must be at least 1")
    if args.fast and args.multi_ref_mode != "average":
        logger.warning("--multi-ref-mode only applies to the official scorer; --fast takes the best F1")
    problem = check_output_paths(
        [("--json", args.json), ("--per-cluster", args.per_cluster)], inputs=[args.hyp, *args.refs, *args.extra_refs]
    )
    if problem is not None:
        parser.error(problem)
    try:
        if args.per_cluster:
            from mdsfair.evaluation.per_cluster import per_cluster_format

            per_cluster_format(args.per_cluster)
        if args.convention:
            from mdsfair.evaluation.conventions import get_convention

            get_convention(args.convention)
            if args.fast and args.convention != "mdsfair-fast":
                raise RougeInputError(
                    f"--fast is the mdsfair-fast convention; it cannot be combined with --convention {args.convention}"
                )
        result = score_files(
            args.hyp,
            list(args.refs) + list(args.extra_refs),
            fast=args.fast,
            sentence_separator=args.sentence_separator,
            stemming=not args.no_stemming,
            multi_ref_mode=args.multi_ref_mode,
            resamples=args.resamples,
            gpt2_encoder_json=args.gpt2_encoder_json,
            gpt2_vocab_bpe=args.gpt2_vocab_bpe,
            keep_files=args.keep_rouge_files,
            per_cluster=bool(args.per_cluster),
            data_bin=args.data_bin,
            split=args.split,
            expected=args.expected,
            target_lines=args.target_lines,
            convention=args.convention,
            max_summary_words=args.max_summary_words,
            ignore_log_data_bin=args.ignore_log_data_bin,
        )
        if args.per_cluster:
            from mdsfair.evaluation.per_cluster import write_per_cluster

            write_per_cluster(args.per_cluster, {args.hyp: result})
    except (RougeInputError, RougeDependencyError, ManifestError, OSError) as error:
        parser.error(str(error))
    measures = ("f", "r", "p") if args.measure == "all" else (args.measure,)
    print(format_table(result, measures))
    if args.json:
        try:
            write_json_atomic(args.json, result, trailing_newline=True, indent=2)
        except OSError as error:
            parser.error(f"--json {args.json}: {error.strerror or error}")
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
