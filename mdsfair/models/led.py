"""LED, the Longformer encoder-decoder (Beltagy et al. 2020, Sec. 6), and
PRIMERA (Xiao et al., ACL 2022) on fairseq's BART.

The model is the component model (:mod:`mdsfair.models.component_model`):
BART with every encoder self-attention replaced by Longformer's
sliding-window + global attention (``--encoder-self-attention longformer``,
:mod:`mdsfair.modules.longformer_attention`), a learned encoder position
table of ``--max-encoder-positions`` rows (16,384 for LED, 4,096 for
PRIMERA), and the decoder of BART, as in Hugging Face's
``LEDForConditionalGeneration`` (``transformers/models/led/modeling_led.py``).

Global attention (``--global-attention``, stored in the checkpoint's model
config so ``fairseq-generate --path`` and the hub decode the way the model
was trained):

* ``first``: the first real token of every source (its ``<s>``), as Hugging
  Face's LED summarization examples set ``global_attention_mask[:, 0] = 1``;
  with fairseq's left-padded sources the first *non-padding* token;
* ``doc-sep``: the first token and every ``<doc-sep>`` (PRIMERA,
  allenai/PRIMER ``script/primer_hf_main.py``: ``global_attention_mask`` at
  ``<s>`` and at the ``<doc-sep>`` ids); the id is the task's
  (:meth:`MultidocSummarizationTask.document_separator`, ``--source-layout
  primera``) or the dictionary's ``<doc-sep>``;
* ``documents``: the first token of every document, from the batch's
  ``src_doc_ids`` (the data-bin's document ids, no string search).

``--attention-window`` takes one even window for every encoder layer or one
per layer (comma list); a window ``w`` lets each token see ``w / 2`` tokens
on each side (Hugging Face's ``attention_window``).

Parameter names (fairseq BART's, so the Hugging Face importer maps one to one
and a BART checkpoint restores with only the global projections new)::

    fairseq (this model)                            Hugging Face LED
    encoder.embed_tokens.weight                     led.shared.weight (tied)
    encoder.embed_positions.weight [P + 2, d]       led.encoder.embed_positions.weight [P, d]
                                                    (fairseq rows 2: = HF rows; rows 0-1 unused)
    encoder.layernorm_embedding.*                   led.encoder.layernorm_embedding.*
    encoder.layers.i.self_attn.q_proj.*             led.encoder.layers.i.self_attn.longformer_self_attn.query.*
    encoder.layers.i.self_attn.k_proj.*             ... .longformer_self_attn.key.*
    encoder.layers.i.self_attn.v_proj.*             ... .longformer_self_attn.value.*
    encoder.layers.i.self_attn.q_global_proj.*      ... .longformer_self_attn.query_global.*
    encoder.layers.i.self_attn.k_global_proj.*      ... .longformer_self_attn.key_global.*
    encoder.layers.i.self_attn.v_global_proj.*      ... .longformer_self_attn.value_global.*
    encoder.layers.i.self_attn.out_proj.*           led.encoder.layers.i.self_attn.output.*
    encoder.layers.i.{self_attn_layer_norm,fc1,fc2,final_layer_norm}.*   the same names under led.
    decoder.*                                       led.decoder.* (BART's names; positions offset as above)
    decoder.output_projection.weight                lm_head.weight (tied to led.shared)
    (none: fairseq has no output bias)              final_logits_bias (must be zero)

:func:`mdsfair.modules.led_parameter_map.led_state_dict_from_hf` does this
mapping (the one table, shared with the exporter).

Positions: Hugging Face numbers every position 0, 1, ... including padding;
fairseq's learned positions skip padding (``make_positions``), so a token's
position is the same for right-padded sources, and for left-padded ones it is
that of the unpadded source.
"""

import logging

from fairseq.models import register_model, register_model_architecture

from mdsfair.models.component_model import ComponentBARTModel
from mdsfair.models.hub import MultiDocHubModel
from mdsfair.models.presets import LED_ENCODER, PRIMERA_ENCODER, bart_dimensions, family_defaults

logger = logging.getLogger(__name__)

#: The one source of the led model's defaults (``mdsfair.models.flag_defaults``):
#: allenai/led-*-16384's; the architectures override positions, window and
#: global attention for PRIMERA.
DEFAULTS = family_defaults(**LED_ENCODER)


@register_model("led")
class LEDModel(MultiDocHubModel, ComponentBARTModel):
    """LED / PRIMERA: see the module docstring."""

    defaults = DEFAULTS
    #: torch.hub entry point (hubconf.py) of this family
    hub_description = (
        "LED / PRIMERA (Beltagy et al. 2020; Xiao et al. 2022): BART with Longformer sliding-window + global "
        "encoder attention"
    )


# ------------------------------------------------------------ architectures


@register_model_architecture("led", "led_base")
def led_base_architecture(args):
    """allenai/led-base-16384: BART-base (6 + 6 layers, d 768), 16,384 source
    positions, window 1,024."""
    bart_dimensions(args, "base")
    DEFAULTS.fill(args)


@register_model_architecture("led", "led_large")
def led_large_architecture(args):
    """allenai/led-large-16384: BART-large (12 + 12 layers, d 1,024), 16,384
    source positions, window 1,024."""
    bart_dimensions(args, "large")
    DEFAULTS.fill(args)


@register_model_architecture("led", "primera")
def primera_architecture(args):
    """allenai/PRIMERA: led_large dimensions, 4,096 source positions, window
    512, ``--global-attention doc-sep`` and the task's ``--source-layout
    primera`` (documents joined by ``<doc-sep>``, PRIMERA's per-document
    truncation). With no ``--source-layout`` given (the task's default is
    the data-bin's recorded layout), the architecture sets ``primera``; an
    explicit other layout is replaced, with a log line saying so; use
    ``led_large`` with ``--max-encoder-positions 4096 --attention-window
    512`` for PRIMERA's dimensions on another layout."""
    if hasattr(args, "source_layout") and args.source_layout != "primera":
        if args.source_layout is not None:
            logger.info(
                "architecture primera: task --source-layout %s replaced by primera (documents joined by <doc-sep>); "
                "for PRIMERA's dimensions on another layout use --arch led_large --max-encoder-positions 4096 "
                "--attention-window 512",
                args.source_layout,
            )
        args.source_layout = "primera"
    bart_dimensions(args, "large")
    DEFAULTS.fill(args, **PRIMERA_ENCODER)


@register_model_architecture("led", "led_tiny")
def led_tiny_architecture(args):
    """Tiny dims for tests (``mdsfair.models.tiny_dimensions``), 1,024
    encoder positions, window 8 (several windows per test source)."""
    bart_dimensions(args, "tiny")
    DEFAULTS.fill(args, max_encoder_positions=1024, attention_window="8")
