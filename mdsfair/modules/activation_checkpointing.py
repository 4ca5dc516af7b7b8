"""``--checkpoint-activations`` / ``--offload-activations`` for mdsfair's layers.

fairseq's transformer wraps each of its layers with
:func:`fairseq.modules.checkpoint_activations.checkpoint_wrapper` when
``--checkpoint-activations`` is on: the layer's forward runs without keeping
its intermediate activations, and the backward pass recomputes them (with
``--offload-activations``, which implies checkpointing, the layer's saved
inputs wait in CPU memory). Parameter names and outputs do not change.

:func:`checkpoint_layer` applies fairseq's checkpoint function
(``_checkpointed_forward``, the one ``checkpoint_wrapper`` installs) the same
way to an mdsfair layer. That function records the tensor arguments for the
recomputation and passes any other argument by reference; a tensor *inside*
another object (a NamedTuple, a dataclass) would reach the recomputation but
not the autograd graph, and a tensor inside a structured *output* would carry
no gradient. Layers whose arguments or outputs hold such tensors (the
sparse decoder layer: its ``SentenceContext`` holds the trainable sentence
vectors, its ``SentenceAttention`` output the saliencies the KL loss trains
on) use :func:`checkpoint_structured_layer`, which flattens tuples, lists and
NamedTuples of the arguments and outputs into tensors before fairseq's
checkpoint function sees them, and rebuilds them after.

fairseq's function is also silent when no tensor argument requires grad: its
output then has no gradient, so a trainable layer on frozen inputs would not
train. :func:`checkpoint_layer` always records one extra zero-size tensor
that requires grad. ``tests/test_activation_checkpointing.py`` shows both
behaviours of fairseq's function and the fixes.
"""

import functools
import weakref
from typing import Sequence, Tuple

import torch
from fairseq.modules.checkpoint_activations import _checkpointed_forward
from torch import nn
from torch.utils import _pytree as pytree


def activation_checkpointing(cfg) -> bool:
    """Whether ``cfg`` (an argparse namespace or a fairseq config) asks for
    activation checkpointing (``--offload-activations`` implies it)."""
    return bool(getattr(cfg, "checkpoint_activations", False) or getattr(cfg, "offload_activations", False))


def checkpoint_layer(
    layer: nn.Module, cfg, attribute_inputs: Sequence[Tuple[nn.Module, str]] = (), structured: bool = False
) -> nn.Module:
    """``layer`` with its forward checkpointed by fairseq's checkpoint function
    when ``cfg`` asks for activation checkpointing, else ``layer`` itself.

    As fairseq's ``checkpoint_wrapper`` (the layer's ``forward`` is replaced,
    the original kept as ``precheckpoint_forward``; parameter names do not
    change), plus:

    * a zero-size tensor that requires grad is always one of the recorded
      inputs, so the layer's own parameters get gradients even when none of
      its inputs requires grad (a trainable layer on frozen inputs: sparse_bart's
      sentence encoder on the frozen BART encoder while its approximator
      trains; fairseq's function would return an output without gradient);
    * ``structured``: tensors inside tuples, lists and NamedTuples of the
      arguments and outputs are flattened into recorded tensors and rebuilt
      (see the module docstring); dicts pass by reference;
    * ``attribute_inputs``: ``(module, attribute)`` pairs inside the layer
      that its caller sets for one forward pass (HierEncDec's decoder hands
      every cross-attention the key documents that way). The recomputation in
      the backward pass runs after the caller has reset them, so their values
      at call time become recorded inputs, set again around the recomputation.

    Without gradients (evaluation, generation) the layer runs as is.
    """
    if not activation_checkpointing(cfg):
        return layer
    assert not hasattr(layer, "precheckpoint_forward"), "the layer is already checkpointed"
    layer.precheckpoint_forward = layer.forward
    layer.forward = functools.partial(
        _checkpointed_layer_forward,
        layer.precheckpoint_forward,
        bool(getattr(cfg, "offload_activations", False)),
        tuple(attribute_inputs),
        structured,
        _layer_ref=weakref.ref(layer),
    )
    return layer


