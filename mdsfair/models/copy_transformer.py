"""CopyTransformer (Gehrmann, Deng & Rush, EMNLP 2018, "Bottom-Up Abstractive
Summarization", Sec. 5): ``--arch copy_transformer``.

A Transformer encoder-decoder with a copy mechanism: the final distribution
mixes the generator's vocabulary distribution with one attention head of the
decoder's cross-attention, scattered onto the source token ids (the
pointer-generator mixture of See et al. 2017, Eq. 9, with a Transformer
attention head in the place of the LSTM attention; Gehrmann et al. choose one
head as the copy distribution).

This is fairseq's pointer-generator Transformer
(``fairseq/examples/pointer_generator``, ``transformer_pointer_generator``,
Enarvi et al. 2020) at the CopyTransformer's settings. Its copy attention is
the first ``--alignment-heads`` heads of ``--alignment-layer``'s cross-attention
averaged; the architecture takes one head (the first) of the last decoder
layer, which is the head OpenNMT-py's Transformer decoder returns as its
attention (the first head of its last layer) and the copy attention of
Gehrmann et al.'s OpenNMT-py model. Two differences from OpenNMT-py remain:
fairseq predicts ``p_gen`` from the decoder input embedding and the decoder
output (OpenNMT-py from the decoder output), and copying is over the task's
dictionary ids (OpenNMT-py extends the vocabulary with each source's words).
mdsfair's data-bins are subword encoded, so no source token is out of the
vocabulary: the fairseq plugin's ``<unk-N>`` position markers
(``--source-position-markers``) are not produced by ``mdsfair-preprocess`` and
the architecture sets their number to 0.

The sizes are Gehrmann et al.'s (the OpenNMT-py summarization recipe of
their paper): 4 layers, d 512, 8 heads, feed-forward 2,048, dropout 0.2,
pre-layer-norm layers (OpenNMT-py's Transformer normalizes before each
sublayer), sinusoidal positions and one embedding matrix for source, target
and output.
"""

from fairseq.examples.pointer_generator.pointer_generator_src.transformer_pg import (
    TransformerPointerGeneratorModel,
    transformer_pointer_generator,
)
from fairseq.models import register_model, register_model_architecture

from mdsfair.models.flag_defaults import FlagDefaults
from mdsfair.models.tiny_dimensions import set_tiny_dimensions

#: The one source of the copy_transformer model's defaults
#: (:mod:`mdsfair.models.flag_defaults`): fairseq's Transformer flags where
#: Gehrmann et al.'s CopyTransformer differs from fairseq's base
#: Transformer, and the copy attention (one head of the last layer).
DEFAULTS = FlagDefaults(
    {
        "encoder_layers": 4,
        "decoder_layers": 4,
        "encoder_embed_dim": 512,
        "decoder_embed_dim": 512,
        "encoder_ffn_embed_dim": 2048,
        "decoder_ffn_embed_dim": 2048,
        "encoder_attention_heads": 8,
        "decoder_attention_heads": 8,
        "encoder_normalize_before": True,
        "decoder_normalize_before": True,
        "dropout": 0.2,
        "attention_dropout": 0.2,
        "activation_dropout": 0.2,
        "share_all_embeddings": True,
        "alignment_heads": 1,
        "alignment_layer": -1,
        "source_position_markers": 0,
    }
)


@register_model("copy_transformer")
class CopyTransformerModel(TransformerPointerGeneratorModel):
    """CopyTransformer (Gehrmann et al. 2018) on fairseq's pointer-generator
    Transformer. Train on ``--task multidoc_summarization``."""

    @staticmethod
    @DEFAULTS.documented
    def add_args(parser):
        TransformerPointerGeneratorModel.add_args(parser)

    @classmethod
    def build_model(cls, args, task):
        copy_transformer_architecture(args)
        return super().build_model(args, task)


@register_model_architecture("copy_transformer", "copy_transformer")
def copy_transformer_architecture(args):
    """Gehrmann et al. 2018's CopyTransformer: 4 + 4 pre-LN layers, d 512, 8
    heads, feed-forward 2,048, dropout 0.2, shared embeddings; the copy
    attention is the first head of the last decoder layer (a negative
    ``--alignment-layer`` counts from the top)."""
    DEFAULTS.fill(args)
    transformer_pointer_generator(args)


@register_model_architecture("copy_transformer", "copy_transformer_tiny")
def copy_transformer_tiny_architecture(args):
    """Tiny dimensions for tests: 2 + 2 layers, d 32, 4 heads, FFN 64."""
    set_tiny_dimensions(args)
    copy_transformer_architecture(args)
