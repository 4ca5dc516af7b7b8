"""LongT5's encoder self-attention as components (``--encoder-self-attention``).

* ``local``: LongT5's local attention (Guo et al. 2022, Sec. 2.1.1): the
  source in blocks of ``r + 1`` tokens, each token over the tokens within
  ``r`` positions of it (``--local-radius``, 127 in the releases);
* ``transient-global``: local attention plus, for every token, the global
  tokens of the source's fixed blocks of ``k`` tokens (Sec. 2.1.2,
  ``--global-block-size``, 16): each the sum of its block's states through
  the layer's own RMS layer norm, keyed and valued by the layer's
  projections, with a relative bias table of its own.

Both are T5's attention (no projection biases, unscaled scores) and take
T5's relative position bias as LongT5 does: the encoder's bucketed table of
``--encoder-positions t5-relative-bias`` (``encoder.relative_position_bias``)
read per block over the three-block window, and for ``transient-global`` a
second table over the offsets to the global blocks
(``encoder.global_relative_position_bias``, Hugging Face's
``global_relative_attention_bias``). The blocked biases and masks are
computed once per batch (:meth:`LongT5LocalSelfAttention.prepare`), so the
encoder computes no ``[B * H, T, T]`` bias; the computation is
:mod:`mdsfair.modules.longt5_attention`'s, which mdsfair's own LongT5 model
(``--arch longt5_*``) runs.

LongT5's blocks start at a row's first token, so a row's states depend on
where its padding lies; fairseq pads sources on the left. Every layer reads
the rows right-padded (:func:`~mdsfair.modules.longt5_attention.right_padding_order`)
and writes its output back to the rows' own positions, so a row's states are
those it gets alone, as Hugging Face's LongT5 on right-padded sources.

They run on T5's backbone only (``--linear-biases off --attention-scaling
none`` and ``--encoder-positions t5-relative-bias``); on BART's they are
refused with the reason.
"""

from dataclasses import dataclass
from typing import NamedTuple, Optional

import torch
from torch import Tensor, nn

from mdsfair.argument_types import at_least
from mdsfair.modules.components import BackboneConfig, ComponentConfig, component_flag, register_component
from mdsfair.modules.longt5_attention import (
    BlockedAttentionBias,
    LocalSelfAttention,
    TransientGlobalSelfAttention,
    blocked_attention_bias,
    right_padding_order,
)
from mdsfair.modules.self_attention_components import SelfAttentionComponent


@dataclass
class LocalAttentionConfig(ComponentConfig):
    """LongT5's local radius (google/long-t5-*'s ``local_radius``)."""

    local_radius: Optional[int] = component_flag(
        127,
        "LongT5: each token attends to the tokens within R positions of it (blocks of R + 1 tokens)",
        type=at_least(1),
        metavar="R",
    )


@dataclass
class TransientGlobalAttentionConfig(LocalAttentionConfig):
    """LongT5's local radius and global block size (google/long-t5-tglobal-*'s)."""

    global_block_size: Optional[int] = component_flag(
        16,
        "LongT5 transient-global: one global token per block of K tokens, the sum of their states",
        type=at_least(1),
        metavar="K",
    )


class RightPaddedBlocks(NamedTuple):
    """A batch's context for LongT5's attention: ``order`` ``[B, T]`` (row
    ``b`` right-padded is ``x[b, order[b]]``), ``restore`` ``[B, T]`` (its
    inverse) and the blocked biases and masks of the right-padded rows."""

    order: Tensor
    restore: Tensor
    bias: BlockedAttentionBias


def rows_gathered(x: Tensor, positions: Tensor) -> Tensor:
    """``x [B, T, C]`` with row ``b`` read at ``positions[b]`` ``[B, T]``
    (indexed: the backward pass keeps the positions, where ``gather`` keeps
    ``x`` too)."""
    rows = torch.arange(x.size(0), device=x.device)[:, None]
    return x[rows, positions]


