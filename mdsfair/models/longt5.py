"""LongT5 (Guo et al. 2022, "LongT5: Efficient Text-To-Text Transformer for
Long Sequences") as the component model (:mod:`mdsfair.models.component_model`),
``--arch longt5_{tglobal,local}_base``, ``longt5_tglobal_large``, equal to
Hugging Face's ``LongT5ForConditionalGeneration`` on the weights
``mdsfair-import hf-longt5`` converts (:mod:`mdsfair.importers.hf_longt5`).

LongT5 is T5 v1.1 (:mod:`mdsfair.models.t5`, T5's backbone) whose encoder
self-attention is local or transient-global (``--encoder-self-attention
local`` or ``transient-global``, Sec. 2.1;
:mod:`mdsfair.modules.longt5_components`: ``--local-radius`` 127,
``--global-block-size`` 16) over up to 16,384 source tokens, and whose
output layer is the token embedding, not scaled. Its encoder reads each
source row from its first token, since its blocks start there. Its
vocabulary, decoding from ``<pad>``, the seeds' methods on it (HierEncDec's
document-scaled cross-attention) and the checkpoints of the former model:
:mod:`mdsfair.models.t5_family`.
"""

from fairseq.models import register_model, register_model_architecture

from mdsfair.models.presets import T5_BACKBONE, family_defaults, t5_dimensions
from mdsfair.models.t5_family import T5Family, tiny_architecture

#: The one source of the longt5 model's defaults (``mdsfair.models.flag_defaults``): T5's
#: backbone, the output layer the embedding, 16,384 source positions (the paper's longest
#: inputs), transient-global attention.
DEFAULTS = family_defaults(
    **T5_BACKBONE, encoder_self_attention="transient-global", max_source_positions=16384, max_encoder_positions=16384
)


@register_model("longt5")
class LongT5Model(T5Family):
    """LongT5 (Guo et al. 2022) as Hugging Face's LongT5ForConditionalGeneration
    computes it (module docstring); import a Hugging Face folder with
    ``mdsfair-import hf-longt5``."""

    defaults = DEFAULTS
    #: torch.hub entry point (hubconf.py) of this family
    hub_description = (
        "LongT5 (Guo et al. 2022): T5 with local or transient-global encoder attention, imported from Hugging "
        "Face with mdsfair-import hf-longt5; document-scaled and sparse cross-attention by flags"
    )


@register_model_architecture("longt5", "longt5_tglobal_base")
def longt5_tglobal_base_architecture(args):
    """google/long-t5-tglobal-base: T5 v1.1 base's sizes (d_model 768, d_ff
    2,048, 12 heads of 64, 12 + 12 layers), transient-global attention with
    radius 127 and global blocks of 16."""
    DEFAULTS.fill(args)
    t5_dimensions(args, 768, 2048, 12, 12)


@register_model_architecture("longt5", "longt5_local_base")
def longt5_local_base_architecture(args):
    """google/long-t5-local-base: T5 v1.1 base's sizes, local attention with radius 127."""
    DEFAULTS.fill(args, encoder_self_attention="local")
    t5_dimensions(args, 768, 2048, 12, 12)


@register_model_architecture("longt5", "longt5_tglobal_large")
def longt5_tglobal_large_architecture(args):
    """google/long-t5-tglobal-large: d_model 1,024, d_ff 2,816, 16 heads of
    64, 24 + 24 layers, transient-global attention."""
    DEFAULTS.fill(args)
    t5_dimensions(args, 1024, 2816, 16, 24)


@register_model_architecture("longt5", "longt5_tiny")
def longt5_tiny_architecture(args):
    """:func:`tiny_architecture` with transient-global attention, radius 3
    and global blocks of 4, so that the tests' sources span many blocks (the
    model's ``_tiny``, whose sizes the model contract runs every ``longt5``
    architecture at)."""
    tiny_architecture(args, DEFAULTS, local_radius=3, global_block_size=4)


@register_model_architecture("longt5", "longt5_local_tiny")
def longt5_local_tiny_architecture(args):
    """:func:`tiny_architecture` with local attention of radius 3."""
    tiny_architecture(args, DEFAULTS, encoder_self_attention="local", local_radius=3)
