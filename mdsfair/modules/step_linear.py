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
product saved. :func:`row_major` copies it block by block instead, each
block small enough to stay in a core's cache (the same values, a copy).
"""
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mdsfair.modules.parameter_cache import derived_from_parameters, linear_parameters

#: rows (inclusive) for which a CPU step takes the transposed product (see the module docstring)
TRANSPOSED_ROWS = (8, 48)

#: elements of one block of :func:`row_major`'s copy (256 KiB of float32: within a core's L2 cache)
ROW_MAJOR_BLOCK_ELEMENTS = 65536


def transposed_product_pays(rows: int, x: Tensor) -> bool:
    """Whether ``rows`` rows of ``x`` (a generation step's states) are
    multiplied as ``W x^T`` (see the module docstring)."""
    return (x.device.type == "cpu" and x.dtype == torch.float32 and not torch.is_grad_enabled()
            and TRANSPOSED_ROWS[0] <= rows <= TRANSPOSED_ROWS[1])


def transposed(matrix: Tensor) -> Tensor:
    """``matrix.t()`` of a 2-D tensor, as one strided view (one operator
    call, ``t()`` dispatches three)."""
    return matrix.as_strided((matrix.size(1), matrix.size(0)), (matrix.stride(1), matrix.stride(0)))


def _transposed_product(x: Tensor, weight: Tensor, bias_column: Optional[Tensor]) -> Tensor:
    """``(weight @ x^T + bias_column)^T``: ``[rows, out]``, a transposed view."""
    if bias_column is None:
        return transposed(torch.mm(weight, transposed(x)))
    return transposed(torch.addmm(bias_column, weight, transposed(x)))


def rows_times_weight(x: Tensor, weight: Tensor, bias: Optional[Tensor],
                      bias_column: Optional[Tensor] = None) -> Tensor:
    """``x [rows, in] @ weight[out, in]^T + bias`` as ``[rows, out]``: taken
    as ``(weight @ x^T + bias_column)^T`` (a transposed view) where
    :func:`transposed_product_pays`, else as ``F.linear``. ``bias_column``:
    ``bias`` as ``[out, 1]`` (kept by the caller; made here if None)."""
    if not transposed_product_pays(x.size(0), x):
        return F.linear(x, weight, bias)
    if bias is not None and bias_column is None:
        bias_column = bias.unsqueeze(1)
    return _transposed_product(x, weight, bias_column)


def row_major(matrix: Tensor) -> Tensor:
    """``matrix [rows, n]`` as a contiguous tensor. A transposed view of a
    contiguous ``[n, rows]`` tensor (:func:`_transposed_product`'s result)
    is copied in blocks of columns (see the module docstring): each block
    is first transposed into a staging tensor ``[blocks, rows, block]``
    while its source stays in the cache, then the staged blocks are copied
    into the rows, a contiguous run per block and row. Any other matrix is
    ``matrix.contiguous()``."""
    if matrix.dim() != 2 or matrix.is_contiguous() or matrix.stride() != (1, matrix.size(0)):
        return matrix.contiguous()
    rows, columns = matrix.shape
    block = max(1, ROW_MAJOR_BLOCK_ELEMENTS // rows)
    blocks = columns // block
    if blocks < 2:
        return matrix.contiguous()
    result = matrix.new_empty(rows, columns)
    staged = matrix.new_empty(blocks, rows, block)
    start = matrix.storage_offset()
    staged.copy_(matrix.as_strided((blocks, rows, block), (block * rows, 1, rows), start))
    result.as_strided((blocks, rows, block), (block, columns, 1)).copy_(staged)
    done = blocks * block
    if done < columns:  # the last columns, fewer than a block
        result.as_strided((rows, columns - done), (columns, 1), done).copy_(
            matrix.as_strided((rows, columns - done), (1, rows), start + done * rows))
    return result


def step_linear(linear: nn.Linear, x: Tensor, contiguous: bool = False) -> Tensor:
    """``linear(x)`` for the states ``x [..., in]`` of a generation step:
    the transposed product where :func:`transposed_product_pays` (its bias
    column kept on ``linear``), else ``linear(x)``. The result may be a
    transposed view; with ``contiguous``, the transposed product is copied
    by :func:`row_major` (for a consumer that would copy it anyway). A
    linear with hooks (quantization noise, pruning) or of another class is
    called as it is."""
    rows = x.numel() // x.size(-1) if x.size(-1) else 0
    if (type(linear) is not nn.Linear or linear._forward_hooks or linear._forward_pre_hooks
            or not transposed_product_pays(rows, x)):
        return linear(x)
    bias_column = None
    if linear.bias is not None:
        bias_column = derived_from_parameters(linear, "_step_bias_column", linear_parameters(linear),
                                              lambda: linear.bias.unsqueeze(1))
    product = _transposed_product(x.reshape(rows, x.size(-1)), linear.weight, bias_column)
    if contiguous:
        product = row_major(product)
    return product.view(*x.shape[:-1], linear.out_features)
