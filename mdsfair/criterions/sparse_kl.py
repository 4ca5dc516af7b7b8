"""Cross-entropy plus the sentence-attention losses of Manakul & Gales (2021).

* KL loss (Eq. 11) between the exact sentence saliency alpha^s (Eq. 4, the
  teacher, re-sharpened with temperature T by Eq. 15) and the approximator's
  alpha~^s, per head and averaged over heads (App. A.4), per target token,
  summed over decoder layers (the authors' code sums its 12 layers)::

      L_KL = 1/M sum_m KL(alpha^s_m || alpha~^s_m)                  (Eq. 11)
      L_I  = L_xent + lambda * L_KL                                  (Eq. 12)

  ``--kl-reduction`` sets the scale of ``KL(.||.)``:

  - ``mean-over-sentences`` (default): the KL divided by the example's
    sentence count N1, which is what the authors' ``KLDivLoss(reduction=
    'mean')`` over ``[H * T, N1]`` elements computes (for their batch of 1,
    exactly; with batch > 1 each example is divided by its own N1). The
    paper's lambda = 0.2 was tuned on this scale.
  - ``sum-over-sentences``: the KL of Eq. 11 as written (summed over the N1
    sentences), N1 times larger (~29x on CNNDM, ~331x on Podcast by the
    paper's Table 4), so lambda = 0.2 weighs it far more than in the paper.

  The teacher is not detached by default: Eq. 13 updates theta_dec with
  ``lambda * grad_theta_dec L_KL``, and alpha^s depends on theta_dec (the
  word-level cross-attention's q/k projections and everything below), as in
  the authors' code. ``--kl-detach-teacher`` stops that gradient (the KL then
  moves the approximator towards the attention, never the attention towards
  the approximator).

* Entropy sparsity loss (Eq. 5), for making a vanilla model's attention
  sparse: ``L_A = L_xent + gamma * L_sparse`` with
  ``L_sparse = 1/M sum_m H(alpha^s_m)``, per head averaged, averaged over
  layers (``--entropy-sparsity-weight gamma``; the paper tries 0.1 and 1.0).

The task ``multidoc_summarization_sparse`` sets :attr:`training_phase` per
update (Eq. 13-14):

* ``decoder``: ``L_xent + lambda * L_KL`` (Eq. 13, theta~ fixed);
* ``approximator``: ``lambda * L_KL`` (Eq. 14, the gradient of L_xent w.r.t.
  theta~ is zero because top-r is not differentiable);
* ``kl-only``: ``L_KL`` (the KL-only stage, base model frozen);
* ``None`` (validation, or any other task): ``L_xent + lambda * L_KL +
  gamma * L_sparse``.

Sums are over target tokens; fairseq divides by the sample size (tokens),
which gives the 1/M of Eq. 5 and 11.
"""

from dataclasses import dataclass, field
from typing import List, Optional

import torch
import torch.nn.functional as F
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)
from fairseq.dataclass import ChoiceEnum
from torch import Tensor

from mdsfair.criterions.logged_means import label_smoothed_logging_output, log_means_per_sample

TRAINING_PHASES = ("decoder", "approximator", "kl-only")
KL_REDUCTIONS = ("mean-over-sentences", "sum-over-sentences")


