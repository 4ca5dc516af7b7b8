"""Splitting channels into attention heads and back, for every mdsfair
attention (one helper, the layout of fairseq's ``MultiheadAttention``: head
``h`` holds channels ``h * d_h .. (h + 1) * d_h - 1``, ``d_h = C / H``).

* :func:`to_heads`: ``[..., C]`` -> ``[..., H, d_h]``;
* :func:`from_heads`: ``[..., H, d_h]`` -> ``[..., C]``;
* :func:`split_heads`: time-major ``[L, B, C]`` -> ``[B, H, L, d_h]`` (fairseq's
  ``q.view(L, B * H, d_h).transpose(0, 1)`` viewed as ``[B, H, L, d_h]``);
* :func:`merge_heads`: ``[B, H, L, d_h]`` -> time-major ``[L, B, C]`` (inverse
  of :func:`split_heads`; what fairseq feeds ``out_proj``).

``reshape`` is a view of a contiguous input (no copy).
"""

from torch import Tensor


def to_heads(x: Tensor, num_heads: int) -> Tensor:
    """``[..., C]`` -> ``[..., H, C / H]``."""
    channels = x.size(-1)
    if channels % num_heads:
        raise ValueError(f"{channels} channels do not split into {num_heads} heads")
    return x.reshape(*x.shape[:-1], num_heads, channels // num_heads)


def from_heads(x: Tensor) -> Tensor:
    """``[..., H, d_h]`` -> ``[..., H * d_h]`` (inverse of :func:`to_heads`)."""
    return x.reshape(*x.shape[:-2], x.size(-2) * x.size(-1))


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """Time-major ``[L, B, C]`` -> ``[B, H, L, d_h]``."""
    return to_heads(x, num_heads).permute(1, 2, 0, 3)


def merge_heads(x: Tensor) -> Tensor:
    """``[B, H, L, d_h]`` -> time-major ``[L, B, H * d_h]`` (inverse of :func:`split_heads`)."""
    return from_heads(x.permute(2, 0, 1, 3))
