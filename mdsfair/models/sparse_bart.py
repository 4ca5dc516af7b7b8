"""BART with sparse encoder-decoder attention over the top-r sentences.

Manakul & Gales, "Sparsity and Sentence Structure in Encoder-Decoder
Attention of Summarization Systems" (EMNLP 2021). In every decoder layer the
cross-attention first ranks the source sentences with a sentence-level
attention (the approximator, Eq. 7-10, or the model-free Eq. 19), keeps the
top-r (Eq. 6) and attends to their tokens only (Eq. 3), so a generation step
costs O(N1 + r * N2) instead of O(N1 * N2). The approximator is trained with
a KL loss to the exact sentence saliency (Eq. 4, 11); see
``mdsfair/criterions/sparse_kl.py`` and ``mdsfair/tasks/sparse_training.py``.

Generation keeps everything the encoder produced once per source example:
the encoder output is never expanded to the beam; only the per-row vector
``hypothesis_source_index`` (which source every hypothesis reads) is
reordered with fairseq's ``new_order``, so batch compaction of finished
sources is tracked exactly, and the cross-attention's key/value cache stays
``[B, H, N, d_h]`` (see ``mdsfair/modules/hypothesis_rows.py``).

The model is the component model (:mod:`mdsfair.models.component_model`)
with ``--cross-attention sparse``
(:mod:`mdsfair.modules.cross_attention_components`); ``led_sparse``,
``hierencdec_sparse`` and ``lobart_4k_sparse`` put the same decoder behind
LED's, HierEncDec's and LoBART's encoders.

Sentences come from ``src_sent_ids`` of mdsfair's data contract (the start-
of-document ``<s>`` belongs to the following sentence and the closing
``</s>`` to the last one).

Parameters beyond BART (the approximator theta~ of Eq. 13-14):
``encoder.sentence_encoder.*`` (the BiGRU of Eq. 10, or with
``--sentence-encoder attention-pooling`` the pooling of Sec. 4.5; shared by all layers)
and ``decoder.layers.*.encoder_attn.sentence_attention.*`` (W^Q, W^K of
Eq. 8-9, per layer). When a plain BART checkpoint is restored they are
created: W^Q/W^K copied from the layer's cross-attention ``q_proj``/``k_proj``
(weights and biases), the sentence encoder freshly initialized.
"""

from fairseq.models import register_model, register_model_architecture

from mdsfair.models.component_model import ComponentBARTModel
from mdsfair.models.hub import MultiDocHubModel
from mdsfair.models.presets import (
    HIERENCDEC,
    LED_ENCODER,
    LOBART_ENCODER,
    SPARSE_DECODER,
    bart_dimensions,
    family_defaults,
    hierencdec_source_positions,
)

#: The one source of the sparse_bart model's defaults
#: (``mdsfair.models.flag_defaults``): Manakul & Gales 2021, r = 5 (their
#: CNN/DailyMail setting, Table 3) and the 2-layer BiGRU of the model-based
#: approximator with the model's width (App. A.1); see
#: :class:`mdsfair.modules.cross_attention_components.SparseSentenceCrossAttention`.
DEFAULTS = family_defaults(**SPARSE_DECODER)


@register_model("sparse_bart")
class SparseBARTModel(MultiDocHubModel, ComponentBARTModel):
    """BART whose decoder attends to the top-r sentences (Manakul & Gales 2021)."""

    defaults = DEFAULTS
    #: torch.hub entry point (hubconf.py) of this family
    hub_description = (
        "BART with sparse encoder-decoder attention over the top-r sentences (Manakul & Gales 2021); "
        "load with top_r=R to change r (0: full attention)"
    )


@register_model_architecture("sparse_bart", "sparse_bart_large")
def sparse_bart_large_architecture(args):
    """BART-large dimensions, the paper's."""
    bart_dimensions(args, "large")
    DEFAULTS.fill(args)


@register_model_architecture("sparse_bart", "sparse_bart_base")
def sparse_bart_base_architecture(args):
    bart_dimensions(args, "base")
    DEFAULTS.fill(args)


@register_model_architecture("sparse_bart", "sparse_bart_tiny")
def sparse_bart_tiny_architecture(args):
    """The dimensions of ``tests.utils.TINY_BART_ARGS`` (2+2 layers, d 32,
    4 heads, FFN 64), so tiny BART checkpoints restore into it."""
    bart_dimensions(args, "tiny")
    DEFAULTS.fill(args)


# ------------------------------------------------------------ combinations


def led_sparse_architecture(args, size: str, **values):
    """LED's encoder (Longformer attention over up to 16,384 tokens) with the
    sparse decoder, where its cost argument is strongest: cross-attention
    cost grows with the source. An LED checkpoint restores into it; the
    approximator is created as for BART (W^Q/W^K from the cross-attention)."""
    bart_dimensions(args, size)
    DEFAULTS.fill(args, **{**LED_ENCODER, **values})


@register_model_architecture("sparse_bart", "led_sparse")
def led_sparse(args):
    led_sparse_architecture(args, "base")


@register_model_architecture("sparse_bart", "led_sparse_tiny")
def led_sparse_tiny(args):
    """Tiny dims for tests; 1,024 positions, window 8."""
    led_sparse_architecture(args, "tiny", max_encoder_positions=1024, attention_window="8")


def hierencdec_sparse_architecture(args, size: str):
    """HierEncDec's encoder (document attention, position restart, 4,096
    positions) with the sparse decoder."""
    hierencdec_source_positions(args)
    bart_dimensions(args, size)
    DEFAULTS.fill(
        args,
        encoder_self_attention=HIERENCDEC["encoder_self_attention"],
        encoder_positions=HIERENCDEC["encoder_positions"],
    )


@register_model_architecture("sparse_bart", "hierencdec_sparse")
def hierencdec_sparse(args):
    hierencdec_sparse_architecture(args, "base")


@register_model_architecture("sparse_bart", "hierencdec_sparse_tiny")
def hierencdec_sparse_tiny(args):
    hierencdec_sparse_architecture(args, "tiny")


@register_model_architecture("sparse_bart", "lobart_4k_sparse")
def lobart_4k_sparse(args):
    """LoBART(4k)'s encoder (local attention, width 1,024, 4,096 positions;
    :mod:`mdsfair.models.lobart`) with the sparse decoder, BART-large
    dimensions: the model the sparse decoder paper's Fig. 2 fine-tunes. A
    LoBART or BART checkpoint restores into it (BART's positions copied as
    LoBART's code does)."""
    bart_dimensions(args, "large")
    DEFAULTS.fill(args, **LOBART_ENCODER)


@register_model_architecture("sparse_bart", "lobart_4k_sparse_tiny")
def lobart_4k_sparse_tiny(args):
    """Tiny dims for tests; 1,024 positions, window 8."""
    bart_dimensions(args, "tiny")
    DEFAULTS.fill(args, **{**LOBART_ENCODER, "max_encoder_positions": 1024, "attention_window": "8"})