@dataclass
class SparseKLCriterionConfig(LabelSmoothedCrossEntropyCriterionConfig):
    kl_weight: float = field(
        default=0.2, metadata={"help": "lambda of the integrated loss L_I = L_xent + lambda * L_KL (Eq. 12; paper 0.2)"}
    )
    kl_temperature: float = field(
        default=0.5,
        metadata={
            "help": "temperature T re-sharpening the exact saliency target, softmax(log(alpha)/T) (Eq. 15; paper 0.5)"
        },
    )
    kl_reduction: ChoiceEnum(KL_REDUCTIONS) = field(
        default="mean-over-sentences",
        metadata={
            "help": "scale of the per-token KL (Eq. 11): mean-over-sentences divides it by the example's "
            "sentence count N1, as the authors' KLDivLoss(reduction='mean') over [H*T, N1] "
            "elements, the scale on which the paper tuned lambda = 0.2; sum-over-sentences is the "
            "KL as written in Eq. 11, N1 times larger"
        },
    )
    kl_detach_teacher: bool = field(
        default=False,
        metadata={
            "help": "detach the exact saliency target of the KL: theta_dec then gets no KL gradient through "
            "alpha^s (by default it does, as Eq. 13 and the authors' code)"
        },
    )
    entropy_sparsity_weight: float = field(
        default=0.0,
        metadata={
            "help": "gamma of the entropy sparsity loss L_A = L_xent + gamma * L_sparse (Eq. 5); 0 disables "
            "it (the paper fine-tunes with 0.1 or 1.0 to make attention sparse)"
        },
    )


def masked_log(probabilities: Tensor, mask: Tensor) -> Tensor:
    """log p at real sentences (p clamped to the smallest positive float), -inf elsewhere."""
    return probabilities.clamp(min=torch.finfo(probabilities.dtype).tiny).log().masked_fill(~mask, float("-inf"))


def sentence_kl_per_token(
    exact: Tensor,
    approx_log: Tensor,
    sentence_mask: Tensor,
    temperature: float,
    reduction: str = "mean-over-sentences",
    detach_teacher: bool = False,
) -> Tensor:
    """``KL(softmax(log alpha / T) || alpha~)`` per head averaged: ``[B, T]``.

    Args:
        exact: ``[B, H, T, S]`` alpha^s (Eq. 4).
        approx_log: ``[B, H, T, S]`` log alpha~^s (normalized over sentences).
        sentence_mask: ``[B, S]`` True for real sentences.
        temperature: T of Eq. 15.
        reduction: ``sum-over-sentences`` (Eq. 11) or ``mean-over-sentences``
            (divided by the example's sentence count, the authors' scale).
        detach_teacher: stop the gradient through the target alpha^s.
    """
    if reduction not in KL_REDUCTIONS:
        raise ValueError(f"KL reduction must be one of {KL_REDUCTIONS}, got {reduction!r}")
    mask = sentence_mask[:, None, None, :]
    teacher_log = F.log_softmax(masked_log(exact.float(), mask) / temperature, dim=-1)
    if detach_teacher:
        teacher_log = teacher_log.detach()
    teacher = teacher_log.exp()
    # empty sentence slots: -inf - -inf; zero there (forward and backward) keeps the gradient finite
    log_ratio = (teacher_log - approx_log.float()).masked_fill(~mask, 0.0)
    kl = (teacher * log_ratio).sum(dim=-1).mean(dim=1)
    if reduction == "mean-over-sentences":
        kl = kl / sentence_mask.sum(dim=-1, keepdim=True).clamp(min=1).to(kl.dtype)
    return kl


def sentence_entropy_per_token(exact: Tensor, sentence_mask: Tensor) -> Tensor:
    """``H(alpha^s_m)`` per head averaged: ``[B, T]`` (Eq. 5)."""
    mask = sentence_mask[:, None, None, :]
    exact = exact.float()
    terms = torch.where(mask, -exact * masked_log(exact, mask), torch.zeros_like(exact))
    return terms.sum(dim=-1).mean(dim=1)


