"""The coverage loss of the pointer-generator (See et al. 2017, Sec. 2.3)::

    covloss_t = sum_i min(a^t_i, c^t_i)                              (Eq. 12)
    loss_t    = -log P(w*_t) + lambda sum_i min(a^t_i, c^t_i)        (Eq. 13)

summed over the summary's tokens (fairseq divides by the sample size, the
target tokens, which gives Eq. 7's mean over the summary). The model reports
``covloss_t`` per step (``extra["coverage_loss"]``, the ``pointer_generator``
model's decoder); ``-log P(w*_t)`` is fairseq's label-smoothed cross-entropy,
which is the negative log-likelihood of Eq. 6 at ``--label-smoothing 0`` (the
default here).
"""

from dataclasses import dataclass, field

from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)

from mdsfair.criterions.logged_means import label_smoothed_logging_output, log_means_per_sample


@dataclass
class PointerGeneratorCoverageConfig(LabelSmoothedCrossEntropyCriterionConfig):
    coverage_weight: float = field(
        default=1.0, metadata={"help": "lambda of the coverage loss term (Eq. 13; the paper uses 1)"}
    )


@register_criterion("pointer_generator_coverage", dataclass=PointerGeneratorCoverageConfig)
class PointerGeneratorCoverageCriterion(LabelSmoothedCrossEntropyCriterion):
    """Negative log-likelihood plus lambda times the coverage loss (Eq. 13)."""

    def __init__(
        self, task, sentence_avg, label_smoothing, ignore_prefix_size=0, report_accuracy=False, coverage_weight=1.0
    ):
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
        if coverage_weight < 0:
            raise ValueError(f"--coverage-weight must not be negative, got {coverage_weight}")
        self.coverage_weight = coverage_weight

    def forward(self, model, sample, reduce=True):
        if not reduce:
            raise ValueError("pointer_generator_coverage sums its loss over the batch (reduce=True)")
        net_output = model(**sample["net_input"])
        loss, nll_loss = self.compute_loss(model, net_output, sample, reduce=reduce)
        if "coverage_loss" not in net_output[1]:
            raise ValueError(
                "pointer_generator_coverage needs a model that reports its coverage loss per step "
                "(--arch pointer_generator_see2017 or another pointer_generator architecture)"
            )
        coverage_terms = net_output[1]["coverage_loss"][0]
        target_mask = sample["target"].ne(self.padding_idx)
        coverage_loss = coverage_terms.masked_fill(~target_mask, 0.0).sum()
        loss = loss + self.coverage_weight * coverage_loss
        sample_size, logging_output = label_smoothed_logging_output(
            self, model, net_output, sample, loss, nll_loss, coverage_loss=coverage_loss
        )
        return loss, sample_size, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        log_means_per_sample(logging_outputs, ("coverage_loss",))

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
