"""Longformer self-attention (Beltagy et al. 2020, "Longformer: The
Long-Document Transformer", Sec. 3.1) as LED's encoder uses it.

The computation is that of Hugging Face's ``LEDEncoderSelfAttention``
(``transformers/models/led/modeling_led.py``, copied there from
``LongformerSelfAttention``) and of allenai/longformer's
``longformer/sliding_chunks.py``, written here as one banded computation:

* **Window.** ``attention_window`` has Hugging Face's meaning: a window
  ``w`` (even) lets every token see ``w / 2`` tokens on *each* side and
  itself (``one_sided_attn_window_size = attention_window // 2`` in HF), so
  ``w + 1`` keys in all.
* **Global tokens** (``global_mask``) attend to every (non-padding) token and
  every token attends to them. A local token's scores against the global
  tokens use the *local* key and value projections (HF's
  ``_concat_with_global_key_attn_probs``); a global token is removed from the
  sliding windows so that it is counted once. A global token's own output is
  computed with the separate global projections ``q_global_proj``,
  ``k_global_proj``, ``v_global_proj`` (LED's ``query_global``/``key_global``/
  ``value_global``) over all tokens (HF's ``_compute_global_attn_output_from_hidden``).
  One softmax covers the global and the window scores of a local token.
* **Padding** (``key_padding_mask``, True at padding) is never attended to;
  a padding token's own output is the output projection of zero (HF zeroes
  its probabilities the same way).
* **Any length.** The sequence is padded internally to a multiple of the
  block size ``min(w / 2, n)`` and the padding stripped afterwards.

Cost is O(n * w): queries are cut into blocks of ``b = w / 2`` tokens, and
block ``c`` scores only the ``3b`` keys of blocks ``c - 1, c, c + 1``
(``Tensor.unfold`` on the key sequence padded by ``b`` on each side: a view),
with a fixed ``[b, 3b]`` band mask ``|i - j| <= w / 2``. Two computations
give the same numbers (``implementation``): ``banded`` holds the scores as
``[B, H, n / b, b, 3b + G]`` (``G`` = most global tokens of an example), the
portable reference; ``fused`` (default) hands every block's queries and
its ``3b + G`` keys to ``F.scaled_dot_product_attention`` (flash kernel on
CPU, fused kernels on CUDA), which keeps no score tensor, with one band mask
shared by all blocks and the excluded keys marked in an extra head-dimension
column (:meth:`LongformerSelfAttention.fused_windows`). Neither ever forms
``n x n``. Masked scores take the dtype's lowest finite value
(``torch.finfo(dtype).min``), the softmax runs in float32 as in HF, so
float16 and bfloat16 work.

Input and output follow fairseq's ``MultiheadAttention`` layout: time-major
``[T, B, C]``.
"""

import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.modules.fairseq_dropout import FairseqDropout
from torch import Tensor, nn


def global_token_indices(global_mask: Tensor) -> Tuple[Tensor, Tensor]:
    """Positions of the global tokens of every row, first to last, padded.

    Args:
        global_mask: ``[B, T]`` bool, True at global tokens.

    Returns:
        ``indices [B, G]`` (``G`` = most global tokens of a row; slots past a
        row's count hold 0) and ``valid [B, G]`` (True at real slots).
    """
    counts = global_mask.sum(dim=1)
    most = int(counts.max()) if global_mask.numel() else 0
    # a stable sort of "not global" puts a row's global positions first, in order
    order = torch.sort((~global_mask).to(torch.uint8), dim=1, stable=True).indices[:, :most]
    valid = torch.arange(most, device=global_mask.device).unsqueeze(0) < counts.unsqueeze(1)
    return order.masked_fill(~valid, 0), valid


#: ``fused``: the window and global keys of every query block through
#: ``F.scaled_dot_product_attention`` with a shared band mask (PyTorch's fused
#: kernels where the device has them); ``banded``: the same scores as explicit
#: ``[B, H, N, b, 3b + G]`` tensors (einsum, masked softmax): the portable
#: reference, as Hugging Face computes it.
IMPLEMENTATIONS = ("fused", "banded")


def softmax_dtype(scores: Tensor) -> torch.dtype:
    """float32 for float16/bfloat16 scores (HF's ``softmax(..., dtype=torch.float32)``),
    else the scores' own dtype (float64 stays float64)."""
    return torch.float32 if scores.element_size() < 4 else scores.dtype


