"""The linear layers of a generation step: a few rows times every weight.

A beam-search step multiplies ``batch * beam`` rows (16 at batch 4, beam 4)
by each of the decoder's weight matrices and by the output embedding
(50,265 x 768 in BART): on a CPU the product reads every weight once and is
bound by memory, not arithmetic. fairseq takes it as ``F.linear``, i.e.
``x W^T`` with the weight transposed. The same product taken the other way
round, ``W x^T`` (the weight as stored, the rows transposed; the result a
transposed view), reads the same bytes, and with the math library PyTorch
calls on CPUs (MKL in the official wheels) it is faster from about 8 to 48
rows and slower below: ``benchmarks/step_linear.py`` measures both for
BART-base's shapes per row count (``benchmarks/results/step_linear_cpu.json``).

:func:`transposed_product_pays` says when a step takes ``W x^T`` (float32
on a CPU, no autograd, :data:`TRANSPOSED_ROWS` rows); everywhere else (a
GPU, training, half precision, other row counts) the product is
``F.linear``'s. Both give the product to float rounding (a different
summation order; ``tests/test_step_linear.py``). The choice depends only on
the shapes, so a run is reproducible.

The transposed product's result is a transposed view. Most of a step reads
it as it is, but the log-softmax over the output layer's 50,265 logits per
row makes its input contiguous first, and PyTorch's copy of a transposed
matrix walks the whole ``[vocabulary, rows]`` source once per row: it misses
the cache at every element and costs a large part of what the transposed
product saved. :func:`row_major_product` takes the product block by block of
output features instead, and copies each block's ``[block, rows]`` result
into the rows while it is still in a core's cache (the loop tiles one
matrix product for the cache; a block's product is the same call on fewer
rows of the weight).

In a static beam search's steps (:mod:`mdsfair.generation.fast.static_beam_search`)
the decoder layers' feed-forward products (:class:`StepProductLinear`, put
in place of ``fc1`` and ``fc2`` by the fast decoder layer) and the decoder's
output projection (:class:`StepProductOutputProjection`, the fast variant of
:class:`~mdsfair.modules.transformer_layers.OutputProjection`, contiguous
logits by :func:`row_major_product`) are taken this way; every other call
is ``nn.Linear``'s.
"""

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mdsfair.generation.fast import fast_variant_of
from mdsfair.generation.fast.static_beam_search import FollowsStaticBeamSearch
from mdsfair.modules.parameter_cache import derived_from_parameters, linear_parameters
from mdsfair.modules.transformer_layers import OutputProjection

#: rows (inclusive) for which a CPU step takes the transposed product (see the module docstring)
TRANSPOSED_ROWS = (8, 48)

#: elements of one block of :func:`row_major_product`'s result (512 KiB of float32: within a core's L2
#: cache; 8,192 of BART's 50,265 output features at 16 rows, the fastest of 2,048-16,384 on CPU)
ROW_MAJOR_BLOCK_ELEMENTS = 131072


def transposed_product_pays(rows: int, x: Tensor) -> bool:
    """Whether ``rows`` rows of ``x`` (a generation step's states) are
    multiplied as ``W x^T`` (see the module docstring)."""
    return (
        x.device.type == "cpu"
        and x.dtype == torch.float32
        and not torch.is_grad_enabled()
        and TRANSPOSED_ROWS[0] <= rows <= TRANSPOSED_ROWS[1]
    )


def _transposed_product(x: Tensor, weight: Tensor, bias_column: Optional[Tensor]) -> Tensor:
    """``(weight @ x^T + bias_column)^T``: ``[rows, out]``, a transposed view."""
    if bias_column is None:
        return torch.mm(weight, x.t()).t()
    return torch.addmm(bias_column, weight, x.t()).t()


def rows_times_weight(
    x: Tensor, weight: Tensor, bias: Optional[Tensor], bias_column: Optional[Tensor] = None
) -> Tensor:
    """``x [rows, in] @ weight[out, in]^T + bias`` as ``[rows, out]``: taken
    as ``(weight @ x^T + bias_column)^T`` (a transposed view) where
    :func:`transposed_product_pays`, else as ``F.linear``. ``bias_column``:
    ``bias`` as ``[out, 1]`` (kept by the caller; made here if None)."""
    if not transposed_product_pays(x.size(0), x):
        return F.linear(x, weight, bias)
    if bias is not None and bias_column is None:
        bias_column = bias.unsqueeze(1)
    return _transposed_product(x, weight, bias_column)


