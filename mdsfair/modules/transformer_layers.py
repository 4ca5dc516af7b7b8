"""The one encoder layer and the one decoder layer of mdsfair's
encoder-decoders: the residual, layer-norm and feed-forward block of
fairseq's ``TransformerEncoderLayerBase`` / ``TransformerDecoderLayerBase``
(post- or pre-norm, parameter names unchanged), written once, around any
self-attention or cross-attention component (:mod:`mdsfair.modules.components`).

* :class:`ComponentEncoderLayer` ``(x, encoder_padding_mask, attention_context)``:
  the self-attention component builds ``self_attn`` and runs it on the
  context it prepared once per batch (a document layout, a global mask);
* :class:`ComponentDecoderLayer`: causal self-attention as fairseq's
  (:class:`DecoderSelfAttention`), then the cross-attention component's
  ``attend`` with the context it prepared once per decoder pass, then the
  feed-forward; returns ``(x, attention, extra)``;
* :class:`DecoderSelfAttention` and :class:`OutputProjection`: fairseq's
  ``MultiheadAttention`` and the decoder's ``nn.Linear`` output projection,
  unchanged, as classes of their own: the generation speed-ups of
  :mod:`mdsfair.generation.fast` replace exactly these (and no other
  attention or linear layer) when a generator asks for them;
* :func:`wrap_layer`: activation checkpointing and FSDP wrapping, as fairseq's
  own layer builders do;
* :func:`logits_without`: the logits of a vocabulary imported with a token
  the model never predicts (fairseq's ``<s>`` in PEGASUS's dictionary).
"""

from typing import Optional

import torch
from fairseq.distributed import fsdp_wrap
from fairseq.modules import MultiheadAttention
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase
from torch import Tensor, nn

from mdsfair.modules.activation_checkpointing import activation_checkpointing, checkpoint_layer


def wrap_layer(layer, cfg, structured: bool = False):
    """Activation checkpointing (``structured``: tensors inside tuples and
    NamedTuples of the arguments and outputs are recorded; see
    :func:`mdsfair.modules.activation_checkpointing.checkpoint_layer`) and
    FSDP wrapping, as fairseq's own builders do."""
    layer = checkpoint_layer(layer, cfg, structured=structured)
    return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap if not activation_checkpointing(cfg) else 0)


def embed_source(encoder, src_tokens: Tensor, token_embedding: Optional[Tensor], positions: Optional[Tensor]):
    """fairseq's encoder embedding with the positions given: ``embed_scale``
    times the token embedding, plus ``positions`` (``[B, T, C]``, or None),
    layer norm, dropout and quantization noise as the encoder has them.
    Returns ``(x, token embedding)``, as ``forward_embedding``."""
    if token_embedding is None:
        token_embedding = encoder.embed_tokens(src_tokens)
    x = embed = encoder.embed_scale * token_embedding
    if positions is not None:
        x = embed + positions.type_as(embed)
    if encoder.layernorm_embedding is not None:
        x = encoder.layernorm_embedding(x)
    x = encoder.dropout_module(x)
    if encoder.quant_noise is not None:
        x = encoder.quant_noise(x)
    return x, embed


class ComponentEncoderLayer(TransformerEncoderLayerBase):
    """fairseq's encoder layer whose self-attention is a component's."""

    def __init__(self, cfg, self_attention, layer_index: int):
        self.self_attention_component = self_attention
        self.layer_index = layer_index
        super().__init__(cfg)

    def build_self_attention(self, embed_dim, cfg):
        return self.self_attention_component.build(self, embed_dim, cfg)

    def forward(self, x: Tensor, encoder_padding_mask: Optional[Tensor], attention_context=None):
        """``x [T, B, C]``; ``encoder_padding_mask [B, T]`` (None without
        padding); ``attention_context``: what the component prepared for the batch."""
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        x = self.self_attention_component.attend(
            self.self_attn, x, encoder_padding_mask, attention_context, self.layer_index
        )
        x = self.residual_connection(self.dropout_module(x), residual)
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)
        residual = x
        if self.normalize_before:
            x = self.final_layer_norm(x)
        x = self.fc2(self.activation_dropout_module(self.activation_fn(self.fc1(x))))
        x = self.residual_connection(self.dropout_module(x), residual)
        if not self.normalize_before:
            x = self.final_layer_norm(x)
        return x


class DecoderSelfAttention(MultiheadAttention):
    """The decoder layer's causal self-attention: fairseq's
    ``MultiheadAttention`` (Vaswani et al. 2017, Sec. 3.2.2), with its
    key/value cache in the incremental state and reordered with the beams."""


#: How far below a step's lowest logit a token the model never predicts lies.
ABSENT_TOKEN_MARGIN = 100.0


