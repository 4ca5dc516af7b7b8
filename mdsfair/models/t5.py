"""T5 v1.1 (Raffel et al. 2020, Sec. 2.1 and 3.1; the v1.1 changes of
google-research/text-to-text-transfer-transformer's released checkpoints)
as the component model (:mod:`mdsfair.models.component_model`), ``--arch
t5_v1_1_{small,base,large}``, equal to Hugging Face's
``T5ForConditionalGeneration`` on the weights ``mdsfair-import hf-t5``
converts (:mod:`mdsfair.importers.hf_t5`).

T5 is the component model on T5's backbone
(:data:`mdsfair.models.presets.T5_BACKBONE`): pre-norm RMS layer norms, no
biases, attention without score scaling and heads of ``d_kv``
(``--attention-head-dim``, 64 in the releases, whose small size has 6 heads
of 64 on ``d_model`` 512), the gated-GELU feed-forward, and one bucketed
relative position bias per stack (``--encoder-positions t5-relative-bias``:
bidirectional in the encoder, causal in the decoder) computed once and added
in every layer; the token embeddings are not scaled and are shared by
encoder and decoder; the output layer is its own matrix (v1.1 unties it,
``--untie-output-embedding``); each stack ends with a layer norm and dropout
(``--stack-output-dropout``). Its vocabulary (T5's shifted one place after
fairseq's ``<s>``), its decoding from ``<pad>``, the seeds' methods on it
and the checkpoints of the former T5 model: :mod:`mdsfair.models.t5_family`.
"""

from fairseq.models import register_model, register_model_architecture

from mdsfair.models.presets import T5_BACKBONE, family_defaults, t5_dimensions
from mdsfair.models.t5_family import T5Family, tiny_architecture

#: The one source of the t5_v1_1 model's defaults (``mdsfair.models.flag_defaults``):
#: the components' with T5's backbone, the output layer its own.
DEFAULTS = family_defaults(**T5_BACKBONE, untie_output_embedding=True)


@register_model("t5_v1_1")
class T5Model(T5Family):
    """T5 v1.1 (Raffel et al. 2020) as Hugging Face's T5ForConditionalGeneration
    computes it (module docstring); import a Hugging Face folder with
    ``mdsfair-import hf-t5``."""

    defaults = DEFAULTS
    #: torch.hub entry point (hubconf.py) of this family
    hub_description = (
        "T5 v1.1 (Raffel et al. 2020): imported from Hugging Face with mdsfair-import hf-t5; document "
        "attention, document-scaled and sparse cross-attention by flags"
    )


@register_model_architecture("t5_v1_1", "t5_v1_1_base")
def t5_v1_1_base_architecture(args):
    """google/t5-v1_1-base: d_model 768, d_ff 2,048, 12 heads of 64, 12 + 12 layers."""
    DEFAULTS.fill(args)
    t5_dimensions(args, 768, 2048, 12, 12)


@register_model_architecture("t5_v1_1", "t5_v1_1_small")
def t5_v1_1_small_architecture(args):
    """google/t5-v1_1-small: d_model 512, d_ff 1,024, 6 heads of 64, 8 + 8 layers."""
    DEFAULTS.fill(args)
    t5_dimensions(args, 512, 1024, 6, 8)


@register_model_architecture("t5_v1_1", "t5_v1_1_large")
def t5_v1_1_large_architecture(args):
    """google/t5-v1_1-large: d_model 1,024, d_ff 2,816, 16 heads of 64, 24 + 24 layers."""
    DEFAULTS.fill(args)
    t5_dimensions(args, 1024, 2816, 16, 24)


@register_model_architecture("t5_v1_1", "t5_v1_1_tiny")
def t5_v1_1_tiny_architecture(args):
    """:func:`tiny_architecture`."""
    tiny_architecture(args, DEFAULTS)
