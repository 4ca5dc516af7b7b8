"""Criterion ``paragraph_ranking``: cross-entropy between the ranker's score
``s_i`` (Eq. 6) and the soft target ``y_i`` = ROUGE-2 recall of the paragraph
against the gold summary (Liu & Lapata 2019, Section 3.1)::

    loss = - Σ_i [ y_i log s_i + (1 - y_i) log (1 - s_i) ]

summed over the paragraphs of the batch; ``sample_size`` is the number of
paragraphs, so gradients are per-paragraph averages.
"""

from dataclasses import dataclass

import torch.nn.functional as F
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass

from mdsfair.criterions.logged_means import log_means_per_sample


@dataclass
class ParagraphRankingCriterionConfig(FairseqDataclass):
    pass


@register_criterion("paragraph_ranking", dataclass=ParagraphRankingCriterionConfig)
class ParagraphRankingCriterion(FairseqCriterion):
    """Binary cross-entropy on soft targets, summed over paragraphs."""

    def forward(self, model, sample, reduce=True):
        logits = model(**sample["net_input"])
        target = sample["target"].to(logits.dtype)
        if ((target < 0) | (target > 1)).any():
            raise ValueError("paragraph ranking targets must lie in [0, 1] (ROUGE-2 recall)")
        loss = F.binary_cross_entropy_with_logits(logits, target, reduction="sum" if reduce else "none")
        num_paragraphs = target.numel()
        # The loss of a perfect ranker is the targets' own entropy; report the excess too.
        entropy = F.binary_cross_entropy(target, target, reduction="sum")
        logging_output = {
            "loss": loss.data,
            "excess_loss": (loss.sum() - entropy).data,
            "ntokens": num_paragraphs,
            "nsentences": sample["nsentences"],
            "sample_size": num_paragraphs,
        }
        return loss, num_paragraphs, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        log_means_per_sample(logging_outputs, ("loss", "excess_loss"))

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