@register_component("encoder_self_attention", "local")
class LongT5LocalSelfAttention(SelfAttentionComponent):
    """LongT5's local attention (Sec. 2.1.1) in every encoder layer,
    :class:`~mdsfair.modules.longt5_attention.LocalSelfAttention` as
    ``self_attn``, the relative bias read per block from the position
    component's table."""

    config_class = LocalAttentionConfig
    paper = "LongT5 (Guo et al. 2022, Sec. 2.1.1)"
    summary = (
        "each token over the tokens within `--local-radius` of it, in blocks, T5's relative bias per block "
        "(T5's backbone)"
    )
    implemented_in = ("mdsfair.modules.longt5_attention",)
    #: takes T5's relative position bias, blocked (:meth:`prepare`), not as a ``[B * H, T, T]`` matrix
    takes_position_bias = True
    #: the encoder computes no dense bias for it: :meth:`prepare` reads the position component's table
    reads_position_tables = True
    follows_backbone = True

    def global_block_size(self) -> int:
        """Source tokens per global token; 0: no global tokens."""
        return 0

    def refusal(self, components):
        positions = components["encoder_positions"]
        if positions.name != "t5-relative-bias":
            return (
                "LongT5's attention adds T5's relative position bias within its blocks; it needs "
                "--encoder-positions t5-relative-bias"
            )
        backbone = BackboneConfig.of(self.args)
        if backbone.linear_bias or backbone.attention_scaling != "none":
            return (
                "LongT5's attention is T5's (projections without biases, unscaled scores); it needs T5's "
                "backbone: --linear-biases off --attention-scaling none"
            )
        return None

    def build(self, layer, embed_dim, cfg):
        heads = cfg.encoder.attention_heads
        return LocalSelfAttention(embed_dim, heads, embed_dim // heads, cfg.attention_dropout, self.config.local_radius)

    def global_bias_table(self, encoder) -> Optional[nn.Embedding]:
        """The table of the global tokens' bias; none for local attention."""
        return None

    def prepare(self, encoder, structure):
        order = right_padding_order(structure.padding_mask)
        table = encoder.relative_position_bias
        bias = blocked_attention_bias(
            structure.padding_mask.gather(1, order),
            encoder.embed_tokens.weight.dtype,
            table.relative_attention_bias,
            self.global_bias_table(encoder),
            table.num_buckets,
            table.max_distance,
            self.config.local_radius,
            self.global_block_size(),
        )
        return RightPaddedBlocks(order, order.argsort(dim=1), bias)

    def attend(self, attention, x, padding_mask, context, layer_index, position_bias=None):
        output = attention(rows_gathered(x.transpose(0, 1), context.order), context.bias)
        return rows_gathered(output, context.restore).transpose(0, 1)


@register_component("encoder_self_attention", "transient-global")
class LongT5TransientGlobalSelfAttention(LongT5LocalSelfAttention):
    """LongT5's transient-global attention (Sec. 2.1.2):
    :class:`~mdsfair.modules.longt5_attention.TransientGlobalSelfAttention`
    as ``self_attn`` (with its ``global_input_layer_norm``, eps
    ``--rms-norm-eps``), the global tokens' bias table
    ``encoder.global_relative_position_bias`` (the position component's
    buckets)."""

    config_class = TransientGlobalAttentionConfig
    paper = "LongT5 (Guo et al. 2022, Sec. 2.1.2)"
    summary = (
        "local attention plus global tokens, the layer-normed sums of blocks of `--global-block-size` tokens, "
        "with a relative bias table of their own (T5's backbone)"
    )

    def global_block_size(self) -> int:
        return self.config.global_block_size

    def build(self, layer, embed_dim, cfg):
        heads = cfg.encoder.attention_heads
        return TransientGlobalSelfAttention(
            embed_dim,
            heads,
            embed_dim // heads,
            cfg.attention_dropout,
            self.config.local_radius,
            layer.backbone.rms_norm_eps,
        )

    def build_encoder_modules(self, encoder):
        encoder.global_relative_position_bias = nn.Embedding(
            self.args.relative_attention_num_buckets, self.args.encoder_attention_heads
        )

    def global_bias_table(self, encoder):
        return encoder.global_relative_position_bias
