"""Task ``multidoc_summarization_sparse``: the training stages of Manakul &
Gales (2021) for ``sparse_bart`` inside fairseq's trainer.

The data are those of ``multidoc_summarization``; this task adds which
parameters train and, per update, which loss (criterion ``sparse_kl``):

* ``--sparse-training-stage kl-only``: the base BART is frozen
  (``requires_grad=False``) and only the approximator theta~ (sentence
  encoder, W^Q, W^K) is trained on L_KL (Eq. 11).
* ``--sparse-training-stage interleaved`` (default; Sec. 4.3, Eq. 13-14):
  updates alternate. Even updates train the decoder theta_dec on
  ``L_xent + lambda * L_KL`` with theta~ fixed; odd updates train theta~ on
  ``lambda * L_KL``. The fixed group's gradients are dropped (set to None)
  after the backward pass and again before the optimizer step, so fairseq's
  Adam leaves those parameters and their moments untouched, and gradient
  clipping sees only the group being updated.
* ``--sparse-training-stage joint``: the authors' code: one optimizer updates
  theta_dec and theta~ together on ``L_xent + lambda * L_KL`` every step.

In every stage the encoder and the (shared) embeddings stay frozen, unless
``--train-encoder``: the paper's theta_dec is the decoder, and the authors'
code freezes them too. It also freezes the decoder's learned positions and
embedding layer norm (it trains only ``decoder.layers`` and the sentence
encoder); here they belong to theta_dec and train with the decoder layers.

Everything happens inside ``train_step`` / ``optimizer_step``, so
multi-GPU, gradient accumulation, fp16/bf16 and checkpoints work as for any
fairseq task. Dropping a gradient keeps a parameter fixed with fairseq's
FP32 Adam and the memory-efficient fp16/bf16 optimizers; the flat fp32
master copy of plain ``--fp16`` turns dropped gradients into zeros, on which
Adam's momentum still moves the parameters, so use
``--memory-efficient-fp16`` or ``--memory-efficient-bf16`` with
``interleaved``.
"""

from dataclasses import dataclass, field
from typing import List

from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task

from mdsfair.tasks.model_inputs import unwrap_model
from mdsfair.tasks.multidoc_config import MultiDocSummarizationConfig
from mdsfair.tasks.multidoc_summarization import MultiDocSummarizationTask

SPARSE_TRAINING_STAGES = ChoiceEnum(["kl-only", "interleaved", "joint"])


@dataclass
class SparseTrainingConfig(MultiDocSummarizationConfig):
    sparse_training_stage: SPARSE_TRAINING_STAGES = field(
        default="interleaved",
        metadata={
            "help": "kl-only: train only the approximator on L_KL with BART frozen; interleaved: alternate "
            "decoder updates (L_xent + lambda*L_KL) and approximator updates (lambda*L_KL), Eq. 13-14; "
            "joint: the authors' single update of both on L_xent + lambda*L_KL"
        },
    )
    train_encoder: bool = field(
        default=False,
        metadata={
            "help": "also train the encoder and the shared embeddings with the decoder (the paper trains "
            "only the decoder and the approximator)"
        },
    )


@register_task("multidoc_summarization_sparse", dataclass=SparseTrainingConfig)
class SparseTrainingTask(MultiDocSummarizationTask):
    """Multi-document summarization with the sparse decoder's training stages."""

    cfg: SparseTrainingConfig

    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        if not hasattr(model, "approximator_parameter_names"):
            raise ValueError(
                "task multidoc_summarization_sparse trains a model with a sentence approximator "
                "(--arch sparse_bart_*); use --task multidoc_summarization for other models"
            )
        approximator = set(model.approximator_parameter_names())
        if not approximator:
            raise ValueError(
                "the model has no approximator parameters to train (--approximator model-free has "
                "none); fine-tune it with --task multidoc_summarization instead"
            )
        for name, parameter in model.named_parameters():
            if self.cfg.sparse_training_stage == "kl-only":
                parameter.requires_grad = name in approximator
            elif not self.cfg.train_encoder and (name.startswith("encoder.") or "embed_tokens" in name):
                parameter.requires_grad = name in approximator
        return model

    def training_phase(self, update_num: int) -> str:
        """The criterion's phase for update ``update_num`` (Eq. 13-14)."""
        stage = self.cfg.sparse_training_stage
        if stage == "kl-only":
            return "kl-only"
        if stage == "joint":
            return "decoder"
        return "decoder" if update_num % 2 == 0 else "approximator"

    def fixed_parameters(self, model, update_num: int) -> List:
        """Parameters held fixed in this update of the interleaved stage."""
        if self.cfg.sparse_training_stage != "interleaved":
            return []
        model = unwrap_model(model)
        approximator = set(model.approximator_parameter_names())
        train_approximator = self.training_phase(update_num) == "approximator"
        return [
            parameter
            for name, parameter in model.named_parameters()
            if parameter.requires_grad and (name in approximator) != train_approximator
        ]

    @staticmethod
    def drop_gradients(parameters: List):
        for parameter in parameters:
            parameter.grad = None

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        if not hasattr(criterion, "set_training_phase"):
            raise ValueError("task multidoc_summarization_sparse needs --criterion sparse_kl")
        criterion.set_training_phase(self.training_phase(update_num))
        try:
            result = super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)
        finally:
            criterion.set_training_phase(None)
        self.drop_gradients(self.fixed_parameters(model, update_num))
        return result

    def optimizer_step(self, optimizer, model, update_num):
        # Wrappers that all-reduce after train_step (legacy_ddp) refill
        # missing gradients with zeros; drop them again before Adam sees them.
        self.drop_gradients(self.fixed_parameters(model, update_num))
        optimizer.step()

    def valid_step(self, sample, model, criterion):
        if hasattr(criterion, "set_training_phase"):
            criterion.set_training_phase(None)
        return super().valid_step(sample, model, criterion)
