"""PEGASUS (Zhang et al. 2020, "PEGASUS: Pre-training with Extracted
Gap-sentences for Abstractive Summarization") as the component model
(:mod:`mdsfair.models.component_model`), equal to Hugging Face's
``PegasusForConditionalGeneration`` on the weights ``mdsfair-import
hf-pegasus`` converts (:mod:`mdsfair.importers.hf_pegasus`).

PEGASUS is BART-shaped apart from its backbone
(:data:`mdsfair.models.presets.PEGASUS_BACKBONE`): pre-norm layers with a
final layer norm at the end of both stacks, no embedding layer norm, token
embeddings scaled by ``sqrt(d_model)``, a ReLU feed-forward, and sinusoidal
positions in both stacks in PEGASUS's layout (sines in the first half of
the dimensions, cosines in the second, from position 0: the encoder's
``--encoder-positions pegasus-sinusoidal``, the decoder's
:class:`~mdsfair.modules.sinusoidal.HalvesSinusoidalPositions`). Its
``final_logits_bias`` is zero and has no counterpart here.

**Vocabulary.** PEGASUS's ids are ``<pad>`` 0, ``</s>`` 1, ``<mask_1>`` 2,
``<mask_2>`` 3, ``<unk_2>`` ... ``<unk_102>`` 4-104, then the SentencePiece
pieces from ``<unk>`` (105) on. A fairseq dictionary always starts ``<s>
<pad> </s> <unk>``, so the imported dictionary is PEGASUS's vocabulary one
place up (fairseq index = Hugging Face id + 1) with one exchange: fairseq's
``<unk>`` (index 3, what unknown text maps to) holds PEGASUS's ``<unk>``
(id 105) and index 106 holds ``<mask_1>`` (id 2). Index 0 is fairseq's
``<s>``, which PEGASUS never predicts
(:func:`~mdsfair.modules.transformer_layers.logits_without`); it is the
documents' start token where the task inserts one (HierEncDec's layout), a
row that fine-tuning learns.

**Decoding starts from** ``<pad>``, PEGASUS's ``decoder_start_token_id``:
the decoder reads the first token of every target row (fairseq's ``</s>``)
as ``<pad>``.

**The seeds' methods** combine by flags as on BART: HierEncDec's document
attention (``--encoder-self-attention document``) and its document-scaled
cross-attention (``--cross-attention document-scaled``), and the sparse
cross-attention (``--cross-attention sparse``, trained with ``--task
multidoc_summarization_sparse --criterion sparse_kl``). Position components
other than ``pegasus-sinusoidal`` are refused when the model is built:
PEGASUS's checkpoints have no position table, so HierEncDec's restarted
positions and the learned table would read rows no checkpoint trained, and
fairseq's sinusoidal layout and DAPE's token positions are not the
encoding PEGASUS was trained with.
"""

from fairseq.models import register_model, register_model_architecture

from mdsfair.models.component_model import ComponentBARTModel
from mdsfair.models.hub import MultiDocHubModel
from mdsfair.models.presets import PEGASUS_BACKBONE, PEGASUS_ENCODER, family_defaults, pegasus_dimensions
from mdsfair.modules.components import flag_of
from mdsfair.modules.sinusoidal import HalvesSinusoidalPositions

#: The one source of the pegasus model's defaults (``mdsfair.models.flag_defaults``):
#: the components' (PEGASUS's encoder positions) and PEGASUS's backbone.
DEFAULTS = family_defaults(**PEGASUS_ENCODER, **PEGASUS_BACKBONE)


def position_refusal(args) -> str:
    """Why ``args``' encoder positions cannot serve PEGASUS, or ''."""
    chosen = getattr(args, "encoder_positions", None)
    if chosen in (None, PEGASUS_ENCODER["encoder_positions"]):
        return ""
    return (
        f"{flag_of('encoder_positions')} {chosen} cannot be used with the pegasus architectures: PEGASUS was "
        "trained with its own sinusoidal positions (pegasus-sinusoidal) and its checkpoints hold no position "
        "table, so a learned table (learned, HierEncDec's document-restart) would read untrained rows and "
        "another encoding (sinusoidal, document-aware) is not the one the weights expect; use "
        f"{flag_of('encoder_positions')} pegasus-sinusoidal (HierEncDec's document attention and its "
        "cross-attention combine with it)"
    )


@register_model("pegasus")
class PegasusModel(MultiDocHubModel, ComponentBARTModel):
    """PEGASUS: see the module docstring."""

    defaults = DEFAULTS
    #: torch.hub entry point (hubconf.py) of this family
    hub_description = (
        "PEGASUS (Zhang et al. 2020): imported from Hugging Face with mdsfair-import hf-pegasus; document "
        "attention, document-scaled and sparse cross-attention by flags"
    )

    @classmethod
    def build_model(cls, args, task):
        reason = position_refusal(args)
        if reason:
            raise ValueError(reason)
        return super().build_model(args, task)

    @classmethod
    def decoder_options(cls, args, dictionary):
        """PEGASUS's decoder: it starts from ``<pad>``, never predicts
        fairseq's ``<s>``, and has PEGASUS's sinusoidal positions."""
        return {
            "start_index": dictionary.pad(),
            "absent_index": dictionary.bos(),
            "positions": HalvesSinusoidalPositions(args.max_target_positions, args.decoder_embed_dim, dictionary.pad()),
        }


@register_model_architecture("pegasus", "pegasus_large")
def pegasus_large_architecture(args):
    """google/pegasus-large and its fine-tuned checkpoints (google/pegasus-multi_news):
    d_model 1,024, 16 + 16 layers, 16 heads, feed-forward 4,096, 1,024 positions per stack."""
    DEFAULTS.fill(args)
    pegasus_dimensions(args, "large")


@register_model_architecture("pegasus", "pegasus_tiny")
def pegasus_tiny_architecture(args):
    """Tiny dims for tests (``mdsfair.models.tiny_dimensions``)."""
    DEFAULTS.fill(args)
    pegasus_dimensions(args, "tiny")
