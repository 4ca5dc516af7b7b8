"""ROUGE of hypothesis files: read and check what ``mdsfair-rouge`` and
``mdsfair-compare`` score, then score it.

:func:`load_scoring_inputs` reads a hypothesis file and its references
(:func:`mdsfair.evaluation.hypotheses.load_hypotheses_and_references`),
refuses a summary too long to score (:func:`check_summary_lengths`), puts both
in Unicode NFC and warns about wordless references; :func:`score_inputs`
scores what it read with mdsfair's scorers (:mod:`mdsfair.evaluation.scoring`)
or a paper's convention (:mod:`mdsfair.evaluation.conventions`);
:func:`score_files` is the two in one call.

Inputs
------
* HYP: one hypothesis per line, or a fairseq-generate log (detected by its
  ``H-<id>``/``D-<id>`` lines; see :mod:`mdsfair.evaluation.fairseq_output`).
* REF: one reference per line, line ``i`` belonging to hypothesis ``i``.
  **Several references** are given as several parallel files, all with as
  many lines as HYP. An empty line in a reference file means "this file has
  no reference for this cluster" (so clusters may have different numbers of
  references); every cluster needs at least one non-empty reference.
* Without REF files the references are the full, uncut summaries that
  ``mdsfair-preprocess`` stored in the data-bin (``{split}.summary.txt``):
  the data-bin and split given with ``data_bin`` / ``split``, or, for a
  fairseq-generate log, the ones the task names in the log (its line
  ``split S of data-bin D: N clusters, ...``). The log's ``T-`` lines are the
  targets as the task served them, cut at the model's target limit; they are
  used only with ``target_lines``.
* Every cluster must have a hypothesis: the expected number is the split's
  cluster count in the data-bin manifest, ``expected``, or the REF files'
  line count. A fairseq-generate log with missing ids (cut short, or clusters
  skipped with ``--skip-invalid-size-inputs-valid-test``) is refused with the
  missing ids named.
* Sentences: each line is split with the rule-based splitter of
  :mod:`mdsfair.text`, or on an explicit marker given as
  ``sentence_separator`` (the marker is removed).

Pure Python (no torch / fairseq import).
"""

import logging
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Union

from mdsfair.evaluation.hypotheses import load_hypotheses_and_references, reference_file_list
from mdsfair.evaluation.inputs import RougeInputError
from mdsfair.evaluation.scoring import nfc_normalized, normalised_references, score, warn_nfc_normalized
from mdsfair.text import has_word

# Log records keep the name mdsfair-rouge's users filter on.
logger = logging.getLogger("mdsfair.evaluation.rouge")


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
    ref_paths = reference_file_list(ref_paths)
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
            normalised_references(hypotheses, references),
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
            keep_files, per_cluster: see :func:`mdsfair.evaluation.scoring.score`.
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
        See :func:`mdsfair.evaluation.scoring.score_sentences`; ``info`` also names the files, the
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
