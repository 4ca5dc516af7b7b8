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

The output projection is the largest product of a step (BART's embedding,
154 MB in float32, read once per step) and the log-softmax over its logits
reads them row by row, so a transposed result would be copied whole. It
is taken instead by oneDNN (the library behind PyTorch's ``mkldnn``
operators, in every official CPU wheel) on the weight reordered once into
oneDNN's blocked layout (:func:`packed_product`): the result comes out row
major, and ``benchmarks/step_linear.py`` times it against the other two
products (``benchmarks/results/step_linear_packed_cpu.json``). The
reordered copy is kept until a parameter changes (as much memory again as
the embedding, during generation only); where oneDNN is missing the output
projection takes :func:`step_product`'s product, made contiguous.

In a static beam search's steps (:mod:`mdsfair.generation.fast.static_beam_search`)
the decoder layers' feed-forward products (:class:`StepProductLinear`, put
in place of ``fc1`` and ``fc2`` by the fast decoder layer) are taken as
:func:`step_product` takes them, and the decoder's output projection
(:class:`StepProductOutputProjection`, the fast variant of
:class:`~mdsfair.modules.transformer_layers.OutputProjection`) as
:func:`packed_product`; every other call is ``nn.Linear``'s.
"""

import functools
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

#: the rows oneDNN lays a packed weight out for (its reorder takes a row count as a hint; one fixed
#: hint keeps the numbers of a run independent of the row count of its first step)
PACKED_ROWS_HINT = 16


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


@functools.lru_cache(maxsize=None)
def onednn_linear_available() -> bool:
    """Whether this PyTorch has oneDNN's packed-weight linear (checked once
    on a 2 x 3 product)."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(torch.ones(3, 2), 1)
        product = torch.ops.mkldnn._linear_pointwise(torch.ones(1, 2), packed, None, "none", [], "")
    except (AttributeError, RuntimeError):
        return False
    return torch.equal(product, torch.full((1, 3), 2.0))


def packed_product_pays(x: Tensor) -> bool:
    """Whether the states ``x`` of a generation step are multiplied by
    :func:`packed_product` (float32 on a CPU, no autograd, oneDNN present)."""
    return (
        x.device.type == "cpu"
        and x.dtype == torch.float32
        and not torch.is_grad_enabled()
        and onednn_linear_available()
    )


def packed_product(linear: nn.Linear, x: Tensor) -> Tensor:
    """``linear(x)`` for ``x [..., in]`` as oneDNN's product with the weight
    reordered into its blocked layout (kept on ``linear`` until a parameter
    changes; see the module docstring): a contiguous result, equal to
    ``F.linear``'s to float rounding (another summation order)."""
    packed = derived_from_parameters(
        linear,
        "_packed_weight",
        linear_parameters(linear),
        lambda: torch.ops.mkldnn._reorder_linear_weight(linear.weight.contiguous(), PACKED_ROWS_HINT),
    )
    flat = x.reshape(-1, x.size(-1)).contiguous()
    product = torch.ops.mkldnn._linear_pointwise(flat, packed, linear.bias, "none", [], "")
    return product.view(*x.shape[:-1], linear.out_features)


def step_product(linear: nn.Linear, x: Tensor) -> Tensor:
    """``linear(x)`` for the states ``x [..., in]`` of a generation step,
    ``linear``'s hooks not called (a module's ``forward``, which its call
    runs after the hooks): the transposed product where
    :func:`transposed_product_pays` (its bias column kept on ``linear``;
    the result a transposed view), else ``F.linear``."""
    rows = x.numel() // x.size(-1) if x.size(-1) else 0
    if not transposed_product_pays(rows, x):
        return F.linear(x, linear.weight, linear.bias)
    bias_column = None
    if linear.bias is not None:
        bias_column = derived_from_parameters(
            linear, "_step_bias_column", linear_parameters(linear), lambda: linear.bias.unsqueeze(1)
        )
    product = _transposed_product(x.reshape(rows, x.size(-1)), linear.weight, bias_column)
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
    logits as :func:`packed_product` takes them where it pays (else
    :func:`step_product`'s, contiguous), row major as the log-softmax over
    the vocabulary reads them; ``nn.Linear``'s everywhere else."""

    def forward(self, x: Tensor) -> Tensor:
        if self.static_beam_search is None or self.training:
            return super().forward(x)
        if packed_product_pays(x):
            return packed_product(self, x)
        return step_product(self, x).contiguous()