def logits_without(logits: Tensor, index: int) -> Tensor:
    """``logits [..., V]`` with the token ``index`` set ``ABSENT_TOKEN_MARGIN``
    below the lowest logit of its step, with no gradient: a probability under
    ``e^-100`` of the least likely token's, below float64's resolution of the
    others' log-probabilities, so their softmax is the vocabulary's without
    that token (a dictionary imported from Hugging Face has fairseq's ``<s>``
    in front of the model's own tokens), and finite, so a loss that sums
    every log-probability (label smoothing) stays finite."""
    lowest = logits.detach().min(dim=-1, keepdim=True).values - ABSENT_TOKEN_MARGIN
    return logits.index_copy(-1, torch.tensor([index], device=logits.device), lowest)


class OutputProjection(nn.Linear):
    """The decoder's output projection to the vocabulary (the logits of
    every target position): ``nn.Linear``, tied to the token embedding or
    its own, as fairseq builds it."""


class ComponentDecoderLayer(TransformerDecoderLayerBase):
    """fairseq's decoder layer whose cross-attention is a component's."""

    def __init__(self, cfg, cross_attention):
        self.cross_attention_component = cross_attention
        super().__init__(cfg)
        if self.c_attn is not None:
            raise ValueError("--scale-heads is not supported by mdsfair's component decoder layer")
        if self.cross_self_attention:
            raise ValueError("--cross-self-attention is not supported by mdsfair's component decoder layer")

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        """fairseq's self-attention, built as ``TransformerDecoderLayerBase``
        builds it (same arguments, same parameters)."""
        return DecoderSelfAttention(
            embed_dim,
            cfg.decoder.attention_heads,
            dropout=cfg.attention_dropout,
            add_bias_kv=add_bias_kv,
            add_zero_attn=add_zero_attn,
            self_attention=not cfg.cross_self_attention,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
            xformers_att_config=cfg.decoder.xformers_att_config,
        )

    def build_encoder_attention(self, embed_dim, cfg):
        return self.cross_attention_component.build(self, embed_dim, cfg)

    def after_cross_attention(self, x: Tensor, cross_context, incremental_state) -> Tensor:
        """A sub-layer between the cross-attention block and the
        feed-forward block (HAT-BART's attention over the sentence states,
        :mod:`mdsfair.modules.hat_attention`); none here."""
        return x

    def forward(
        self,
        x: Tensor,
        encoder_states: Tensor,
        encoder_padding_mask: Optional[Tensor],
        cross_context=None,
        incremental_state=None,
        self_attn_mask: Optional[Tensor] = None,
        self_attn_padding_mask: Optional[Tensor] = None,
        need_attn: bool = False,
        alignment_heads: Optional[int] = None,
    ):
        """Self-attention, the component's cross-attention, feed-forward.
        Returns ``(x, attention, extra)``: ``attention`` the cross-attention
        weights ``[B, T, S]`` averaged over the first ``alignment_heads``
        heads when ``need_attn``, ``extra`` what the component reports per
        layer (the sparse decoder's sentence saliencies), or None."""
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        x, _ = self.self_attn(
            query=x,
            key=x,
            value=x,
            key_padding_mask=self_attn_padding_mask,
            incremental_state=incremental_state,
            need_weights=False,
            attn_mask=self_attn_mask,
        )
        if self.attn_ln is not None:
            x = self.attn_ln(x)
        x = self.residual_connection(self.dropout_module(x), residual)
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)

        residual = x
        if self.normalize_before:
            x = self.encoder_attn_layer_norm(x)
        x, attention, extra = self.cross_attention_component.attend(
            self.encoder_attn,
            x,
            encoder_states,
            encoder_padding_mask,
            cross_context,
            incremental_state=incremental_state,
            need_attn=need_attn,
            alignment_heads=alignment_heads,
            # fairseq's layer asks its attention for weights in evaluation too (self.need_attn),
            # which selects the attention's computation: kept, so BART's numbers are bitwise BART's
            need_weights=need_attn or (not self.training and self.need_attn),
        )
        x = self.residual_connection(self.dropout_module(x), residual)
        if not self.normalize_before:
            x = self.encoder_attn_layer_norm(x)
        x = self.after_cross_attention(x, cross_context, incremental_state)

        residual = x
        if self.normalize_before:
            x = self.final_layer_norm(x)
        x = self.activation_dropout_module(self.activation_fn(self.fc1(x)))
        if self.ffn_layernorm is not None:
            x = self.ffn_layernorm(x)
        x = self.dropout_module(self.fc2(x))
        if self.w_resid is not None:
            residual = self.w_resid * residual
        x = self.residual_connection(x, residual)
        if not self.normalize_before:
            x = self.final_layer_norm(x)
        return x, attention, extra
