"""ROUGE during validation: the ``multidoc_summarization`` task's
``--eval-rouge`` (as fairseq's translation task has ``--eval-bleu``).

PRIMERA keeps the checkpoint with the best validation ROUGE (allenai/PRIMER
``script/primer_hf_main.py`` line 378-382: ``ModelCheckpoint(monitor="avgr")``,
``avgr`` the mean of the ROUGE-1, -2 and -L F1 means, line 295), and
Hugging Face's summarization trainer does too (``predict_with_generate``,
``metric_for_best_model``). With ``--eval-rouge`` every validation batch is
decoded with the task's generator (``--eval-rouge-args``), each summary is
scored against every reference the data-bin stores for its cluster
(``{split}.summary*.txt``, :func:`mdsfair.evaluation.references.data_bin_references`),
and the task logs ROUGE-1/2/L/Lsum F1, each the mean over the clusters,
times 100: ``rouge_1``, ``rouge_2``, ``rouge_l``, ``rouge_lsum``, and
``rouge_avg``, the mean of ``rouge_1``, ``rouge_2`` and ``rouge_l`` (PRIMERA's
``avgr``), so that ``--best-checkpoint-metric rouge_avg
--maximize-best-checkpoint-metric`` selects checkpoints as PRIMERA did
(``rouge_l`` and the others select by one metric).

A convention's score is a mean of per-cluster scores only for rouge-score
scorers (``mdsfair-fast``, and the presets that use rouge-score); those are
the ones validation can sum batch by batch and across workers, and the logged
score then equals ``mdsfair-rouge`` with that convention on the same summaries
(``tests/test_validation_rouge.py``). ROUGE-1.5.5's average is over bootstrap
resamples of the whole set, so its presets are refused here: score the saved
checkpoints with ``mdsfair-rouge`` instead.
"""

from typing import Dict, List, Sequence

from mdsfair.evaluation.references import data_bin_references

#: rouge-score metrics logged, and their fairseq log names.
LOGGED_METRICS = {"rouge-1": "rouge_1", "rouge-2": "rouge_2", "rouge-l": "rouge_l", "rouge-lsum": "rouge_lsum"}


class ValidationRouge:
    """The scorer of one ``--eval-rouge-convention``."""

    def __init__(self, convention: str = "mdsfair-fast"):
        self.convention_name = convention
        if convention != "mdsfair-fast":
            from mdsfair.evaluation.conventions import get_convention

            self.convention = get_convention(convention)
            if self.convention.scorer != "rouge-score":
                raise ValueError(
                    f"--eval-rouge-convention {convention}: scored by {self.convention.scorer}, whose average is not "
                    "a mean of per-cluster scores, so validation cannot sum it batch by batch; use mdsfair-fast or a "
                    "rouge-score convention here, and score saved checkpoints with mdsfair-rouge --convention "
                    f"{convention}"
                )

    @staticmethod
    def references(data_dir: str, split: str) -> List[List[str]]:
        """Every reference of every row of a data-bin split."""
        return data_bin_references(data_dir, split)[0]

    def per_cluster_f1(self, hypotheses: Sequence[str], references: Sequence[Sequence[str]]) -> Dict[str, List[float]]:
        """Per metric of :data:`LOGGED_METRICS`, every cluster's F1 in [0, 1]."""
        if self.convention_name == "mdsfair-fast":
            from mdsfair.evaluation.scoring import score

            result = score(list(hypotheses), [list(r) for r in references], fast=True, per_cluster=True)
        else:
            from mdsfair.evaluation.conventions import score_with_convention

            result = score_with_convention(list(hypotheses), [list(r) for r in references], self.convention)
        clusters = result["per_cluster"]
        return {metric: list(clusters[metric]["f"]) for metric in LOGGED_METRICS if metric in clusters}