def checkpoint_structured_layer(layer: nn.Module, cfg) -> nn.Module:
    """:func:`checkpoint_layer` for a layer whose arguments or outputs hold
    tensors inside tuples or NamedTuples."""
    return checkpoint_layer(layer, cfg, structured=True)


def _is_passed_by_reference(value) -> bool:
    """Dicts (an incremental state the layer updates in place) are not flattened."""
    return isinstance(value, dict)


def _requires_grad(value) -> bool:
    return any(torch.is_tensor(leaf) and leaf.requires_grad for leaf in pytree.tree_leaves(value))


def _checkpointed_layer_forward(
    original_forward, offload_to_cpu: bool, holders, structured: bool, *args, _layer_ref=None, **kwargs
):
    if not torch.is_grad_enabled():  # evaluation and generation: nothing to save memory on
        return original_forward(*args, **kwargs)
    layer = _layer_ref() if _layer_ref is not None else None
    if (
        layer is not None
        and not any(p.requires_grad for p in layer.parameters())
        and not _requires_grad((args, kwargs))
    ):
        # a frozen layer on inputs without gradient (the frozen encoder while the sparse
        # approximator trains): nothing to recompute, and the anchor below would make the
        # backward pass recompute a layer whose outputs cannot require grad
        return original_forward(*args, **kwargs)
    if structured:
        # the keyword values as a list: the keywords' own dict is not one the layer updates in place
        leaves, spec = pytree.tree_flatten((args, list(kwargs.values())), is_leaf=_is_passed_by_reference)
    else:
        leaves, spec = [*args, *kwargs.values()], None
    keys = list(kwargs)
    output_spec = {}

    def run(anchor, *values_and_leaves):
        values, flat = values_and_leaves[: len(holders)], list(values_and_leaves[len(holders) :])
        if structured:
            call_args, keyword_values = pytree.tree_unflatten(flat, spec)
            call_kwargs = dict(zip(keys, keyword_values))
        else:
            split = len(flat) - len(keys)
            call_args, call_kwargs = flat[:split], dict(zip(keys, flat[split:]))
        previous = [getattr(module, name) for module, name in holders]
        for (module, name), value in zip(holders, values):
            setattr(module, name, value)
        try:
            output = original_forward(*call_args, **call_kwargs)
        finally:
            for (module, name), value in zip(holders, previous):
                setattr(module, name, value)
        if not structured:
            return output
        output_leaves, output_spec["spec"] = pytree.tree_flatten(output)
        return tuple(output_leaves)

    anchor = torch.empty(0, requires_grad=True)
    values = [getattr(module, name) for module, name in holders]
    output = _checkpointed_forward(run, offload_to_cpu, anchor, *values, *leaves)
    if not structured:
        return output
    output_leaves = (output,) if isinstance(output, torch.Tensor) else output
    return pytree.tree_unflatten(list(output_leaves), output_spec["spec"])


def checkpointed_call(function, *args, offload_to_cpu: bool = False):
    """``function(*args)`` through fairseq's checkpoint function (tensor
    arguments recorded, the rest passed by reference, one zero-size tensor
    that requires grad recorded so ``function``'s parameters get gradients);
    for a part of a layer that checkpoints piece by piece. Without gradients
    it is a plain call."""
    if not torch.is_grad_enabled():
        return function(*args)
    anchor = torch.empty(0, requires_grad=True)
    return _checkpointed_forward(lambda _anchor, *inner: function(*inner), offload_to_cpu, anchor, *args)


def checkpointed_modules(model: nn.Module):
    """Names of the modules of ``model`` whose forward is checkpointed."""
    return [name for name, module in model.named_modules() if hasattr(module, "precheckpoint_forward")]


def add_activation_checkpointing_args(parser, layer: str = "layer") -> None:
    """``--checkpoint-activations`` and ``--offload-activations`` of a model
    whose every ``layer`` (its helps' word for them: ``"LSTM layer"`` where
    only the LSTMs are) runs through :func:`checkpoint_layer`."""
    parser.add_argument(
        "--checkpoint-activations",
        action="store_true",
        help=f"checkpoint every {layer}'s activations: recompute them in the backward pass",
    )
    parser.add_argument(
        "--offload-activations",
        action="store_true",
        help=f"keep the checkpointed {layer}s' saved inputs in CPU memory; implies --checkpoint-activations",
    )
