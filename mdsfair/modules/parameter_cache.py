"""Tensors derived from a module's parameters (stacked, scaled, reshaped
projections), built once and kept while the parameters stay the same.

Generation multiplies the same stacked weights at every step; rebuilding
them (a concatenation of weight matrices) at every layer and step is host
and memory work for nothing. :func:`derived_from_parameters` keeps what
``build`` returns on the module and builds it again only when a parameter
changed: in place (its version counter), moved or cast (its storage,
dtype or device). With autograd enabled it builds afresh at every call, so
gradients reach the parameters.
"""

from typing import Callable, Iterable, Tuple, TypeVar

import torch
from torch import Tensor, nn

Derived = TypeVar("Derived")


def linear_bias(linear: nn.Linear) -> Tensor:
    """``linear``'s bias, or zeros of its output size where it has none."""
    return linear.bias if linear.bias is not None else linear.weight.new_zeros(linear.out_features)


def linear_parameters(*linears: nn.Linear) -> list:
    """The weights and (existing) biases of ``linears``, in order."""
    return [parameter for linear in linears for parameter in (linear.weight, linear.bias) if parameter is not None]


def scaled_query_key_value(attention) -> Tuple[Tensor, Tensor]:
    """``[q_proj * scaling; k_proj; v_proj]`` weights ``[3C, C]`` and biases
    of a fairseq ``MultiheadAttention``: its three input projections as one
    product, the queries scaled as fairseq scales them."""
    weight = torch.cat([attention.q_proj.weight * attention.scaling, attention.k_proj.weight, attention.v_proj.weight])
    bias = torch.cat(
        [
            linear_bias(attention.q_proj) * attention.scaling,
            linear_bias(attention.k_proj),
            linear_bias(attention.v_proj),
        ]
    )
    return weight, bias


def derived_from_parameters(
    owner: nn.Module, name: str, parameters: Iterable[Tensor], build: Callable[[], Derived]
) -> Derived:
    """``build()``, kept on ``owner`` as ``name`` until one of ``parameters``
    changes (see the module docstring); built afresh whenever autograd is on."""
    if torch.is_grad_enabled():
        return build()
    signature = tuple((p.data_ptr(), p._version, p.dtype, p.device) for p in parameters)
    cached = owner.__dict__.get(name)
    if cached is None or cached[0] != signature:
        cached = (signature, build())
        owner.__dict__[name] = cached
    return cached[1]
