"""LoBART (Manakul & Gales, ACL 2021, "Long-Span Summarization via Local
Attention and Content Selection"): BART whose encoder self-attention is
local, a sliding window of width 1,024 without global tokens, over 4,096
learned positions, fine-tuned from a BART checkpoint.

The model is the component model (:mod:`mdsfair.models.component_model`)
with ``--encoder-self-attention longformer --global-attention none``
(:mod:`mdsfair.modules.longformer_attention` built without global
projections): every token attends to the ``W / 2`` tokens on each side of it
and to itself, as the authors' ``LocalSelfAttention`` (potsawee/longsum0
``models/localattn.py``, Hugging Face's Longformer attention "with global
attention removed", ``one_sided_attention_window_size = attention_window //
2``). The parameters are BART's, under BART's names (``q_proj``, ``k_proj``,
``v_proj``, ``out_proj``), so a BART checkpoint restores one to one, as the
authors copy BART's projections into the local attention
(``swap_fullattn_to_localattn``).

Positions: BART's table of 1,024 positions (1,026 rows with the two offset
rows) is extended on load to 4,096 positions by ``--position-tiling mirror``
(:func:`mdsfair.modules.segment_positions.tile_position_table`): the table,
its reverse, the table, its reverse, cut to size, as the authors'
``expand_learned_embed_positions(multiple=4, cut=8)``.

``lobart_4k_sparse`` (:mod:`mdsfair.models.sparse_bart`, registered under
``sparse_bart`` so it trains with that model's KL task) puts the sparse
decoder of Manakul & Gales (EMNLP 2021) behind this encoder, the model their
Fig. 2 fine-tunes.

The paper's content selection (MCS) is a separate hierarchical model in the
authors' code (``models/hiermodel.py``) that selects the sentences of an
input longer than 4,096 tokens before the summarizer reads it; it is not
part of this model (see ``examples/lobart/README.md``).
"""

from fairseq.models import register_model, register_model_architecture

from mdsfair.models.component_model import ComponentBARTModel
from mdsfair.models.hub import MultiDocHubModel
from mdsfair.models.presets import LOBART_ENCODER, bart_dimensions, family_defaults

#: Tiny test dimensions: 1,024 positions, window 8 (several windows per test source).
TINY_ENCODER = {"max_encoder_positions": 1024, "attention_window": "8"}

#: The one source of the lobart model's defaults (``mdsfair.models.flag_defaults``).
DEFAULTS = family_defaults(**LOBART_ENCODER)


@register_model("lobart")
class LoBARTModel(MultiDocHubModel, ComponentBARTModel):
    """LoBART: see the module docstring."""

    defaults = DEFAULTS
    #: torch.hub entry point (hubconf.py) of this family
    hub_description = (
        "LoBART (Manakul & Gales 2021): BART with local (sliding-window, no global token) encoder attention "
        "over 4,096 positions"
    )


@register_model_architecture("lobart", "lobart_4k")
def lobart_4k_architecture(args):
    """LoBART(4k): BART-large (12 + 12 layers, d 1,024, 16 heads), 4,096
    source positions, window 1,024."""
    bart_dimensions(args, "large")
    DEFAULTS.fill(args)


@register_model_architecture("lobart", "lobart_tiny")
def lobart_tiny_architecture(args):
    """Tiny dims for tests (``mdsfair.models.tiny_dimensions``)."""
    bart_dimensions(args, "tiny")
    DEFAULTS.fill(args, **TINY_ENCODER)
