"""LongT5's encoder self-attention (Guo et al. 2022, "LongT5: Efficient
Text-To-Text Transformer for Long Sequences", Sec. 2.1), as Hugging Face's
``modeling_longt5.py`` computes it on the released checkpoints.

**Local attention** (Sec. 2.1.1): the source is cut into blocks of
``b = r + 1`` tokens (``r``, the local radius: 127 in the releases); each
token attends to the keys of its own block and of the two blocks beside it
that lie within ``r`` positions of it: token ``i`` attends to ``j`` iff
``|i - j| <= r``. The scores carry T5's bucketed relative position bias
(:func:`mdsfair.modules.t5_layers.relative_position_bucket`, bidirectional)
of the offset ``j - i`` within the three-block window.

**Transient-global attention** (Sec. 2.1.2): local attention plus, for every
token, ``G = T // k`` global tokens (``k``, the global block size: 16). The
source is cut into fixed blocks of ``k`` tokens from position 0; a trailing
block shorter than ``k`` is merged into the full block before it (a source
shorter than ``k`` has no global token). Global token ``g`` is the sum of
the states of block ``g`` through its own RMS layer norm (one per layer:
``global_input_layer_norm``); the layer's key and value projections map it
as they map the tokens. Its scores carry a second bias table,
``global_relative_attention_bias``, indexed by the bucket of
``g - block(i)``. The global tokens are "transient": computed afresh in every
layer from that layer's input, never carried between layers.

As in T5, the biases and masks are computed once per batch from the
stack's tables (:func:`blocked_attention_bias`; the component model's
encoder holds the tables, :mod:`mdsfair.modules.longt5_components`) and
every layer adds them.
A masked score gets ``-1e10`` added, the value of the authors' Flaxformer
code and of Hugging Face, so that a padding query, all of whose keys are
masked, still gets finite weights.

**Softmax precision.** Hugging Face computes these softmaxes in float32
whatever the model's dtype (``softmax(scores.float())``), which in a
float64 model rounds the attention weights to float32. mdsfair computes
them in float32 when the model runs in float16 or bfloat16 (the scores, the
biases and the masks are added in float32 too, so that ``-1e10`` stays
finite), and in the model's own dtype otherwise: in float32 the arithmetic
is Hugging Face's; in float64 the weights keep float64 precision
(``tests/test_longt5.py`` checks both).

**Padding.** The blocks start at a row's first token, so the attention of a
row depends on where its padding lies; Hugging Face's models expect
right-padded sources. fairseq's data sets pad sources on the left:
:func:`right_padding_order` puts every row's tokens first, and the
components read each row in that order and write the output back to the
row's own positions, so that a row's states are those it gets alone.

**What the backward pass keeps.** The scores of a layer are ``T (3b + G)``
per head, so what autograd keeps of them sets the layer's training memory.
The blocks are laid out head-major (``[B, heads, n, b, 3b + G]``), so that
the weights of the global tokens are a view of the attention weights when
they meet the global values (a block-major layout has them copied), and the
dropout of the attention weights keeps a boolean mask
(:func:`attention_dropout`): per score, a layer keeps the softmax's output,
the dropped weights the values read and one byte of mask.

Tensors are batch-major (``[B, T, C]``).
"""

from typing import NamedTuple, Optional

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from mdsfair.modules.t5_layers import T5Attention, T5LayerNorm, relative_position_bucket

#: what a masked score gets added (the authors' Flaxformer code; Hugging Face's LongT5)
MASKED_SCORE = -1e10


def softmax_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for float16 and bfloat16, the model's dtype otherwise."""
    return torch.promote_types(dtype, torch.float32)


def right_padding_order(padding_mask: Tensor) -> Tensor:
    """``[B, T]``: the positions of every row's tokens, in their order, then
    of its padding (gathering a row by it right-pads the row)."""
    return torch.argsort(padding_mask.to(torch.long), dim=1, stable=True)


