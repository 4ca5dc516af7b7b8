"""``--eval-rouge`` in the ``multidoc_summarization`` task: ROUGE of the
summaries a model generates for the validation split.

Every validation batch is also decoded with the task's own generator under
``--eval-rouge-args``; the best beam of each cluster is turned back into text
with the data-bin's subword model and scored against all the references the
data-bin stores for the cluster, with ``--eval-rouge-convention``
(:class:`mdsfair.evaluation.validation_rouge.ValidationRouge`, which describes
the metrics and PRIMERA's checkpoint selection). A batch logs, per metric, the
sum of its clusters' F1 x 100 and its cluster count; the logged value is the
sum of the sums over the sum of the counts, the mean over every cluster of the
split whatever the batching and the number of workers, rounded to two places.
``rouge_avg`` is the mean of ``rouge_1``, ``rouge_2`` and ``rouge_l``.

The scorer belongs to the evaluation layer, above the tasks; it is imported
inside the functions that run with the flag on (``tests/test_layering.py``
allows this module that import by name), as fairseq's translation task
imports sacrebleu for ``--eval-bleu``.
"""

import json
from argparse import Namespace
from typing import Dict, List, Sequence

import torch
from fairseq.data import Dictionary


class EvalRouge:
    """The generator, scorer and subword decoder of ``--eval-rouge`` for one model."""

    def __init__(self, generator, scorer, summary_decoder, dictionary: Dictionary):
        self.generator = generator
        self.scorer = scorer
        self.summary_decoder = summary_decoder
        self.dictionary = dictionary

    @classmethod
    def build(cls, task, model) -> "EvalRouge":
        """Parse ``--eval-rouge-args``, load ``--eval-rouge-convention``'s
        scorer and build ``task``'s generator for ``model``."""
        # the evaluation layer's scorer, imported only with --eval-rouge (tests/test_layering.py names it)
        from mdsfair.evaluation.validation_rouge import ValidationRouge

        cfg = task.cfg
        try:
            generation = json.loads(cfg.eval_rouge_args)
        except json.JSONDecodeError as error:
            raise ValueError(f"--eval-rouge-args: not JSON ({error.msg}): {cfg.eval_rouge_args!r}") from None
        if not isinstance(generation, dict):
            raise ValueError(
                f"--eval-rouge-args must be a JSON object of generation settings, got {cfg.eval_rouge_args!r}"
            )
        scorer = ValidationRouge(cfg.eval_rouge_convention)
        generator = task.build_generator([model], Namespace(**generation))
        summary_decoder = task.subword_encoder()
        if summary_decoder is None:
            raise ValueError(
                f"--eval-rouge: the manifest of {task.data_dir} names no subword model to turn the "
                "generated summaries into text"
            )
        return cls(generator, scorer, summary_decoder, task.target_dictionary)

    def decode_summary(self, tokens: torch.Tensor) -> str:
        """The text of a generated summary: its tokens without ``<s>``,
        ``</s>`` and padding, detokenized by the subword model."""
        special = {self.dictionary.bos(), self.dictionary.eos(), self.dictionary.pad()}
        return self.summary_decoder.decode([self.dictionary[t] for t in tokens.tolist() if t not in special])

    def batch_logs(self, task, sample, model) -> Dict[str, float]:
        """Per metric the sum of the batch's per-cluster F1 (x 100), and the cluster count."""
        from mdsfair.evaluation.validation_rouge import LOGGED_METRICS

        hypotheses = task.inference_step(self.generator, [model], sample)
        texts = [self.decode_summary(beams[0]["tokens"]) for beams in hypotheses]
        scores = self.scorer.per_cluster_f1(texts, sample["references"])
        logs = {f"_rouge_{LOGGED_METRICS[metric]}_sum": 100.0 * sum(values) for metric, values in scores.items()}
        logs["_rouge_clusters"] = len(texts)
        return logs


def validation_references(data_dir: str, split: str) -> List[List[str]]:
    """Every reference of every cluster of ``split`` of the data-bin ``data_dir``."""
    from mdsfair.evaluation.validation_rouge import ValidationRouge

    return ValidationRouge.references(data_dir, split)


def log_rouge_means(logging_outputs: Sequence[Dict]) -> None:
    """Log the ROUGE F1 means over the clusters of ``logging_outputs`` (the
    batches' :meth:`EvalRouge.batch_logs`), and ``rouge_avg`` (PRIMERA's
    checkpoint metric ``avgr``, allenai/PRIMER script/primer_hf_main.py) when
    ROUGE-1, -2 and -L are all there."""
    from fairseq.logging import metrics

    clusters = sum(log.get("_rouge_clusters", 0) for log in logging_outputs)
    if not clusters:
        return
    metrics.log_scalar("_rouge_clusters", clusters)
    names = sorted(
        {
            key[len("_rouge_") : -len("_sum")]
            for log in logging_outputs
            for key in log
            if key.startswith("_rouge_") and key.endswith("_sum")
        }
    )
    for name in names:
        metrics.log_scalar(f"_rouge_{name}_sum", sum(log.get(f"_rouge_{name}_sum", 0.0) for log in logging_outputs))

        def mean(meters, name=name):
            return round(meters[f"_rouge_{name}_sum"].sum / meters["_rouge_clusters"].sum, 2)

        metrics.log_derived(name, mean)
    if {"rouge_1", "rouge_2", "rouge_l"} <= set(names):

        def average(meters):
            return round(
                sum(meters[f"_rouge_{name}_sum"].sum for name in ("rouge_1", "rouge_2", "rouge_l"))
                / (3 * meters["_rouge_clusters"].sum),
                2,
            )

        metrics.log_derived("rouge_avg", average)
