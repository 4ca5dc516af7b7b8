"""Tolerances for comparing two computations of the same function in the
same floating-point type (issue 34 item 7).

Two implementations of one model (fairseq's and Hugging Face's, the banded
and the fused Longformer attention, a padded batch and a lone example) add
the same numbers in different orders, and which order a kernel uses depends
on the CPU (AVX2 or AVX-512 widths, oneDNN's choice of blocking) and on the
thread count. In float32 the results then differ by a few units of the last
place, multiplied by the depth of the computation: a fixed ``atol=1e-5``
chosen on one CPU failed on another (1.48e-5 on an Intel Xeon). A test that
compares two such computations either runs them in float64 (and keeps a
tight tolerance) or uses :func:`assert_close_in_dtype`, whose tolerance is
derived from the dtype and the scale of the values, and says which in a
comment.
"""

import torch

#: Units of the last place allowed for a whole model's forward pass (a few
#: layers of sums over the model dimension and the sequence): generous against
#: reordering, still far below any real defect (a wrong weight or mask moves
#: logits by 1e-2 and more).
MODEL_ULPS = 256


#: ``(atol, rtol)`` for a float64 comparison of two computations that both take
#: one step in float32, a softmax (as fairseq's ``utils.softmax``) over layouts
#: of different widths (the sparse generation step's kept tokens against the
#: reference's): eight units of float32's last place, absolute and relative.
FLOAT32_SOFTMAX_ROUND_OFF = (8 * torch.finfo(torch.float32).eps, 8 * torch.finfo(torch.float32).eps)


def tolerance(expected: torch.Tensor, ulps: int = MODEL_ULPS):
    """``(atol, rtol)`` for values of ``expected``'s dtype and scale:
    ``rtol = ulps * eps(dtype)``, ``atol = rtol * max(1, max|expected|)``."""
    dtype = expected.dtype if expected.is_floating_point() else torch.float32
    rtol = ulps * torch.finfo(dtype).eps
    scale = expected.detach().abs().max().item() if expected.numel() else 1.0
    return rtol * max(1.0, scale), rtol


def assert_close_in_dtype(actual: torch.Tensor, expected: torch.Tensor, ulps: int = MODEL_ULPS, msg=None) -> None:
    """``torch.testing.assert_close`` with :func:`tolerance` (the dtype's
    epsilon times ``ulps``, scaled by the largest expected value)."""
    atol, rtol = tolerance(torch.as_tensor(expected), ulps)
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol, msg=msg)


def close_in_dtype(actual: torch.Tensor, expected: torch.Tensor, ulps: int = MODEL_ULPS) -> bool:
    """The boolean form of :func:`assert_close_in_dtype` (for ``assert
    torch.allclose(...)``-style checks and their negations)."""
    atol, rtol = tolerance(torch.as_tensor(expected), ulps)
    return torch.allclose(actual, expected, atol=atol, rtol=rtol)
