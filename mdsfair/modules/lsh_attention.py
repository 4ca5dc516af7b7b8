"""LSH self-attention (Reformer, Kitaev et al. 2020, Sec. 2-3) as Huang et al.
(2021, "Efficient Attentions for Long Document Summarization", Sec. 3) run it
in the encoder of their long BART (``luyang-huang96/LongDocSum``,
``Model/longbart/utils/lsh_attention.py``, an adaptation of Hugging Face's
``ReformerLSHAttention``).

For every head, queries and keys share one vector (shared-QK):
``u = (W_q x + W_k x) / 2``; the key is ``u`` normalised to unit root mean
square and divided by ``sqrt(d)``, the query is ``u`` itself.

1. **Hashing** (Reformer Eq. 2, angular LSH of Andoni et al. 2015): per
   hashing round ``r`` a random rotation ``R_r`` (``d x n_buckets/2``, drawn
   from a standard normal) gives ``h(u) = argmax([u R_r; -u R_r])``. Padding
   tokens take an extra bucket of their own, after every other one.
2. **Sorting and chunking**: every round sorts the positions by (bucket,
   position); the rounds are laid end to end (``n_hashes * T`` slots) and cut
   into chunks of ``chunk_length`` slots.
3. **Attention** (Reformer Eq. 3-4): the queries of a chunk attend to every key
   of their chunk and of the chunk before it (the first chunk of a round to
   the last chunk of the round before; the very first to the very last). As
   in the authors' code, keys of another bucket inside that window are not
   masked. Padding keys are set to -1e9 (-1e4 in float16), a query's own
   position to -1e5 (-1e3): a token attends to itself only when nothing else
   is there.
4. **Rounds combined** (Reformer Sec. 3, multi-round LSH): each round's output
   is weighted by the softmax, over rounds, of that round's log-sum-exp of the
   logits, i.e. the attention over the union of the windows of all rounds,
   a key counted once per round it appears in.

A source no longer than one chunk takes full attention with the same
shared-QK, normalisation and masks (no hashing), as the authors' module does.
The authors' encoder pads the source to a multiple of the chunk; this module
pads to the next multiple itself (the added slots are padding).

Randomness: the authors draw the rotations from the global random generator
in every forward, in training and in evaluation alike (their ``hash_seed``
stays None), so their summaries depend on the seed and the order of batches.
Here a forward given a ``torch.Generator`` draws from it (the component seeds
one per forward in evaluation), else from the global generator (training).
"""

from typing import Optional, Tuple

import torch
from fairseq.modules import MultiheadAttention
from torch import Tensor


