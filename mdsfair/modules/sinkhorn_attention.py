"""Sinkhorn self-attention (Tay et al. 2020, "Sparse Sinkhorn Attention",
Sec. 3) as Huang et al. (2021, "Efficient Attentions for Long Document
Summarization", Sec. 3) run it in the encoder of their long BART
(``luyang-huang96/LongDocSum``, ``Model/longbart/utils/sinkhorn.py``, after
lucidrains' ``sinkhorn-transformer``).

Per head, the sequence is cut into ``n = T / b`` blocks of ``b`` tokens.

1. **Block scores** (Tay et al. Eq. 3, the sorting network as the authors
   wrote it, without parameters): the mean query and mean key of each block,
   ``S_uv = relu(mean(q_u) . mean(k_v) / sqrt(d))``.
2. **Gumbel-Sinkhorn** (Tay et al. Eq. 5-7; Mena et al. 2018):
   ``P^0 = (log(S + 1e-6) + g) / tau`` with Gumbel noise ``g`` and temperature
   ``tau``, then ``iterations`` rounds of normalising every row, then every
   column, in the log domain; ``P = exp(P^K)``. Its columns sum to one, its
   rows do in the limit (a doubly stochastic, soft permutation).
3. **Sorted blocks** (Tay et al. Eq. 4): block ``u`` gets the keys and values
   ``sum_v P_uv k_v`` (``v`` likewise), slot by slot.
4. **Attention** (Tay et al. Eq. 8): the queries of block ``u`` attend to the
   ``b`` sorted keys of block ``u`` and the ``b`` keys of their own block,
   logits ``q . k / sqrt(d)``. A sorted key slot counts as padding where the
   slot of the block with the largest ``|P_uv|`` is padding, as the authors
   mask it; padding keys and padding queries take -10000 (a padding query's
   row is uniform, its output unused).

The authors' encoder pads the source to a multiple of the block; this module
pads to the next multiple itself (the added slots are padding).

Padding, where this module departs from the authors' code: their block means
include the padding tokens and their sorted blocks mix padding keys and values
in with weight ``P_uv``, so a source's output changes with the padding its
batch gives it. Here the block means are over real tokens and padding keys and
values are zero before sorting, so padding reaches no real token (the
attention over a source is the same alone or padded within the same number of
blocks); on a source without padding the two are the same computation.

Randomness: the authors draw the Gumbel noise from the global random generator
in training and evaluation alike, one draw per source and head. Here a forward
given a ``torch.Generator`` (the component seeds one per forward in
evaluation) draws one noise per head from it for every source of the batch;
without one (training) the draws are the authors'.
"""

from typing import Optional

import torch
from fairseq.modules import MultiheadAttention
from torch import Tensor

PADDING_LOGIT = -10000.0
LOG_EPSILON = 1e-6


def gumbel_noise(shape, dtype, device, generator: Optional[torch.Generator]) -> Tensor:
    """``-log(-log(u + 1e-6) + 1e-6)`` with ``u`` uniform on [0, 1), as the authors sample it."""
    uniform = torch.rand(shape, generator=generator, dtype=dtype, device=device)
    return -torch.log(-torch.log(uniform + LOG_EPSILON) + LOG_EPSILON)


