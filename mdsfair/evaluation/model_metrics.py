"""Scores computed by a pre-trained encoder: BERTScore and NSP semantic
coherence as score columns of ``mdsfair-rouge`` and ``mdsfair-compare``.

Both commands take the same flags (:func:`add_model_metric_arguments`) and
add the columns to the result of
:func:`mdsfair.evaluation.file_scoring.score_inputs` with
:func:`add_model_metrics`, under the keys ``bertscore`` and
``nsp-coherence``: a mean over clusters with its ``r``, ``p`` and ``f``, and
every cluster's under ``per_cluster``, as the ROUGE columns are, so the
tables, ``--per-cluster`` files, ``--json``, ``--ci`` and ``--baseline``
treat them as they treat ROUGE.

* ``bertscore`` (:mod:`mdsfair.evaluation.bertscore`): the precision,
  recall and F1 of Zhang et al. (2020) against the references.
* ``nsp-coherence`` (:mod:`mdsfair.evaluation.nsp_coherence`): PageSum's
  semantic coherence (Liu et al. 2022, Eq. 12) of the hypothesis alone. It
  is one number, with no recall or precision; its ``r``, ``p`` and ``f`` are
  that number, so the column shows it whatever ``--measure`` picks.

The models are read from local folders only: a folder, or a Hugging Face
model id found in the Hugging Face cache (``HF_HOME`` / ``HF_HUB_CACHE``);
nothing is downloaded (:func:`mdsfair.evaluation.local_models.local_model_folder`). ``transformers``,
``bert-score`` and torch are imported only when a flag asks for a metric.
"""

import argparse
from typing import Dict, List, Optional, Sequence

from mdsfair.argument_types import at_least
from mdsfair.evaluation.scoring import normalised_references
from mdsfair.text import split_sentences

#: Result keys of the columns this module adds, in column order.
MODEL_METRICS = ("bertscore", "nsp-coherence")


def add_model_metric_arguments(parser: argparse.ArgumentParser) -> None:
    """``--bertscore`` with its model and layer, ``--nsp-coherence`` with its model."""
    from mdsfair.evaluation.bertscore import DEFAULT_MODEL
    from mdsfair.evaluation.nsp_coherence import DEFAULT_MODEL as DEFAULT_NSP_MODEL

    group = parser.add_argument_group("scores of a pre-trained encoder (need transformers; read local models only)")
    group.add_argument(
        "--bertscore",
        action="store_true",
        help="add BERTScore (Zhang et al. 2020, through the bert-score package) against the references: "
        "precision, recall and F1 per cluster, as column BS",
    )
    group.add_argument(
        "--bertscore-model",
        metavar="DIR",
        default=DEFAULT_MODEL,
        help=f"the encoder of --bertscore: a Hugging Face model folder, or a model id found in the Hugging Face "
        f"cache (nothing is downloaded; default: {DEFAULT_MODEL}, bert-score's model for English)",
    )
    group.add_argument(
        "--bertscore-layer",
        type=at_least(0),
        metavar="N",
        help="the layer whose embeddings --bertscore compares (default: bert-score's table for the model, "
        "found by its id or its folder's name: 17 for roberta-large; required for a model the table lacks)",
    )
    group.add_argument(
        "--nsp-coherence",
        action="store_true",
        help="add the semantic coherence of each hypothesis (PageSum Eq. 12: BERT's next-sentence probability "
        "of each sentence after the one before, averaged over the summary's sentence pairs), as column SC",
    )
    group.add_argument(
        "--nsp-model",
        metavar="DIR",
        default=DEFAULT_NSP_MODEL,
        help=f"the BertForNextSentencePrediction model of --nsp-coherence: a folder, or a model id found in the "
        f"Hugging Face cache (nothing is downloaded; default: {DEFAULT_NSP_MODEL}, the one PageSum used)",
    )
    group.add_argument(
        "--model-batch-size",
        type=at_least(1),
        default=32,
        metavar="N",
        help="texts (BERTScore) or sentence pairs (NSP) per forward pass of the model (default: 32)",
    )


def wants_model_metrics(args: argparse.Namespace) -> bool:
    """Whether the flags ask for a column of this module."""
    return bool(args.bertscore or args.nsp_coherence)


def add_model_metrics(
    result: Dict,
    hypotheses: Sequence[str],
    references: Sequence[Sequence[str]],
    args: argparse.Namespace,
    per_cluster: bool,
) -> None:
    """Add the columns the flags ask for to ``result`` (a
    :func:`mdsfair.evaluation.file_scoring.score_inputs` result for these
    hypotheses and references), their settings to ``result["info"]``, and
    with ``per_cluster`` every cluster's scores to ``result["per_cluster"]``."""
    columns: Dict[str, Dict[str, List[float]]] = {}
    if args.bertscore:
        from mdsfair.evaluation.bertscore import bertscore

        columns["bertscore"], result["info"]["bertscore"] = bertscore(
            hypotheses,
            normalised_references(hypotheses, references),
            args.bertscore_model,
            layer=args.bertscore_layer,
            batch_size=args.model_batch_size,
        )
    if args.nsp_coherence:
        from mdsfair.evaluation.nsp_coherence import semantic_coherence

        separator: Optional[str] = getattr(args, "sentence_separator", None)
        coherence, result["info"]["nsp_coherence"] = semantic_coherence(
            [split_sentences(hypothesis, separator) for hypothesis in hypotheses],
            args.nsp_model,
            batch_size=args.model_batch_size,
        )
        columns["nsp-coherence"] = {measure: list(coherence) for measure in ("r", "p", "f")}
    for metric, scores in columns.items():
        result[metric] = {measure: sum(values) / len(values) for measure, values in scores.items()}
        if per_cluster:
            result["per_cluster"][metric] = scores
