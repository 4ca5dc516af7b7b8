"""HAT-BART's hierarchical layers (Rohde, Wu & Liu 2021, "Hierarchical
Learning for Generation with Long Source Sequences", arXiv 2104.07545, Sec. 3).

The source carries one start token per sentence. After the token-level
encoder (BART's layers, unchanged), the hierarchical encoder takes the final
states of the sentence-start tokens only,

    h_1, ..., h_S = states at the first token of sentences 1..S,

and runs standard Transformer encoder layers (self-attention and feed-forward,
BART's layer) over that sequence, one per example, padding the shorter ones.
Every decoder layer then attends to both memories: BART's cross-attention over
the token states, followed by a second cross-attention block, with its own
residual connection and layer norm, over the hierarchical sentence states.

Only the hierarchical encoder layers and the decoder's sentence
cross-attention blocks are new parameters; every other parameter keeps BART's
name, so a BART checkpoint restores with exactly these missing.

Here the start of a sentence is the first token of each sentence of the data
contract's ``src_sent_ids`` (``docs/data_contract.md``).

The paper's Sec. 3 could not be read for this implementation (only its
abstract, which names the hierarchical layers and a "hierarchical
encoder-decoder attention"): the place of the hierarchical layers (after the
last token layer), their number (2 in ``hat_bart_large``) and the order of the
two cross-attentions are this implementation's reading, listed in
``examples/hat_bart/README.md`` and checked on a built model by
``tests/test_hat_bart.py``.
"""

from typing import NamedTuple, Optional, Tuple

import torch
from fairseq.modules import LayerNorm, MultiheadAttention
from fairseq.modules.transformer_layer import TransformerEncoderLayerBase
from torch import Tensor, nn

from mdsfair.modules.cross_attention_components import fairseq_cross_attention
from mdsfair.modules.segment_positions import segment_start_mask
from mdsfair.modules.transformer_layers import ComponentDecoderLayer


class SentenceMemory(NamedTuple):
    """The hierarchical encoder's output as the decoder layers read it:
    ``states [S, B, C]`` and ``padding_mask [B, S]`` (True at padding)."""

    states: Tensor
    padding_mask: Tensor


def sentence_start_index(src_sent_ids: Tensor, num_sentences: int) -> Tuple[Tensor, Tensor]:
    """Positions of the sentence-start tokens.

    Args:
        src_sent_ids: ``[B, T]`` sentence of every token, -1 at padding.
        num_sentences: the most sentences of any example (``S``).

    Returns:
        ``(index [B, S], padding [B, S])``: the position of the first token of
        each example's ``s``-th sentence in source order, and True where the
        example has fewer than ``s + 1`` sentences (index 0 there).
    """
    starts = segment_start_mask(src_sent_ids)
    time = torch.arange(src_sent_ids.size(1), device=src_sent_ids.device).expand_as(src_sent_ids)
    # the starts first, in source order (a stable sort of "not a start")
    order = torch.sort(starts.logical_not().to(torch.uint8), dim=1, stable=True).indices
    index = time.gather(1, order)[:, :num_sentences]
    padding = starts.sum(dim=1, keepdim=True) <= torch.arange(num_sentences, device=starts.device)
    return index.masked_fill(padding, 0), padding


def gather_sentence_states(token_states: Tensor, index: Tensor) -> Tensor:
    """``token_states [T, B, C]`` at ``index [B, S]``: ``[S, B, C]``."""
    return token_states.gather(0, index.t().unsqueeze(-1).expand(-1, -1, token_states.size(-1)))


class HierarchicalSentenceEncoder(nn.Module):
    """The hierarchical encoder: BART's encoder layer, ``num_layers`` times,
    over the sentence-start states."""

    def __init__(self, cfg, num_layers: int, wrap=lambda layer: layer):
        super().__init__()
        self.layers = nn.ModuleList([wrap(TransformerEncoderLayerBase(cfg)) for _ in range(num_layers)])

    def forward(self, token_states: Tensor, src_sent_ids: Tensor, num_sentences: int) -> SentenceMemory:
        """``token_states [T, B, C]`` (the token encoder's output),
        ``src_sent_ids [B, T]``; returns the sentence states and their padding."""
        index, padding = sentence_start_index(src_sent_ids, num_sentences)
        x = gather_sentence_states(token_states, index)
        for layer in self.layers:
            x = layer(x, encoder_padding_mask=padding)
        return SentenceMemory(x, padding)


class HATDecoderLayer(ComponentDecoderLayer):
    """BART's decoder layer plus the sentence cross-attention block between
    the token cross-attention and the feed-forward: residual, dropout and
    layer norm as the token block (post-norm as BART, or pre-norm)."""

    def __init__(self, cfg, cross_attention):
        super().__init__(cfg, cross_attention)
        embed_dim = cfg.decoder.embed_dim
        self.sentence_attn = fairseq_cross_attention(MultiheadAttention, self, embed_dim, cfg)
        self.sentence_attn_layer_norm = LayerNorm(embed_dim, export=cfg.export)

    def after_cross_attention(self, x: Tensor, cross_context: Optional[SentenceMemory], incremental_state) -> Tensor:
        if cross_context is None:
            raise ValueError("HAT-BART's decoder layer needs the hierarchical encoder's sentence states")
        residual = x
        if self.normalize_before:
            x = self.sentence_attn_layer_norm(x)
        x, _ = self.sentence_attn(
            query=x,
            key=cross_context.states,
            value=cross_context.states,
            key_padding_mask=cross_context.padding_mask,
            incremental_state=incremental_state,
            static_kv=True,
            need_weights=False,
        )
        x = self.residual_connection(self.dropout_module(x), residual)
        if not self.normalize_before:
            x = self.sentence_attn_layer_norm(x)
        return x