def row_major_product(x: Tensor, weight: Tensor, bias_column: Optional[Tensor]) -> Tensor:
    """``x [rows, in] @ weight[out, in]^T + bias_column^T`` as a contiguous
    ``[rows, out]`` tensor, taken as :func:`_transposed_product` (``W x^T``)
    block by block of :data:`ROW_MAJOR_BLOCK_ELEMENTS` ``/ rows`` output
    features: each block's ``[block, rows]`` product is copied into the rows
    while it is in the cache (see the module docstring). One block's worth
    of features is one product and one copy."""
    rows, out_features = x.size(0), weight.size(0)
    block = max(1, ROW_MAJOR_BLOCK_ELEMENTS // max(rows, 1))
    if out_features <= block:
        return _transposed_product(x, weight, bias_column).contiguous()
    result = torch.empty((rows, out_features), dtype=x.dtype, device=x.device)
    for start in range(0, out_features, block):  # cache tiling of one product (7 blocks for BART's vocabulary)
        end = min(start + block, out_features)
        bias_block = None if bias_column is None else bias_column[start:end]
        result[:, start:end].copy_(_transposed_product(x, weight[start:end], bias_block))
    return result


def step_linear(linear: nn.Linear, x: Tensor, contiguous: bool = False) -> Tensor:
    """``linear(x)`` for the states ``x [..., in]`` of a generation step:
    the transposed product where :func:`transposed_product_pays` (its bias
    column kept on ``linear``), else ``linear(x)``. The result may be a
    transposed view; with ``contiguous``, the product is taken contiguous
    by :func:`row_major_product` (for a consumer that would copy it anyway). A
    linear with hooks (quantization noise, pruning) or of another class is
    called as it is."""
    if type(linear) is not nn.Linear or linear._forward_hooks or linear._forward_pre_hooks:
        return linear(x)
    return step_product(linear, x, contiguous)


def step_product(linear: nn.Linear, x: Tensor, contiguous: bool = False) -> Tensor:
    """The product of :func:`step_linear` with ``linear``'s parameters, its
    hooks not called (a module's ``forward``, which its call runs after the
    hooks): the transposed product where it pays, else ``F.linear``."""
    rows = x.numel() // x.size(-1) if x.size(-1) else 0
    if not transposed_product_pays(rows, x):
        return F.linear(x, linear.weight, linear.bias)
    bias_column = None
    if linear.bias is not None:
        bias_column = derived_from_parameters(
            linear, "_step_bias_column", linear_parameters(linear), lambda: linear.bias.unsqueeze(1)
        )
    flat = x.reshape(rows, x.size(-1))
    if contiguous:
        product = row_major_product(flat, linear.weight, bias_column)
    else:
        product = _transposed_product(flat, linear.weight, bias_column)
    return product.view(*x.shape[:-1], linear.out_features)


class StepProductLinear(nn.Linear, FollowsStaticBeamSearch):
    """A decoder layer's feed-forward linear (``fc1``, ``fc2``): in a static
    beam search's step, its product as :func:`step_product` takes it (a
    transposed view where that pays); ``nn.Linear``'s everywhere else."""

    def forward(self, x: Tensor) -> Tensor:
        if self.static_beam_search is None or self.training:
            return super().forward(x)
        return step_product(self, x)


@fast_variant_of(OutputProjection)
class StepProductOutputProjection(OutputProjection, FollowsStaticBeamSearch):
    """The decoder's output projection: in a static beam search's step, the
    logits as :func:`step_product` takes them, contiguous (block by block,
    :func:`row_major_product`), as the log-softmax over the vocabulary reads
    them; ``nn.Linear``'s everywhere else."""

    def forward(self, x: Tensor) -> Tensor:
        if self.static_beam_search is None or self.training:
            return super().forward(x)
        return step_product(self, x, contiguous=True)
