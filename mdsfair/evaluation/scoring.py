"""ROUGE of summaries held in memory: files2rouge-compatible official scores, or a fast scorer.

:func:`score` takes summaries as strings (split into sentences here),
:func:`score_sentences` summaries already split into sentences. Both serve
``mdsfair-rouge`` (through :mod:`mdsfair.evaluation.file_scoring`),
``mdsfair-baseline --score`` and the task's ``--eval-rouge``.

Numbers
-------
``rouge-1``, ``rouge-2``, ``rouge-l``, ``rouge-lsum``, ``rouge-su4``, each with
recall ``r``, precision ``p`` and F1 ``f`` as fractions in [0, 1] (the table of
:mod:`mdsfair.evaluation.score_table` prints them x100 with 2 decimals),
averaged over clusters.

* Official (default): ROUGE-1.5.5 with files2rouge's options
  ``-c 95 -r 1000 -n 2 -a -m`` plus ``-2 4 -u``. ``rouge-lsum`` is the
  script's ROUGE-L on sentence-split files (summary-level union LCS: what
  files2rouge reports as ROUGE-L for multi-sentence lines); ``rouge-l`` is the
  script's ROUGE-L with each summary on a single line (plain LCS). Several
  references: ``multi_ref_mode="average"`` (``-f A``, the default of the
  script and of files2rouge) or ``best`` (``-f B``). Details:
  :mod:`mdsfair.evaluation.rouge155`.
* ``fast``: rouge-score's ``rouge1``, ``rouge2``, ``rougeL``, ``rougeLsum``
  (sentences joined by newlines) with Porter stemming, and our ROUGE-SU4
  (:mod:`mdsfair.evaluation.fast_rouge`). Several references: per metric the
  reference with the best F1 (rouge-score's ``score_multi`` convention).

An empty hypothesis is valid (it scores 0); empty hypotheses are counted and
a warning is logged.

Hypotheses and references are scored in Unicode NFC, the form
``mdsfair-preprocess`` stores its text in: the same word in NFD (a letter and
a combining accent) and in NFC would otherwise not match (both scorers drop
or split at the combining mark). Texts that change are counted in ``info``
(``nfc_normalized``) and logged.

Pure Python (no torch / fairseq import).
"""

import logging
import unicodedata
from typing import Dict, List, Optional, Sequence, Tuple, Union

from mdsfair.evaluation.inputs import RougeInputError
from mdsfair.text import split_sentences

# Log records keep the name mdsfair-rouge's users filter on.
logger = logging.getLogger("mdsfair.evaluation.rouge")

#: Metric keys in report order.
METRICS = ("rouge-1", "rouge-2", "rouge-l", "rouge-lsum", "rouge-su4")


def normalised_references(
    hypotheses: Sequence[str], references: Sequence[Union[str, Sequence[str]]]
) -> List[List[str]]:
    """Per hypothesis, the list of its non-empty references (a single
    reference string becomes a list of one); a hypothesis without one is
    refused, as is a count of reference entries other than the hypotheses'."""
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
    references = normalised_references(hyps, refs)
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
