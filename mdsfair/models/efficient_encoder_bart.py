"""BART with the efficient encoder self-attentions of Huang et al. (2021,
"Efficient Attentions for Long Document Summarization", Sec. 3 and Table 2,
the encoder settings PageSum's comparison takes up): the encoder
self-attention is Reformer's LSH attention (``--encoder-self-attention lsh``,
:mod:`mdsfair.modules.lsh_attention`) or Sparse Sinkhorn attention
(``--encoder-self-attention sinkhorn``,
:mod:`mdsfair.modules.sinkhorn_attention`) in the second, fourth, ... encoder
layers and sliding-window attention in the others, the authors' hybrid
encoder (``--efficient-attention-layers hybrid``; ``all`` puts it in every
layer), with full encoder-decoder attention; HEPOS's strided cross-attention is ``hepos_bart``
(:mod:`mdsfair.models.hepos_bart`) with one of these encoders.

They are architectures of the component model ``multidoc_bart``
(:mod:`mdsfair.models.multidoc_bart`): ``lsh_bart_large`` reads 7,168 source
tokens and ``sinkhorn_bart_large`` 10,240, the input lengths of the paper's
LSH and Sinkhorn rows; a BART checkpoint's position table is extended on load
(``--position-tiling``). The attentions' own flags and the layer pattern keep
the authors' defaults (``mdsfair.modules.efficient_encoder_components``).
"""

from fairseq.models import register_model_architecture

from mdsfair.models.multidoc_bart import DEFAULTS
from mdsfair.models.presets import bart_dimensions

#: The presets: the encoder self-attention and the source length of the paper's rows.
LSH_ENCODER = {"encoder_self_attention": "lsh", "max_encoder_positions": 7168}
SINKHORN_ENCODER = {"encoder_self_attention": "sinkhorn", "max_encoder_positions": 10240}


@register_model_architecture("multidoc_bart", "lsh_bart_large")
def lsh_bart_large(args):
    """BART-large with LSH encoder self-attention over 7,168 source positions."""
    bart_dimensions(args, "large")
    DEFAULTS.fill(args, **LSH_ENCODER)


@register_model_architecture("multidoc_bart", "sinkhorn_bart_large")
def sinkhorn_bart_large(args):
    """BART-large with Sinkhorn encoder self-attention over 10,240 source positions."""
    bart_dimensions(args, "large")
    DEFAULTS.fill(args, **SINKHORN_ENCODER)


@register_model_architecture("multidoc_bart", "lsh_bart_tiny")
def lsh_bart_tiny(args):
    """Tiny dims for tests (``mdsfair.models.tiny_dimensions``: a sliding-window
    layer, then an LSH layer), 1,024 source positions, chunks of 32 (several
    chunks and both hashing rounds' wrap on the test sources), a window of 16."""
    bart_dimensions(args, "tiny")
    DEFAULTS.fill(
        args,
        **dict(LSH_ENCODER, max_encoder_positions=1024, lsh_chunk_length=32, lsh_hashes=2, hybrid_sliding_window=16),
    )


@register_model_architecture("multidoc_bart", "sinkhorn_bart_tiny")
def sinkhorn_bart_tiny(args):
    """Tiny dims for tests (a sliding-window layer, then a Sinkhorn layer),
    1,024 source positions, blocks of 32, a window of 16."""
    bart_dimensions(args, "tiny")
    DEFAULTS.fill(
        args, **dict(SINKHORN_ENCODER, max_encoder_positions=1024, sinkhorn_block_size=32, hybrid_sliding_window=16)
    )