@register_criterion("sparse_kl", dataclass=SparseKLCriterionConfig)
class SparseKLCriterion(LabelSmoothedCrossEntropyCriterion):
    """Cross-entropy + lambda * KL (Eq. 11-12, 15) + gamma * entropy (Eq. 5)."""

    def __init__(
        self,
        task,
        sentence_avg,
        label_smoothing,
        ignore_prefix_size=0,
        report_accuracy=False,
        kl_weight=0.2,
        kl_temperature=0.5,
        kl_reduction="mean-over-sentences",
        kl_detach_teacher=False,
        entropy_sparsity_weight=0.0,
    ):
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
        if kl_temperature <= 0:
            raise ValueError(f"--kl-temperature must be positive, got {kl_temperature}")
        self.kl_weight = kl_weight
        self.kl_temperature = kl_temperature
        if kl_reduction not in KL_REDUCTIONS:
            raise ValueError(f"--kl-reduction must be one of {KL_REDUCTIONS}, got {kl_reduction!r}")
        self.kl_reduction = kl_reduction
        self.kl_detach_teacher = kl_detach_teacher
        self.entropy_sparsity_weight = entropy_sparsity_weight
        self.training_phase: Optional[str] = None

    def set_training_phase(self, phase: Optional[str]):
        if phase is not None and phase not in TRAINING_PHASES:
            raise ValueError(f"training phase must be one of {TRAINING_PHASES} or None, got {phase!r}")
        self.training_phase = phase

    def sentence_losses(self, sentence_attention: List, target_mask: Tensor):
        """Summed ``L_KL`` (over layers and tokens) and ``L_sparse`` (averaged
        over layers, summed over tokens)."""
        kl_loss = target_mask.new_zeros((), dtype=torch.float)
        entropy_loss = target_mask.new_zeros((), dtype=torch.float)
        for layer in sentence_attention:
            if layer.exact is None:
                raise ValueError("sparse_kl needs the exact sentence saliency (teacher-forced forward)")
            if layer.approx_log is not None:
                kl = sentence_kl_per_token(
                    layer.exact,
                    layer.approx_log,
                    layer.sentence_mask,
                    self.kl_temperature,
                    reduction=self.kl_reduction,
                    detach_teacher=self.kl_detach_teacher,
                )
                kl_loss = kl_loss + kl.masked_fill(~target_mask, 0.0).sum()
            if self.entropy_sparsity_weight > 0:
                entropy = sentence_entropy_per_token(layer.exact, layer.sentence_mask)
                entropy_loss = entropy_loss + entropy.masked_fill(~target_mask, 0.0).sum()
        entropy_loss = entropy_loss / max(len(sentence_attention), 1)
        return kl_loss, entropy_loss

    def forward(self, model, sample, reduce=True):
        net_output = model(**sample["net_input"])
        xent_loss, nll_loss = self.compute_loss(model, net_output, sample, reduce=reduce)
        if "sentence_attention" not in net_output[1]:
            raise ValueError("sparse_kl needs a model that reports sentence attention (e.g. --arch sparse_bart_*)")
        target_mask = sample["target"].ne(self.padding_idx)
        kl_loss, entropy_loss = self.sentence_losses(net_output[1]["sentence_attention"], target_mask)

        phase = self.training_phase if model.training else None
        if phase == "kl-only":
            loss = kl_loss
        elif phase == "approximator":
            # 0 * L_xent keeps every parameter in the graph (zero gradients),
            # as data-parallel wrappers expect; the task drops theta_dec's.
            loss = self.kl_weight * kl_loss + 0.0 * xent_loss
        elif phase == "decoder":
            loss = xent_loss + self.kl_weight * kl_loss
        else:
            loss = xent_loss + self.kl_weight * kl_loss + self.entropy_sparsity_weight * entropy_loss
        if phase in ("decoder", "approximator") and self.entropy_sparsity_weight > 0:
            raise ValueError(
                "--entropy-sparsity-weight (Eq. 5) is a separate fine-tuning loss; it does not combine "
                "with interleaved KL training"
            )

        sample_size, logging_output = label_smoothed_logging_output(
            self, model, net_output, sample, loss, nll_loss, kl_loss=kl_loss, sentence_entropy=entropy_loss
        )
        return loss, sample_size, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        log_means_per_sample(logging_outputs, ("kl_loss", "sentence_entropy"))

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