def default_bucket_count(max_source_positions: int, chunk_length: int) -> int:
    """The authors' number of buckets: the largest power of two not above
    ``2 * (max_source_positions // chunk_length)`` (about half a chunk of
    tokens per bucket on the longest source; 256 buckets for chunks of 64 on
    8,192 positions)."""
    return 2 ** ((2 * (max_source_positions // chunk_length)).bit_length() - 1)


def mask_values(dtype: torch.dtype) -> Tuple[float, float]:
    """The authors' (padding, self) logits: (-1e4, -1e3) in float16, else (-1e9, -1e5)."""
    return (-1e4, -1e3) if dtype == torch.float16 else (-1e9, -1e5)


def rms_normalised(vectors: Tensor, epsilon: float = 1e-6) -> Tensor:
    """``vectors`` divided by their root mean square over the last dimension (Reformer's key norm)."""
    return vectors * torch.rsqrt(vectors.pow(2).mean(dim=-1, keepdim=True) + epsilon)


def hash_buckets(shared_qk: Tensor, rotations: Tensor, padding_mask: Optional[Tensor]) -> Tensor:
    """Step 1: ``shared_qk [B, H, T, d]`` and ``rotations [H, d, n_hashes,
    n_buckets/2]`` -> buckets ``[B, H, n_hashes, T]``; padding (``[B, T]`` True)
    in bucket ``n_buckets``."""
    rotated = torch.einsum("bhtd,hdnr->bhntr", shared_qk.detach(), rotations)
    buckets = torch.cat([rotated, -rotated], dim=-1).argmax(dim=-1)
    if padding_mask is not None:
        buckets = buckets.masked_fill(padding_mask[:, None, None, :], 2 * rotations.size(-1))
    return buckets


def sorted_order(buckets: Tensor) -> Tensor:
    """Step 2: per round, the positions sorted by (bucket, position): ``[B, H, n_hashes, T]``."""
    length = buckets.size(-1)
    position = torch.arange(length, device=buckets.device)
    return (buckets * length + position).argsort(dim=-1)


def with_previous_chunk(chunks: Tensor) -> Tensor:
    """``[..., n_chunks, chunk, *]`` -> ``[..., n_chunks, 2 * chunk, *]``: each
    chunk preceded by the one before it (the first by the last)."""
    return torch.cat([chunks.roll(1, dims=2), chunks], dim=3)


def lsh_attention(
    shared_qk: Tensor,
    values: Tensor,
    rotations: Optional[Tensor],
    chunk_length: int,
    padding_mask: Optional[Tensor],
    dropout=None,
) -> Tensor:
    """Steps 1-4 on ``shared_qk``, ``values [B, H, T, d]`` (``T`` a multiple of
    ``chunk_length`` unless ``T <= chunk_length``, then full attention and
    ``rotations`` unused) -> ``[B, H, T, d]``."""
    batch, heads, length, head_dim = shared_qk.shape
    padding_value, self_value = mask_values(shared_qk.dtype)
    keys = rms_normalised(shared_qk) * head_dim**-0.5
    if length <= chunk_length:
        logits = shared_qk @ keys.transpose(-1, -2)
        if padding_mask is not None:
            logits = logits.masked_fill(padding_mask[:, None, None, :], padding_value)
        eye = torch.eye(length, dtype=torch.bool, device=logits.device)
        probs = logits.masked_fill(eye, self_value).softmax(dim=-1)
        return (dropout(probs) if dropout is not None else probs) @ values

    hashes = rotations.size(2)
    order = sorted_order(hash_buckets(shared_qk, rotations, padding_mask))  # [B, H, n, T]
    slots = order.flatten(2)  # [B, H, n*T]: the position in every sorted slot

    def chunked(tensor):
        return tensor.reshape(batch, heads, -1, chunk_length, *tensor.shape[3:])

    def gathered(vectors):
        return vectors.gather(2, slots[..., None].expand(-1, -1, -1, head_dim))

    query_chunks = chunked(gathered(shared_qk))  # [B, H, C, c, d]
    key_chunks = with_previous_chunk(chunked(gathered(keys)))  # [B, H, C, 2c, d]
    value_chunks = with_previous_chunk(chunked(gathered(values)))
    query_positions = chunked(slots)  # [B, H, C, c]
    key_positions = with_previous_chunk(query_positions)  # [B, H, C, 2c]

    logits = query_chunks @ key_chunks.transpose(-1, -2)  # [B, H, C, c, 2c]
    if padding_mask is not None:
        key_padding = padding_mask[:, None, None, :].expand(batch, heads, 1, length)
        key_padding = key_padding.gather(3, key_positions.flatten(2)[:, :, None, :]).view_as(key_positions)
        logits = logits.masked_fill(key_padding[..., None, :], padding_value)
    logits = logits.masked_fill(query_positions[..., :, None] == key_positions[..., None, :], self_value)
    log_normaliser = logits.logsumexp(dim=-1, keepdim=True)
    probs = torch.exp(logits - log_normaliser)
    if dropout is not None:
        probs = dropout(probs)
    outputs = (probs @ value_chunks).reshape(batch, heads, hashes, length, head_dim)
    log_normaliser = log_normaliser.reshape(batch, heads, hashes, length)

    # back to positions: slot j of round r holds position order[..., r, j]
    unsort = order.argsort(dim=-1)
    outputs = outputs.gather(3, unsort[..., None].expand(-1, -1, -1, -1, head_dim))
    log_normaliser = log_normaliser.gather(3, unsort)
    round_weights = log_normaliser.softmax(dim=2)  # step 4
    return (outputs * round_weights[..., None]).sum(dim=2)


class LSHSelfAttention(MultiheadAttention):
    """The encoder self-attention of one layer, under fairseq's parameter
    names (``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``: a BART checkpoint
    restores into it); see the module docstring for the algorithm."""

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        chunk_length: int,
        num_hashes: int,
        num_buckets: int,
        dropout: float = 0.0,
        **kwargs,
    ):
        super().__init__(embed_dim, num_heads, dropout=dropout, self_attention=True, **kwargs)
        if num_buckets % 2:
            raise ValueError(f"--lsh-buckets must be even (one rotation gives +/- halves), got {num_buckets}")
        self.chunk_length = chunk_length
        self.num_hashes = num_hashes
        self.num_buckets = num_buckets

    def random_rotations(self, dtype: torch.dtype, device, generator: Optional[torch.Generator]) -> Tensor:
        """One rotation per head and round: ``[H, d, n_hashes, n_buckets/2]``, standard normal."""
        shape = (self.num_heads, self.head_dim, self.num_hashes, self.num_buckets // 2)
        return torch.randn(shape, generator=generator, dtype=dtype, device=device)

    def forward_lsh(
        self,
        x: Tensor,
        padding_mask: Optional[Tensor],
        generator: Optional[torch.Generator] = None,
        rotations: Optional[Tensor] = None,
    ) -> Tensor:
        """``x [T, B, C]`` -> ``[T, B, C]``; ``padding_mask [B, T]`` True at
        padding; the rotations drawn from ``generator`` unless given."""
        length, batch, _ = x.shape
        padded_length = length
        if length > self.chunk_length and length % self.chunk_length:
            padded_length = length + self.chunk_length - length % self.chunk_length
            x = torch.cat([x, x.new_zeros(padded_length - length, batch, x.size(-1))])
            if padding_mask is None:
                padding_mask = x.new_zeros(batch, length, dtype=torch.bool)
            padding_mask = torch.cat([padding_mask, padding_mask.new_ones(batch, padded_length - length)], dim=1)

        def heads(projected):
            return projected.view(padded_length, batch, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

        shared_qk = heads((self.q_proj(x) + self.k_proj(x)) / 2)
        values = heads(self.v_proj(x))
        if rotations is None and padded_length > self.chunk_length:
            rotations = self.random_rotations(x.dtype, x.device, generator)
        if x.dtype == torch.float16:  # the norms and log-sum-exps in float32: beyond float16s range
            shared_qk, values = shared_qk.float(), values.float()
            rotations = rotations.float() if rotations is not None else None
        attended = lsh_attention(shared_qk, values, rotations, self.chunk_length, padding_mask, self.dropout_module)
        attended = attended.to(x.dtype)
        attended = attended.permute(2, 0, 1, 3).reshape(padded_length, batch, -1)[:length]
        return self.out_proj(attended)
