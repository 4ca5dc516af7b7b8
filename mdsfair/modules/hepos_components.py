"""The HEPOS cross-attention component (``--cross-attention hepos``): head
``h`` of every decoder layer's encoder-decoder attention reads the source
positions ``j mod s = h mod s`` (Huang et al. 2021, Sec. 3;
:mod:`mdsfair.modules.hepos_attention`)."""

from dataclasses import dataclass
from typing import Optional

from mdsfair.argument_types import at_least
from mdsfair.modules.components import ComponentConfig, component_flag, register_component
from mdsfair.modules.cross_attention_components import (
    CrossAttentionComponent,
    fairseq_cross_attention,
    stock_attend,
)
from mdsfair.modules.hepos_attention import HeposCrossAttention


@dataclass
class HeposCrossAttentionConfig(ComponentConfig):
    """Huang et al. 2021: stride 4 (Sec. 3 and the authors' ``--divide_ratio``
    default in ``Model/longbart/longbartmodel.py``), with BART-large's 16 heads
    four heads per residue."""

    hepos_stride: Optional[int] = component_flag(
        4,
        "HEPOS stride s: head h of the cross-attention reads the source positions j with "
        "j mod s = h mod s, 1/s of the source (Huang et al. 2021, Sec. 3); s must divide the "
        "decoder's attention heads",
        type=at_least(1),
        metavar="S",
    )


@register_component("cross_attention", "hepos")
class HeposCrossAttentionComponent(CrossAttentionComponent):
    """HEPOS: cross-attention with head-wise positional strides."""

    config_class = HeposCrossAttentionConfig
    paper = "HEPOS (Huang et al. 2021, Sec. 3)"
    summary = "head h reads the source positions j with j mod s = h mod s (1/s of the source per head)"
    implemented_in = ("mdsfair.modules.hepos_attention",)

    def refusal(self, components):
        heads = getattr(self.args, "decoder_attention_heads", None)
        stride = self.config.hepos_stride
        if heads is not None and stride is not None and heads % stride != 0:
            return (
                f"--hepos-stride {stride} must divide the {heads} decoder attention heads "
                "(every residue j mod s is read by the same number of heads)"
            )
        return None

    def build(self, layer, embed_dim, cfg):
        return fairseq_cross_attention(HeposCrossAttention, layer, embed_dim, cfg, stride=self.config.hepos_stride)

    def attend(
        self,
        attention,
        x,
        encoder_states,
        padding_mask,
        context,
        incremental_state=None,
        need_attn=False,
        alignment_heads=None,
        need_weights=None,
    ):
        # weights are scattered back to the source only when the alignment layer asks for them
        return stock_attend(
            attention, x, encoder_states, padding_mask, incremental_state, need_attn, alignment_heads, need_attn
        )