def split_into_blocks(x: Tensor, block_length: int) -> Tensor:
    """``[B, T, ...]`` -> ``[B, ceil(T / b), b, ...]``, the last block padded with zeros."""
    blocks = -(-x.size(1) // block_length)
    missing = blocks * block_length - x.size(1)
    if missing:
        x = torch.cat([x, x.new_zeros(x.size(0), missing, *x.shape[2:])], dim=1)
    return x.view(x.size(0), blocks, block_length, *x.shape[2:])


def three_blocks(blocks: Tensor, dim: int = 1) -> Tensor:
    """``[..., n, b, ...]`` (the blocks at ``dim``) -> ``[..., n, 3b, ...]``:
    each block with the block before and the block after it (zeros beyond
    the ends)."""
    edge_shape = list(blocks.shape)
    edge_shape[dim] = 1
    edge = blocks.new_zeros(edge_shape)
    padded = torch.cat([edge, blocks, edge], dim=dim)
    blocks_count = blocks.size(dim)
    return torch.cat([padded.narrow(dim, start, blocks_count) for start in range(3)], dim=dim + 1)


def attention_dropout(weights: Tensor, p: float, training: bool) -> Tensor:
    """``F.dropout(weights, p, training)``: the same draws and the same
    weights, with a boolean mask kept for the backward pass
    (``torch.native_dropout``, which ``F.dropout`` calls on CUDA; on a CPU
    ``F.dropout`` keeps its mask in the weights' dtype, four bytes a score in
    float32). The gradient is the same in float32 and float64; in bfloat16
    it is scaled by ``1 / (1 - p)`` before rounding, where ``F.dropout``'s
    mask holds that factor rounded to bfloat16."""
    if not training or p == 0:
        return weights
    return torch.native_dropout(weights, p, True)[0]


class BlockedAttentionBias(NamedTuple):
    """What every encoder layer of a LongT5 stack adds and reads, computed
    once per batch: ``scores`` ``[B, heads, n, b, 3b + G]``, the position
    biases and masks of each block's queries over its three-block window and
    the ``G`` global tokens (``G = 0`` for local attention), in the softmax's
    dtype; ``global_blocks`` ``[B, T, G]``, one where token ``t`` belongs to
    global block ``g``, in the states' dtype."""

    scores: Tensor
    global_blocks: Tensor


def blocked_attention_bias(
    padding_mask: Tensor,
    states_dtype: torch.dtype,
    relative_attention_bias: nn.Embedding,
    global_relative_attention_bias: Optional[nn.Embedding],
    num_buckets: int,
    max_distance: int,
    local_radius: int,
    global_block_size: int = 0,
) -> BlockedAttentionBias:
    """The :class:`BlockedAttentionBias` of a right-padded batch
    (``padding_mask`` ``[B, T]``, :func:`right_padding_order`): the local table's
    bias of the bucketed offset ``j - i`` within every block's three-block
    window (offsets beyond ``local_radius`` and padded keys masked) and,
    when ``global_block_size`` is set, the global table's bias of
    ``g - block(i)`` over the ``G = T // global_block_size`` global tokens
    (a row's global tokens beyond its own full blocks masked)."""
    real = ~padding_mask
    batch_size, length = real.shape
    device, dtype, block = real.device, softmax_dtype(states_dtype), local_radius + 1

    def bucket_bias(table: nn.Embedding, offsets: Tensor) -> Tensor:  # [..., heads]
        return table(relative_position_bucket(offsets, True, num_buckets, max_distance))

    real_blocks = split_into_blocks(real, block)  # [B, n, b]
    offsets = torch.arange(3 * block, device=device)[None, :] - torch.arange(block, 2 * block, device=device)[:, None]
    allowed = real_blocks[..., :, None] & three_blocks(real_blocks)[..., None, :] & (offsets.abs() < block)
    local = bucket_bias(relative_attention_bias, offsets).permute(2, 0, 1).to(dtype)  # [heads, b, 3b]
    scores = torch.where(allowed[:, None], local[:, None], MASKED_SCORE)  # [B, heads, n, b, 3b]
    if not global_block_size:
        return BlockedAttentionBias(scores, real.new_zeros(batch_size, length, 0, dtype=states_dtype))
    size = global_block_size
    globals_count = length // size
    full_blocks = real.sum(1, keepdim=True) // size  # [B, 1]
    positions = torch.arange(length, device=device)[None, :]
    # the trailing partial block joins the last full one; padding (and a row shorter than k) in none
    global_block = torch.where(real, torch.minimum(positions // size, full_blocks - 1), -1)  # [B, T]
    global_index = torch.arange(globals_count, device=device)
    side = bucket_bias(global_relative_attention_bias, global_index - global_block[..., None])
    side_allowed = real[..., None] & (global_index < full_blocks)[:, None, :]  # [B, T, G]
    side = torch.where(side_allowed[..., None], side.to(dtype), MASKED_SCORE)  # [B, T, G, heads]
    side = split_into_blocks(side, block).permute(0, 4, 1, 2, 3)  # [B, heads, n, b, G]
    global_blocks = F.one_hot(global_block + 1, globals_count + 1)[..., 1:].to(states_dtype)
    return BlockedAttentionBias(torch.cat([scores, side], dim=-1), global_blocks)


class LocalSelfAttention(T5Attention):
    """Sec. 2.1.1: each block's queries over the keys of its three-block
    window, ``softmax(Q K^T + bias) V`` (T5's unscaled scores), with T5's
    projections (the same parameters as :class:`T5Attention`)."""

    def __init__(self, embed_dim: int, heads: int, head_dim: int, dropout: float, local_radius: int):
        super().__init__(embed_dim, heads, head_dim, dropout)
        self.block_length = local_radius + 1

    def project_blocks(self, projection: nn.Linear, x: Tensor) -> Tensor:
        """``[B, heads, n, b, d_kv]``."""
        projected = projection(x).view(x.size(0), x.size(1), self.heads, self.head_dim)
        return split_into_blocks(projected, self.block_length).permute(0, 3, 1, 2, 4)

    def attention_weights(self, scores: Tensor, bias: Tensor) -> Tensor:
        """The softmax over the last dimension in :func:`softmax_dtype`, back in the scores' dtype, then dropout."""
        weights = F.softmax(scores.to(bias.dtype) + bias, dim=-1).to(scores.dtype)
        return attention_dropout(weights, self.dropout, self.training)

    def forward(self, x: Tensor, bias: BlockedAttentionBias) -> Tensor:
        batch_size, length, _ = x.shape
        query = self.project_blocks(self.q_proj, x).contiguous()  # one copy, read by both products
        key = three_blocks(self.project_blocks(self.k_proj, x), dim=2)  # [B, heads, n, 3b, d_kv]
        value = three_blocks(self.project_blocks(self.v_proj, x), dim=2)
        local_scores = torch.matmul(query, key.transpose(-1, -2))  # [B, heads, n, b, 3b]
        scores, global_value = self.with_global_scores(x, query, local_scores, bias)
        weights = self.attention_weights(scores, bias.scores)
        window = key.size(-2)
        output = torch.matmul(weights[..., :window], value)  # [B, heads, n, b, d_kv]
        if global_value is not None:
            # the blocks' rows of every head as one matrix, a view of the weights
            output = output + torch.matmul(weights[..., window:].flatten(2, 3), global_value).view(output.shape)
        output = output.permute(0, 2, 3, 1, 4).reshape(batch_size, -1, self.heads * self.head_dim)
        return self.out_proj(output[:, :length])

    def with_global_scores(self, x: Tensor, query: Tensor, local_scores: Tensor, bias: BlockedAttentionBias):
        """The scores over every key, and the global tokens' values (none here)."""
        return local_scores, None


class TransientGlobalSelfAttention(LocalSelfAttention):
    """Sec. 2.1.2: :class:`LocalSelfAttention` plus every query over the
    ``G`` global tokens, the layer-normed sums of the fixed blocks' states
    under the layer's own key and value projections."""

    def __init__(self, embed_dim: int, heads: int, head_dim: int, dropout: float, local_radius: int, eps: float):
        super().__init__(embed_dim, heads, head_dim, dropout, local_radius)
        self.global_input_layer_norm = T5LayerNorm(embed_dim, eps)

    def with_global_scores(self, x: Tensor, query: Tensor, local_scores: Tensor, bias: BlockedAttentionBias):
        global_inputs = self.global_input_layer_norm(torch.einsum("btc,btg->bgc", x, bias.global_blocks))
        global_key = self.split_heads(self.k_proj(global_inputs))  # [B, heads, G, d_kv]
        global_value = self.split_heads(self.v_proj(global_inputs))
        global_scores = torch.matmul(query.flatten(2, 3), global_key.transpose(-1, -2))  # [B, heads, n b, G]
        global_scores = global_scores.view(*local_scores.shape[:-1], -1)
        return torch.cat([local_scores, global_scores], dim=-1), global_value
