"""Criterion ``content_selection``: the multitask loss of LoBART's content
selection model (Manakul & Gales 2021, Sec. 4; the authors'
``train/train_hiermodel.py``)::

    L = (1 - gamma) L_seq2seq + gamma L_ext

per cluster, ``L_seq2seq`` the negative log-likelihood of the summary words
averaged over them, ``L_ext`` the binary cross-entropy of the extractive
labeller against the oracle labels averaged over the cluster's sentences
(the authors train on one cluster at a time). The loss is summed over the
clusters of the batch and ``sample_size`` is their number, so an update is
the mean over clusters whatever the batch size or ``--update-freq``.
"""

from dataclasses import dataclass, field

import torch.nn.functional as F
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass

from mdsfair.criterions.logged_means import log_means_per_sample
from mdsfair.modules.pointer_attention import at_least_float32


@dataclass
class ContentSelectionCriterionConfig(FairseqDataclass):
    extraction_weight: float = field(
        default=0.2,
        metadata={
            "help": "gamma of L = (1 - gamma) L_seq2seq + gamma L_ext, in [0, 1] (0.2 in the authors' "
            "conf/hiermodel_v1.txt)"
        },
    )


@register_criterion("content_selection", dataclass=ContentSelectionCriterionConfig)
class ContentSelectionCriterion(FairseqCriterion):
    """Summary NLL and extractive-label BCE, weighted, per cluster."""

    def __init__(self, task, extraction_weight: float = 0.2):
        super().__init__(task)
        if not 0.0 <= extraction_weight <= 1.0:
            raise ValueError(f"--extraction-weight must lie in [0, 1], got {extraction_weight}")
        self.extraction_weight = extraction_weight
        self.padding_idx = task.target_dictionary.pad()

    def forward(self, model, sample, reduce=True):
        net_output = model(**sample["net_input"])
        lprobs = model.get_normalized_probs(net_output, log_probs=True)
        target = sample["target"]
        summary_mask = target.ne(self.padding_idx)
        nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1).masked_fill(~summary_mask, 0.0)
        summary_loss = nll.sum(dim=1) / summary_mask.sum(dim=1)
        sentence_mask = sample["net_input"]["sentence_tokens"].ne(self.padding_idx).any(dim=-1)
        logits = at_least_float32(net_output[1]["extraction_logits"])
        bce = F.binary_cross_entropy_with_logits(logits, sample["extractive_target"].to(logits.dtype), reduction="none")
        extraction_loss = bce.masked_fill(~sentence_mask, 0.0).sum(dim=1) / sentence_mask.sum(dim=1)
        gamma = self.extraction_weight
        losses = (1 - gamma) * summary_loss + gamma * extraction_loss
        loss = losses.sum() if reduce else losses
        num_clusters = target.size(0)
        logging_output = {
            "loss": loss.data,
            "summary_loss": summary_loss.sum().data,
            "extraction_loss": extraction_loss.sum().data,
            "ntokens": sample["ntokens"],
            "nsentences": num_clusters,
            "sample_size": num_clusters,
        }
        return loss, num_clusters, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        log_means_per_sample(logging_outputs, ("loss", "summary_loss", "extraction_loss"))

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