class LongformerSelfAttention(nn.Module):
    """Sliding-window + global self-attention (see the module docstring).

    Parameters (fairseq's names; Hugging Face LED's in brackets):
    ``q_proj`` [``query``], ``k_proj`` [``key``], ``v_proj`` [``value``],
    ``q_global_proj`` [``query_global``], ``k_global_proj`` [``key_global``],
    ``v_global_proj`` [``value_global``], ``out_proj`` [LED's
    ``self_attn.output``].
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        attention_window: int,
        dropout: float = 0.0,
        bias: bool = True,
        implementation: str = "fused",
        global_projections: bool = True,
    ):
        super().__init__()
        if implementation not in IMPLEMENTATIONS:
            raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}")
        self.implementation = implementation
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not a multiple of the number of heads {num_heads}")
        if attention_window <= 0 or attention_window % 2:
            raise ValueError(
                f"attention_window must be a positive even number (each token sees attention_window / 2 "
                f"tokens on each side), got {attention_window}"
            )
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.attention_window = attention_window
        self.one_sided_window = attention_window // 2
        self.scaling = self.head_dim**-0.5
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        # LoBART's local attention (global tokens none) has BART's projections only
        self.q_global_proj = nn.Linear(embed_dim, embed_dim, bias=bias) if global_projections else None
        self.k_global_proj = nn.Linear(embed_dim, embed_dim, bias=bias) if global_projections else None
        self.v_global_proj = nn.Linear(embed_dim, embed_dim, bias=bias) if global_projections else None
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.reset_parameters()

    def reset_parameters(self):
        """fairseq ``MultiheadAttention``'s initialization for every projection."""
        input_projections = tuple(
            projection
            for projection in (
                self.q_proj,
                self.k_proj,
                self.v_proj,
                self.q_global_proj,
                self.k_global_proj,
                self.v_global_proj,
            )
            if projection is not None
        )
        for projection in input_projections:
            nn.init.xavier_uniform_(projection.weight, gain=1 / math.sqrt(2))
        nn.init.xavier_uniform_(self.out_proj.weight)
        for projection in (*input_projections, self.out_proj):
            if projection.bias is not None:
                nn.init.constant_(projection.bias, 0.0)

    def heads(self, x: Tensor) -> Tensor:
        """``[B, T, C]`` -> ``[B, H, T, D]``."""
        batch_size, length, _ = x.shape
        return x.view(batch_size, length, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(
        self,
        x: Tensor,
        key_padding_mask: Optional[Tensor] = None,
        global_mask: Optional[Tensor] = None,
    ) -> Tensor:
        """Args:
            x: ``[T, B, C]``.
            key_padding_mask: ``[B, T]`` bool, True at padding (or None).
            global_mask: ``[B, T]`` bool, True at global tokens (or None);
                padding is never global. None (or no True) for an attention
                built with ``global_projections=False`` (LoBART's local
                attention, Manakul & Gales 2021).

        Returns:
            ``[T, B, C]``.
        """
        length, batch_size, embed_dim = x.shape
        if embed_dim != self.embed_dim:
            raise ValueError(f"input has {embed_dim} channels, the attention {self.embed_dim}")
        padding = (
            key_padding_mask.to(torch.bool)
            if key_padding_mask is not None
            else torch.zeros(batch_size, length, dtype=torch.bool, device=x.device)
        )
        is_global = global_mask.to(torch.bool) & ~padding if global_mask is not None else torch.zeros_like(padding)
        hidden = x.transpose(0, 1)  # [B, T, C]

        block = max(1, min(self.one_sided_window, length))
        extra = (-length) % block
        if extra:
            hidden = F.pad(hidden, (0, 0, 0, extra))
            padding = F.pad(padding, (0, extra), value=True)
            is_global = F.pad(is_global, (0, extra), value=False)

        output = self.local_and_global_keys(hidden, padding, is_global, block)
        if is_global.any():
            output = self.global_queries(hidden, padding, is_global, output)
        output = output[:, :length]
        return self.out_proj(output).transpose(0, 1)

    def local_and_global_keys(self, hidden: Tensor, padding: Tensor, is_global: Tensor, block: int) -> Tensor:
        """Every query over its window and the global keys (local projections);
        ``[B, T, C]`` before the output projection."""
        batch_size, length, _ = hidden.shape
        num_blocks = length // block
        query = self.heads(self.q_proj(hidden) * self.scaling)  # [B, H, T, D]
        key = self.heads(self.k_proj(hidden))
        value = self.heads(self.v_proj(hidden))
        query_blocks = query.reshape(batch_size, self.num_heads, num_blocks, block, self.head_dim)

        # keys of blocks c-1, c, c+1 for every query block c: [B, H, N, D, 3b] (a view)
        def windows(t: Tensor) -> Tensor:
            return F.pad(t, (0, 0, block, block)).unfold(2, 3 * block, block)

        # a key is in a window when within w/2 of the query, not padding, not global
        offsets = torch.arange(3 * block, device=hidden.device) - block
        positions = torch.arange(block, device=hidden.device)
        band = (offsets.unsqueeze(0) - positions.unsqueeze(1)).abs() <= self.one_sided_window  # [b, 3b]
        global_indices, global_valid = global_token_indices(is_global)
        num_global = global_indices.size(1)
        if num_global:
            gather = global_indices.view(batch_size, 1, num_global, 1).expand(-1, self.num_heads, -1, self.head_dim)
            global_keys = key.gather(2, gather)  # [B, H, G, D]
            global_values = value.gather(2, gather)
        if self.implementation == "fused":
            output = self.fused_windows(
                query_blocks,
                key,
                value,
                ~(padding | is_global),
                band,
                (global_keys, global_values, global_valid) if num_global else None,
            )
        else:
            windowed_keys = F.pad(~(padding | is_global), (block, block), value=False).unfold(1, 3 * block, block)
            allowed = band.view(1, 1, block, 3 * block) & windowed_keys.unsqueeze(2)  # [B, N, b, 3b]
            lowest = torch.finfo(hidden.dtype).min
            scores = torch.einsum("bhnqd,bhndk->bhnqk", query_blocks, windows(key))  # [B, H, N, b, 3b]
            scores.masked_fill_(~allowed.unsqueeze(1), lowest)  # in place: einsum's backward keeps its inputs only
            if num_global:
                global_scores = torch.einsum("bhnqd,bhgd->bhnqg", query_blocks, global_keys)
                global_scores = global_scores.masked_fill(~global_valid.view(batch_size, 1, 1, 1, num_global), lowest)
                scores = torch.cat([global_scores, scores], dim=-1)
            probabilities = F.softmax(scores, dim=-1, dtype=softmax_dtype(scores)).type_as(scores)
            del scores
            probabilities = self.dropout_module(probabilities)
            output = torch.einsum("bhnqk,bhndk->bhnqd", probabilities[..., num_global:], windows(value))
            if num_global:
                output = output + torch.einsum("bhnqg,bhgd->bhnqd", probabilities[..., :num_global], global_values)
        # padding queries attend to nothing (HF zeroes their probabilities)
        output = output.masked_fill(padding.view(batch_size, 1, num_blocks, block, 1), 0.0)
        return (
            output.reshape(batch_size, self.num_heads, length, self.head_dim)
            .transpose(1, 2)
            .reshape(batch_size, length, self.embed_dim)
        )

    def fused_windows(self, query_blocks, key, value, key_allowed, band, global_part):
        """The same attention through ``F.scaled_dot_product_attention`` (a
        fused kernel where the device has one: no score tensor is kept), one
        call over every (example, block): queries ``[B * N, H, b, D']``
        against their ``3b`` window keys and the ``G`` global keys.

        Which keys a query may see is split in two so that no per-block mask
        is built: the band ``|i - j| <= w / 2`` is one ``[b, G + 3b]`` boolean
        mask shared by every block and head; a key that is padding, global
        (inside a window), outside the sequence, or an unused global slot gets
        ``finfo(dtype).min / 2`` in an extra head-dimension column whose query
        entry is 1, so its score is that low value and its probability exactly
        0, while the extra column adds exactly 0 to every other score. The
        head dimension is padded with zeros to a multiple of 8 (the fused
        kernels' alignment). No row is empty (a query always sees itself), so
        padding queries give finite outputs, zeroed afterwards."""
        batch_size, heads, num_blocks, block, head_dim = query_blocks.shape
        rows = batch_size * num_blocks
        dtype = query_blocks.dtype
        extra = 8 - head_dim % 8  # >= 1: the key-bias column, then zeros
        lowest = torch.finfo(dtype).min / 2

        def extended(vectors: Tensor, bias: Tensor) -> Tensor:
            """``[..., L, D]`` + the bias column ``[..., L]`` + zero columns."""
            columns = [vectors, bias.unsqueeze(-1)]
            if extra > 1:
                columns.append(vectors.new_zeros(*vectors.shape[:-1], extra - 1))
            return torch.cat(columns, dim=-1)

        key_bias = torch.zeros(key_allowed.shape, dtype=dtype, device=key.device).masked_fill(~key_allowed, lowest)
        key_bias = F.pad(key_bias, (block, block), value=lowest)  # outside the sequence
        padded_keys = extended(F.pad(key, (0, 0, block, block)), key_bias.unsqueeze(1).expand(-1, heads, -1))
        keys = padded_keys.unfold(2, 3 * block, block).permute(0, 2, 1, 4, 3)  # [B, N, H, 3b, D']
        # zero head-dimension columns and the sequence padding in one copy, before the (view) windows
        values = F.pad(value, (0, extra, block, block)).unfold(2, 3 * block, block).permute(0, 2, 1, 4, 3)
        mask = band
        if global_part is not None:
            global_keys, global_values, global_valid = global_part
            num_global = global_keys.size(2)
            global_bias = torch.zeros(global_valid.shape, dtype=dtype, device=key.device).masked_fill(
                ~global_valid, lowest
            )
            global_keys = extended(global_keys, global_bias.unsqueeze(1).expand(-1, heads, -1))
            global_values = F.pad(global_values, (0, extra))
            keys = torch.cat([global_keys.unsqueeze(1).expand(-1, num_blocks, -1, -1, -1), keys], dim=3)
            values = torch.cat([global_values.unsqueeze(1).expand(-1, num_blocks, -1, -1, -1), values], dim=3)
            mask = torch.cat([band.new_ones(block, num_global), band], dim=1)
        width = keys.size(3)
        queries = extended(query_blocks, query_blocks.new_ones(query_blocks.shape[:-1]))
        output = F.scaled_dot_product_attention(
            queries.transpose(1, 2).reshape(rows, heads, block, head_dim + extra),
            keys.reshape(rows, heads, width, head_dim + extra),
            values.reshape(rows, heads, width, head_dim + extra),
            attn_mask=mask.view(1, 1, block, width),
            dropout_p=self.dropout_module.p if self.training else 0.0,
            scale=1.0,  # the queries are already scaled, as in HF
        )
        output = output[..., :head_dim]
        return output.reshape(batch_size, num_blocks, heads, block, head_dim).transpose(1, 2)

    def global_queries(self, hidden: Tensor, padding: Tensor, is_global: Tensor, output: Tensor) -> Tensor:
        """Global tokens attend to every non-padding token with the global
        projections; their rows of ``output`` are replaced. Cost O(n * G)."""
        batch_size, length, _ = hidden.shape
        global_indices, global_valid = global_token_indices(is_global)
        num_global = global_indices.size(1)
        global_hidden = hidden.gather(1, global_indices.unsqueeze(-1).expand(-1, -1, self.embed_dim))  # [B, G, C]
        query = self.heads(self.q_global_proj(global_hidden) * self.scaling)  # [B, H, G, D]
        key = self.heads(self.k_global_proj(hidden))
        value = self.heads(self.v_global_proj(hidden))
        scores = torch.einsum("bhgd,bhtd->bhgt", query, key)
        scores = scores.masked_fill(padding.view(batch_size, 1, 1, length), torch.finfo(scores.dtype).min)
        probabilities = F.softmax(scores, dim=-1, dtype=softmax_dtype(scores)).type_as(scores)
        probabilities = self.dropout_module(probabilities)
        global_output = torch.einsum("bhgt,bhtd->bhgd", probabilities, value)
        global_output = global_output.transpose(1, 2).reshape(batch_size, num_global, self.embed_dim)
        # slots past a row's count write to position 0 of that row: send them to a scratch row instead
        target = torch.where(global_valid, global_indices, torch.full_like(global_indices, length))
        scratch = torch.cat([output, output.new_zeros(batch_size, 1, self.embed_dim)], dim=1)
        scratch = scratch.scatter(1, target.unsqueeze(-1).expand(-1, -1, self.embed_dim), global_output.type_as(output))
        return scratch[:, :length]
