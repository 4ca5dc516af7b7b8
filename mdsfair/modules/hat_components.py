"""HAT-BART's cross-attention component (``--cross-attention hat``): the
hierarchical encoder over the sentence-start states and the decoder's second
cross-attention over them (Rohde et al. 2021, Sec. 3;
:mod:`mdsfair.modules.hat_attention`)."""

import logging
from dataclasses import dataclass
from typing import Optional

from mdsfair.argument_types import at_least
from mdsfair.modules.components import ComponentConfig, component_flag, register_component
from mdsfair.modules.cross_attention_components import FullCrossAttention, required_context
from mdsfair.modules.hat_attention import HATDecoderLayer, HierarchicalSentenceEncoder, SentenceMemory
from mdsfair.modules.segment_positions import segment_start_mask
from mdsfair.modules.source_structure import SourceContext
from mdsfair.modules.transformer_layers import wrap_layer

logger = logging.getLogger(__name__)


def is_hierarchical_parameter(key: str) -> bool:
    """Whether a state-dict key (of the model, without prefix) belongs to
    HAT's new layers: the hierarchical encoder and the decoder layers'
    sentence cross-attention blocks."""
    return key.startswith("encoder.hierarchical_encoder.") or (
        key.startswith("decoder.layers.") and ".sentence_attn" in key
    )


@dataclass
class HATConfig(ComponentConfig):
    hierarchical_sentence_layers: Optional[int] = component_flag(
        2,
        "Transformer encoder layers over the sentence-start states after the token encoder "
        "(HAT-BART, Rohde et al. 2021; 2 is this implementation's choice, see examples/hat_bart/README.md)",
        type=at_least(1),
        metavar="N",
    )


@register_component("cross_attention", "hat")
class HATCrossAttention(FullCrossAttention):
    """BART's cross-attention over the tokens, then a second cross-attention
    over the hierarchical encoder's sentence states in every decoder layer."""

    paper = "HAT-BART (Rohde et al. 2021, Sec. 3)"
    summary = (
        "hierarchical encoder layers over the sentence-start states; each decoder layer attends to the "
        "tokens, then to the sentence states"
    )
    side_input_notes = {"src_sent_ids": "required"}
    implemented_in = ("mdsfair.modules.hat_attention",)
    config_class = HATConfig
    decoder_layer_class = HATDecoderLayer

    def side_inputs(self):
        return {"src_sent_ids": True}

    def build_encoder_modules(self, encoder):
        encoder.hierarchical_encoder = HierarchicalSentenceEncoder(
            encoder.cfg, self.config.hierarchical_sentence_layers, wrap=lambda layer: wrap_layer(layer, encoder.cfg)
        )

    def source_context(self, encoder, encoder_states, structure):
        src_sent_ids = structure.sentence_ids.masked_fill(structure.padding_mask, -1)
        (num_sentences,) = structure.read(segment_start_mask(src_sent_ids).sum(dim=1).max())
        memory = encoder.hierarchical_encoder(encoder_states, src_sent_ids, num_sentences)
        return SourceContext(sentence_states=memory.states.transpose(0, 1), sentence_padding_mask=memory.padding_mask)

    def decoder_context(self, decoder, source, incremental_state):
        source = required_context(source, self)
        return SentenceMemory(source.sentence_states.transpose(0, 1), source.sentence_padding_mask)

    def upgrade_state_dict(self, model, state_dict, prefix):
        """Restoring a checkpoint without HAT's layers (BART): the new layers
        take the model's fresh initialization; every other tensor is the
        checkpoint's (and fairseq's strict loading still refuses any other
        missing or unexpected key)."""
        created = [
            key for key in model.state_dict() if is_hierarchical_parameter(key) and prefix + key not in state_dict
        ]
        fresh = model.state_dict()
        for key in created:
            state_dict[prefix + key] = fresh[key].clone()
        if created:
            logger.info(
                "HAT-BART: %d tensors of the hierarchical layers absent from the checkpoint, initialized", len(created)
            )
