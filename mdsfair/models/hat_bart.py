"""HAT-BART: BART with hierarchical attention over the sentences (Rohde, Wu &
Liu 2021, "Hierarchical Learning for Generation with Long Source Sequences",
arXiv 2104.07545).

After BART's token-level encoder, hierarchical Transformer layers run over the
states of the sentence-start tokens only; every decoder layer attends to the
token states (BART's cross-attention) and then to the hierarchical sentence
states (a second cross-attention block). See
:mod:`mdsfair.modules.hat_attention` and the component ``--cross-attention
hat`` (:mod:`mdsfair.modules.hat_components`), which any BART-based system can
also choose.

Restoring from BART (``--restore-file`` a BART checkpoint): every BART
parameter keeps its name; the new parameters are exactly
``encoder.hierarchical_encoder.*`` and, in every decoder layer,
``sentence_attn.*`` and ``sentence_attn_layer_norm.*``, freshly initialized.
The source budget is 3,072 tokens (the HAT-BART rows of PageSum's Table 2);
BART's 1,024-row position table is extended when the checkpoint is loaded.
"""

from fairseq.models import register_model, register_model_architecture

from mdsfair.models.component_model import ComponentBARTModel
from mdsfair.models.hub import MultiDocHubModel
from mdsfair.models.presets import bart_dimensions, family_defaults

#: HAT-BART's components: BART's encoder attention and positions, the hierarchical
#: cross-attention (two hierarchical layers), 3,072 source positions.
HAT_BART = {"cross_attention": "hat", "max_encoder_positions": 3072}

#: The one source of the hat_bart model's defaults (``mdsfair.models.flag_defaults``).
DEFAULTS = family_defaults(**HAT_BART)


@register_model("hat_bart")
class HATBARTModel(MultiDocHubModel, ComponentBARTModel):
    """BART with HAT's hierarchical sentence layers (Rohde et al. 2021)."""

    defaults = DEFAULTS
    #: torch.hub entry point (hubconf.py) of this family
    hub_description = (
        "HAT-BART (Rohde et al. 2021): hierarchical layers over the sentence-start states, "
        "the decoder attending to tokens and sentences"
    )


def hat_bart_architecture(args, size: str) -> None:
    if size != "tiny":
        args.max_source_positions = getattr(args, "max_source_positions", 3072)
    bart_dimensions(args, size)
    DEFAULTS.fill(args, **({"max_encoder_positions": 1024} if size == "tiny" else {}))


@register_model_architecture("hat_bart", "hat_bart_large")
def hat_bart_large(args):
    """BART-large (12 + 12 layers, d 1,024) plus 2 hierarchical layers, 3,072 source tokens."""
    hat_bart_architecture(args, "large")


@register_model_architecture("hat_bart", "hat_bart_tiny")
def hat_bart_tiny(args):
    """The dimensions of ``tests.utils.TINY_BART_ARGS`` (2 + 2 layers, d 32,
    4 heads, FFN 64), so tiny BART checkpoints restore into it."""
    hat_bart_architecture(args, "tiny")