def block_scores(queries: Tensor, keys: Tensor, block_size: int, real: Optional[Tensor] = None) -> Tensor:
    """Step 1: ``queries``, ``keys [N, T, d]`` -> ``S [N, n, n]``; the means
    over the real tokens of each block where ``real [N, T]`` is given (a block
    of padding only has mean zero)."""
    count, length, head_dim = queries.shape
    shape = (count, length // block_size, block_size, head_dim)
    if real is None:
        query_means, key_means = queries.view(shape).mean(dim=2), keys.view(shape).mean(dim=2)
    else:
        weights = real.to(queries.dtype).view(shape[:3] + (1,))
        counts = weights.sum(dim=2).clamp(min=1)
        query_means = (queries.view(shape) * weights).sum(dim=2) / counts
        key_means = (keys.view(shape) * weights).sum(dim=2) / counts
    return torch.relu(query_means @ key_means.transpose(1, 2) * head_dim**-0.5)


def sinkhorn_sorting(scores: Tensor, noise: Tensor, iterations: int, temperature: float) -> Tensor:
    """Step 2: ``S [N, n, n]`` and its Gumbel ``noise`` -> ``P [N, n, n]``."""
    log_sorting = (torch.log(scores + LOG_EPSILON) + noise) / temperature
    for _ in range(iterations):
        log_sorting = log_sorting - log_sorting.logsumexp(dim=2, keepdim=True)  # rows
        log_sorting = log_sorting - log_sorting.logsumexp(dim=1, keepdim=True)  # columns
    return log_sorting.exp()


def sinkhorn_attention(
    queries: Tensor,
    keys: Tensor,
    values: Tensor,
    sorting: Tensor,
    block_size: int,
    padding_mask: Optional[Tensor],
    dropout=None,
) -> Tensor:
    """Steps 3-4: ``queries``, ``keys``, ``values [N, T, d]`` (``N`` = batch
    x heads, batch-major), ``sorting [N, n, n]``, ``padding_mask [B, T]`` True
    at padding -> ``[N, T, d]``."""
    count, length, head_dim = queries.shape
    blocks = length // block_size

    def blocked(tensor):
        return tensor.reshape(count, blocks, block_size, *tensor.shape[2:])

    key_blocks, value_blocks = blocked(keys), blocked(values)
    sorted_keys = torch.einsum("nuv,nvtd->nutd", sorting, key_blocks)
    sorted_values = torch.einsum("nuv,nvtd->nutd", sorting, value_blocks)
    all_keys = torch.cat([sorted_keys, key_blocks], dim=2)  # [N, n, 2b, d]
    all_values = torch.cat([sorted_values, value_blocks], dim=2)
    logits = blocked(queries) @ all_keys.transpose(-1, -2) * head_dim**-0.5  # [N, n, b, 2b]
    if padding_mask is not None:
        real = blocked((~padding_mask).repeat_interleave(count // padding_mask.size(0), dim=0))  # [N, n, b]
        chosen = sorting.abs().argmax(dim=-1)  # [N, n]: the block each sorted block mostly is
        sorted_real = real.gather(1, chosen[..., None].expand(-1, -1, block_size))
        key_real = torch.cat([sorted_real, real], dim=2)
        logits = logits.masked_fill(~(real[..., :, None] & key_real[..., None, :]), PADDING_LOGIT)
    probs = logits.softmax(dim=-1)
    if dropout is not None:
        probs = dropout(probs)
    return (probs @ all_values).reshape(count, length, head_dim)


class SinkhornSelfAttention(MultiheadAttention):
    """The encoder self-attention of one layer, under fairseq's parameter
    names (``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``: a BART checkpoint
    restores into it; the sorting network has no parameters); see the module
    docstring for the algorithm."""

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        block_size: int,
        iterations: int,
        temperature: float,
        dropout: float = 0.0,
        **kwargs,
    ):
        super().__init__(embed_dim, num_heads, dropout=dropout, self_attention=True, **kwargs)
        self.block_size = block_size
        self.iterations = iterations
        self.temperature = temperature

    def forward_sinkhorn(
        self,
        x: Tensor,
        padding_mask: Optional[Tensor],
        generator: Optional[torch.Generator] = None,
        noise: Optional[Tensor] = None,
    ) -> Tensor:
        """``x [T, B, C]`` -> ``[T, B, C]``; ``padding_mask [B, T]`` True at
        padding; the Gumbel noise ``[B * H, n, n]`` given, else drawn per head
        from ``generator`` (one draw for every source, so that a source's output
        does not depend on the others of its batch), else per source and head
        from the global generator, as the authors draw it."""
        length, batch, _ = x.shape
        padded_length = -(-length // self.block_size) * self.block_size
        if padded_length != length:
            x = torch.cat([x, x.new_zeros(padded_length - length, batch, x.size(-1))])
            if padding_mask is None:
                padding_mask = x.new_zeros(batch, length, dtype=torch.bool)
            padding_mask = torch.cat([padding_mask, padding_mask.new_ones(batch, padded_length - length)], dim=1)

        def heads(projected):
            projected = projected.view(padded_length, batch, self.num_heads, self.head_dim)
            return projected.permute(1, 2, 0, 3).reshape(batch * self.num_heads, padded_length, self.head_dim)

        queries, keys, values = heads(self.q_proj(x)), heads(self.k_proj(x)), heads(self.v_proj(x))
        real = None
        if padding_mask is not None:  # padding neither scores the blocks nor enters a sorted block
            real = (~padding_mask).repeat_interleave(self.num_heads, dim=0)
            keys, values = keys * real[..., None], values * real[..., None]
        scores = block_scores(queries, keys, self.block_size, real)
        if noise is None and generator is None:
            noise = gumbel_noise(scores.shape, scores.dtype, scores.device, None)
        elif noise is None:  # one draw per head, the same for every source of the batch
            noise = gumbel_noise((self.num_heads,) + scores.shape[1:], scores.dtype, scores.device, generator)
            noise = noise.repeat(batch, 1, 1)
        sorting = sinkhorn_sorting(scores, noise, self.iterations, self.temperature)
        attended = sinkhorn_attention(
            queries, keys, values, sorting, self.block_size, padding_mask, self.dropout_module
        )
        attended = attended.view(batch, self.num_heads, padded_length, self.head_dim).permute(2, 0, 1, 3)
        return self.out_proj(attended.reshape(padded_length, batch, -1)[:length])
