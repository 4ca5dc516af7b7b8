"""HEPOS (Huang et al. 2021, "Efficient Attentions for Long Document
Summarization", NAACL): BART-large whose every encoder-decoder attention
has head-wise positional strides (``--cross-attention hepos``,
:mod:`mdsfair.modules.hepos_attention`): head ``h`` reads the source
positions ``j mod s = h mod s``, stride ``s = 4``.

The model is the component model (:mod:`mdsfair.models.component_model`)
with the ``hepos`` cross-attention; its encoder self-attention stays a flag
(``--encoder-self-attention``): the paper pairs HEPOS with an efficient
encoder (LSH for 7,168 source tokens, Sinkhorn for 10,240; the inputs of
PageSum's Table 2 and 3 rows ``HEPOS* (7168)`` and ``HEPOS* (10240)``:
``--encoder-self-attention lsh`` or ``sinkhorn``); by default the encoder
keeps BART's full attention and only the cross-attention is HEPOS.
``hepos_bart_large`` has 7,168 learned source positions;
``--max-encoder-positions 10240`` gives the longer setting. A BART
checkpoint's 1,026-row position table is extended when it is loaded
(``--position-tiling``); the authors' ``align_embed_position``
(``Model/longbart/longbartmodel.py``) copies BART's rows and repeats the
last one for every position past 1,024 instead.
"""

from fairseq.models import register_model, register_model_architecture

from mdsfair.models.component_model import ComponentBARTModel
from mdsfair.models.hub import MultiDocHubModel
from mdsfair.models.presets import bart_dimensions, family_defaults

#: HEPOS's preset: the strided cross-attention (its stride is the component's
#: default, 4) over 7,168 source positions.
HEPOS = {"cross_attention": "hepos", "max_encoder_positions": 7168}

#: The one source of the hepos_bart model's defaults (``mdsfair.models.flag_defaults``).
DEFAULTS = family_defaults(**HEPOS)


@register_model("hepos_bart")
class HeposBARTModel(MultiDocHubModel, ComponentBARTModel):
    """BART with HEPOS cross-attention: see the module docstring."""

    defaults = DEFAULTS
    #: torch.hub entry point (hubconf.py) of this family
    hub_description = (
        "HEPOS (Huang et al. 2021): BART whose encoder-decoder attention heads read strided subsets of the source"
    )


@register_model_architecture("hepos_bart", "hepos_bart_large")
def hepos_bart_large_architecture(args):
    """BART-large (12 + 12 layers, d 1,024, 16 heads: four per residue at
    stride 4), 7,168 source positions."""
    bart_dimensions(args, "large")
    DEFAULTS.fill(args)


@register_model_architecture("hepos_bart", "hepos_bart_tiny")
def hepos_bart_tiny_architecture(args):
    """Tiny dims for tests (``mdsfair.models.tiny_dimensions``), 1,024 source
    positions, stride 2 (the tiny model's heads in two residues)."""
    bart_dimensions(args, "tiny")
    DEFAULTS.fill(args, max_encoder_positions=1024, hepos_stride=2)
